// The device endpoint's public face (device_endpoint.hpp): its own io_context and thread, the
// lease writer wired to the gate, the calls posted onto that thread, and the presence metrics.
// The sessions and the table behind it: device_endpoint_core.hpp.
#include "device_endpoint.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include "device_endpoint_core.hpp"
#include "presence_config.hpp"

namespace zkagent::agent::detail {

PresenceMetrics::PresenceMetrics(metrics::Registry& r)
    : connections(r.gauge("zkagent_presence_device_connections",
                          "Device WebSocket connections by state.", {"state"})),
      heartbeats(r.counter("zkagent_presence_heartbeats_total",
                           "Device heartbeats (pings) answered with a pong.")
                     .with({})),
      pingTimeouts(r.counter("zkagent_presence_ping_timeouts_total",
                             "Device connections closed (4002) after ping_timeout_ms of silence.")
                       .with({})),
      pingFloods(r.counter("zkagent_presence_ping_floods_total",
                           "Device connections closed (1008) for pinging faster than the limit "
                           "(20 per second, bursts of 40).")
                     .with({})),
      redirects(
          r.counter("zkagent_presence_redirects_total",
                    "Upgrades sent elsewhere: 307 to the leader, 503 when none is known; with "
                    "redirect=close in band, 4001 to the leader, 1013 when none is known.",
                    {"code"})),
      refused(r.counter("zkagent_presence_refused_upgrades_total",
                        "Device upgrades refused before the handshake, by reason.", {"reason"})),
      closes(r.counter("zkagent_presence_closes_total",
                       "Close frames the agent sent to devices, by close code.", {"code"})),
      leaderMovedCloses(r.counter("zkagent_presence_leader_moved_closes_total",
                                  "Device connections closed with 4001 (leader moved).")
                            .with({})),
      leaseBatches(r.counter("zkagent_presence_lease_batches_total",
                             "POST /v1/presence/leases requests, by result.", {"result"})),
      leaseEntries(r.counter("zkagent_presence_lease_entries_total",
                             "Lease entries by kind (renew, remove) and result (sent, failed, "
                             "dropped: this agent did not lead the account under that token).",
                             {"kind", "result"})),
      leaseDropped(r.counter("zkagent_presence_lease_dropped_total",
                             "Lease entries dropped because the lease queue was full (renewals "
                             "before removals), by kind (renew, remove).",
                             {"kind"})),
      leaseQueued(r.gauge("zkagent_presence_lease_queued_entries",
                          "Lease entries waiting to be sent to the gateway.")
                      .with({})),
      fencedAccounts(r.counter("zkagent_presence_fenced_total",
                               "Accounts whose lease writes the gateway fenced (a newer leader).")
                         .with({})),
      gatewayLeaseTtl(r.gauge("zkagent_presence_gateway_lease_ttl_seconds",
                              "The lease TTL the gateway reported in its last lease answer (0: "
                              "none yet); presence.lease_ttl_ms should equal it.")
                          .with({})),
      authRefused(r.counter("zkagent_device_auth_refused_total",
                            "Device upgrades refused for their token, by reason: 401 (missing, "
                            "malformed, unknown_key, bad_signature, expired, not_yet_valid, "
                            "wrong_audience, wrong_scope) or 403 (wrong_account, wrong_device).",
                            {"reason"})),
      tokenExpired(r.counter("zkagent_device_token_expired_total",
                             "Device connections closed with 4003 because their token expired.")
                       .with({})) {}

DeviceEndpoint::DeviceEndpoint(asio::io_context& io, const Config& config,
                               std::shared_ptr<ShardRoutes> routes)
    : counts_(std::make_shared<Counts>(config)),
      // One thread runs it: the hint lets Asio skip the locking and waking a pool would need.
      own_(std::make_unique<asio::io_context>(1)),
      core_(std::make_shared<Core>(io, *own_, config, counts_)),
      agentIo_(io),
      advertised_(core_->advertised),
      port_(core_->port) {
  // The writer needs the gateway settings now; its gate is wired in start().
  core_->writer = std::make_shared<GatewayLeaseWriter>(
      core_->executor, config, core_->m,
      [weak = std::weak_ptr<Core>(core_)](std::string_view account) {
        auto core = weak.lock();
        if (!core || !core->gate)
          return election::GateDecision{election::GateDecision::Verdict::Suspended, -1, 0, {}};
        return core->gate(account);
      },
      [weak = std::weak_ptr<Core>(core_)] {
        auto core = weak.lock();
        return core && core->sessionId ? core->sessionId() : int64_t{0};
      },
      [weak = std::weak_ptr<Core>(core_)](const std::string& account, uint64_t token) {
        if (auto core = weak.lock()) core->onFenced(account, token);
      },
      std::move(routes));
  // Runs until halt(), also while nothing is pending (before start(), after stop()).
  thread_ = std::thread([io = own_.get()] {
    auto work = asio::make_work_guard(*io);
    io->run();
  });
}

DeviceEndpoint::~DeviceEndpoint() {
  closeNow();
  halt();
}

template <class F>
void DeviceEndpoint::post(F&& f) {
  std::lock_guard lock(mutex_);
  if (!halted_) asio::post(*own_, std::forward<F>(f));
}

void DeviceEndpoint::halt() {
  {
    std::lock_guard lock(mutex_);
    if (halted_) return;
    halted_ = true;
  }
  if (thread_.get_id() == std::this_thread::get_id()) {
    // Misuse (the owner's last reference dropped inside `gate`): the thread cannot join itself,
    // and the io_context cannot be destroyed under its own run(). Leave it to the process; the
    // Core goes as if a handler dropped it.
    own_->stop();
    thread_.detach();
    static_cast<void>(own_.release());
    return;
  }
  own_->stop();
  thread_.join();
  // Nothing runs the io_context now. The lease writer's client posts its answers into it from
  // its own worker: wait for that worker before the io_context goes.
  core_->writer->shutdown();
  // Pending handlers hold sessions, and sessions hold the Core: destroying the io_context
  // destroys them, and with the last of them the Core's sockets and timers, while their services
  // still exist.
  core_.reset();
  own_.reset();
}

const std::string& DeviceEndpoint::endpoint() const { return advertised_; }
uint16_t DeviceEndpoint::port() const { return port_; }

void DeviceEndpoint::start(GateCheck gate, AdmitCheck admit, std::function<int64_t()> sessionId) {
  post([core = core_, gate = std::move(gate), admit = std::move(admit),
        sessionId = std::move(sessionId)]() mutable {
    if (core->stopping) return;
    core->gate = std::move(gate);
    core->admitGate = std::move(admit);
    core->sessionId = std::move(sessionId);
    core->table = std::make_unique<presence::ConnectionTable>(
        core->clock, presenceParams(core->settings), presence::HolderIdentity{core->instanceId, 0},
        *core->writer,
        [weak = std::weak_ptr<DeviceEndpoint::Core>(core)](const presence::DeviceKey&,
                                                           presence::Epoch epoch) {
          if (auto c = weak.lock()) c->onTimeout(epoch);
        });
    core->listener->start([weak = std::weak_ptr<DeviceEndpoint::Core>(core)](tcp::socket socket) {
      if (auto self = weak.lock()) self->admit(std::move(socket));
    });
    core->reap();
    spdlog::info("device endpoint listening on {} instance={}", core->advertised, core->instanceId);
  });
}

void DeviceEndpoint::leadershipLost(const std::string& account) {
  post([core = core_, account] { core->leadershipLost(account); });
}

void DeviceEndpoint::successorsTookOver() {
  post([core = core_] { core->closeMovingNow(); });
}

void DeviceEndpoint::stop(std::function<void()> done) {
  std::unique_lock lock(mutex_);
  if (halted_) {
    lock.unlock();
    return asio::post(agentIo_, std::move(done));
  }
  lock.unlock();
  post([core = core_, done = std::move(done)]() mutable {
    if (core->stopping) return asio::post(core->io, std::move(done));
    core->stop(std::move(done));
  });
}

void DeviceEndpoint::closeNow() {
  post([core = core_] {
    if (!core->stopping) core->stop([] {});
  });
}

int64_t DeviceEndpoint::devices(std::string_view account) const {
  auto it = counts_->deviceCounts.find(account);
  return it == counts_->deviceCounts.end() ? 0 : it->second.load();
}

std::string DeviceEndpoint::metricsText() const { return counts_->registry.expose(); }

}  // namespace zkagent::agent::detail
