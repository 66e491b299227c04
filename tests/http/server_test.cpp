// Server and client together on a loopback port chosen by the kernel.
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "zkagent/http.hpp"

using namespace zkagent::http;
using namespace std::chrono_literals;

namespace {

// Serves `router` on 127.0.0.1:<free port> from one io thread for the life of the object.
class RunningServer {
 public:
  explicit RunningServer(Router router, ServerOptions options = {})
      : server_(io_, std::move(options), std::move(router)) {
    server_.start();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~RunningServer() {
    server_.stop();
    thread_.join();  // returns once the listener and every session are closed
  }
  uint16_t port() const { return server_.port(); }
  uint64_t accepted() const { return server_.acceptCounts().accepted; }
  ClientOptions client() const { return ClientOptions{.port = port()}; }

 private:
  boost::asio::io_context io_;
  Server server_;
  std::thread thread_;
};

Router echoRouter() {
  Router router;
  router.add(Method::Post, "/echo/{word}", [](const Request& request) {
    return Response::text(200, request.params.at("word") + ":" + request.body);
  });
  router.add(Method::Get, "/peer",
             [](const Request& request) { return Response::text(200, request.remoteAddress); });
  return router;
}

// Connects, sends nothing, and waits up to `deadline` for the server to close the connection.
bool serverClosesAnIdleConnection(uint16_t port, std::chrono::milliseconds deadline) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket socket(io);
  socket.connect({boost::asio::ip::make_address("127.0.0.1"), port});
  pollfd fd{socket.native_handle(), POLLIN, 0};
  if (::poll(&fd, 1, static_cast<int>(deadline.count())) != 1) return false;
  char byte = 0;
  boost::system::error_code ec;
  socket.read_some(boost::asio::buffer(&byte, 1), ec);
  return ec == boost::asio::error::eof || ec == boost::asio::error::connection_reset;
}

// Whether the server has closed a keep-alive connection that went idle before this call, proven
// by two connections of its own that send nothing being closed one after the other. One is not
// enough: the server may arm the read timer of the pooled connection (after writing its response,
// which the client already has) after accepting the first probe, on a slow machine (seen under
// ASan), so the probe can time out first. The second is accepted only after the first timed out,
// a whole read timeout after the server's thread had handled both, so the pooled one is older.
bool serverClosedTheIdleConnections(uint16_t port, std::chrono::milliseconds deadline) {
  return serverClosesAnIdleConnection(port, deadline) &&
         serverClosesAnIdleConnection(port, deadline);
}

// Lets a fixed number of threads meet; gives up after a deadline.
class Meeting {
 public:
  explicit Meeting(int expected) : expected_(expected) {}
  bool arriveAndWait(std::chrono::milliseconds deadline) {
    std::unique_lock lock(mutex_);
    if (++arrived_ == expected_) changed_.notify_all();
    return changed_.wait_for(lock, deadline, [&] { return arrived_ >= expected_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int expected_;
  int arrived_ = 0;
};

// GET /slow answers once `released` is ready (or after 5 s).
Router slowRouter(std::shared_future<void> released) {
  Router router;
  router.add(Method::Get, "/slow", [released](const Request&) {
    released.wait_for(5s);
    return Response::text(200, "late");
  });
  return router;
}

}  // namespace

TEST(HttpServer, RequestReachesHandlerAndAnswerComesBack) {
  RunningServer server(echoRouter());
  Client client(server.client());
  auto response = client.post("/echo/hi", R"({"a":1})");
  ASSERT_TRUE(response.delivered()) << response.transportError;
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body, R"(hi:{"a":1})");
  EXPECT_EQ(response.contentType, "text/plain");
  EXPECT_EQ(client.get("/missing").status, 404);
}

TEST(HttpServer, ClientReusesItsKeepAliveConnection) {
  RunningServer server(echoRouter());
  Client client(server.client());
  auto first = client.get("/peer");
  auto second = client.get("/peer");
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(first.body, second.body);  // same client port: same TCP connection
}

TEST(HttpServer, ClientReconnectsWhenTheServerClosedTheIdleConnection) {
  RunningServer server(echoRouter(), ServerOptions{.readTimeout = 50ms});
  Client client(server.client());
  auto first = client.get("/peer");
  ASSERT_EQ(first.status, 200) << first.transportError;
  // The server closes a connection idle for its read timeout.
  ASSERT_TRUE(serverClosedTheIdleConnections(server.port(), 5s));
  const auto acceptedBefore = server.accepted();
  auto second = client.get("/peer");
  ASSERT_TRUE(second.delivered()) << second.transportError;
  EXPECT_EQ(second.status, 200);
  // A new connection, counted where it is accepted (the client's port may be reused).
  EXPECT_EQ(server.accepted(), acceptedBefore + 1);
}

// The read and write deadlines bound one step each, not the connection: a kept-alive connection
// busy for several times its timeouts stays open (the session sets a fresh expiry before each
// read and each write).
TEST(HttpServer, AConnectionBusyForLongerThanItsTimeoutsIsNotCut) {
  RunningServer server(echoRouter(), ServerOptions{.readTimeout = 100ms, .writeTimeout = 100ms});
  Client client(server.client());
  const auto first = client.get("/peer");
  ASSERT_EQ(first.status, 200) << first.transportError;
  // Back to back for five read and write timeouts.
  const auto until = std::chrono::steady_clock::now() + 500ms;
  int requests = 1;
  while (std::chrono::steady_clock::now() < until) {
    const auto next = client.get("/peer");
    ASSERT_EQ(next.status, 200) << next.transportError;
    EXPECT_EQ(next.body, first.body) << "request " << requests << " came on a new connection";
    ++requests;
  }
  EXPECT_EQ(server.accepted(), 1u);
}

TEST(HttpServer, OversizedBodyGets413AndServerKeepsServing) {
  RunningServer server(echoRouter(), ServerOptions{.bodyLimit = 1024});
  Client client(server.client());
  auto tooLarge = client.post("/echo/x", std::string(512 * 1024, 'x'));
  ASSERT_TRUE(tooLarge.delivered()) << tooLarge.transportError;
  EXPECT_EQ(tooLarge.status, 413);
  EXPECT_NE(tooLarge.body.find("1024"), std::string::npos);
  EXPECT_EQ(client.post("/echo/x", std::string(1024, 'y')).status, 200);
}

TEST(HttpServer, GarbageOnTheWireClosesOnlyThatConnection) {
  RunningServer server(echoRouter());
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket socket(io);
  socket.connect({boost::asio::ip::make_address("127.0.0.1"), server.port()});
  boost::asio::write(socket, boost::asio::buffer(std::string("NOT HTTP AT ALL\r\n\r\n")));
  boost::system::error_code error;
  char byte;
  boost::asio::read(socket, boost::asio::buffer(&byte, 1), error);
  EXPECT_TRUE(error) << "the server must close a connection it cannot parse";
  Client client(server.client());
  EXPECT_EQ(client.post("/echo/still", "up").body, "still:up");
}

TEST(HttpServer, BlockingHandlersRunConcurrentlyOnTheHandlerPool) {
  constexpr int kClients = 4;
  Meeting meeting(kClients);
  Router router;
  router.add(Method::Post, "/meet", [&](const Request&) {
    return Response::text(meeting.arriveAndWait(5s) ? 200 : 500, "");
  });
  RunningServer server(std::move(router), ServerOptions{.handlerThreads = kClients});
  Client client(server.client());
  std::vector<std::future<ClientResponse>> answers;
  for (int i = 0; i < kClients; ++i) {
    answers.push_back(std::async(std::launch::async, [&] { return client.post("/meet", "x"); }));
  }
  for (auto& answer : answers) EXPECT_EQ(answer.get().status, 200);
}

TEST(HttpClient, SlowServerIsReportedAsTimeout) {
  std::promise<void> release;
  RunningServer server(slowRouter(release.get_future().share()),
                       ServerOptions{.handlerThreads = 1});
  auto options = server.client();
  options.requestTimeout = 100ms;
  Client client(options);
  auto response = client.get("/slow");
  release.set_value();
  EXPECT_FALSE(response.delivered());
  EXPECT_EQ(response.status, 0);
  EXPECT_NE(response.transportError.find("no answer"), std::string::npos)
      << response.transportError;
}

TEST(HttpClient, RefusedConnectionIsReportedNotThrown) {
  uint16_t closedPort;
  {
    boost::asio::io_context io;
    boost::asio::ip::tcp::acceptor probe(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
    closedPort = probe.local_endpoint().port();
  }
  Client client(ClientOptions{.port = closedPort});
  auto response = client.get("/x");
  EXPECT_FALSE(response.delivered());
  EXPECT_NE(response.transportError.find("cannot connect"), std::string::npos)
      << response.transportError;
}

TEST(HttpClient, BearerTokenIsSentAndAsyncRequestDeliversOnAWorker) {
  Router router({.bearerToken = "t0k"});
  router.add(Method::Get, "/secret", [](const Request&) { return Response::text(200, "yes"); });
  RunningServer server(std::move(router));
  auto options = server.client();
  EXPECT_EQ(Client(options).get("/secret").status, 401);
  options.bearerToken = "t0k";
  Client client(options);
  std::promise<ClientResponse> answer;
  client.asyncRequest(Method::Get, "/secret", "", [&](ClientResponse r) { answer.set_value(r); });
  auto future = answer.get_future();
  ASSERT_EQ(future.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(future.get().body, "yes");
}

// ---- asynchronous exchanges on the caller's io_context (ClientOptions::io) ----

namespace {

// Runs `io` on this thread until `done` or the deadline; true when done.
bool runUntil(boost::asio::io_context& io, const bool& done, std::chrono::milliseconds deadline) {
  const auto until = std::chrono::steady_clock::now() + deadline;
  io.restart();
  while (!done && std::chrono::steady_clock::now() < until) io.run_for(10ms);
  return done;
}

// GET `path` through `client` (on `io`), running `io` until it is answered; nothing after 5 s.
std::optional<ClientResponse> getOn(boost::asio::io_context& io, Client& client,
                                    const std::string& path) {
  ClientResponse answer;
  bool done = false;
  client.asyncRequest(Method::Get, path, "", [&](ClientResponse r) {
    answer = std::move(r);
    done = true;
  });
  if (!runUntil(io, done, 5s)) return std::nullopt;
  return answer;
}

}  // namespace

TEST(HttpClientOnIo, ExchangesRunOnTheCallersContextAndReuseTheConnection) {
  RunningServer server(echoRouter());
  boost::asio::io_context io;
  auto options = server.client();
  options.io = &io;
  Client client(options);
  std::vector<ClientResponse> answers;
  std::vector<std::thread::id> threads;
  bool done = false;
  client.asyncRequest(Method::Get, "/peer", "", [&](ClientResponse first) {
    answers.push_back(std::move(first));
    threads.push_back(std::this_thread::get_id());
    client.asyncRequest(Method::Post, "/echo/hi", "body", [&](ClientResponse second) {
      answers.push_back(std::move(second));
      threads.push_back(std::this_thread::get_id());
      client.asyncRequest(Method::Get, "/peer", "", [&](ClientResponse third) {
        answers.push_back(std::move(third));
        done = true;
      });
    });
  });
  ASSERT_TRUE(runUntil(io, done, 5s));
  ASSERT_EQ(answers.size(), 3u);
  for (const auto& a : answers) ASSERT_TRUE(a.delivered()) << a.transportError;
  EXPECT_EQ(answers[1].body, "hi:body");
  EXPECT_EQ(answers[0].body, answers[2].body);  // same client port: the kept-alive connection
  for (auto id : threads) EXPECT_EQ(id, std::this_thread::get_id());
  EXPECT_THROW(client.get("/peer"), std::logic_error);
}

TEST(HttpClientOnIo, ReconnectsWhenTheServerClosedTheIdleConnection) {
  RunningServer server(echoRouter(), ServerOptions{.readTimeout = 50ms});
  boost::asio::io_context io;
  auto options = server.client();
  options.io = &io;
  Client client(options);
  const auto first = getOn(io, client, "/peer");
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200) << first->transportError;
  ASSERT_TRUE(serverClosedTheIdleConnections(server.port(), 5s));
  const auto acceptedBefore = server.accepted();
  const auto second = getOn(io, client, "/peer");
  ASSERT_TRUE(second);
  ASSERT_TRUE(second->delivered()) << second->transportError;
  EXPECT_EQ(second->status, 200);
  // A new connection, counted where it is accepted (the client's port may be reused).
  EXPECT_EQ(server.accepted(), acceptedBefore + 1);
}

// The request timeout bounds each exchange, and an idle pooled connection has none: exchanges
// over several times the timeout, with idle gaps longer than it, all go on the first connection.
TEST(HttpClientOnIo, TheRequestDeadlineBoundsEachExchangeAndSparesAnIdleConnection) {
  RunningServer server(echoRouter());
  boost::asio::io_context io;
  auto options = server.client();
  options.io = &io;
  options.requestTimeout = 100ms;
  Client client(options);
  std::string firstPeer;
  for (int i = 0; i < 4; ++i) {
    const auto answer = getOn(io, client, "/peer");
    ASSERT_TRUE(answer);
    ASSERT_EQ(answer->status, 200) << answer->transportError;
    if (i == 0) firstPeer = answer->body;
    EXPECT_EQ(answer->body, firstPeer) << "exchange " << i << " came on a new connection";
    // Idle in the pool for longer than the request timeout, with the io_context running.
    bool idleOver = false;
    boost::asio::steady_timer idle(io, 150ms);
    idle.async_wait([&](boost::system::error_code) { idleOver = true; });
    ASSERT_TRUE(runUntil(io, idleOver, 5s));
  }
  EXPECT_EQ(server.accepted(), 1u);
}

TEST(HttpClientOnIo, TimeoutsAndRefusedConnectionsAreReported) {
  std::promise<void> release;
  RunningServer server(slowRouter(release.get_future().share()),
                       ServerOptions{.handlerThreads = 1});
  boost::asio::io_context io;
  auto options = server.client();
  options.io = &io;
  options.requestTimeout = 100ms;
  ClientResponse slow, refused;
  bool done = false;
  Client client(options);
  client.asyncRequest(Method::Get, "/slow", "", [&](ClientResponse r) {
    slow = std::move(r);
    done = true;
  });
  ASSERT_TRUE(runUntil(io, done, 5s));
  release.set_value();
  EXPECT_FALSE(slow.delivered());
  EXPECT_NE(slow.transportError.find("no answer"), std::string::npos) << slow.transportError;

  uint16_t closedPort;
  {
    boost::asio::ip::tcp::acceptor probe(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
    closedPort = probe.local_endpoint().port();
  }
  options.port = closedPort;
  Client nobody(options);
  done = false;
  nobody.asyncRequest(Method::Get, "/x", "", [&](ClientResponse r) {
    refused = std::move(r);
    done = true;
  });
  ASSERT_TRUE(runUntil(io, done, 5s));
  EXPECT_NE(refused.transportError.find("cannot connect"), std::string::npos)
      << refused.transportError;
}

// The agent runs its io_context on several threads. A request timeout closes the socket from
// Beast's timer handler while the failed read completes and drops the connection: both must
// run on the connection's strand. Under ThreadSanitizer (scripts/run-sanitizers) this failed
// with a data race in the socket's close when connections were on the bare io_context.
TEST(HttpClientOnIo, TimeoutsOnAContextRunByManyThreadsAreEachReportedOnce) {
  std::promise<void> release;
  RunningServer server(slowRouter(release.get_future().share()),
                       ServerOptions{.handlerThreads = 1});
  boost::asio::io_context io;
  auto work = boost::asio::make_work_guard(io);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) threads.emplace_back([&io] { io.run(); });
  auto options = server.client();
  options.io = &io;
  options.requestTimeout = 20ms;
  options.maxIdleConnections = 4;
  constexpr int kRequests = 100;
  std::atomic<int> answers{0}, timeouts{0};
  std::promise<void> allAnswered;
  {
    Client client(options);
    for (int i = 0; i < kRequests; ++i) {
      client.asyncRequest(Method::Get, "/slow", "", [&](ClientResponse r) {
        if (!r.delivered() && r.transportError.find("no answer") != std::string::npos) ++timeouts;
        if (++answers == kRequests) allAnswered.set_value();
      });
    }
    EXPECT_EQ(allAnswered.get_future().wait_for(30s), std::future_status::ready) << answers;
    release.set_value();
    work.reset();
    for (auto& thread : threads) thread.join();
  }
  EXPECT_EQ(answers, kRequests);
  EXPECT_EQ(timeouts, kRequests);
}

// ---- deferred routes: handlers that answer later, holding no thread meanwhile ----

TEST(HttpRouter, DeferredRoutesKeepTheRulesAndAnswerThroughTheirResponder) {
  Router router({.bearerToken = "t0k"});
  router.addDeferred(Method::Post, "/later/{id}", [](const Request& request, Responder respond) {
    std::thread([id = request.params.at("id"), respond] {
      respond(Response::text(200, "done " + id));
    }).detach();
  });
  router.addDeferred(Method::Get, "/broken",
                     [](const Request&, Responder) { throw std::runtime_error("boom"); });
  Request request;
  request.method = Method::Post;
  request.path = "/later/7";
  EXPECT_EQ(router.handle(request).status, 401);  // no token: refused before the handler
  request.headers.emplace_back("Authorization", "Bearer t0k");
  const auto answer = router.handle(request);
  EXPECT_EQ(answer.status, 200);
  EXPECT_EQ(answer.body, "done 7");
  request.method = Method::Get;
  request.path = "/broken";
  const auto broken = router.handle(request);
  EXPECT_EQ(broken.status, 500);
  EXPECT_NE(broken.body.find("boom"), std::string::npos);
}

TEST(HttpServer, ADeferredAnswerHoldsNoThreadAndComesBackOnItsConnection) {
  // One io thread and no handler pool: while the first request waits for its answer, the
  // second is served on the same thread.
  std::mutex mu;
  std::condition_variable arrived;
  std::vector<Responder> waiting;
  Router router;
  router.addDeferred(Method::Get, "/wait", [&](const Request&, Responder respond) {
    std::lock_guard lock(mu);
    waiting.push_back(std::move(respond));
    arrived.notify_all();
  });
  router.add(Method::Get, "/now", [](const Request&) { return Response::text(200, "now"); });
  RunningServer server(std::move(router));
  // A held responder keeps its session alive: let go of them before the server and its
  // io_context go (also on an early return).
  struct LetGo {
    std::mutex& mu;
    std::vector<Responder>& held;
    ~LetGo() {
      std::lock_guard lock(mu);
      held.clear();
    }
  } letGo{mu, waiting};
  Client waiter(server.client());
  std::promise<ClientResponse> late;
  waiter.asyncRequest(Method::Get, "/wait", "", [&](ClientResponse r) { late.set_value(r); });
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(arrived.wait_for(lock, 5s, [&] { return !waiting.empty(); }))
        << "the deferred handler never ran";
  }
  EXPECT_EQ(Client(server.client()).get("/now").body, "now");
  auto answer = late.get_future();
  EXPECT_EQ(answer.wait_for(0ms), std::future_status::timeout);
  std::thread([&] {
    std::lock_guard lock(mu);
    waiting.front()(Response::text(200, "later"));  // from another thread
  }).join();
  ASSERT_EQ(answer.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(answer.get().body, "later");
}
