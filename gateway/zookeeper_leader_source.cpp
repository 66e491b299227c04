// LeaderSource over election::LeaderObserver: a watched cache of every account's `active` node
// on the election library's own ZooKeeper session, served by a private io_context thread so that
// HTTP handlers can wait for a first read without ever blocking the gateway's I/O threads.
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <future>
#include <thread>

#include "gateway.hpp"
#include "zkagent/election.hpp"

namespace zkagent::gateway {
namespace {

// How long an operation may wait for a read of an account: its first, or one after a sync.
constexpr std::chrono::milliseconds kReadTimeout{2000};
// The most a decision's view of ZooKeeper may lag behind it. A gateway that was stopped (SIGSTOP,
// a stalled VM) resumes with requests waiting in its sockets and a cache that has not yet seen
// the deletions and takeovers made meanwhile: they wait for one round trip instead of being
// decided on it. Under steady traffic one decision per this period pays that round trip.
constexpr std::chrono::milliseconds kFreshness{50};

fencing::ActiveView toActiveView(const election::LeaderObserver::View& view) {
  using State = election::LeaderObserver::View::State;
  switch (view.state) {
    case State::Leader:
      if (view.active.seq < 0) return fencing::ActiveView::unknown();
      return fencing::ActiveView::heldBy(static_cast<uint64_t>(view.active.seq),
                                         view.active.instanceId, view.active.sessionId);
    case State::NoLeader:
      return fencing::ActiveView::absent();
    case State::Unknown:
      break;
  }
  return fencing::ActiveView::unknown();
}

class ZooKeeperLeaderSource final : public LeaderSource {
 public:
  explicit ZooKeeperLeaderSource(const Config& config)
      : work_(io_.get_executor()),
        observer_(io_,
                  election::SessionOptions{config.zkHosts,
                                           std::chrono::milliseconds(config.zkSessionTimeoutMs)},
                  config.zkRoot) {
    observer_.start();
    thread_ = std::thread([this] { io_.run(); });
  }

  ~ZooKeeperLeaderSource() override {
    observer_.stop();
    work_.reset();
    io_.stop();
    thread_.join();
  }

  bool trusted() const override { return observer_.trusted(); }

  fencing::ActiveView active(std::string_view account) override {
    if (!observer_.trusted() || !fresh()) return fencing::ActiveView::unknown();
    auto view = observer_.current(account);
    if (view.state == election::LeaderObserver::View::State::Unknown) {
      view = wait([&](auto done) { observer_.lookup(account, std::move(done)); });
    }
    auto active = toActiveView(view);
    active.cached = true;
    return active;
  }

  fencing::ActiveView confirmedActive(std::string_view account) override {
    if (!observer_.trusted()) return fencing::ActiveView::unknown();
    return toActiveView(
        wait([&](auto done) { observer_.readConfirmed(account, std::move(done)); }));
  }

 private:
  // Starts a read with `start(done)` and waits for its view; Unknown after kReadTimeout.
  template <typename Start>
  static election::LeaderObserver::View wait(Start start) {
    auto answer = std::make_shared<std::promise<election::LeaderObserver::View>>();
    auto future = answer->get_future();
    start([answer](election::LeaderObserver::View view) { answer->set_value(std::move(view)); });
    if (future.wait_for(kReadTimeout) != std::future_status::ready) return {};
    return future.get();
  }

  // Whether the cache lags ZooKeeper by at most kFreshness (waits for a round trip when not).
  bool fresh() {
    auto answer = std::make_shared<std::promise<bool>>();
    auto future = answer->get_future();
    observer_.confirmFresh(kFreshness, [answer](bool ok) { answer->set_value(ok); });
    return future.wait_for(kReadTimeout) == std::future_status::ready && future.get();
  }

  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  election::LeaderObserver observer_;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<LeaderSource> makeZooKeeperLeaderSource(const Config& config) {
  return std::make_unique<ZooKeeperLeaderSource>(config);
}

}  // namespace zkagent::gateway
