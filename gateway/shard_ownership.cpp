// ShardOwnership over election::ElectionGroup (docs/gateway-cluster.md): the gateway stands for
// every shard of the cluster on its own ZooKeeper session, the shard's `active` node naming the
// owner's advertised URL. The elections run on a private io_context thread, so that HTTP
// handlers only ever read the group's in-memory gate.
#include <spdlog/spdlog.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <charconv>
#include <future>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "gateway.hpp"
#include "shard_balance.hpp"
#include "zkagent/cluster_node.hpp"
#include "zkagent/election.hpp"
#include "zkagent/naming.hpp"

namespace zkagent::gateway {
namespace {

// How often a gateway that cannot read the cluster's shard count at start says it is waiting.
constexpr std::chrono::seconds kStartReport{5};
// An epoch bump that failed for another reason than a concurrent bump (the link, a node that does
// not parse) is tried again this much later, while the take lasts.
constexpr std::chrono::milliseconds kEpochRetry{100};
// Writes of a rule node raced by another gateway's create or delete: tried again this many times.
constexpr int kPrivacyWriteAttempts = 3;

// The epoch node's decimal value; nullopt when it is not one.
std::optional<std::uint64_t> parseEpoch(const std::string& text) {
  std::uint64_t value = 0;
  const char* end = text.data() + text.size();
  while (end != text.data() && (end[-1] == '\n' || end[-1] == ' ')) --end;
  const auto [next, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc{} || next != end || text.empty()) return std::nullopt;
  return value;
}

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
                .deviceEndpoint = {}}),
        balancer_(io_, group_, config.gatewayId, naming::gatewayShardsRoot(config.zkRoot)),
        takes_(config.clusterShards) {
    group_.onLeadership([this](const election::LeadershipEvent& event) {
      const bool acquired = event.kind == election::LeadershipEvent::Kind::Acquired;
      owned_ += acquired ? 1 : -1;
      spdlog::info("{} shard {} token {}{}", acquired ? "took" : "lost", event.account, event.token,
                   acquired ? "" : std::string(" reason=") + std::string(toString(event.reason)));
      onTakeOrLoss(event.account, acquired ? event.token : -1);
      balancer_.passSoon();
    });
    group_.onSession([this](const election::SessionEvent& event) {
      if (event.state != election::SessionState::Connected) return;
      if (!verified_) return verifyCluster();
      readPrivacy();  // every watch is forgotten with the link: read them all again
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
    Answer answer;
    answer.shard = naming::shardId(naming::shardOf(account, config_.clusterShards));
    const auto gate = group_.check(answer.shard);
    if (gate.allowed()) {
      answer.kind = Answer::Kind::Owned;
      answer.take = gate.token;
      std::lock_guard lock(takesMutex_);
      const Take& take = takes_[naming::shardOf(account, config_.clusterShards)];
      if (take.epochToken == gate.token) answer.epoch = take.epoch;
    } else if (gate.leader && gate.leader->instanceId != config_.gatewayId &&
               !gate.leader->endpoint.empty() &&
               gate.verdict != election::GateDecision::Verdict::Suspended) {
      // Another gateway's node, seen on a session that is up: where to send the client.
      answer.kind = Answer::Kind::Elsewhere;
      answer.owner = gate.leader->endpoint;
    }
    return answer;
  }

  std::size_t owned() const override { return static_cast<std::size_t>(owned_.load()); }

  std::uint64_t epochOf(std::string_view account) const override {
    std::lock_guard lock(takesMutex_);
    return takes_[naming::shardOf(account, config_.clusterShards)].epoch;
  }

  std::optional<std::string> writePrivacy(const std::string& account, const std::string& rules,
                                          std::chrono::milliseconds timeout) override {
    auto done = std::make_shared<std::promise<std::optional<std::string>>>();
    auto answer = done->get_future();
    boost::asio::post(io_, [this, account, rules, done] {
      if (!verified_ || group_.session().state() != election::SessionState::Connected) {
        done->set_value("ZooKeeper is not connected; nothing changed");
        return;
      }
      writePrivacyNode(naming::gatewayPrivacyPath(config_.zkRoot, account), rules,
                       kPrivacyWriteAttempts, done);
    });
    if (answer.wait_for(timeout) != std::future_status::ready) {
      return "no answer from ZooKeeper within " + std::to_string(timeout.count()) +
             " ms; the rules may or may not be written: read them back before retrying";
    }
    return answer.get();
  }

  void watchPrivacy(PrivacyHandler apply) override {
    const bool start = static_cast<bool>(apply);
    {
      std::lock_guard lock(privacyMutex_);
      privacyHandler_ = std::move(apply);
    }
    if (start) boost::asio::post(io_, [this] { readPrivacy(); });
  }

  void stop(std::function<void()> handedOver) override {
    boost::asio::post(io_, [this, handedOver = std::move(handedOver)]() mutable {
      balancer_.leave([this, handedOver = std::move(handedOver)]() mutable {
        group_.stop([] {}, std::move(handedOver));
      });
    });
  }

 private:
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
    readPrivacy();
    spdlog::info("cluster: {} shards under {}, standing for each as {} ({})", config_.clusterShards,
                 naming::gatewayShardsRoot(config_.zkRoot), config_.gatewayId,
                 config_.advertiseUrl);
    clusterVerified_.set_value();
  }

  // ---- Presence version epochs: one compare-and-set bump of the cluster's counter per take.

  struct Take {
    int64_t token = -1;       // the current take (-1: not owned)
    int64_t epochToken = -1;  // the take `epoch` was bumped for
    std::uint64_t epoch = 0;  // the latest take's epoch, kept after a loss (0: never taken)
  };

  // On the io thread: a take (token >= 0) or a loss of `shard` ("shard-0007").
  void onTakeOrLoss(const std::string& shard, int64_t token) {
    const auto index = shardIndex(shard);
    if (!index || *index >= takes_.size()) return;
    {
      std::lock_guard lock(takesMutex_);
      takes_[*index].token = token;
    }
    if (token >= 0) bumpEpoch(*index, token);
  }

  static std::optional<std::uint32_t> shardIndex(std::string_view shard) {
    constexpr std::string_view kPrefix = "shard-";
    if (!shard.starts_with(kPrefix)) return std::nullopt;
    std::uint32_t index = 0;
    const auto digits = shard.substr(kPrefix.size());
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (error != std::errc{} || end != digits.data() + digits.size()) return std::nullopt;
    return index;
  }

  bool stillTaken(std::uint32_t index, int64_t token) const {
    std::lock_guard lock(takesMutex_);
    return takes_[index].token == token;
  }

  // Reads the counter with its version and sets it one higher with that version; a BadVersion (or
  // NodeExists on the first create) means another gateway bumped it meanwhile: read again.
  void bumpEpoch(std::uint32_t index, int64_t token) {
    if (!stillTaken(index, token)) return;
    auto& session = group_.session();
    const auto path = naming::gatewayEpochPath(config_.zkRoot);
    session.get(
        path, nullptr,
        [this, &session, index, token, path](election::ZkError read, std::string data,
                                             election::NodeStat stat) {
          if (read == election::ZkError::NoNode) {
            session.create(path, "1", election::NodeKind::Persistent,
                           [this, index, token](election::ZkError created, const std::string&) {
                             if (created == election::ZkError::Ok) return gotEpoch(index, token, 1);
                             if (created == election::ZkError::NodeExists) {
                               return bumpEpoch(index, token);
                             }
                             retryEpoch(index, token, created);
                           });
            return;
          }
          if (read != election::ZkError::Ok) return retryEpoch(index, token, read);
          const auto current = parseEpoch(data);
          if (!current) {
            spdlog::error(
                "cluster: {} holds '{}', not a decimal epoch: presence writes for shard {} "
                "are refused until it is fixed",
                path, data.substr(0, 64), naming::shardId(index));
            return retryEpoch(index, token, election::ZkError::Other, std::chrono::seconds(1));
          }
          const auto next = *current + 1;
          session.set(path, std::to_string(next), stat.version,
                      [this, index, token, next](election::ZkError set, election::NodeStat) {
                        if (set == election::ZkError::Ok) return gotEpoch(index, token, next);
                        if (set == election::ZkError::BadVersion) return bumpEpoch(index, token);
                        retryEpoch(index, token, set);
                      });
        });
  }

  void retryEpoch(std::uint32_t index, int64_t token, election::ZkError error,
                  std::chrono::milliseconds after = kEpochRetry) {
    spdlog::debug("cluster: epoch bump for shard {} failed ({}), again in {} ms",
                  naming::shardId(index), toString(error), after.count());
    auto timer = std::make_shared<boost::asio::steady_timer>(io_, after);
    timer->async_wait([this, timer, index, token](const boost::system::error_code& cancelled) {
      if (!cancelled) bumpEpoch(index, token);
    });
  }

  void gotEpoch(std::uint32_t index, int64_t token, std::uint64_t epoch) {
    std::lock_guard lock(takesMutex_);
    Take& take = takes_[index];
    if (take.token != token) return;  // lost meanwhile: the next take bumps again
    take.epoch = epoch;
    take.epochToken = token;
    spdlog::info("shard {} token {} presence epoch {}", naming::shardId(index), token, epoch);
  }

  // ---- Privacy rules: a children watch on the rules' folder and a data watch on each node.

  // Reads every rule node (on a new connection, or once the handler is set).
  void readPrivacy() {
    if (!verified_) return;
    {
      std::lock_guard lock(privacyMutex_);
      if (!privacyHandler_) return;
    }
    privacyKnown_.clear();
    const auto round = ++privacyRound_;
    auto& session = group_.session();
    session.ensurePath(naming::gatewayPrivacyRoot(config_.zkRoot),
                       [this, round](election::ZkError ensured) {
                         if (ensured == election::ZkError::Ok) readPrivacyChildren(round);
                       });
  }

  // `round`: the readPrivacy() this read belongs to. A watch armed by an earlier round (on the same
  // session) is left to fire unheeded, so that each node keeps one live watch.
  void readPrivacyChildren(std::uint64_t round) {
    if (round != privacyRound_) return;
    group_.session().children(
        naming::gatewayPrivacyRoot(config_.zkRoot), [this, round] { readPrivacyChildren(round); },
        [this, round](election::ZkError read, std::vector<std::string> children) {
          // Failed: the next connect reads them all again.
          if (read != election::ZkError::Ok || round != privacyRound_) return;
          const std::set<std::string> now(children.begin(), children.end());
          for (auto known = privacyKnown_.begin(); known != privacyKnown_.end();) {
            if (now.contains(*known)) {
              ++known;
              continue;
            }
            deliverPrivacy(*known, std::nullopt);
            known = privacyKnown_.erase(known);
          }
          for (const auto& account : now) {
            if (naming::accountIdError(account)) continue;  // not an account's node
            if (privacyKnown_.insert(account).second) readPrivacyNode(account, round);
          }
        });
  }

  void readPrivacyNode(const std::string& account, std::uint64_t round) {
    if (round != privacyRound_ || !privacyKnown_.contains(account)) return;
    group_.session().get(
        naming::gatewayPrivacyPath(config_.zkRoot, account),
        [this, account, round] { readPrivacyNode(account, round); },
        [this, account, round](election::ZkError read, std::string data, election::NodeStat) {
          if (round != privacyRound_) return;
          if (read == election::ZkError::Ok) return deliverPrivacy(account, data);
          if (read == election::ZkError::NoNode && privacyKnown_.erase(account) > 0) {
            deliverPrivacy(account, std::nullopt);
          }
        });
  }

  void deliverPrivacy(const std::string& account, const std::optional<std::string>& data) {
    std::lock_guard lock(privacyMutex_);
    if (privacyHandler_) privacyHandler_(account, data);
  }

  using PrivacyWritten = std::shared_ptr<std::promise<std::optional<std::string>>>;

  static void privacyWriteFailed(const PrivacyWritten& done, election::ZkError error) {
    done->set_value(error == election::ZkError::ConnectionLoss
                        ? std::string("the ZooKeeper link was lost before the write was "
                                      "acknowledged; the rules may or may not be written: read "
                                      "them back before retrying")
                        : "ZooKeeper refused the write: " + std::string(toString(error)));
  }

  // Sets the rule node (any version), or creates it when missing; `attempts` bounds the races with
  // another gateway creating or deleting it meanwhile.
  void writePrivacyNode(const std::string& path, const std::string& data, int attempts,
                        const PrivacyWritten& done) {
    group_.session().set(
        path, data, -1,
        [this, path, data, attempts, done](election::ZkError set, election::NodeStat) {
          if (set == election::ZkError::Ok) return done->set_value(std::nullopt);
          if (set != election::ZkError::NoNode || attempts <= 1) {
            return privacyWriteFailed(done, set);
          }
          group_.session().ensurePath(
              naming::gatewayPrivacyRoot(config_.zkRoot),
              [this, path, data, attempts, done](election::ZkError ensured) {
                if (ensured != election::ZkError::Ok) return privacyWriteFailed(done, ensured);
                createPrivacyNode(path, data, attempts, done);
              });
        });
  }

  void createPrivacyNode(const std::string& path, const std::string& data, int attempts,
                         const PrivacyWritten& done) {
    group_.session().create(
        path, data, election::NodeKind::Persistent,
        [this, path, data, attempts, done](election::ZkError created, const std::string&) {
          if (created == election::ZkError::Ok) return done->set_value(std::nullopt);
          if (created == election::ZkError::NodeExists) {
            return writePrivacyNode(path, data, attempts - 1, done);
          }
          privacyWriteFailed(done, created);
        });
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
  mutable std::mutex takesMutex_;
  std::vector<Take> takes_;  // by shard index, under takesMutex_
  std::mutex privacyMutex_;  // held while the handler runs, so that clearing it waits for it
  PrivacyHandler privacyHandler_;
  std::set<std::string> privacyKnown_;  // io thread only: rule nodes read on this connection
  std::uint64_t privacyRound_ = 0;      // io thread only: readPrivacy() calls so far
};

}  // namespace

std::unique_ptr<ShardOwnership> makeZooKeeperShardOwnership(const Config& config) {
  return std::make_unique<ZooKeeperShardOwnership>(config);
}

}  // namespace zkagent::gateway
