// zkagent http: a small HTTP/1.1 server and client with keep-alive (Boost.Beast inside, not here).
//
// The server hands every complete request to a Router, which maps method + path pattern to a
// plain function `Response(const Request&)`; routes are testable without sockets:
//
//   zkagent::http::Router router({.bearerToken = "s3cret"});
//   router.add(Method::Get, "/v1/accounts/{id}", [](const Request& r) {
//     return Response::json(200, "{\"id\":\"" + r.params.at("id") + "\"}");
//   });
//   router.add(Method::Get, "/healthz", healthz, Access::Public);
//   zkagent::http::Server server(io, {.address = "127.0.0.1", .port = 0}, std::move(router));
//   server.start();   // then io.run() on one or more threads
//
// The client keeps idle connections open for reuse, is thread-safe, and never throws for
// transport problems: they come back as ClientResponse::transportError.
//
// Both sides speak TLS when given ServerOptions::tls / ClientOptions::tls (OpenSSL, inside the
// library). A server that verifies client certificates tells each handler who the peer is
// (Request::peerIdentities): the certificate's subject CN and its DNS and URI names.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace zkagent::http {

using Millis = std::chrono::milliseconds;

enum class Method { Get, Head, Post, Put, Delete, Patch, Options, Other };
std::string_view toString(Method method);

struct Request {
  Method method = Method::Get;
  std::string target;                                        // as received, e.g. "/v1/ops?dry=1"
  std::string path;                                          // target without the query string
  std::string query;                                         // after '?', empty when none
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-case
  std::string body;
  std::map<std::string, std::string, std::less<>> params;  // {name} segments, set by the Router
  std::string remoteAddress;
  // The verified client certificate's subject CN first, then its DNS and URI subject alternative
  // names; empty over plain HTTP or when the client sent no certificate.
  std::vector<std::string> peerIdentities;

  // Case-insensitive header lookup.
  std::optional<std::string_view> header(std::string_view name) const;
};

struct Response {
  int status = 200;
  std::string contentType = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers

  static Response json(int status, std::string body);
  static Response text(int status, std::string body, std::string contentType = "text/plain");
  // {"error":"<message>"} with the message JSON-escaped.
  static Response error(int status, std::string_view message);
};

using Handler = std::function<Response(const Request&)>;
// Answers a request, once, from any thread.
using Responder = std::function<void(Response)>;
// A handler that answers later (for example when a request it sent on has come back), so that
// nothing blocks a thread meanwhile. It runs on the server's io thread and must not block.
using DeferredHandler = std::function<void(const Request&, Responder)>;

// Token: needs `Authorization: Bearer <token>` when the router has a token. Operator: needs the
// operator token; without one configured it gets 403 naming operatorTokenSetting, unless
// openOperatorActions (then it is a Token route). OperatorRead (what only operators may read):
// needs the operator token when one is configured, else it is a Token route. Public: never.
enum class Access { Token, Operator, OperatorRead, Public };

struct RouterOptions {
  std::string bearerToken{};    // empty: no request needs a token
  std::string operatorToken{};  // what Operator routes need instead of bearerToken
  bool openOperatorActions = false;
  std::string operatorTokenSetting = "an operator token";  // where to set it, for the 403
};

class Router {
 public:
  explicit Router(RouterOptions options = {});

  // `pattern` is a path of literal segments and `{name}` segments; a `{name}` segment matches one
  // non-empty path segment and lands in Request::params. Literal routes win over parameter
  // routes. Throws std::invalid_argument on a malformed pattern or a duplicate route.
  void add(Method method, std::string_view pattern, Handler handler, Access access = Access::Token);
  // The same rules for a handler that answers through its Responder. One that throws before it
  // answered gets the 500; it must not both answer and throw.
  void addDeferred(Method method, std::string_view pattern, DeferredHandler handler,
                   Access access = Access::Token);

  // Dispatches: 404 no route for the path, 405 (with Allow) wrong method, 401 missing or wrong
  // bearer token, 403 an operator route without an operator token configured, 500 when the
  // handler throws. Never throws.
  // A deferred route's answer is waited for (so not from the thread that would deliver it).
  Response handle(Request request) const;
  // The same, answering through `respond`: a deferred handler runs here, on the caller's
  // thread; any other handler runs through `runBlocking` (e.g. posted to a pool), or here when
  // it is empty. Refusals (404, 405, 401, 403) are answered here.
  void dispatch(Request request, Responder respond,
                const std::function<void(std::function<void()>)>& runBlocking = {}) const;
  // The refusal dispatch would answer from the request line and headers alone (404, 405, 401,
  // 403), so that a server answers it before reading the body; nullopt when a handler would run.
  std::optional<Response> refusal(Request head) const;

  bool requiresToken() const { return !options_.bearerToken.empty(); }

 private:
  struct Route {
    Method method;
    std::vector<std::string> segments;  // "{name}" marks a parameter
    Handler handler;                    // one of the two is set
    DeferredHandler deferred;
    Access access;
  };
  void addRoute(Method method, std::string_view pattern, Route route);
  const Route* resolve(Request& request, Response& refusal) const;
  RouterOptions options_;
  std::vector<Route> routes_;
};

// PEM files. With a clientCa, a client certificate signed by it is verified during the handshake
// (expired, unknown CA or no certificate when required: the handshake fails, no handler runs).
struct ServerTls {
  std::filesystem::path cert{};      // the server's certificate chain
  std::filesystem::path key{};       // its private key
  std::filesystem::path clientCa{};  // empty: client certificates are not asked for
  bool requireClientCert = true;     // with a clientCa: refuse clients without a certificate
};

struct ServerOptions {
  std::string address = "127.0.0.1";
  uint16_t port = 0;               // 0: any free port (see Server::port())
  size_t bodyLimit = 1024 * 1024;  // larger request bodies get 413 and the connection closes
  Millis readTimeout{60000};       // waiting for and reading one request (bounds idle keep-alive)
  Millis writeTimeout{30000};      // writing one response
  // 0: handlers run on the io_context's threads (they must not block). N > 0: handlers run on a
  // pool of N threads, for handlers that block (e.g. waiting for an fsync).
  size_t handlerThreads = 0;
  std::optional<ServerTls> tls{};  // unset: plain HTTP
  // Connections beyond this are closed as soon as they are accepted; the open ones are served.
  size_t maxConnections = 4096;
  size_t headerLimit = 16 * 1024;  // request line + headers; larger gets 431 and a close
  // Requests per second on one connection (a bucket of one second's worth, refilled steadily);
  // a request beyond it gets 429 with Retry-After and no handler runs. 0: no limit.
  unsigned maxRequestsPerSecond = 10000;
  std::function<void()> onRateLimited{};  // called for every 429, e.g. to count it
};

// What a listener's accept loop (zkagent/http/accept_loop.hpp) has done so far.
struct AcceptCounts {
  uint64_t attempts = 0;  // accepts started
  uint64_t accepted = 0;
  uint64_t failures = 0;     // accepts that failed, each followed by a pause (no busy retry)
  uint64_t failureRuns = 0;  // runs of failures between successes (one warning each)
};

namespace detail {
struct ServerState;
}

class Server {
 public:
  // Binds and listens at once (so port() is known); throws std::system_error when it cannot, and
  // std::invalid_argument (naming the file) when a TLS file cannot be loaded.
  Server(boost::asio::io_context& io, ServerOptions options, Router router);
  ~Server();  // stop(), then waits for running handlers
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  void start();  // begins accepting; connections are served on `io`
  // Stops accepting and closes every open connection; io.run() returns once nothing is left.
  void stop();
  uint16_t port() const;
  std::string address() const;
  AcceptCounts acceptCounts() const;  // from any thread

 private:
  std::shared_ptr<detail::ServerState> state_;
};

// PEM files. The server's certificate must chain to `ca` and name `host` (DNS name or IP).
struct ClientTls {
  std::filesystem::path ca{};
  std::filesystem::path cert{};  // optional client certificate (with `key`) for servers that ask
  std::filesystem::path key{};
};

struct ClientOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 80;
  Millis connectTimeout{2000};
  Millis requestTimeout{5000};     // writing the request and reading the whole response
  std::string bearerToken{};       // sent as `Authorization: Bearer ...` when not empty
  size_t maxIdleConnections = 64;  // idle keep-alive connections kept for reuse
  size_t asyncThreads = 2;         // workers that run asyncRequest() when `io` is not set
  // Set: asyncRequest() runs its exchanges on this context, with no thread of its own, and
  // request() is not available (it throws std::logic_error).
  boost::asio::io_context* io = nullptr;
  size_t responseBodyLimit = 8 * 1024 * 1024;
  std::optional<ClientTls> tls{};  // unset: plain HTTP
};

struct ClientResponse {
  int status = 0;  // 0 when the exchange failed
  std::string body;
  std::string contentType;
  std::string transportError;  // what failed (connect, timeout, closed...) or empty

  bool delivered() const { return transportError.empty(); }
};

class Client {
 public:
  // Throws std::invalid_argument when a TLS file cannot be loaded (naming the file).
  explicit Client(ClientOptions options);
  // Waits for asyncRequest() calls in flight on its workers; on `io`, exchanges still in flight
  // finish there later and call their `done`.
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // One exchange on an idle keep-alive connection, or a new one. A reused connection that turns
  // out closed by the server (before any answer) is retried once on a fresh connection; callers
  // that cannot tolerate a repeated request must make it idempotent (the gateway's opId).
  // Thread-safe; blocks the calling thread for at most connectTimeout + 2 x requestTimeout.
  ClientResponse request(Method method, std::string_view target, std::string body = {},
                         std::string_view contentType = "application/json");
  ClientResponse get(std::string_view target) { return request(Method::Get, target); }
  ClientResponse post(std::string_view target, std::string body) {
    return request(Method::Post, target, std::move(body));
  }

  // request() on one of the client's worker threads, or on `io` when set; `done` runs there, so
  // an Asio program should post the result back to its own strand.
  void asyncRequest(Method method, std::string target, std::string body,
                    std::function<void(ClientResponse)> done);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace zkagent::http
