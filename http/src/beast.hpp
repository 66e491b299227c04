// What server.cpp and client.cpp share: the Beast headers, short namespace names and the
// mapping between our Method and Beast's verb. Only the library's own sources include this.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "zkagent/http.hpp"

namespace zkagent::http {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;

inline Method methodOf(bhttp::verb verb) {
  switch (verb) {
    case bhttp::verb::get:
      return Method::Get;
    case bhttp::verb::head:
      return Method::Head;
    case bhttp::verb::post:
      return Method::Post;
    case bhttp::verb::put:
      return Method::Put;
    case bhttp::verb::delete_:
      return Method::Delete;
    case bhttp::verb::patch:
      return Method::Patch;
    case bhttp::verb::options:
      return Method::Options;
    default:
      return Method::Other;
  }
}

inline bhttp::verb verbOf(Method method) {
  switch (method) {
    case Method::Get:
      return bhttp::verb::get;
    case Method::Head:
      return bhttp::verb::head;
    case Method::Post:
      return bhttp::verb::post;
    case Method::Put:
      return bhttp::verb::put;
    case Method::Delete:
      return bhttp::verb::delete_;
    case Method::Patch:
      return bhttp::verb::patch;
    case Method::Options:
      return bhttp::verb::options;
    case Method::Other:
      break;
  }
  return bhttp::verb::unknown;
}

}  // namespace zkagent::http
