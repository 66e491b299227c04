// Requests through the Router without sockets: any method, target, headers and body get an
// answer (never an exception), with a status the server can send.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "zkagent/http.hpp"

namespace {

using namespace zkagent::http;

const Router& router() {
  static const Router instance = [] {
    Router r({.bearerToken = "s3cret"});
    auto echo = [](const Request& request) {
      std::string out = request.path;
      for (const auto& [name, value] : request.params) out += "|" + name + "=" + value;
      return Response::text(200, out);
    };
    r.add(Method::Get, "/healthz", echo, Access::Public);
    r.add(Method::Get, "/v1/accounts/{id}", echo);
    r.add(Method::Post, "/v1/accounts/{id}/resign", echo);
    r.add(Method::Post, "/v1/accounts/{id}/ops", echo);
    r.add(Method::Put, "/v1/presence/privacy/{account}", echo);
    r.add(Method::Get, "/v1/{a}/{b}/{c}", echo, Access::Public);
    r.add(Method::Post, "/v1/throws",
          [](const Request&) -> Response { throw std::runtime_error("x"); });
    return r;
  }();
  return instance;
}

}  // namespace

// Input: one byte for the method, then the target, header lines "name: value" and the body,
// separated by newlines (the body is the rest).
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  Request request;
  request.method = static_cast<Method>(data[0] % 8);
  auto line = [&text]() {
    auto end = text.find('\n');
    auto out = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    return out;
  };
  request.target = std::string(line());
  auto question = request.target.find('?');
  request.path = request.target.substr(0, question);
  if (question != std::string::npos) request.query = request.target.substr(question + 1);
  for (auto header = line(); !header.empty(); header = line()) {
    auto colon = header.find(':');
    request.headers.emplace_back(
        std::string(header.substr(0, colon)),
        colon == std::string_view::npos ? std::string() : std::string(header.substr(colon + 1)));
  }
  request.body = std::string(text);
  const Response response = router().handle(std::move(request));
  if (response.status < 200 || response.status > 599) __builtin_trap();
  return 0;
}
