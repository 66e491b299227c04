// The listener's limits against misbehaving clients: too many connections, oversized headers, and
// a slowloris client trickling a request byte by byte.
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <thread>

#include "zkagent/http.hpp"
#include "zktest/deadline.hpp"

using namespace zkagent::http;
using namespace std::chrono_literals;
namespace asio = boost::asio;

namespace {

class RunningServer {
 public:
  explicit RunningServer(ServerOptions options, Router router = pingRouter())
      : server_(io_, std::move(options), std::move(router)) {
    server_.start();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~RunningServer() {
    server_.stop();
    thread_.join();
  }
  uint16_t port() const { return server_.port(); }

 private:
  static Router pingRouter() {
    Router r;
    r.add(Method::Get, "/ping", [](const Request&) { return Response::text(200, "pong"); });
    return r;
  }
  asio::io_context io_;
  Server server_;
  std::thread thread_;
};

// A raw client socket: what it sends is up to the test.
class RawClient {
 public:
  explicit RawClient(uint16_t port) : socket_(io_) {
    socket_.connect({asio::ip::make_address("127.0.0.1"), port});
  }
  bool send(std::string_view bytes) {
    boost::system::error_code error;
    asio::write(socket_, asio::buffer(bytes.data(), bytes.size()), error);
    return !error;
  }
  // What arrives within `deadline` until the server closes or stops sending; "" when nothing.
  std::string receive(std::chrono::milliseconds deadline) {
    std::string out;
    const auto until = std::chrono::steady_clock::now() + deadline;
    while (std::chrono::steady_clock::now() < until) {
      pollfd fd{socket_.native_handle(), POLLIN, 0};
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (::poll(&fd, 1, static_cast<int>(std::max<int64_t>(left.count(), 1))) != 1) break;
      char buffer[4096];
      boost::system::error_code error;
      size_t n = socket_.read_some(asio::buffer(buffer), error);
      if (error) {
        closed_ = true;
        break;
      }
      out.append(buffer, n);
      if (out.find("\r\n\r\n") != std::string::npos) break;
    }
    return out;
  }
  // Whether the server closes the connection within `deadline`.
  bool closedByServer(std::chrono::milliseconds deadline) {
    receive(deadline);
    return closed_;
  }

 private:
  asio::io_context io_;
  asio::ip::tcp::socket socket_;
  bool closed_ = false;
};

constexpr std::string_view kPing = "GET /ping HTTP/1.1\r\nHost: x\r\n\r\n";

TEST(HttpLimits, ConnectionsBeyondTheLimitAreClosedAndTheOpenOnesStillServed) {
  RunningServer server({.maxConnections = 2});
  RawClient first(server.port());
  RawClient second(server.port());
  ASSERT_TRUE(first.send(kPing));
  ASSERT_NE(first.receive(5s).find("200 OK"), std::string::npos);  // both are accepted by now
  RawClient third(server.port());
  EXPECT_TRUE(third.closedByServer(5s));
  ASSERT_TRUE(second.send(kPing));
  EXPECT_NE(second.receive(5s).find("200 OK"), std::string::npos);
}

TEST(HttpLimits, AClosedConnectionFreesItsPlaceUnderTheLimit) {
  RunningServer server({.maxConnections = 1});
  {
    RawClient first(server.port());
    ASSERT_TRUE(first.send(kPing));
    ASSERT_NE(first.receive(5s).find("200 OK"), std::string::npos);
  }
  // The server learns of the close asynchronously: a fresh client is served once it has.
  ASSERT_TRUE(zktest::eventually(
      [&] {
        Client client({.port = server.port()});
        return client.get("/ping").status == 200;
      },
      5s));
}

TEST(HttpLimits, AnOversizedHeaderGets431AndTheConnectionCloses) {
  RunningServer server({.headerLimit = 1024});
  RawClient client(server.port());
  ASSERT_TRUE(client.send("GET /ping HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(4096, 'a') +
                          "\r\n\r\n"));
  EXPECT_NE(client.receive(5s).find("431"), std::string::npos);
  EXPECT_TRUE(client.closedByServer(5s));
}

TEST(HttpLimits, AnOversizedBodyGets413) {
  RunningServer server({.bodyLimit = 16});
  RawClient client(server.port());
  ASSERT_TRUE(client.send("POST /ping HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"));
  EXPECT_NE(client.receive(5s).find("413"), std::string::npos);
}

// A client sending one byte at a time neither holds the only handler thread nor delays other
// clients, and its connection is closed when the read deadline passes although bytes still come:
// the deadline covers the whole request, not the time between two bytes.
TEST(HttpLimits, ASlowlorisClientBlocksNobodyAndIsCutAtTheReadDeadline) {
  RunningServer server({.readTimeout = 1000ms, .handlerThreads = 1});
  RawClient slow(server.port());
  std::atomic<bool> cut{false};
  std::atomic<int> sent{0};
  std::thread trickle([&] {
    const std::string request = "GET /ping HTTP/1.1\r\nHost: x\r\nX-Pad: " + std::string(200, 'a');
    for (char byte : request) {
      if (!slow.send(std::string_view(&byte, 1))) {
        cut = true;
        return;
      }
      ++sent;
      std::this_thread::sleep_for(100ms);  // the attack's pace, not a wait for a condition
    }
  });
  Client client({.port = server.port()});
  for (int i = 0; i < 20; ++i) {
    auto response = client.get("/ping");
    ASSERT_EQ(response.status, 200) << response.transportError;
  }
  EXPECT_TRUE(zktest::eventually([&] { return cut.load(); }, 10s))
      << "the server kept a trickling connection open; bytes sent: " << sent;
  trickle.join();
  // 200+ bytes would take 20 s at this pace: the request was cut long before it completed.
  EXPECT_LT(sent.load(), 100);
}

// A connection over its request rate gets 429 with Retry-After, counted, without its handler
// running; another connection has its own allowance, and the first one gets through again once
// its bucket refills.
TEST(HttpLimits, AConnectionOverItsRequestRateGets429WithRetryAfter) {
  std::atomic<int> limited{0};
  RunningServer server({.maxRequestsPerSecond = 5, .onRateLimited = [&] { ++limited; }});
  Client flooding({.port = server.port(), .maxIdleConnections = 1});
  int ok = 0;
  ClientResponse refused;
  for (int i = 0; i < 20 && refused.status == 0; ++i) {
    auto response = flooding.get("/ping");
    if (response.status == 200) ++ok;
    if (response.status == 429) refused = response;
  }
  ASSERT_EQ(refused.status, 429) << "20 requests at once were all served";
  EXPECT_LE(ok, 6);  // the bucket of one second's worth, plus what refilled meanwhile
  EXPECT_NE(refused.body.find("too many requests"), std::string::npos) << refused.body;
  EXPECT_EQ(limited.load(), 1);

  RawClient other(server.port());
  ASSERT_TRUE(other.send(kPing));
  EXPECT_NE(other.receive(5s).find("200 OK"), std::string::npos);

  RawClient raw(server.port());
  std::string last;
  for (int i = 0; i < 10 && last.find("429") == std::string::npos; ++i) {
    ASSERT_TRUE(raw.send(kPing));
    last = raw.receive(5s);
  }
  EXPECT_NE(last.find("429 Too Many Requests"), std::string::npos) << last;
  EXPECT_NE(last.find("Retry-After: 1"), std::string::npos) << last;
  EXPECT_TRUE(zktest::eventually([&] { return flooding.get("/ping").status == 200; }, 5s));
}

// The bearer token is checked on the headers: a client without it that announces a 10 MB body and
// never sends it gets its 401 at once (not at the read deadline), no handler runs, and the
// connection closes; with the token the same route takes the body.
TEST(HttpLimits, AMissingOrWrongTokenGets401BeforeTheBodyIsRead) {
  std::atomic<int> handled{0};
  Router router({.bearerToken = "s3cret"});
  router.add(Method::Post, "/upload", [&](const Request& request) {
    ++handled;
    return Response::text(200, std::to_string(request.body.size()));
  });
  RunningServer server({.bodyLimit = 16 * 1024 * 1024, .readTimeout = 60000ms}, std::move(router));
  const std::string announced = "Content-Length: " + std::to_string(10 * 1024 * 1024) + "\r\n";
  for (const std::string authorization : {"", "Authorization: Bearer wrong\r\n"}) {
    RawClient client(server.port());
    ASSERT_TRUE(
        client.send("POST /upload HTTP/1.1\r\nHost: x\r\n" + authorization + announced + "\r\n"));
    const std::string answer = client.receive(10s);
    EXPECT_NE(answer.find("401 Unauthorized"), std::string::npos) << authorization << answer;
    EXPECT_NE(answer.find("Connection: close"), std::string::npos) << answer;
    EXPECT_TRUE(client.closedByServer(10s)) << "the connection waited for a body after the 401";
  }
  EXPECT_EQ(handled.load(), 0);

  Client honest({.port = server.port(), .bearerToken = "s3cret"});
  auto taken = honest.post("/upload", std::string(64 * 1024, 'x'));
  EXPECT_EQ(taken.status, 200) << taken.transportError;
  EXPECT_EQ(taken.body, std::to_string(64 * 1024));
  EXPECT_EQ(handled.load(), 1);
}

TEST(HttpLimits, ARateOfZeroLimitsNothing) {
  RunningServer server({.maxRequestsPerSecond = 0});
  Client client({.port = server.port()});
  for (int i = 0; i < 200; ++i) ASSERT_EQ(client.get("/ping").status, 200) << i;
}

}  // namespace
