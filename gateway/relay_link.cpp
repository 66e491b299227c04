// The relay's WebSocket client: the subscriber listener's Session seen from the other end.
#include "relay_link.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <deque>
#include <type_traits>

#include "zkagent/http/tls.hpp"
#include "zkagent/http/websocket.hpp"
#include "zkagent/naming.hpp"

namespace zkagent::gateway {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

namespace {

constexpr auto kConnectTimeout = std::chrono::seconds(5);  // TCP connect, then the TLS handshake
constexpr auto kCloseTimeout = std::chrono::seconds(1);    // our close frame, then the socket goes

// A silent owner (a host gone without a reset) is found by WebSocket pings: the stream ends once
// nothing came back for the idle timeout.
websocket::stream_base::timeout linkTimeouts() {
  websocket::stream_base::timeout timeouts{};
  timeouts.handshake_timeout = std::chrono::seconds(5);
  timeouts.idle_timeout = std::chrono::seconds(10);
  timeouts.keep_alive_pings = true;
  return timeouts;
}

template <typename Stream>
class Link final : public RelayLink, public std::enable_shared_from_this<Link<Stream>> {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  template <typename... Tls>
  Link(asio::any_io_executor executor, RelayEndpoint endpoint, Request request, Handlers handlers,
       Tls&... tls)
      : resolver_(executor),
        ws_(executor, tls...),
        endpoint_(std::move(endpoint)),
        request_(std::move(request)),
        handlers_(std::move(handlers)) {}

  void start() {
    resolver_.async_resolve(
        endpoint_.host, std::to_string(endpoint_.port),
        [self = this->shared_from_this()](beast::error_code ec, tcp::resolver::results_type found) {
          if (self->closed_) return;
          if (ec) return self->end(0, "resolve " + self->endpoint_.host + ": " + ec.message());
          self->connect(found);
        });
  }

  void send(std::string text) override {
    if (closed_) return;
    outgoing_.push_back(std::move(text));
    if (open_) pump();
  }

  void close() override {
    if (closed_) return;
    // The handlers stay until the link goes (no handler runs once closed_ is set): close() may be
    // called from inside one of them.
    closed_ = true;
    resolver_.cancel();
    if (!open_ || writing_) return cut();
    beast::get_lowest_layer(ws_).expires_after(kCloseTimeout);
    ws_.async_close(websocket::close_code::normal,
                    [self = this->shared_from_this()](beast::error_code) { self->cut(); });
  }

 private:
  std::string where() const { return naming::toString({endpoint_.host, endpoint_.port}); }

  void connect(const tcp::resolver::results_type& found) {
    beast::get_lowest_layer(ws_).expires_after(kConnectTimeout);
    beast::get_lowest_layer(ws_).async_connect(
        found, [self = this->shared_from_this()](beast::error_code ec, const tcp::endpoint&) {
          if (self->closed_) return;
          if (ec) return self->end(0, "connect " + self->where() + ": " + ec.message());
          if constexpr (kTls) {
            http::expectServerName(self->ws_.next_layer().native_handle(), self->endpoint_.host);
            self->ws_.next_layer().async_handshake(
                asio::ssl::stream_base::client, [self](beast::error_code error) {
                  if (self->closed_) return;
                  if (error) {
                    return self->end(
                        0, "TLS handshake with " + self->where() + ": " +
                               http::handshakeFailure(self->ws_.next_layer().native_handle(), error,
                                                      self->endpoint_.host));
                  }
                  self->upgrade();
                });
          } else {
            self->upgrade();
          }
        });
  }

  void upgrade() {
    beast::get_lowest_layer(ws_).expires_never();
    ws_.set_option(linkTimeouts());
    ws_.set_option(websocket::stream_base::decorator(
        [authorization = request_.authorization](websocket::request_type& upgrade) {
          if (!authorization.empty()) upgrade.set(beast::http::field::authorization, authorization);
        }));
    ws_.async_handshake(
        response_, where(), request_.target,
        [self = this->shared_from_this()](beast::error_code ec) { self->onUpgraded(ec); });
  }

  void onUpgraded(beast::error_code ec) {
    if (closed_) return;
    // A handshake error means an HTTP answer was read (a refusal); anything else, none came.
    if (ec == websocket::condition::handshake_failed) {
      return end(response_.result_int(), response_.body());
    }
    if (ec) return end(0, "upgrade at " + where() + ": " + ec.message());
    open_ = true;
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().set_option(tcp::no_delay(true), ignored);
    read();
    pump();
  }

  void read() {
    ws_.async_read(incoming_, [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
      if (self->closed_) return;
      if (ec) {
        const auto reason = self->ws_.reason();
        return self->end(0, ec == websocket::error::closed
                                ? "closed by " + self->where() + " (" +
                                      std::to_string(reason.code) + " " +
                                      std::string(reason.reason.c_str()) + ")"
                                : "stream with " + self->where() + ": " + ec.message());
      }
      const std::string text = beast::buffers_to_string(self->incoming_.data());
      self->incoming_.consume(self->incoming_.size());
      if (self->handlers_.message) self->handlers_.message(text);
      if (!self->closed_) self->read();
    });
  }

  void pump() {
    if (writing_ || outgoing_.empty() || closed_) return;
    writing_ = true;
    ws_.async_write(asio::buffer(outgoing_.front()),
                    [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                      self->writing_ = false;
                      if (self->closed_) return;
                      if (ec)
                        return self->end(0, "write to " + self->where() + ": " + ec.message());
                      self->outgoing_.pop_front();
                      self->pump();
                    });
  }

  void cut() {
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().shutdown(tcp::socket::shutdown_both, ignored);
    beast::get_lowest_layer(ws_).close();
  }

  void end(int status, std::string why) {
    if (closed_) return;
    closed_ = true;
    auto ended = std::move(handlers_.ended);
    cut();
    if (ended) ended(End{status, std::move(why)});
  }

  tcp::resolver resolver_;
  zkagent::http::WebSocketStream<Stream> ws_;
  RelayEndpoint endpoint_;
  Request request_;
  Handlers handlers_;
  websocket::response_type response_;
  beast::flat_buffer incoming_;
  std::deque<std::string> outgoing_;
  bool open_ = false, writing_ = false, closed_ = false;
};

}  // namespace

std::optional<RelayEndpoint> parseRelayUrl(std::string_view url) {
  RelayEndpoint endpoint;
  endpoint.tls = url.starts_with("wss://");
  if (!endpoint.tls && !url.starts_with("ws://")) return std::nullopt;
  url.remove_prefix(endpoint.tls ? 6 : 5);
  if (url.ends_with("/")) url.remove_suffix(1);
  naming::HostPort address;
  if (url.find('/') != std::string_view::npos ||
      naming::hostPortError(url, address, naming::PortZero::Refused)) {
    return std::nullopt;
  }
  endpoint.host = address.host;
  endpoint.port = address.port;
  return endpoint;
}

std::shared_ptr<RelayLink> RelayLink::open(asio::any_io_executor executor,
                                           const RelayEndpoint& endpoint, asio::ssl::context* tls,
                                           Request request, Handlers handlers) {
  if (!endpoint.tls) {
    auto link = std::make_shared<Link<beast::tcp_stream>>(executor, endpoint, std::move(request),
                                                          std::move(handlers));
    link->start();
    return link;
  }
  if (tls == nullptr) {
    // Told on the executor, like every other end.
    auto ended = std::move(handlers.ended);
    asio::post(executor, [ended = std::move(ended)] {
      if (ended) {
        ended(End{0, "wss:// needs tls.client_ca (the cluster's CA) to verify the owner"});
      }
    });
    return std::make_shared<Link<beast::tcp_stream>>(executor, endpoint, std::move(request),
                                                     Handlers{});
  }
  auto link = std::make_shared<Link<beast::ssl_stream<beast::tcp_stream>>>(
      executor, endpoint, std::move(request), std::move(handlers), *tls);
  link->start();
  return link;
}

}  // namespace zkagent::gateway
