// The gateway's presence lease store: the model's PresenceService (its LeaseStore; the view inside
// it is where subscribers plug in) on an AsioClock over a strand of the gateway's io_context, and
// the two HTTP calls on it, POST /v1/presence/leases and GET /v1/presence/{account}
// (docs/presence-runtime.md, docs/gateway.md).
//
// The model is single-threaded: HTTP handlers run on the server's handler threads, so each one
// parses and fences its request where it runs, posts the model work onto the strand and waits for
// the answer. Fencing stays with the Gateway, which knows the check mode: this file asks it once
// per batch, for every account and token the batch names.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "zkagent/fencing.hpp"
#include "zkagent/http.hpp"
#include "zkagent/metrics.hpp"
#include "zkagent/presence.hpp"

namespace boost::asio {
class io_context;
}

namespace zkagent::gateway {

struct Config;
class ShardOwnership;

// The largest lease batch body (the agent splits its batches at 2000 entries, well below this).
inline constexpr std::size_t kMaxLeaseBatchBytes = 1024 * 1024;

struct LeaseRemoval {
  presence::LeaseEntry entry;
  presence::LeaveReason reason = presence::LeaveReason::Close;
};

// One POST /v1/presence/leases body.
struct LeaseBatch {
  std::string instanceId;      // the agent that holds the connections
  std::int64_t sessionId = 0;  // its ZooKeeper session: with instanceId, what the fence checks
  std::vector<presence::LeaseEntry> renew;
  std::vector<LeaseRemoval> remove;
};

// Parses and checks a whole batch; throws fencing::BadRequest whose message starts with the field
// (`renew[3].device: ...`).
LeaseBatch parseLeaseBatch(std::string_view body);

class PresenceStore {
 public:
  // Decides the batch's writes (fencing::TokenValidator::admit): one token per account and
  // token the batch names, with the batch's instance and session, in order of first appearance;
  // one Decision each, or why the whole batch is refused with 503 (the gateway cannot tell now,
  // or its durable log failed).
  using LeaseFence = std::function<std::variant<std::vector<fencing::Decision>, std::string>(
      std::span<const fencing::FencingToken> writes)>;

  // Builds the model and starts its sweep on a new strand of `io`: construct it before `io` runs,
  // and destroy it after stop() once `io` no longer runs. Throws std::invalid_argument for bad
  // presence parameters in `config`. With `cluster` (cluster mode, outliving the store) the
  // privacy rules and the versions' high part come from ZooKeeper (docs/gateway-cluster.md).
  PresenceStore(boost::asio::io_context& io, const Config& config, metrics::Registry& registry,
                ShardOwnership* cluster = nullptr);
  ~PresenceStore();
  // Cluster mode, when the shards' elections start after the store (they advertise the subscriber
  // listener, bound after it): what the constructor's `cluster` does, before `io` runs.
  void attachCluster(ShardOwnership& cluster);
  ShardOwnership* cluster() const;  // null in single mode
  PresenceStore(const PresenceStore&) = delete;
  PresenceStore& operator=(const PresenceStore&) = delete;

  // POST /v1/presence/leases: 200 with the counts and each refused entry (an account not served,
  // a write the fence refuses: the others are applied), 400 naming the field (nothing applied),
  // 413, 503 when the fence refuses the batch or the store does not answer in time.
  http::Response postLeases(std::string_view body, const LeaseFence& fence);
  // The 503 of a gateway that refuses every write right now (counted as refused).
  http::Response refuseLeases(std::string_view why);
  // GET /v1/presence/{account}, account already checked.
  http::Response accountPresence(const std::string& account);
  // PUT /v1/presence/privacy/{account}, account already checked: 400 naming the field (nothing
  // changed), else durable first (single mode: atomic replace in the data dir; cluster mode: the
  // account's node in ZooKeeper, 503 without its acknowledgement), then applied to the live
  // subscriptions before the 200. GET the same path: the rules, the defaults when none were set
  // (cluster mode: 500 while the account's node does not parse; the account is hidden then).
  http::Response putPrivacy(const std::string& account, std::string_view body);
  http::Response getPrivacy(const std::string& account);
  // Added to every version of `target` sent to subscribers: single mode, the durable restart
  // counter << 32 (see presence_disk.hpp), so versions grow across restarts; cluster mode, the
  // epoch of this gateway's latest take of the target's shard << 32, so they grow across moves.
  std::uint64_t versionBase(std::string_view target) const;
  // Single mode: the restart counter (logged at start).
  std::uint64_t generation() const;
  // The strand the model runs on, for the I/O objects of what plugs in (their handlers then run
  // where the model does, and may touch it directly).
  boost::asio::any_io_executor executor() const;
  // True during the first lease TTL after start: "offline" may only mean "not renewed yet".
  bool warmingUp() const;
  // Brings the lease gauge and the expiration and flap counters up to date (before a scrape).
  void refreshMetrics();
  // Runs `work` on the model's strand, for what plugs into the service (the subscriber side
  // reads service.view() and service.subscriptions()); never inside this call. Dropped once
  // stopped.
  void post(std::function<void(presence::PresenceService& service)> work);
  // Cancels the model's timers so that io.run() can return; later calls answer 503.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zkagent::gateway
