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
#include "zkagent/http/accept_loop.hpp"

namespace zkagent::http {
namespace {

// The request line and headers; the body is added once read.
Request headOf(const bhttp::request_header<>& raw, const std::string& remote) {
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
  std::shared_ptr<AcceptLoop> listener;  // each connection on a strand of its own
  std::optional<asio::ssl::context> tls;
  std::optional<asio::thread_pool> handlerPool;
  std::mutex mutex;  // guards sessions and stopped
  std::unordered_set<std::shared_ptr<SessionBase>> sessions;
  bool stopped = false;

  ServerState(asio::io_context& context, ServerOptions serverOptions, Router serverRouter)
      : io(context),
        options(std::move(serverOptions)),
        router(std::move(serverRouter)),
        listener(std::make_shared<AcceptLoop>(
            asio::make_strand(context),
            tcp::endpoint{asio::ip::make_address(options.address), options.port},
            AcceptLoop::Options{.name = "HTTP server", .socketExecutor = [&context] {
                                  return asio::any_io_executor(asio::make_strand(context));
                                }})) {
    if (options.tls) tls.emplace(serverTlsContext(*options.tls));
    if (options.handlerThreads > 0) handlerPool.emplace(options.handlerThreads);
  }
  void serve(const std::shared_ptr<ServerState>& self, tcp::socket socket);
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

  // The header first: a request the router refuses on its headers alone (no route, no or a wrong
  // token, over the rate) is answered before its body is read, so a client without credentials
  // cannot make the server take in a body.
  void read() {
    parser_.emplace();
    parser_->body_limit(server_->options.bodyLimit);
    parser_->header_limit(static_cast<std::uint32_t>(server_->options.headerLimit));
    tcp().expires_after(server_->options.readTimeout);  // the header and the body together
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             [self = this->shared_from_this()](beast::error_code error, size_t) {
                               self->onHeader(error);
                             });
  }

  // After an error reading a request: answer the limits, close on anything else.
  void failed(beast::error_code error) {
    if (error == bhttp::error::body_limit || error == bhttp::error::header_limit) {
      const bool body = error == bhttp::error::body_limit;
      auto limit = std::to_string(body ? server_->options.bodyLimit : server_->options.headerLimit);
      drainAfter_ = true;
      write(toBeast(body ? Response::error(413, "request body larger than " + limit + " bytes")
                         : Response::error(431, "request header larger than " + limit + " bytes"),
                    11, false));
      return;
    }
    finish();  // closed by the peer, timed out or unparsable: just close
  }

  void onHeader(beast::error_code error) {
    if (error) return failed(error);
    const auto& head = parser_->get();
    const unsigned version = head.version();
    // Answered early with a body still to come: the connection closes after the answer.
    const bool bodyPending = !parser_->is_done();
    const bool keepAlive = head.keep_alive() && !bodyPending;
    drainAfter_ = bodyPending;
    if (!withinRate()) {
      const auto& onLimited = server_->options.onRateLimited;
      if (onLimited) onLimited();
      Response limited = Response::error(
          429, "too many requests on this connection (limit " +
                   std::to_string(server_->options.maxRequestsPerSecond) + " per second)");
      limited.headers.emplace_back("Retry-After", std::to_string(retryAfterSeconds()));
      return write(toBeast(std::move(limited), version, keepAlive));
    }
    if (auto refused = server_->router.refusal(headOf(head, remote_))) {
      return write(toBeast(std::move(*refused), version, keepAlive));
    }
    drainAfter_ = false;
    bhttp::async_read(stream_, buffer_, *parser_,
                      [self = this->shared_from_this()](beast::error_code readError, size_t) {
                        self->onRead(readError);
                      });
  }

  void onRead(beast::error_code error) {
    if (error) return failed(error);
    auto raw = parser_->release();
    unsigned version = raw.version();
    bool keepAlive = raw.keep_alive();
    auto request = headOf(raw, remote_);
    request.body = std::move(raw.body());
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

void detail::ServerState::serve(const std::shared_ptr<ServerState>& self, tcp::socket socket) {
  std::shared_ptr<SessionBase> session;
  if (tls) {
    session = std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(std::move(socket),
                                                                              self, *tls);
  } else {
    session = std::make_shared<Session<beast::tcp_stream>>(std::move(socket), self);
  }
  {
    std::lock_guard lock(mutex);
    // Stopped, or over the limit: closed at once (the session is dropped unstarted), so the
    // open connections keep being served.
    if (stopped || sessions.size() >= options.maxConnections) return;
    sessions.insert(session);
  }
  session->start();
}

Server::Server(asio::io_context& io, ServerOptions options, Router router)
    : state_(std::make_shared<detail::ServerState>(io, std::move(options), std::move(router))) {}

Server::~Server() {
  stop();
  if (state_->handlerPool) state_->handlerPool->join();
}

void Server::start() {
  state_->listener->start([weak = std::weak_ptr<detail::ServerState>(state_)](tcp::socket socket) {
    if (auto self = weak.lock()) self->serve(self, std::move(socket));
  });
}

void Server::stop() {
  std::unordered_set<std::shared_ptr<SessionBase>> open;
  {
    std::lock_guard lock(state_->mutex);
    if (state_->stopped) return;
    state_->stopped = true;
    open.swap(state_->sessions);
  }
  state_->listener->stop();
  for (const auto& session : open) session->close();
}

AcceptCounts Server::acceptCounts() const { return state_->listener->counts(); }

uint16_t Server::port() const { return state_->listener->port(); }

std::string Server::address() const { return state_->listener->endpoint().address().to_string(); }

}  // namespace zkagent::http
