// The socket under a device session: a WebSocket stream over a plain TCP socket (ws://) or over
// OpenSSL (wss://, when presence.tls is set). The only file that instantiates Beast's WebSocket
// stream: the session's logic (device_upgrade.cpp, device_session.cpp) reaches it through the
// Session's few I/O calls, so it is written once for both.
#include <poll.h>

#include <boost/asio/ssl.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <type_traits>

#include "device_endpoint_core.hpp"
#include "zkagent/http/websocket.hpp"

namespace zkagent::agent::detail {
namespace {

template <class Socket>
class SessionOver final : public Session {
 public:
  static constexpr bool kTls = !std::is_same_v<Socket, tcp::socket>;

  template <class... Tls>
  SessionOver(std::shared_ptr<DeviceEndpoint::Core> core, tcp::socket socket, Tls&... tls)
      : Session(std::move(core)), ws_(std::move(socket), tls...) {}

  void abort() override {
    beast::error_code ignored;
    auto& socket = beast::get_lowest_layer(ws_);
    socket.shutdown(tcp::socket::shutdown_both, ignored);
    socket.close(ignored);
  }

 protected:
  bool tls() const override { return kTls; }

  void awaitBytes() override {
    beast::get_lowest_layer(ws_).async_wait(
        tcp::socket::wait_read, [self = shared()](beast::error_code ec) { self->onBytes(ec); });
  }

  void tlsHandshake() override {
    if constexpr (kTls) {
      // The reaper bounds the handshake like the rest of the upgrade (kUpgradeTimeout).
      ws_.next_layer().async_handshake(
          asio::ssl::stream_base::server,
          [self = shared()](beast::error_code ec) { self->onTlsHandshake(ec); });
    }
  }

  void readRequest() override {
    bhttp::async_read(ws_.next_layer(), buffer_, *parser_,
                      [self = shared()](beast::error_code ec, size_t) { self->onRequest(ec); });
  }

  void writeRefusal() override {
    bhttp::async_write(ws_.next_layer(), *refusal_,
                       [self = shared()](beast::error_code, size_t) { self->onRefusalWritten(); });
  }

  void acceptSocket() override {
    ws_.set_option(
        websocket::stream_base::timeout{kHandshakeTimeout, websocket::stream_base::none(), false});
    ws_.read_message_max(kMaxFrameBytes);
    ws_.write_buffer_bytes(256);  // our frames are tiny: keep the write buffer small
    ws_.auto_fragment(false);
    ws_.async_accept(parser_->get(),
                     [self = shared()](beast::error_code ec) { self->onHandshake(ec); });
  }

  void readFrame() override {
    ws_.async_read(buffer_, [self = shared()](beast::error_code ec, size_t) { self->onRead(ec); });
  }

  void writeFrame() override {
    ws_.text(true);
    ws_.async_write(asio::buffer(out_),
                    [self = shared()](beast::error_code ec, size_t) { self->onWritten(ec); });
  }

  void writeClose(const websocket::close_reason& reason) override {
    ws_.async_close(reason, [self = shared()](beast::error_code) { self->onCloseWritten(); });
  }

  bool socketOpen() const override { return beast::get_lowest_layer(ws_).is_open(); }
  size_t bytesWaiting() const override {
    beast::error_code ignored;
    return beast::get_lowest_layer(ws_).available(ignored);
  }
  bool peerClosed() override {
    pollfd events{beast::get_lowest_layer(ws_).native_handle(), POLLIN | POLLRDHUP, 0};
    return ::poll(&events, 1, 0) == 1 && (events.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  }
  bool gotText() const override { return ws_.got_text(); }
  void setNoDelay() override {
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).set_option(tcp::no_delay(true), ignored);
  }

 private:
  std::shared_ptr<SessionOver> shared() {
    return std::static_pointer_cast<SessionOver>(shared_from_this());
  }

  zkagent::http::WebSocketStream<Socket> ws_;
};

}  // namespace

std::shared_ptr<Session> DeviceEndpoint::Core::makeSession(tcp::socket socket) {
  if (tls) {
    return std::make_shared<SessionOver<asio::ssl::stream<tcp::socket>>>(shared_from_this(),
                                                                         std::move(socket), *tls);
  }
  return std::make_shared<SessionOver<tcp::socket>>(shared_from_this(), std::move(socket));
}

}  // namespace zkagent::agent::detail
