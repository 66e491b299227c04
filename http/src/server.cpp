// The HTTP/1.1 server: listener + one session per connection on its own strand (Boost.Beast's
// clean-shutdown example, with bmcweb's router in front of the handlers), plain or TLS.
#include <boost/asio/strand.hpp>
#include <chrono>
#include <cmath>
#include <mutex>
#include <optional>
#include <unordered_set>

#include "beast.hpp"
#include "tls.hpp"

namespace zkagent::http {
namespace {

Request toRequest(bhttp::request<bhttp::string_body>&& raw, const std::string& remote) {
  Request request;
  request.method = methodOf(raw.method());
  request.target = std::string(raw.target());
  auto question = request.target.find('?');
  request.path = request.target.substr(0, question);
  if (question != std::string::npos) request.query = request.target.substr(question + 1);
  for (const auto& field : raw) {
    std::string name(field.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    request.headers.emplace_back(std::move(name), std::string(field.value()));
  }
  request.body = std::move(raw.body());
  request.remoteAddress = remote;
  return request;
}

bhttp::response<bhttp::string_body> toBeast(Response&& response, unsigned version, bool keepAlive) {
  bhttp::response<bhttp::string_body> raw{static_cast<bhttp::status>(response.status), version};
  raw.set(bhttp::field::server, "zkagent");
  raw.set(bhttp::field::content_type, response.contentType);
  for (auto& [name, value] : response.headers) raw.set(name, value);
  raw.body() = std::move(response.body);
  raw.keep_alive(keepAlive);
  raw.prepare_payload();
  return raw;
}

}  // namespace

// What the server keeps of each open connection, plain or TLS.
class SessionBase {
 public:
  virtual ~SessionBase() = default;
  virtual void start() = 0;
  virtual void close() = 0;
};

struct detail::ServerState {
  asio::io_context& io;
  ServerOptions options;
  Router router;
  tcp::acceptor acceptor;
  tcp::endpoint bound;  // kept: the acceptor's own endpoint is gone once it is closed
  std::optional<asio::ssl::context> tls;
  std::optional<asio::thread_pool> handlerPool;
  std::mutex mutex;  // guards sessions and stopped
  std::unordered_set<std::shared_ptr<SessionBase>> sessions;
  bool stopped = false;

  ServerState(asio::io_context& context, ServerOptions serverOptions, Router serverRouter)
      : io(context),
        options(std::move(serverOptions)),
        router(std::move(serverRouter)),
        acceptor(asio::make_strand(context)) {
    if (options.tls) tls.emplace(detail::serverContext(*options.tls));
    if (options.handlerThreads > 0) handlerPool.emplace(options.handlerThreads);
  }
  void accept(std::shared_ptr<ServerState> self);
  void forget(const std::shared_ptr<SessionBase>& session) {
    std::lock_guard lock(mutex);
    sessions.erase(session);
  }
};

// One connection. `Stream` is beast::tcp_stream or an ssl_stream over one; every deadline is on
// the TCP layer and covers a whole step (handshake, one request, one response), so a client
// trickling bytes cannot stretch it.
template <typename Stream>
class Session : public SessionBase, public std::enable_shared_from_this<Session<Stream>> {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  template <typename... Tls>
  Session(tcp::socket&& socket, std::shared_ptr<detail::ServerState> server, Tls&... tls)
      : stream_(std::move(socket), tls...), server_(std::move(server)) {
    beast::error_code ignored;
    auto endpoint = tcp().socket().remote_endpoint(ignored);
    if (!ignored) remote_ = endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
  }

  void start() override {
    asio::dispatch(stream_.get_executor(), [self = this->shared_from_this()] {
      if constexpr (kTls) {
        self->tcp().expires_after(self->server_->options.readTimeout);
        self->stream_.async_handshake(
            asio::ssl::stream_base::server, [self](beast::error_code error) {
              if (error) return self->finish();
              self->peer_ = detail::peerIdentities(self->stream_.native_handle());
              self->read();
            });
      } else {
        self->read();
      }
    });
  }

  void close() override {
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] {
      beast::error_code ignored;
      self->tcp().socket().shutdown(tcp::socket::shutdown_both, ignored);
      self->tcp().close();
    });
  }

 private:
  beast::tcp_stream& tcp() { return beast::get_lowest_layer(stream_); }

  void read() {
    parser_.emplace();
    parser_->body_limit(server_->options.bodyLimit);
    parser_->header_limit(static_cast<std::uint32_t>(server_->options.headerLimit));
    tcp().expires_after(server_->options.readTimeout);
    bhttp::async_read(stream_, buffer_, *parser_,
                      [self = this->shared_from_this()](beast::error_code error, size_t) {
                        self->onRead(error);
                      });
  }

  void onRead(beast::error_code error) {
    if (error == bhttp::error::body_limit || error == bhttp::error::header_limit) {
      const bool body = error == bhttp::error::body_limit;
      auto limit = std::to_string(body ? server_->options.bodyLimit : server_->options.headerLimit);
      drainAfter_ = true;
      write(toBeast(body ? Response::error(413, "request body larger than " + limit + " bytes")
                         : Response::error(431, "request header larger than " + limit + " bytes"),
                    11, false));
      return;
    }
    if (error) return finish();  // closed by the peer, timed out or unparsable: just close
    auto raw = parser_->release();
    unsigned version = raw.version();
    bool keepAlive = raw.keep_alive();
    if (!withinRate()) {
      const auto& onLimited = server_->options.onRateLimited;
      if (onLimited) onLimited();
      Response limited = Response::error(
          429, "too many requests on this connection (limit " +
                   std::to_string(server_->options.maxRequestsPerSecond) + " per second)");
      limited.headers.emplace_back("Retry-After", std::to_string(retryAfterSeconds()));
      return write(toBeast(std::move(limited), version, keepAlive));
    }
    auto request = toRequest(std::move(raw), remote_);
    request.peerIdentities = peer_;
    // From whichever thread answers (the handler pool, a deferred handler's completion): the
    // write goes on the session's strand.
    auto respond = [self = this->shared_from_this(), version, keepAlive](Response response) {
      asio::dispatch(self->stream_.get_executor(),
                     [self, version, keepAlive, response = std::move(response)]() mutable {
                       self->write(toBeast(std::move(response), version, keepAlive));
                     });
    };
    std::function<void(std::function<void()>)> runBlocking;
    if (server_->handlerPool) {
      runBlocking = [pool = &*server_->handlerPool](std::function<void()> run) {
        asio::post(*pool, std::move(run));
      };
    }
    server_->router.dispatch(std::move(request), std::move(respond), runBlocking);
  }

  // A token bucket per connection: one second's worth of requests, refilled at the rate.
  double rate() const { return server_->options.maxRequestsPerSecond; }
  bool withinRate() {
    if (rate() <= 0) return true;
    const auto now = std::chrono::steady_clock::now();
    if (!lastRefill_) {
      allowance_ = rate();
    } else {
      allowance_ = std::min(
          rate(), allowance_ + rate() * std::chrono::duration<double>(now - *lastRefill_).count());
    }
    lastRefill_ = now;
    if (allowance_ < 1) return false;
    allowance_ -= 1;
    return true;
  }
  long retryAfterSeconds() const {
    return std::max(1L, static_cast<long>(std::ceil((1 - allowance_) / rate())));
  }

  void write(bhttp::response<bhttp::string_body> response) {
    response_ = std::move(response);
    tcp().expires_after(server_->options.writeTimeout);
    bhttp::async_write(stream_, response_,
                       [self = this->shared_from_this()](beast::error_code error, size_t) {
                         if (!error && self->drainAfter_) return self->drain();
                         if (error || !self->response_.keep_alive()) return self->finish();
                         self->read();
                       });
  }

  // After an early answer (413, 431) the client may still be sending; closing now would reset
  // the connection and could destroy our answer before the client reads it. So: signal the end
  // of our response, then discard what still arrives (bounded) until the client closes.
  void drain() {
    beast::error_code ignored;
    tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
    discard(0);
  }

  void discard(size_t discarded) {
    constexpr size_t kMaxDiscarded = 64 * 1024 * 1024;
    if (discarded > kMaxDiscarded) return finish();
    tcp().expires_after(server_->options.readTimeout);
    buffer_.clear();
    tcp().async_read_some(buffer_.prepare(64 * 1024), [self = this->shared_from_this(), discarded](
                                                          beast::error_code error, size_t bytes) {
      if (error) return self->finish();
      self->discard(discarded + bytes);
    });
  }

  void finish() {
    beast::error_code ignored;
    tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
    tcp().close();
    server_->forget(this->shared_from_this());
  }

  Stream stream_;
  std::shared_ptr<detail::ServerState> server_;
  std::string remote_;
  std::vector<std::string> peer_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bhttp::response<bhttp::string_body> response_;
  bool drainAfter_ = false;
  double allowance_ = 0;  // requests this connection may still make now
  std::optional<std::chrono::steady_clock::time_point> lastRefill_;
};

void detail::ServerState::accept(std::shared_ptr<ServerState> self) {
  acceptor.async_accept(asio::make_strand(io), [self](beast::error_code error, tcp::socket socket) {
    if (error) {
      if (error == asio::error::operation_aborted || !self->acceptor.is_open()) return;
      return self->accept(self);  // e.g. too many open files: keep serving the others
    }
    std::shared_ptr<SessionBase> session;
    if (self->tls) {
      session = std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(std::move(socket),
                                                                                self, *self->tls);
    } else {
      session = std::make_shared<Session<beast::tcp_stream>>(std::move(socket), self);
    }
    {
      std::lock_guard lock(self->mutex);
      if (self->stopped) return;
      // Over the limit: closed at once (the session is dropped unstarted), so the open
      // connections keep being served.
      if (self->sessions.size() >= self->options.maxConnections) return self->accept(self);
      self->sessions.insert(session);
    }
    session->start();
    self->accept(self);
  });
}

Server::Server(asio::io_context& io, ServerOptions options, Router router)
    : state_(std::make_shared<detail::ServerState>(io, std::move(options), std::move(router))) {
  tcp::endpoint endpoint{asio::ip::make_address(state_->options.address), state_->options.port};
  auto& acceptor = state_->acceptor;
  acceptor.open(endpoint.protocol());
  acceptor.set_option(asio::socket_base::reuse_address(true));
  acceptor.bind(endpoint);
  acceptor.listen(asio::socket_base::max_listen_connections);
  state_->bound = acceptor.local_endpoint();
}

Server::~Server() {
  stop();
  if (state_->handlerPool) state_->handlerPool->join();
}

void Server::start() {
  asio::dispatch(state_->acceptor.get_executor(), [state = state_] { state->accept(state); });
}

void Server::stop() {
  std::unordered_set<std::shared_ptr<SessionBase>> open;
  {
    std::lock_guard lock(state_->mutex);
    if (state_->stopped) return;
    state_->stopped = true;
    open.swap(state_->sessions);
  }
  asio::post(state_->acceptor.get_executor(), [state = state_] {
    beast::error_code ignored;
    state->acceptor.close(ignored);
  });
  for (const auto& session : open) session->close();
}

uint16_t Server::port() const { return state_->bound.port(); }

std::string Server::address() const { return state_->bound.address().to_string(); }

}  // namespace zkagent::http
