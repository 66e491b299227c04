// fencing-gateway: the downstream service that accepts an account's operation only with a valid
// fencing token (the seq of the account's current `active` node). This header is the gateway's own
// seam for tests: the configuration, the view of ZooKeeper behind a small interface, and the HTTP
// API as a Router.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zkagent/auth.hpp"
#include "zkagent/fencing.hpp"
#include "zkagent/http.hpp"
#include "zkagent/metrics.hpp"

namespace zkagent::gateway {

// What to do while ZooKeeper is configured but its cache cannot be trusted (session down).
enum class UntrustedPolicy { HwmOnly, Refuse };

struct Config {
  std::string listenAddress = "127.0.0.1";
  uint16_t listenPort = 8480;
  std::filesystem::path dataDir;
  std::string zkHosts;  // empty: HWM checks only
  std::string zkRoot = "/wx-accounts";
  int zkSessionTimeoutMs = 10000;
  UntrustedPolicy untrusted = UntrustedPolicy::HwmOnly;
  bool untrustedSet = false;  // given in the file or a flag (cluster mode allows only refuse)
  // Cluster mode (docs/gateway-cluster.md): accounts spread over clusterShards shards, each owned
  // by one gateway through an election per shard. 0: a single gateway, which serves every account.
  std::uint32_t clusterShards = 0;
  std::string gatewayId;     // this gateway's instance id in the shards' elections
  std::string advertiseUrl;  // where agents reach this gateway (http[s]://host:port)
  // Cluster mode: where other gateways reach this one's subscriber listener (ws[s]://host:port,
  // the advertise URL's host), written into every shard it owns. Not read from the file: set
  // once the listener is bound (subscribeUrlOf).
  std::string subscribeUrl;
  std::string bearerToken;  // what agents (and subscribers) send; empty: no authentication
  // Operator actions (HWM reset, privacy PUT, drain) need this one instead; empty: refused.
  // Never equal to bearerToken, so an agent's credentials allow no operator action.
  std::string operatorToken;
  // Per connection on the HTTP listener; 0: no limit. High enough for an agent forwarding over a
  // kept-alive connection (one loopback connection carries up to ~9k requests/s here).
  unsigned maxRequestsPerSecond = 10000;
  // TLS on the listener: all three or none (identity.hpp). Without TLS the listener must be on
  // loopback, or `insecure` set (a warning at start). The subscriber listener serves wss:// with
  // the same certificate and key (no client certificates: subscribers send tokens); without them
  // it is plain ws://, on loopback unless `insecure`.
  std::string tlsCert;
  std::string tlsKey;
  std::string tlsClientCa;
  bool insecure = false;
  std::vector<std::string> accounts;  // empty: any valid account id
  fencing::CommitMode commitMode = fencing::CommitMode::group;
  // The operation log is folded into a snapshot once it reaches this many MiB (docs/fencing.md,
  // "Compaction"): what bounds the data dir. 0: never.
  std::uint64_t compactAfterMib = 64;
  size_t handlerThreads = 64;  // concurrent ops waiting on one group commit
  int agentTimeoutMs = 5000;   // an agent silent this long on /healthz counts as gone
  size_t ioThreads = 2;
  // Presence leases (presence_store.hpp): a lease lives leaseTtlMs after its last renewal, on
  // the gateway's own monotonic clock, and is swept every leaseSweepMs.
  int leaseTtlMs = 150000;
  int leaseSweepMs = 5000;
  // When set, every lease entry's fencing decision is appended to this file, one JSON line each
  // (presence_store.cpp): what a test such as the chaos run judges every lease write by.
  std::string leaseJournal;
  // Subscribers (presence_subscribers.hpp): a user's offline is published after debounceMs with
  // no device back; changes for one subscriber go out at most once per coalesceMs, merged; a
  // subscriber with more than subscriberQueue messages unsent is closed (4008, resubscribe).
  int debounceMs = 20000;
  // Unless set, the HTTP listen address with the next port (port 0 stays 0: any free port).
  std::string subscribeAddress = "127.0.0.1";
  uint16_t subscribePort = 8481;
  bool subscribeListenSet = false;
  int coalesceMs = 100;
  int subscriberQueue = 64;
  // Subscriber connections at once; upgrades beyond get 503 with Retry-After.
  int maxSubscribers = 10000;
  // Who a subscriber is (docs/auth.md): with viewerAuth, a JWT with scope "viewer" whose `sub` is
  // the viewer; with serviceAuth (separate keys), a backend's JWT with scope "service" that may
  // subscribe for the viewer it names. Neither set: the agents' bearer token and a claimed
  // viewer, on loopback only.
  std::optional<auth::VerifierSettings> viewerAuth;
  std::optional<auth::VerifierSettings> serviceAuth;
  std::string logLevel = "info";
  bool jsonLogs = false;
  // Config keys read under their old camelCase names ("dataDir is deprecated: it is now
  // data_dir ..."): logged as warnings at start.
  std::vector<std::string> warnings;

  // Whether the gateway serves `account` (in `accounts`, or any when that is empty).
  bool serves(std::string_view account) const {
    return accounts.empty() ||
           std::find(accounts.begin(), accounts.end(), account) != accounts.end();
  }
};

// The outcome of reading the command line: run with a config, or print and exit.
struct CommandLine {
  std::optional<Config> config;  // set: run
  std::string message;           // --help / --version text, or the error
  int exitCode = 0;              // when not running: 0 for --help/--version, 2 for errors
};

// Parses `fencing-gateway [options]`; a --config file is read first, flags override it, then
// ZKAGENT_GATEWAY_TOKEN (`environmentToken`) overrides the file's token.
// ZKAGENT_GATEWAY_OPERATOR_TOKEN (`environmentOperatorToken`) is an error together with
// operator_token, operator_token_file or --operator-token-file. Never throws.
CommandLine parseCommandLine(const std::vector<std::string>& args,
                             std::optional<std::string> environmentToken,
                             std::optional<std::string> environmentOperatorToken = std::nullopt);

// Config from JSON text (the --config file); throws std::invalid_argument naming the field. Key
// files named in it are read relative to `baseDir` (the config file's folder).
Config parseConfigJson(std::string_view json, Config base = {},
                       const std::filesystem::path& baseDir = {});

// What the gateway knows about an account's `active` node. The ZooKeeper implementation wraps
// election::LeaderObserver; tests use a fake.
class LeaderSource {
 public:
  virtual ~LeaderSource() = default;
  // Whether the cache reflects ZooKeeper now (session connected).
  virtual bool trusted() const = 0;
  // The account's active node; may block briefly to read an account not cached yet. Returns
  // ActiveView::unknown() when it cannot tell. A cached view (ActiveView::cached): it may lag.
  virtual fencing::ActiveView active(std::string_view account) = 0;
  // The account's active node read after a ZooKeeper sync (not cached): what a decision that
  // fences an account is taken on. Two round trips; unknown() when it cannot tell.
  virtual fencing::ActiveView confirmedActive(std::string_view account) = 0;
};

std::unique_ptr<LeaderSource> makeZooKeeperLeaderSource(const Config& config);

// Which gateway owns an account's shard (cluster mode). The ZooKeeper implementation runs the
// shards' elections; tests use a fake.
class ShardOwnership {
 public:
  struct Answer {
    enum class Kind { Owned, Elsewhere, Nobody } kind = Kind::Nobody;
    std::string shard;  // "shard-0007"
    int64_t take = -1;  // Owned: this take's token (each take of the shard has a new one)
    // Owned: the cluster epoch this take got (the high part of the shard's presence versions); 0
    // while it is still being bumped in ZooKeeper (no presence write is taken until it is known).
    std::uint64_t epoch = 0;
    std::string owner;  // Elsewhere: the owner's advertised URL
    // Elsewhere: the owner's subscriber listener (ws[s]://host:port), where a relay subscribes;
    // empty when its node names none.
    std::string subscribeUrl;
  };
  virtual ~ShardOwnership() = default;
  // Thread-safe and without I/O: the elections' in-memory gate. Owned only while this gateway
  // leads the shard on a session it has heard from recently.
  virtual Answer owner(std::string_view account) const = 0;
  // The same for shard `index` (below shardCount()).
  virtual Answer ownerOfShard(std::uint32_t index) const = 0;
  virtual std::uint32_t shardCount() const = 0;
  virtual std::size_t owned() const = 0;  // shards owned now
  // Hands every owned shard to the next gateway and stops standing; `handedOver` runs (on
  // another thread) once they are handed over.
  virtual void stop(std::function<void()> handedOver) = 0;

  // The drain (docs/gateway-cluster.md "Drain"): the hand-over of stop(), each shard to its
  // receiver by the balance rule in one multi, then no more standing while the process serves on
  // (421 naming the owners it watches). Once drained, for the life of the process.
  enum class Standing { Standing, Draining, Drained };
  struct DrainAnswer {
    Standing state = Standing::Standing;
    std::optional<std::string> refused;  // why nothing was done (no other gateway stands, ...)
    bool timedOut = false;               // refused: no answer in time, the drain may still start
  };
  // Starts the drain, or answers how far it is (a second call changes nothing). Blocks until the
  // elections' thread answered (milliseconds), at most `timeout` (then refused, nothing done).
  virtual DrainAnswer drain(std::chrono::milliseconds timeout) = 0;
  virtual Standing standing() const = 0;  // thread-safe, no I/O

  // Presence in cluster mode (docs/gateway-cluster.md "Presence").
  // The epoch of this gateway's latest take of `account`'s shard, kept after the shard is lost (0:
  // never taken by this process). Thread-safe, no I/O.
  virtual std::uint64_t epochOf(std::string_view account) const = 0;
  // Creates or sets {root}/@gateway-cluster/privacy/{account} to `rules` (privacyJson). Blocks up
  // to `timeout`: nullopt once ZooKeeper acknowledged the write; else why not (not connected:
  // nothing written; the link lost or no answer in time: the write may or may not be applied).
  virtual std::optional<std::string> writePrivacy(const std::string& account,
                                                  const std::string& rules,
                                                  std::chrono::milliseconds timeout) = 0;
  // `apply(account, data)` for every rule node: all of them on every (re)connect, then each one
  // created or changed (data nullopt: the node is gone), on the elections' thread. An empty
  // function stops the calls (returns once none is running).
  using PrivacyHandler =
      std::function<void(const std::string& account, const std::optional<std::string>& data)>;
  virtual void watchPrivacy(PrivacyHandler apply) = 0;
};

// Starts standing for the cluster's shards. Blocks until the cluster's shard count is read from
// ZooKeeper (creating it on the first start); throws std::runtime_error when it differs from
// config.clusterShards.
std::unique_ptr<ShardOwnership> makeZooKeeperShardOwnership(const Config& config);

// Config::subscribeUrl: ws:// (wss:// when `secure`) with the host of config.advertiseUrl and the
// subscriber listener's bound `port`.
std::string subscribeUrlOf(const Config& config, bool secure, std::uint16_t port);

// Which checks an operation gets right now (also the `check` label of the ops metric).
enum class CheckMode { ZooKeeper, HwmOnly, Refusing };
std::string_view toString(CheckMode mode);
// "standing", "draining", "drained" (/healthz, the drain's answer, the metric's label).
std::string_view toString(ShardOwnership::Standing standing);

// The HTTP API over one TokenValidator. Thread-safe: handlers run on many threads at once.
class PresenceStore;

class Gateway {
 public:
  // `leaders` is null when ZooKeeper is not configured; without `presence` the presence routes
  // are not served.
  // `shards` is null outside cluster mode.
  Gateway(const Config& config, fencing::TokenValidator& validator, LeaderSource* leaders,
          metrics::Registry& registry, PresenceStore* presence = nullptr,
          ShardOwnership* shards = nullptr);

  http::Router router();  // handlers refer to this Gateway: keep it alive while serving
  // The current check mode; logs and updates the metrics when it changed since the last call.
  CheckMode refreshCheckMode();
  // The gateway's half of the mutual heartbeat (each side notices the other's silence): agents beat
  // on GET /healthz?instance=ID; one that stays silent longer than agentTimeoutMs is logged and
  // counted as gone.
  void sweepAgents();

 private:
  http::Response submitOperation(const http::Request& request);
  http::Response accountStatus(const http::Request& request);
  http::Response resetHighWaterMark(const http::Request& request);
  http::Response health(const http::Request& request);
  http::Response agents();
  http::Response drain(const http::Request& request);
  http::Response metricsText();
  http::Response presenceLeases(const http::Request& request);
  http::Response presenceOf(const http::Request& request);
  http::Response presencePrivacy(const http::Request& request);
  // The view a write for `account` is decided on under `mode`: ZooKeeper's in ZooKeeper mode,
  // unknown() in hwm_only. A cache that cannot answer for the account in time leaves it to the
  // untrusted policy, which `mode` then says (hwm_only: unknown(); refuse: nullopt).
  enum class ViewRead { cached, confirmed };
  std::optional<fencing::ActiveView> activeView(const std::string& account, CheckMode& mode,
                                                ViewRead read = ViewRead::cached);
  // A decision refused with confirmFirst: the cached view showed a seq below the HWM. The view to
  // decide again on, read after a sync (logged and counted, with whether it differed from the
  // cache); activeView's answer when that read fails.
  std::optional<fencing::ActiveView> reconfirmedView(const std::string& account, CheckMode& mode,
                                                     const fencing::ActiveView& cached,
                                                     std::uint64_t hwm);
  // Cluster mode: whether this gateway owns `account`'s shard. `refusal` (421 naming the owner,
  // 503 while the shard has none) when it does not; else `read` is confirmed for the account's
  // first decision since this take of its shard, so that a new owner decides on ZooKeeper after a
  // sync rather than on a cache that may lag what the previous owner saw.
  struct ShardCheck {
    std::optional<http::Response> refusal;
    std::string why;  // the refusal's detail
    ViewRead read = ViewRead::cached;
    int64_t take = -1;
    std::uint64_t epoch = 0;  // the take's presence epoch; 0 while still being read
  };
  ShardCheck checkShard(const std::string& account, std::string_view route);
  // A decision on a confirmed view was taken for `account` during shard take `take`.
  void confirmedOnTake(const std::string& account, int64_t take);
  // 400 for an invalid account id, 404 for one outside config.accounts; nullopt when served.
  std::optional<http::Response> refusedAccount(const std::string& account) const;

  Config config_;
  fencing::TokenValidator& validator_;
  LeaderSource* leaders_;
  metrics::Registry& registry_;
  PresenceStore* presence_;
  ShardOwnership* shards_;
  std::mutex confirmedTakesMutex_;
  std::map<std::string, int64_t, std::less<>> confirmedTakes_;  // account: the take confirmed on
  // Whether the durable log takes writes. After a failure it tries to recover the log (cut back
  // to what was durable, state reloaded) at most once per kStorageRetry, so that a gateway whose
  // disk filled up or failed an fsync resumes once the fault is gone, without a restart.
  bool storageUsable();
  // A write failed on the durable log: refuse until it recovers. The 503's detail.
  std::string storageFailed(const fencing::StorageError& error);
  static constexpr std::chrono::seconds kStorageRetry{1};

  std::mutex modeMutex_;  // one check-mode change at a time, so its gauges stay one-hot
  std::atomic<CheckMode> mode_;
  std::atomic<bool> storageFailed_{false};
  std::mutex storageRecoveryMutex_;
  std::chrono::steady_clock::time_point lastStorageRecovery_{};  // under storageRecoveryMutex_

  metrics::CounterFamily& ops_;  // by result and check
  metrics::Counter& replayed_;
  metrics::Counter& badRequests_;
  metrics::Counter& hwmResets_;
  metrics::Counter& storageErrors_;
  metrics::CounterFamily& viewReconfirmations_;  // by result
  metrics::Gauge& storageFailedGauge_;
  metrics::Counter& storageRecoveries_;
  metrics::Histogram& opSeconds_;
  metrics::GaugeFamily& checkMode_;
  metrics::Gauge& fencedAccounts_;
  metrics::Gauge& zookeeperTrusted_;
  metrics::GaugeFamily& agentsByState_;
  metrics::CounterFamily& misdirected_;  // by route
  metrics::Gauge& shardsOwned_;
  metrics::GaugeFamily& clusterStanding_;  // by state: standing, draining, drained
  void refreshStanding();

  struct AgentBeat {
    std::chrono::steady_clock::time_point lastSeen;
    bool gone = false;
  };
  std::mutex agentsMutex_;
  std::map<std::string, AgentBeat, std::less<>> agents_;
};

}  // namespace zkagent::gateway
