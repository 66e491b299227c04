// The fuzzers' encoding of an HTTP request, shared by every router fuzzer: one byte for the
// method, then the target, header lines "name: value" and the body, separated by newlines (the
// body is the rest). A header named "peer" is not a header but one of the TLS peer's names
// (Request::peerIdentities), as the server fills them from a client certificate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "zkagent/http.hpp"

namespace zkagent::fuzz {

inline http::Request requestOf(const std::uint8_t* data, std::size_t size) {
  http::Request request;
  if (size == 0) return request;
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  request.method = static_cast<http::Method>(data[0] % 8);
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
    std::string name(header.substr(0, colon));
    std::string_view value = colon == std::string_view::npos ? "" : header.substr(colon + 1);
    if (value.starts_with(' ')) value.remove_prefix(1);
    if (name == "peer") {
      request.peerIdentities.emplace_back(value);
    } else {
      request.headers.emplace_back(std::move(name), std::string(value));
    }
  }
  request.body = std::string(text);
  request.remoteAddress = "127.0.0.1:1";
  return request;
}

// What every router must answer: a status the server can send.
inline void checkAnswer(const http::Response& response) {
  if (response.status < 200 || response.status > 599) __builtin_trap();
}

}  // namespace zkagent::fuzz
