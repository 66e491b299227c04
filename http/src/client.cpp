// The HTTP/1.1 client: blocking exchanges with timeouts, on a pool of keep-alive connections.
// Each connection owns a private io_context so that Beast's per-operation timeouts
// (tcp_stream::expires_after) work for a blocking caller: start the async operation, run the
// private context until it completes or the timer closes the socket. With TLS, the connection
// is a TLS stream over the same TCP stream (the deadlines stay on the TCP layer).
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

struct Connection {
  asio::io_context io;
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls;
  beast::flat_buffer buffer;

  explicit Connection(asio::ssl::context* context) {
    if (context != nullptr) {
      tls.emplace(io, *context);
    } else {
      plain.emplace(io);
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
    io.restart();
    io.run();
    return result;
  }
};

}  // namespace

struct Client::Impl {
  ClientOptions options;
  std::string hostHeader;
  std::mutex mutex;
  std::vector<std::unique_ptr<Connection>> idle;
  std::optional<asio::ssl::context> tls;
  asio::thread_pool workers;

  explicit Impl(ClientOptions clientOptions)
      : options(std::move(clientOptions)),
        hostHeader(options.host + ":" + std::to_string(options.port)),
        workers(std::max<size_t>(1, options.asyncThreads)) {
    if (options.tls) tls.emplace(detail::clientContext(*options.tls));
  }

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

  std::unique_ptr<Connection> connect(std::string& error) {
    auto connection = std::make_unique<Connection>(tls ? &*tls : nullptr);
    beast::error_code code;
    tcp::resolver resolver(connection->io);
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
      error = "cannot connect to " + hostHeader + ": " +
              (code == beast::error::timeout ? std::string("timed out") : code.message());
      return nullptr;
    }
    stream.socket().set_option(tcp::no_delay(true));
    if (connection->tls && !handshake(*connection, error)) return nullptr;
    return connection;
  }

  // The server's certificate must chain to our CA and name the host we dialled.
  bool handshake(Connection& connection, std::string& error) {
    auto& stream = *connection.tls;
    beast::error_code notAddress;
    asio::ip::make_address(options.host, notAddress);
    if (notAddress) {  // SNI; SSL_set_tlsext_host_name is a macro with an old-style cast
      SSL_ctrl(stream.native_handle(), SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
               const_cast<char*>(options.host.c_str()));
    }
    stream.set_verify_callback(asio::ssl::host_name_verification(options.host));
    connection.tcp().expires_after(options.connectTimeout);
    auto code = connection.run(
        [&](auto handler) { stream.async_handshake(asio::ssl::stream_base::client, handler); });
    if (code) {
      error = "TLS handshake with " + hostHeader + " failed: " +
              (code == beast::error::timeout ? std::string("timed out") : code.message());
      return false;
    }
    return true;
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
        result.status = static_cast<int>(response.result_int());
        result.contentType = std::string(response[bhttp::field::content_type]);
        result.body = std::move(response.body());
        result.transportError.clear();
        if (response.keep_alive()) giveBack(std::move(connection));
        return result;
      }
      result.transportError = code == beast::error::timeout
                                  ? "no answer from " + hostHeader + " within " +
                                        std::to_string(options.requestTimeout.count()) + " ms"
                                  : "exchange with " + hostHeader + " failed: " + code.message();
      if (!(reused && !gotBytes && closedWhileIdle(code))) return result;
    }
    return result;
  }
};

Client::Client(ClientOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Client::~Client() { impl_->workers.join(); }

ClientResponse Client::request(Method method, std::string_view target, std::string body,
                               std::string_view contentType) {
  return impl_->request(method, target, std::move(body), contentType);
}

void Client::asyncRequest(Method method, std::string target, std::string body,
                          std::function<void(ClientResponse)> done) {
  asio::post(impl_->workers, [impl = impl_.get(), method, target = std::move(target),
                              body = std::move(body), done = std::move(done)]() mutable {
    done(impl->request(method, target, std::move(body), "application/json"));
  });
}

}  // namespace zkagent::http
