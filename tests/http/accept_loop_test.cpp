// The one accept loop (zkagent/http/accept_loop.hpp) when the process runs out of descriptors:
// it pauses instead of spinning, says so once, and accepts again once descriptors free up;
// the same through http::Server, one of its three users.
#include "zkagent/http/accept_loop.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "zkagent/http.hpp"
#include "zktest/deadline.hpp"

namespace {

using namespace std::chrono_literals;
using zkagent::http::AcceptLoop;
using zktest::eventually;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// How long a test watches a listener that cannot accept. A loop that retries at once makes
// hundreds of thousands of attempts in it; the paused one makes a handful (50, 100, 200 ms...).
constexpr auto kWatched = 500ms;
constexpr std::uint64_t kMaxAttemptsWatched = 8;

// Takes every free descriptor of the process, under a soft RLIMIT_NOFILE lowered to a little
// above the highest one open, so accept() fails with EMFILE; gives them back when it ends.
class DescriptorExhaustion {
 public:
  DescriptorExhaustion() {
    if (::getrlimit(RLIMIT_NOFILE, &saved_) != 0) throw std::runtime_error("getrlimit");
    int highest = 0;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
      highest = std::max(highest, std::stoi(entry.path().filename().string()));
    }
    rlimit lowered = saved_;
    lowered.rlim_cur = static_cast<rlim_t>(highest) + 16;
    if (::setrlimit(RLIMIT_NOFILE, &lowered) != 0) throw std::runtime_error("setrlimit");
    for (;;) {
      const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        error_ = errno;
        break;
      }
      taken_.push_back(fd);
    }
  }
  ~DescriptorExhaustion() {
    for (int fd : taken_) ::close(fd);
    ::setrlimit(RLIMIT_NOFILE, &saved_);
  }
  int error() const { return error_; }

 private:
  rlimit saved_{};
  std::vector<int> taken_;
  int error_ = 0;
};

// The default logger's lines while the test runs.
class LogCapture {
 public:
  LogCapture()
      : saved_(spdlog::default_logger()),
        sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(256)) {
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("captured", sink_));
  }
  ~LogCapture() { spdlog::set_default_logger(saved_); }
  int count(const std::string& text) const {
    const auto lines = sink_->last_formatted();
    return static_cast<int>(std::count_if(lines.begin(), lines.end(), [&](const auto& line) {
      return line.find(text) != std::string::npos;
    }));
  }

 private:
  std::shared_ptr<spdlog::logger> saved_;
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

const tcp::endpoint kLoopbackAnyPort{asio::ip::make_address("127.0.0.1"), 0};

TEST(AcceptLoop, OutOfDescriptorsItPausesInsteadOfSpinningSaysSoOnceAndAcceptsAgainAfter) {
  LogCapture logs;
  asio::io_context io;
  auto loop = std::make_shared<AcceptLoop>(io.get_executor(), kLoopbackAnyPort,
                                           AcceptLoop::Options{.name = "test listener"});
  std::atomic<int> accepted{0};
  std::vector<tcp::socket> served;  // the io thread's
  loop->start([&](tcp::socket socket) {
    served.push_back(std::move(socket));
    ++accepted;
  });
  std::thread runner([&] { io.run(); });

  asio::io_context clients;
  tcp::socket first(clients), second(clients);
  first.open(tcp::v4());  // made while descriptors are left: connecting needs none
  second.open(tcp::v4());
  {
    DescriptorExhaustion exhausted;
    ASSERT_EQ(exhausted.error(), EMFILE);
    first.connect(loop->endpoint());  // the kernel completes it into the backlog
    ASSERT_TRUE(eventually([&] { return loop->counts().failures >= 1; }, 5s));
    const auto before = loop->counts();
    std::this_thread::sleep_for(kWatched);  // the window watched: nothing to wait for in it
    const auto during = loop->counts();
    EXPECT_LE(during.attempts - before.attempts, kMaxAttemptsWatched)
        << "accept retried without a pause: " << during.attempts - before.attempts
        << " attempts in " << kWatched.count() << " ms";
    EXPECT_GE(during.failures, 2u) << "it keeps trying";
    EXPECT_EQ(during.failureRuns, 1u);
    EXPECT_EQ(accepted.load(), 0);
  }
  ASSERT_TRUE(eventually([&] { return accepted.load() == 1; }, 3s))
      << "the connection waiting in the backlog was not accepted once descriptors were free";
  second.connect(loop->endpoint());
  ASSERT_TRUE(eventually([&] { return accepted.load() == 2; }, 3s));
  const auto after = loop->counts();
  EXPECT_EQ(after.accepted, 2u);
  EXPECT_EQ(after.failureRuns, 1u);
  EXPECT_EQ(logs.count("test listener 127.0.0.1:" + std::to_string(loop->port()) +
                       ": accept failed (Too many open files)"),
            1)
      << "one warning per pause, not one per failure";
  EXPECT_EQ(logs.count("accepting again after"), 1);

  loop->stop();
  runner.join();  // the loop ended: nothing keeps io.run() going
}

TEST(AcceptLoop, StopEndsAPauseAndReleasesTheHandler) {
  asio::io_context io;
  auto loop = std::make_shared<AcceptLoop>(
      io.get_executor(), kLoopbackAnyPort,
      AcceptLoop::Options{.name = "test listener", .firstPause = 60s, .maxPause = 60s});
  auto owner = std::make_shared<int>(0);
  std::weak_ptr<int> watched = owner;
  loop->start([owner = std::move(owner)](tcp::socket) {});
  std::thread runner([&] { io.run(); });
  asio::io_context clients;
  tcp::socket client(clients);
  client.open(tcp::v4());
  {
    DescriptorExhaustion exhausted;
    client.connect(loop->endpoint());
    ASSERT_TRUE(eventually([&] { return loop->counts().failures >= 1; }, 5s));
  }
  loop->stop();  // in a 60 s pause: run() must still return at once
  runner.join();
  EXPECT_TRUE(watched.expired()) << "the handler (and what it holds) outlived stop()";
}

// http::Server on the same loop: a request that arrives while descriptors are out is served once
// they are back, and the server did not spin meanwhile.
TEST(AcceptLoop, TheHttpServerOutOfDescriptorsPausesAndServesTheWaitingRequestAfter) {
  zkagent::http::Router router;
  router.add(zkagent::http::Method::Get, "/ping", [](const zkagent::http::Request&) {
    return zkagent::http::Response::text(200, "pong");
  });
  asio::io_context io;
  zkagent::http::Server server(io, {.address = "127.0.0.1", .port = 0}, std::move(router));
  server.start();
  std::thread runner([&] { io.run(); });

  asio::io_context clients;
  tcp::socket client(clients);
  client.open(tcp::v4());
  {
    DescriptorExhaustion exhausted;
    client.connect({asio::ip::make_address("127.0.0.1"), server.port()});
    asio::write(client, asio::buffer(std::string_view("GET /ping HTTP/1.1\r\nHost: x\r\n"
                                                      "Connection: close\r\n\r\n")));
    ASSERT_TRUE(eventually([&] { return server.acceptCounts().failures >= 1; }, 5s));
    const auto before = server.acceptCounts();
    std::this_thread::sleep_for(kWatched);  // the window watched
    const auto during = server.acceptCounts();
    EXPECT_LE(during.attempts - before.attempts, kMaxAttemptsWatched)
        << during.attempts - before.attempts << " attempts in " << kWatched.count() << " ms";
  }
  std::string answer;
  boost::system::error_code error;
  asio::read(client, asio::dynamic_buffer(answer), error);  // until the server closes
  EXPECT_EQ(error, asio::error::eof);
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  EXPECT_NE(answer.find("pong"), std::string::npos) << answer;
  EXPECT_EQ(server.acceptCounts().failureRuns, 1u);
  server.stop();
  runner.join();
}

}  // namespace
