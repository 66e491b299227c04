// Requests through the Router without sockets: any method, target, headers and body get an
// answer (never an exception), with a status the server can send.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_request.hpp"
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

// Input: fuzz_request.hpp's encoding.
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  zkagent::fuzz::checkAnswer(router().handle(zkagent::fuzz::requestOf(data, size)));
  return 0;
}
