// ShardOwnership over election::ElectionGroup (docs/gateway-cluster.md): the gateway stands for
// every shard of the cluster on its own ZooKeeper session, the shard's `active` node naming the
// owner's advertised URL. The elections run on a private io_context thread, so that HTTP
// handlers only ever read the group's in-memory gate.
#include <spdlog/spdlog.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <future>
#include <stdexcept>
#include <thread>

#include "cluster_epochs.hpp"
#include "cluster_privacy.hpp"
#include "gateway.hpp"
#include "shard_balance.hpp"
#include "zkagent/cluster_node.hpp"
#include "zkagent/election.hpp"
#include "zkagent/naming.hpp"

namespace zkagent::gateway {
namespace {

// How often a gateway that cannot read the cluster's shard count at start says it is waiting.
constexpr std::chrono::seconds kStartReport{5};
// A drain waits this long at most for its watch of the shards' owners to have read every shard
// before it hands its own over (so that its first 421s already name the receivers).
constexpr std::chrono::milliseconds kDrainWatchRead{1000};

class ZooKeeperShardOwnership final : public ShardOwnership {
 public:
  explicit ZooKeeperShardOwnership(const Config& config)
      : config_(config),
        work_(io_.get_executor()),
        group_(
            io_,
            election::ElectionOptions{
                .session = {config.zkHosts, std::chrono::milliseconds(config.zkSessionTimeoutMs)},
                .root = naming::gatewayShardsRoot(config.zkRoot),
                .instanceId = config.gatewayId,
                .endpoint = config.advertiseUrl,
                // Where relays subscribe (docs/gateway-cluster.md "Relayed subscriptions").
                .deviceEndpoint = config.subscribeUrl}),
        balancer_(io_, group_, config.gatewayId, naming::gatewayShardsRoot(config.zkRoot)),
        epochs_(io_, group_, config.zkRoot, config.clusterShards),
        privacy_(io_, group_, config.zkRoot),
        drainWatchTimer_(io_) {
    group_.onLeadership([this](const election::LeadershipEvent& event) {
      const bool acquired = event.kind == election::LeadershipEvent::Kind::Acquired;
      owned_ += acquired ? 1 : -1;
      spdlog::info("{} shard {} token {}{}", acquired ? "took" : "lost", event.account, event.token,
                   acquired ? "" : std::string(" reason=") + std::string(toString(event.reason)));
      if (const auto index = naming::shardIndex(event.account)) {
        epochs_.onTakeOrLoss(*index, acquired ? event.token : -1);
      }
      balancer_.passSoon();
      if (!acquired) reportDrained();
    });
    group_.onSession([this](const election::SessionEvent& event) {
      if (event.state != election::SessionState::Connected) return;
      if (!verified_) return verifyCluster();
      privacy_.reconnected();
    });
    thread_ = std::thread([this] { io_.run(); });
    boost::asio::post(io_, [this] { group_.start(); });
    auto verified = clusterVerified_.get_future();
    while (verified.wait_for(kStartReport) != std::future_status::ready) {
      spdlog::warn("cluster: waiting for ZooKeeper ({}) to read the cluster's shard count",
                   config.zkHosts);
    }
    try {
      verified.get();
    } catch (...) {
      shutDown();
      throw;
    }
  }

  ~ZooKeeperShardOwnership() override { shutDown(); }

  Answer owner(std::string_view account) const override {
    return ownerOfShard(naming::shardOf(account, config_.clusterShards));
  }

  Answer ownerOfShard(std::uint32_t index) const override {
    Answer answer;
    answer.shard = naming::shardId(index);
    const auto gate = group_.check(answer.shard);
    if (gate.allowed()) {
      answer.kind = Answer::Kind::Owned;
      answer.take = gate.token;
      answer.epoch = epochs_.epochFor(index, gate.token);
    } else if (withdrawn_.load(std::memory_order_acquire)) {
      // Drained: no candidate of ours watches the shard any more; the drain's observer does.
      const auto view = drainWatch_->current(answer.shard);
      if (view.state == election::LeaderObserver::View::State::Leader) {
        elsewhere(answer, view.active);
      }
    } else if (gate.leader && gate.verdict != election::GateDecision::Verdict::Suspended) {
      // Another gateway's node, seen on a session that is up: where to send the client.
      elsewhere(answer, *gate.leader);
    }
    return answer;
  }

  std::uint32_t shardCount() const override { return config_.clusterShards; }

  std::size_t owned() const override { return static_cast<std::size_t>(owned_.load()); }

  std::uint64_t epochOf(std::string_view account) const override {
    return epochs_.latest(naming::shardOf(account, config_.clusterShards));
  }

  std::optional<std::string> writePrivacy(const std::string& account, const std::string& rules,
                                          std::chrono::milliseconds timeout) override {
    return privacy_.write(account, rules, timeout);
  }

  void watchPrivacy(PrivacyHandler apply) override { privacy_.watch(std::move(apply)); }

  void stop(std::function<void()> handedOver) override {
    boost::asio::post(io_, [this, handedOver = std::move(handedOver)]() mutable {
      stopping_ = true;
      if (drainWatch_) drainWatch_->stop();
      // A drain has planned its receivers already (its hand-over may still be under way: the
      // stop's own hand-over finishes it).
      if (draining_) return group_.stop([] {}, std::move(handedOver));
      balancer_.leave([this, handedOver = std::move(handedOver)]() mutable {
        group_.stop([] {}, std::move(handedOver));
      });
    });
  }

  DrainAnswer drain(std::chrono::milliseconds timeout) override {
    auto answer = std::make_shared<std::promise<DrainAnswer>>();
    auto future = answer->get_future();
    boost::asio::post(io_, [this, answer] { answer->set_value(startDrain()); });
    if (future.wait_for(timeout) != std::future_status::ready) {
      // The drain may still start when the thread gets to it: say so rather than "nothing done".
      return {standing(),
              "the shards' election thread did not answer within " +
                  std::to_string(timeout.count()) +
                  " ms; the drain starts when it does (ask again)",
              true};
    }
    return future.get();
  }

  Standing standing() const override {
    if (!draining_.load()) return Standing::Standing;
    return withdrawn_.load() && owned_.load() == 0 ? Standing::Drained : Standing::Draining;
  }

 private:
  void elsewhere(Answer& answer, const election::ActiveInfo& owner) const {
    if (owner.instanceId == config_.gatewayId || owner.endpoint.empty()) return;
    answer.kind = Answer::Kind::Elsewhere;
    answer.owner = owner.endpoint;
    answer.subscribeUrl = owner.deviceEndpoint;
  }

  // On the io thread. A drain is refused, changing nothing, when no other gateway stands (the
  // shards would be left without an owner, as the agents' drain keeps an account without a
  // successor) or the gateway is stopping. Else: the owners' watch first (the candidates that
  // watch them now are withdrawn below), then the stop's hand-over plan (balancer_.leave), then
  // every shard withdrawn: a led one handed over in one multi, the others' members deleted.
  DrainAnswer startDrain() {
    if (draining_) return {standing(), std::nullopt, false};
    if (stopping_) {
      return {standing(), "the gateway is stopping (SIGTERM): it hands its shards over", false};
    }
    const auto others = balancer_.others();
    if (others.empty()) {
      return {standing(),
              "no other gateway stands for the shards (none seen in the last 2 s): a drain would "
              "leave every shard this gateway owns without an owner; start another gateway first",
              false};
    }
    draining_ = true;
    std::string names;
    for (const auto& id : others) names += (names.empty() ? "" : ",") + id;
    spdlog::info("cluster: drain requested, {} shards to {} (standing for none afterwards)",
                 owned_.load(), names);
    drainWatch_ = std::make_unique<election::LeaderObserver>(
        io_,
        election::SessionOptions{config_.zkHosts,
                                 std::chrono::milliseconds(config_.zkSessionTimeoutMs)},
        naming::gatewayShardsRoot(config_.zkRoot));
    drainWatch_->start();
    auto unread = std::make_shared<std::uint32_t>(config_.clusterShards);
    drainWatchTimer_.expires_after(kDrainWatchRead);
    drainWatchTimer_.async_wait([this](const boost::system::error_code& error) {
      if (!error) handOverForDrain();
    });
    for (std::uint32_t shard = 0; shard < config_.clusterShards; ++shard) {
      drainWatch_->lookup(naming::shardId(shard), [this, unread](election::LeaderObserver::View) {
        if (--*unread == 0) drainWatchTimer_.cancel();
        if (*unread == 0) handOverForDrain();
      });
    }
    return {standing(), std::nullopt, false};
  }

  void handOverForDrain() {
    if (drainHandingOver_ || stopping_) return;
    drainHandingOver_ = true;
    balancer_.leave([this] {
      if (stopping_) return;  // the stop's hand-over does it
      for (std::uint32_t shard = 0; shard < config_.clusterShards; ++shard) {
        group_.withdraw(naming::shardId(shard));
      }
      withdrawn_.store(true, std::memory_order_release);
      reportDrained();
    });
  }

  // Once, when the last shard of a drained gateway is lost (or at once when it owned none).
  void reportDrained() {
    if (drainReported_ || standing() != Standing::Drained) return;
    drainReported_ = true;
    spdlog::info(
        "cluster: drained: standing for no shard; serving on (421 naming the owners) until "
        "stopped; restart the gateway to stand again");
  }
  // Creates the cluster node with this gateway's shard count, or reads the one there: a count that
  // differs is a start error (accounts would move between shards under their owners). Then
  // stands for every shard. Runs on the io thread; retried on the next connect when it fails.
  void verifyCluster() {
    auto& session = group_.session();
    const auto path = naming::gatewayClusterPath(config_.zkRoot);
    const std::string data = naming::clusterNodeData(config_.clusterShards);
    session.ensurePath(config_.zkRoot, [this, &session, path, data](election::ZkError ensured) {
      if (ensured != election::ZkError::Ok) return;
      session.create(path, data, election::NodeKind::Persistent,
                     [this, &session, path](election::ZkError created, const std::string&) {
                       if (created == election::ZkError::Ok) return standForShards();
                       if (created != election::ZkError::NodeExists) return;
                       session.get(path, nullptr,
                                   [this, path](election::ZkError read, std::string stored,
                                                election::NodeStat) {
                                     if (read == election::ZkError::Ok) compare(path, stored);
                                   });
                     });
    });
  }

  void compare(const std::string& path, const std::string& stored) {
    const auto shards = naming::parseClusterNode(stored);
    if (!shards) {
      return fail(path + " holds '" + stored + "', not {\"shards\": N} with N from 1 to " +
                  std::to_string(naming::kMaxShards) + ": not a gateway cluster node");
    }
    if (*shards != config_.clusterShards) {
      return fail("cluster.shards (--cluster-shards) is " + std::to_string(config_.clusterShards) +
                  " but the cluster at " + path + " has " + std::to_string(*shards) +
                  " shards: the count is fixed when the cluster is created");
    }
    standForShards();
  }

  void standForShards() {
    if (verified_) return;
    verified_ = true;
    for (std::uint32_t shard = 0; shard < config_.clusterShards; ++shard) {
      group_.join(naming::shardId(shard));
    }
    balancer_.start();
    privacy_.start();
    spdlog::info("cluster: {} shards under {}, standing for each as {} ({}, subscribers {})",
                 config_.clusterShards, naming::gatewayShardsRoot(config_.zkRoot),
                 config_.gatewayId, config_.advertiseUrl, config_.subscribeUrl);
    clusterVerified_.set_value();
  }

  void fail(const std::string& why) {
    verified_ = true;
    clusterVerified_.set_exception(std::make_exception_ptr(std::runtime_error(why)));
  }

  void shutDown() {
    if (!thread_.joinable()) return;
    work_.reset();
    io_.stop();
    thread_.join();
  }

  const Config config_;
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  election::ElectionGroup group_;
  ShardBalancer balancer_;
  std::thread thread_;
  std::atomic<int> owned_{0};
  bool verified_ = false;  // io thread only
  std::promise<void> clusterVerified_;
  ClusterEpochs epochs_;
  ClusterPrivacyRules privacy_;
  // The drain (io thread, but for the flags read by standing() and ownerOfShard()).
  std::atomic<bool> draining_{false};
  std::atomic<bool> withdrawn_{false};  // every shard withdrawn: drainWatch_ names the owners
  bool stopping_ = false, drainHandingOver_ = false, drainReported_ = false;
  std::unique_ptr<election::LeaderObserver> drainWatch_;  // set before withdrawn_
  boost::asio::steady_timer drainWatchTimer_;
};

}  // namespace

std::unique_ptr<ShardOwnership> makeZooKeeperShardOwnership(const Config& config) {
  return std::make_unique<ZooKeeperShardOwnership>(config);
}

std::string subscribeUrlOf(const Config& config, bool secure, std::uint16_t port) {
  naming::HostPort address;
  bool https = false;
  naming::httpUrlError(config.advertiseUrl, address, https);  // checked by the config
  address.port = port;
  return (secure ? "wss://" : "ws://") + naming::toString(address);
}

}  // namespace zkagent::gateway
