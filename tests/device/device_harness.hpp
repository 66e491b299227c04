#pragma once
// One DeviceClient on an io_context of its own thread, its callbacks recorded as event lines
// ("CONNECTED <agent> <token>.<counter> <endpoint>", "REDIRECTED <url>", "DISCONNECTED <reason>")
// that a test waits for with a deadline.
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "zkagent/device.hpp"
#include "zktest/deadline.hpp"

namespace zkagent::device::testing {

class DeviceHarness {
 public:
  explicit DeviceHarness(DeviceOptions options) : client_(io_, std::move(options)) {
    client_.onConnected([this](const ConnectedInfo& info) {
      record("CONNECTED " + info.agent + " " + std::to_string(info.token) + "." +
             std::to_string(info.counter) + " " + info.endpoint);
    });
    client_.onRedirected(
        [this](std::string_view url) { record("REDIRECTED " + std::string(url)); });
    client_.onDisconnected(
        [this](std::string_view reason) { record("DISCONNECTED " + std::string(reason)); });
    client_.start();
    thread_ = std::thread([this] { io_.run(); });
  }

  ~DeviceHarness() {
    stop();
    io_.stop();
    thread_.join();
  }

  // Stops the client (close 1000 when connected) and waits for its done callback.
  void stop() {
    if (stopped_) return;
    stopped_ = true;
    std::promise<void> done;
    auto future = done.get_future();
    boost::asio::post(io_, [&] { client_.stop([&] { done.set_value(); }); });
    future.wait_for(std::chrono::seconds(10));
  }

  // Runs `read` on the client's thread and returns its result.
  template <typename Read>
  auto onClient(Read read) {
    std::promise<decltype(read(client_))> result;
    auto future = result.get_future();
    boost::asio::post(io_, [&] { result.set_value(read(client_)); });
    return future.get();
  }

  DeviceStats stats() {
    return onClient([](DeviceClient& client) { return client.stats(); });
  }

  std::vector<std::string> events() const {
    std::lock_guard lock(mutex_);
    return events_;
  }

  // Lines starting with `prefix`.
  std::vector<std::string> eventsStartingWith(const std::string& prefix) const {
    std::vector<std::string> matching;
    for (const auto& event : events()) {
      if (event.rfind(prefix, 0) == 0) matching.push_back(event);
    }
    return matching;
  }

  // When the first event starting with `prefix` was recorded (steady clock).
  std::optional<zktest::Clock::time_point> firstTime(const std::string& prefix) const {
    std::lock_guard lock(mutex_);
    for (std::size_t i = 0; i < events_.size(); ++i) {
      if (events_[i].rfind(prefix, 0) == 0) return times_[i];
    }
    return std::nullopt;
  }

  // Waits until at least `count` events start with `prefix`.
  ::testing::AssertionResult waitFor(
      const std::string& prefix, std::size_t count = 1,
      zktest::milliseconds timeout = zktest::milliseconds(10000)) const {
    if (zktest::eventually([&] { return eventsStartingWith(prefix).size() >= count; }, timeout)) {
      return ::testing::AssertionSuccess();
    }
    std::string all;
    for (const auto& event : events()) all += "\n  " + event;
    return ::testing::AssertionFailure() << "no " << count << " x \"" << prefix << "\" within "
                                         << timeout.count() << " ms; events:" << all;
  }

 private:
  void record(std::string event) {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
    times_.push_back(zktest::Clock::now());
  }

  boost::asio::io_context io_;
  DeviceClient client_;
  std::thread thread_;
  bool stopped_ = false;
  mutable std::mutex mutex_;
  std::vector<std::string> events_;
  std::vector<zktest::Clock::time_point> times_;
};

}  // namespace zkagent::device::testing
