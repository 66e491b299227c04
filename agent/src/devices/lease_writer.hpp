// The presence model's LeaseWriter over the network: the connection table's renewals and removals
// become POST /v1/presence/leases batches to the fencing-gateway (docs/presence-runtime.md).
//
// Everything runs on the device endpoint's own thread (its io_context's executor). Writes are
// queued (lease_queue.hpp: coalesced per device, removals first, bounded at kQueuedBatches x
// max_batch_entries entries) and flushed a few milliseconds later, so a removal rides with
// whatever else came in that window; at most one batch is in flight, so a lease's renewal and
// removal reach the gateway in the order they were made. With a gateway cluster the batch is split
// by the owner of each entry's shard (ShardRoutes, the configured gateway when unknown): one POST
// per owner at once, each on its own kept-alive client, and the next batch leaves once all are
// answered (an account's entries are all in one of them). A part whose owner's heartbeat says
// down (ShardRoutes passes it over) fails at once, unsent, as an unanswered part would. Right
// before a batch leaves, every entry is checked against the gate: an entry whose account this agent
// does not lead under the entry's token right now (lost, suspended, drifted) is dropped and
// counted, so no lease write leaves a suspended agent.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lease_queue.hpp"
#include "operations/shard_routes.hpp"
#include "presence_metrics.hpp"
#include "zkagent/agent/config.hpp"
#include "zkagent/election.hpp"
#include "zkagent/http.hpp"
#include "zkagent/presence/leases.hpp"
#include "zkagent/presence/params.hpp"

namespace zkagent::agent::detail {

// The device endpoint's io_context, run by one thread: no strand needed.
using PresenceExecutor = boost::asio::io_context::executor_type;
using GateCheck = std::function<election::GateDecision(std::string_view account)>;

// The lease queue holds this many batches' worth of entries (100 x 2000 = 200 000 by default: a
// renewal for each connection the endpoint may hold, kMaxConnections). A gateway outage then
// costs at most that much memory; beyond it renewals, then removals, are dropped and counted.
inline constexpr std::size_t kQueuedBatches = 100;

class GatewayLeaseWriter final : public presence::LeaseWriter,
                                 public std::enable_shared_from_this<GatewayLeaseWriter> {
 public:
  // The gateway refused `account`'s writes under `token` (a newer leader exists): runs on the
  // endpoint's thread.
  using FencedHandler = std::function<void(const std::string& account, uint64_t token)>;

  GatewayLeaseWriter(PresenceExecutor executor, const Config& config, PresenceMetrics& metrics,
                     GateCheck gate, std::function<int64_t()> sessionId, FencedHandler onFenced,
                     std::shared_ptr<ShardRoutes> routes);

  void renew(std::string_view holder, std::span<const presence::LeaseEntry> entries) override;
  void remove(const presence::DeviceKey& key, presence::Epoch epoch,
              presence::LeaveReason reason) override;
  void stop();  // drops what is queued; nothing more is sent
  // stop(), then waits for the request in flight and frees the client, so none of its threads
  // posts into the endpoint's io_context afterwards. Only while that io_context runs nowhere.
  void shutdown();

 private:
  void flushSoon(std::chrono::milliseconds delay);
  void flush();
  // Counts the queue-full drops and sets the queue gauge.
  void queueChanged(const LeaseDrops& drops = {});
  // Sends one owner's part of a batch ("": the configured gateway).
  void send(const std::string& owner, LeaseBatch part);
  http::Client& clientFor(const std::string& owner);
  // A part's answer (or failure), onto the endpoint's thread: answered() there.
  static void settle(PresenceExecutor executor, std::weak_ptr<GatewayLeaseWriter> weak,
                     size_t renewed, std::vector<QueuedRemoval> removals,
                     http::ClientResponse response);
  // One part's answer; the batch is done when the last part is.
  void answered(size_t renewed, std::vector<QueuedRemoval> removals, http::ClientResponse response);
  // A 200's body: the gateway's lease TTL and the accounts it fenced.
  void fencedBy(const http::ClientResponse& response);
  // The gateway's own lease TTL, from its answer: warned about once per value when it is not
  // presence.lease_ttl_ms, loudly when this agent's renewals would let leases lapse under it.
  void checkGatewayTtl(int64_t gatewayTtlMs);

  PresenceExecutor executor_;
  const std::string instanceId_;
  const size_t maxEntries_;
  PresenceMetrics& m_;
  GateCheck gate_;
  std::function<int64_t()> sessionId_;
  FencedHandler onFenced_;
  const presence::Params params_;  // this agent's renewal timing, for checkGatewayTtl
  int64_t gatewayTtlMs_ = 0;       // the last TTL the gateway reported (0: none yet)
  const Config::Gateway gateway_;
  const std::shared_ptr<ShardRoutes> routes_;
  // Its own kept-alive connection to each gateway it writes to, by URL ("": the configured one).
  std::map<std::string, std::unique_ptr<http::Client>, std::less<>> clients_;
  boost::asio::steady_timer timer_;
  std::size_t inFlight_ = 0;  // parts of the batch not answered yet
  bool failed_ = false;       // a part of the batch in flight failed: the next one waits
  bool scheduled_ = false, stopped_ = false;
  LeaseQueue queue_;
};

}  // namespace zkagent::agent::detail
