// Server and client together on a loopback port chosen by the kernel.
#include <gtest/gtest.h>
#include <poll.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
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
  // The server closes a connection idle for its read timeout. One opened after the client's pooled
  // connection went idle being closed means the pooled one, idle longer, is closed too.
  ASSERT_TRUE(serverClosesAnIdleConnection(server.port(), 5s));
  auto second = client.get("/peer");
  ASSERT_TRUE(second.delivered()) << second.transportError;
  EXPECT_EQ(second.status, 200);
  EXPECT_NE(first.body, second.body);  // a new connection
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
  auto released = release.get_future().share();
  Router router;
  router.add(Method::Get, "/slow", [released](const Request&) {
    released.wait_for(5s);
    return Response::text(200, "late");
  });
  RunningServer server(std::move(router), ServerOptions{.handlerThreads = 1});
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
