// The HTTP/1.1 client, on pools of keep-alive connections. Blocking exchanges: each connection
// owns a private io_context so that Beast's per-operation timeouts (tcp_stream::expires_after)
// work for a blocking caller: start the async operation, run the private context until it
// completes or the timer closes the socket. Asynchronous exchanges on the caller's io_context
// (ClientOptions::io): the same steps chained on connections of that context, no thread of
// their own. With TLS, the connection is a TLS stream over the same TCP stream (the deadlines
// stay on the TCP layer).
#include <boost/asio/dispatch.hpp>
#include <boost/asio/strand.hpp>
#include <mutex>
#include <optional>

#include "beast.hpp"
#include "tls.hpp"

namespace zkagent::http {
namespace {

// The server closed an idle keep-alive connection before our request reached it.
bool closedWhileIdle(const beast::error_code& error) {
  return error == bhttp::error::end_of_stream || error == asio::error::eof ||
         error == asio::error::connection_reset || error == asio::error::broken_pipe;
}

// A reused connection that the server closed while it was idle, before any answer: the request
// goes once more on a fresh connection.
bool retryOnFresh(bool reused, bool gotBytes, const beast::error_code& error) {
  return reused && !gotBytes && closedWhileIdle(error);
}

}  // namespace

// Named, not anonymous: Client::Impl holds connections, and a type with linkage may not hold a
// type without it (GCC's -Wsubobject-linkage when a library is one unity unit).
namespace client_state {

struct Connection {
  std::optional<asio::io_context> own;  // blocking use: the private context it runs on
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls;
  beast::flat_buffer buffer;

  // On a strand of `shared` (asynchronous use), else on a private context. The strand: several
  // threads may run `shared`, and Beast's timeout handler closes the socket on the stream's
  // executor; without one it could run beside the completion that reuses or destroys the
  // connection on another thread (a data race ThreadSanitizer caught in the agent).
  Connection(asio::ssl::context* context, asio::io_context* shared) {
    if (shared != nullptr) {
      open(context, asio::make_strand(*shared));
    } else {
      open(context, own.emplace().get_executor());
    }
  }
  template <typename Executor>
  void open(asio::ssl::context* context, Executor executor) {
    if (context != nullptr) {
      tls.emplace(executor, *context);
    } else {
      plain.emplace(executor);
    }
  }
  beast::tcp_stream& tcp() { return tls ? beast::get_lowest_layer(*tls) : *plain; }
  // Calls `use` with the stream HTTP is spoken on.
  template <typename Use>
  auto with(Use&& use) {
    return tls ? use(*tls) : use(*plain);
  }

  // Runs the operation started by `start` until it completes (or its timer closes the socket).
  template <typename Start>
  beast::error_code run(Start&& start) {
    beast::error_code result;
    start([&result](beast::error_code error, auto&&...) { result = error; });
    own->restart();
    own->run();
    return result;
  }
};

}  // namespace client_state

using client_state::Connection;

struct Client::Impl {
  class AsyncExchange;

  ClientOptions options;
  std::string hostHeader;
  std::mutex mutex;
  std::vector<std::unique_ptr<Connection>> idle;
  std::optional<asio::ssl::context> tls;
  std::optional<asio::thread_pool> workers;  // asyncRequest() without ClientOptions::io

  explicit Impl(ClientOptions clientOptions)
      : options(std::move(clientOptions)),
        hostHeader(options.host + ":" + std::to_string(options.port)) {
    if (options.tls) tls.emplace(clientTlsContext(*options.tls));
    if (options.io == nullptr) workers.emplace(std::max<size_t>(1, options.asyncThreads));
  }

  // Idle connections are all of one kind: on options.io when it is set, else private.
  std::unique_ptr<Connection> takeIdle() {
    std::lock_guard lock(mutex);
    if (idle.empty()) return nullptr;
    auto connection = std::move(idle.back());
    idle.pop_back();
    return connection;
  }

  void giveBack(std::unique_ptr<Connection> connection) {
    std::lock_guard lock(mutex);
    if (idle.size() < options.maxIdleConnections) idle.push_back(std::move(connection));
  }

  std::unique_ptr<Connection> newConnection(asio::io_context* shared) {
    return std::make_unique<Connection>(tls ? &*tls : nullptr, shared);
  }

  bhttp::request<bhttp::string_body> makeRequest(Method method, std::string_view target,
                                                 std::string body,
                                                 std::string_view contentType) const {
    bhttp::request<bhttp::string_body> request{verbOf(method), std::string(target), 11};
    request.set(bhttp::field::host, hostHeader);
    request.set(bhttp::field::user_agent, "zkagent");
    if (!options.bearerToken.empty()) {
      request.set(bhttp::field::authorization, "Bearer " + options.bearerToken);
    }
    if (!body.empty()) request.set(bhttp::field::content_type, std::string(contentType));
    request.body() = std::move(body);
    request.keep_alive(true);
    request.prepare_payload();
    return request;
  }

  static std::string describe(const beast::error_code& code) {
    return code == beast::error::timeout ? std::string("timed out") : code.message();
  }
  std::string connectError(const beast::error_code& code) const {
    return "cannot connect to " + hostHeader + ": " + describe(code);
  }
  std::string handshakeError(const beast::error_code& code) const {
    return "TLS handshake with " + hostHeader + " failed: " + describe(code);
  }
  std::string exchangeError(const beast::error_code& code) const {
    return code == beast::error::timeout
               ? "no answer from " + hostHeader + " within " +
                     std::to_string(options.requestTimeout.count()) + " ms"
               : "exchange with " + hostHeader + " failed: " + code.message();
  }

  // The server's certificate must chain to our CA and name the host we dialled.
  void prepareHandshake(beast::ssl_stream<beast::tcp_stream>& stream) const {
    expectServerName(stream.native_handle(), options.host);
  }

  static ClientResponse answered(bhttp::response<bhttp::string_body>& response) {
    ClientResponse result;
    result.status = static_cast<int>(response.result_int());
    result.contentType = std::string(response[bhttp::field::content_type]);
    result.body = std::move(response.body());
    return result;
  }

  // ---- blocking ----

  std::unique_ptr<Connection> connect(std::string& error) {
    auto connection = newConnection(nullptr);
    beast::error_code code;
    tcp::resolver resolver(*connection->own);
    auto endpoints = resolver.resolve(options.host, std::to_string(options.port), code);
    if (code) {
      error = "cannot resolve " + hostHeader + ": " + code.message();
      return nullptr;
    }
    auto& stream = connection->tcp();
    stream.expires_after(options.connectTimeout);
    code = connection->run([&](auto handler) {
      stream.async_connect(endpoints, [handler](beast::error_code e, const auto&) { handler(e); });
    });
    if (code) {
      error = connectError(code);
      return nullptr;
    }
    stream.socket().set_option(tcp::no_delay(true));
    if (connection->tls) {
      prepareHandshake(*connection->tls);
      connection->tcp().expires_after(options.connectTimeout);
      code = connection->run([&](auto handler) {
        connection->tls->async_handshake(asio::ssl::stream_base::client, handler);
      });
      if (code) {
        error = handshakeError(code);
        return nullptr;
      }
    }
    return connection;
  }

  // One request/response on `connection`; sets `response` or returns the error.
  beast::error_code exchange(Connection& connection,
                             const bhttp::request<bhttp::string_body>& request,
                             bhttp::response<bhttp::string_body>& response, bool& gotBytes) {
    connection.tcp().expires_after(options.requestTimeout);
    auto code = connection.run([&](auto handler) {
      connection.with([&](auto& stream) { bhttp::async_write(stream, request, handler); });
    });
    if (code) return code;
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(options.responseBodyLimit);
    if (request.method() == bhttp::verb::head) parser.skip(true);
    code = connection.run([&](auto handler) {
      connection.with(
          [&](auto& stream) { bhttp::async_read(stream, connection.buffer, parser, handler); });
    });
    gotBytes = parser.got_some();
    if (!code) response = parser.release();
    return code;
  }

  ClientResponse request(Method method, std::string_view target, std::string body,
                         std::string_view contentType) {
    const auto request = makeRequest(method, target, std::move(body), contentType);
    ClientResponse result;
    for (int attempt = 0; attempt < 2; ++attempt) {
      auto connection = takeIdle();
      bool reused = connection != nullptr;
      if (!connection) connection = connect(result.transportError);
      if (!connection) return result;

      bhttp::response<bhttp::string_body> response;
      bool gotBytes = false;
      auto code = exchange(*connection, request, response, gotBytes);
      if (!code) {
        result = answered(response);
        if (response.keep_alive()) giveBack(std::move(connection));
        return result;
      }
      result.transportError = exchangeError(code);
      if (!retryOnFresh(reused, gotBytes, code)) return result;
    }
    return result;
  }
};

// One asynchronous exchange on ClientOptions::io: connect (and handshake) unless an idle
// connection is reused, write, read; once more on a fresh connection when a reused one turns
// out closed. Holds the client's state, so it may outlive the Client.
class Client::Impl::AsyncExchange : public std::enable_shared_from_this<AsyncExchange> {
 public:
  AsyncExchange(std::shared_ptr<Client::Impl> client, bhttp::request<bhttp::string_body> request,
                std::function<void(ClientResponse)> done)
      : client_(std::move(client)), request_(std::move(request)), done_(std::move(done)) {}

  void start() {
    connection_ = client_->takeIdle();
    reused_ = connection_ != nullptr;
    // A reused connection's operations start on its strand, where its last timer may still run.
    if (reused_)
      return asio::dispatch(connection_->tcp().get_executor(),
                            [self = shared_from_this()] { self->send(); });
    fresh();
  }

 private:
  void fresh() {
    connection_ = client_->newConnection(client_->options.io);
    auto resolver = std::make_shared<tcp::resolver>(*client_->options.io);
    resolver->async_resolve(client_->options.host, std::to_string(client_->options.port),
                            [self = shared_from_this(), resolver](
                                beast::error_code code, tcp::resolver::results_type endpoints) {
                              if (code)
                                return self->fail("cannot resolve " + self->client_->hostHeader +
                                                  ": " + code.message());
                              self->connect(endpoints);
                            });
  }

  void connect(const tcp::resolver::results_type& endpoints) {
    auto& stream = connection_->tcp();
    stream.expires_after(client_->options.connectTimeout);
    stream.async_connect(
        endpoints, [self = shared_from_this()](beast::error_code code, const tcp::endpoint&) {
          if (code) return self->fail(self->client_->connectError(code));
          self->connection_->tcp().socket().set_option(tcp::no_delay(true));
          if (!self->connection_->tls) return self->send();
          self->client_->prepareHandshake(*self->connection_->tls);
          self->connection_->tcp().expires_after(self->client_->options.connectTimeout);
          self->connection_->tls->async_handshake(
              asio::ssl::stream_base::client, [self](beast::error_code handshake) {
                if (handshake) return self->fail(self->client_->handshakeError(handshake));
                self->send();
              });
        });
  }

  void send() {
    connection_->tcp().expires_after(client_->options.requestTimeout);
    connection_->with([&](auto& stream) {
      bhttp::async_write(stream, request_,
                         [self = shared_from_this()](beast::error_code code, std::size_t) {
                           if (code) return self->failed(code);
                           self->receive();
                         });
    });
  }

  void receive() {
    parser_.emplace();
    parser_->body_limit(client_->options.responseBodyLimit);
    if (request_.method() == bhttp::verb::head) parser_->skip(true);
    connection_->with([&](auto& stream) {
      bhttp::async_read(stream, connection_->buffer, *parser_,
                        [self = shared_from_this()](beast::error_code code, std::size_t) {
                          if (code) return self->failed(code);
                          auto response = self->parser_->release();
                          auto result = Client::Impl::answered(response);
                          if (response.keep_alive())
                            self->client_->giveBack(std::move(self->connection_));
                          self->done_(std::move(result));
                        });
    });
  }

  void failed(const beast::error_code& code) {
    const bool gotBytes = parser_ && parser_->got_some();
    if (retryOnFresh(reused_, gotBytes, code)) {
      reused_ = false;  // so a fresh connection is tried once only
      parser_.reset();
      return fresh();
    }
    fail(client_->exchangeError(code));
  }

  void fail(std::string error) {
    ClientResponse result;
    result.transportError = std::move(error);
    done_(std::move(result));
  }

  std::shared_ptr<Client::Impl> client_;
  bhttp::request<bhttp::string_body> request_;
  std::function<void(ClientResponse)> done_;
  std::unique_ptr<Connection> connection_;
  std::optional<bhttp::response_parser<bhttp::string_body>> parser_;
  bool reused_ = false;
};

Client::Client(ClientOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {}

Client::~Client() {
  if (impl_->workers) impl_->workers->join();
}

ClientResponse Client::request(Method method, std::string_view target, std::string body,
                               std::string_view contentType) {
  if (impl_->options.io != nullptr)
    throw std::logic_error("http::Client::request: this client runs on ClientOptions::io");
  return impl_->request(method, target, std::move(body), contentType);
}

void Client::asyncRequest(Method method, std::string target, std::string body,
                          std::function<void(ClientResponse)> done) {
  if (impl_->options.io != nullptr) {
    auto request = impl_->makeRequest(method, target, std::move(body), "application/json");
    std::make_shared<Impl::AsyncExchange>(impl_, std::move(request), std::move(done))->start();
    return;
  }
  asio::post(*impl_->workers, [impl = impl_.get(), method, target = std::move(target),
                               body = std::move(body), done = std::move(done)]() mutable {
    done(impl->request(method, target, std::move(body), "application/json"));
  });
}

}  // namespace zkagent::http
