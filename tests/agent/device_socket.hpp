// A device connection for the device endpoint's process tests: a small Beast WebSocket client,
// synchronous for the test but every wait bounded.
#pragma once

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "zkagent/http/websocket.hpp"

namespace zktest {

// The device endpoint's URL target for `device` of `account`.
inline std::string devicePath(const std::string& account, const std::string& device) {
  return "/v1/devices?account=" + account + "&device=" + device;
}

namespace device_socket {
using namespace std::chrono_literals;
using nlohmann::json;
using std::chrono::milliseconds;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

// One device connection, synchronous for the test but every wait bounded.
class Device {
 public:
  struct Refused {
    int status = 0;
    std::string location, retryAfter, body;
  };
  struct Closed {
    int code = 0;  // 0: the connection ended without a close frame
    std::string reason;
  };

  // nullopt: upgraded. Otherwise the HTTP answer that refused the upgrade.
  // `bearer`, when not empty, is sent as `Authorization: Bearer <bearer>`.
  std::optional<Refused> connect(uint16_t port, const std::string& target,
                                 const std::string& bearer = "") {
    beast::error_code ec;
    ws_.next_layer().expires_after(5s);
    ws_.next_layer().async_connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port),
                                   [&](beast::error_code e) { ec = e; });
    run();
    if (ec) return Refused{-1, "", "", ec.message()};
    websocket::response_type response;
    if (!bearer.empty()) {
      ws_.set_option(websocket::stream_base::decorator([bearer](websocket::request_type& request) {
        request.set(bhttp::field::authorization, "Bearer " + bearer);
      }));
    }
    ws_.async_handshake(response, "127.0.0.1:" + std::to_string(port), target,
                        [&](beast::error_code e) { ec = e; });
    run();
    beast::get_lowest_layer(ws_).expires_never();
    if (!ec) return std::nullopt;
    return Refused{static_cast<int>(response.result_int()),
                   std::string(response[bhttp::field::location]),
                   std::string(response[bhttp::field::retry_after]), response.body()};
  }

  void send(const std::string& text, bool binary = false) {
    ws_.binary(binary);
    ws_.write(asio::buffer(text));
  }
  void ping(uint64_t seq) { send(json{{"type", "ping"}, {"seq", seq}}.dump()); }

  // The next frame, or nullopt when the connection closed or nothing came in time (the read
  // then stays pending for the next call: cancelling it would fail the stream).
  std::optional<json> read(milliseconds timeout = 5s) {
    if (!reading_) {
      reading_ = true;
      done_ = false;
      buffer_.consume(buffer_.size());
      ws_.async_read(buffer_, [this](beast::error_code e, size_t) {
        readError_ = e;
        done_ = true;
      });
    }
    run(timeout);
    if (!done_) return std::nullopt;
    reading_ = false;
    if (readError_) {
      closed_ = Closed{readError_ == websocket::error::closed ? ws_.reason().code : 0,
                       std::string(ws_.reason().reason.c_str())};
      return std::nullopt;
    }
    return json::parse(beast::buffers_to_string(buffer_.data()), nullptr, false);
  }

  // Reads (answering nothing) until the agent closes; the close code and reason it sent.
  std::optional<Closed> awaitClose(milliseconds timeout = 5s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!closed_ && std::chrono::steady_clock::now() < deadline) {
      read(std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now()));
    }
    return closed_;
  }

  void close() {
    beast::error_code ec;
    ws_.async_close(websocket::close_code::normal, [&](beast::error_code e) { ec = e; });
    run(2s);
  }

 private:
  void run(milliseconds timeout = 5s) {
    io_.restart();
    io_.run_for(timeout);
  }

  asio::io_context io_;
  zkagent::http::WebSocketStream<beast::tcp_stream> ws_{io_};
  beast::flat_buffer buffer_;
  bool reading_ = false, done_ = false;
  beast::error_code readError_;
  std::optional<Closed> closed_;
};

}  // namespace device_socket

using device_socket::Device;

}  // namespace zktest
