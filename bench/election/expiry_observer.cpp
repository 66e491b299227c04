#include "expiry_observer.hpp"

#include <future>
#include <stdexcept>

#include "contender.hpp"
#include "zktest/deadline.hpp"

namespace zkbench {

using namespace zkagent::election;

ExpiryObserver::ExpiryObserver(const std::string& zk) : work_(boost::asio::make_work_guard(io_)) {
  ElectionOptions options;
  options.session.hosts = zk;
  options.session.timeout = std::chrono::milliseconds(10000);
  options.root = "/election-bench-observer";
  options.instanceId = "expiry-observer";
  group_ = std::make_unique<ElectionGroup>(io_, options);  // stands for no account: a bare session
  group_->start();
  thread_ = std::thread([this] { io_.run(); });
  if (!zktest::eventually([this] { return group_->sessionState() == SessionState::Connected; },
                          std::chrono::seconds(30))) {
    work_.reset();
    io_.stop();
    thread_.join();
    throw std::runtime_error("expiry observer: no ZooKeeper session within 30 s");
  }
}

ExpiryObserver::~ExpiryObserver() {
  std::promise<void> stopped;
  group_->stop([&stopped] { stopped.set_value(); });
  stopped.get_future().wait_for(std::chrono::seconds(10));
  work_.reset();
  io_.stop();
  thread_.join();
}

void ExpiryObserver::watch(const std::string& queuePath) {
  firedAtNs_.store(0);
  std::promise<ZkError> armed;
  group_->session().children(
      queuePath, [this] { firedAtNs_.store(unixNanos()); },
      [&armed](ZkError err, std::vector<std::string>) { armed.set_value(err); });
  auto answer = armed.get_future();
  if (answer.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    throw std::runtime_error("expiry observer: no answer to the children watch on " + queuePath);
  }
  if (auto err = answer.get(); err != ZkError::Ok) {
    throw std::runtime_error("expiry observer: cannot watch " + queuePath + ": " +
                             std::string(toString(err)));
  }
}

}  // namespace zkbench
