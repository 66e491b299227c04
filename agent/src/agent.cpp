// Agent: wires the election group, the gateway link, health reports and the placement table
// together. Control work (health reports, reading peers, placement, balance) runs on one strand;
// the gate and the admin handlers run on any thread and only read state under `mu`. The gate is
// in gate.cpp, the balance pass in balancer.cpp, the admin API in admin_api.cpp.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <future>
#include <thread>

#include "agent_impl.hpp"
#include "zkagent/cluster_node.hpp"

namespace zkagent::agent {
using detail::AccountState;
using detail::hexSession;

std::string_view Gate::Outcome::reason() const {
  switch (result) {
    case Result::Executed:
      return "executed";
    case Result::NotLeader:
      return "not_leader";
    case Result::Suspended:
      return "suspended";
    case Result::Drifted:
      return "drifted";
    case Result::UnknownAccount:
      return "unknown_account";
    case Result::Stopping:
      return "stopping";
  }
  return "unknown";
}

namespace detail {
Metrics::Metrics(metrics::Registry& r)
    : accounts(r.gauge("zkagent_accounts", "Configured accounts by election role.", {"role"})),
      transitions(r.counter("zkagent_leadership_transitions_total",
                            "Leadership acquired or lost, by reason.", {"kind", "reason"})),
      sessionState(r.gauge("zkagent_session_state", "1 for the current ZooKeeper session state.",
                           {"state"})),
      sessionExpirations(
          r.counter("zkagent_session_expirations_total", "ZooKeeper sessions that expired.")
              .with({})),
      sessionDisconnects(r.counter("zkagent_session_disconnects_total",
                                   "Connection losses of the ZooKeeper session.")
                             .with({})),
      gateDecisions(
          r.counter("zkagent_gate_decisions_total", "Gate answers by result.", {"result"})),
      gateExecuted(gateDecisions.with({"executed"})),
      forwarded(r.counter("zkagent_forwarded_ops_total",
                          "Operations forwarded to the gateway, by result.", {"result"})),
      forwardedAccepted(forwarded.with({"accepted"})),
      forwardSeconds(r.histogram("zkagent_forward_duration_seconds",
                                 "Round trip of one forwarded operation.",
                                 metrics::latencyBuckets())
                         .with({})),
      failoverSeconds(r.histogram("zkagent_failover_duration_seconds",
                                  "Takeovers after a lost session: from the previous leader's last "
                                  "health report change seen here to leading.",
                                  {0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120})
                          .with({})),
      ownReportAge(r.gauge("zkagent_health_report_age_seconds",
                           "Age of this agent's own health report on its own clock.")
                       .with({})),
      peers(r.gauge("zkagent_peer_agents", "Agents seen in health reports, by freshness.",
                    {"freshness"})),
      reportWrites(r.counter("zkagent_health_report_writes_total",
                             "Health report writes by result.", {"result"})),
      lifecycle(r.gauge("zkagent_lifecycle", "1 for the current lifecycle.", {"lifecycle"})),
      runtimeReady(r.gauge("zkagent_runtime_ready",
                           "1 when ZooKeeper is connected and the gateway link is up.")
                       .with({})),
      schedulable(
          r.gauge("zkagent_schedulable", "1 when this agent may stand for leadership.").with({})),
      gatewayUp(
          r.gauge("zkagent_gateway_link_up", "1 while the gateway answers heartbeats.").with({})),
      gatewayMissed(r.counter("zkagent_gateway_heartbeat_failures_total",
                              "Gateway heartbeats that failed or timed out.")
                        .with({})),
      ownerUp(r.gauge("zkagent_gateway_owner_link_up",
                      "1 while the shard owner answers heartbeats; owners in the gateway "
                      "cluster's shard map only.",
                      {"owner"})),
      ownerMissed(r.counter("zkagent_gateway_owner_heartbeat_failures_total",
                            "Heartbeats to a shard owner that failed or timed out; owners in the "
                            "gateway cluster's shard map only.",
                            {"owner"})),
      blocked(r.gauge("zkagent_blocked_accounts",
                      "Accounts whose wanted handover or candidacy is blocked, by cause.",
                      {"cause"})),
      balanceMoves(r.counter("zkagent_balance_moves_total",
                             "Handovers this agent started to spread leadership, by reason and "
                             "result.",
                             {"reason", "result"})),
      balanceLeading(r.gauge("zkagent_balance_leading",
                             "Balanced accounts this agent leads, as the balance counts them.")
                         .with({})),
      balanceTarget(
          r.gauge("zkagent_balance_target", "This agent's target share of the balanced accounts.")
              .with({})),
      balanceInFlight(r.gauge("zkagent_balance_moves_in_flight",
                              "Balance handovers started and not yet seen land.")
                          .with({})) {}
}  // namespace detail

namespace {
constexpr Role kRoles[] = {Role::Init,   Role::Candidate, Role::Waiting,
                           Role::Leader, Role::Suspend,   Role::Stopped};
constexpr Lifecycle kLifecycles[] = {Lifecycle::Joining, Lifecycle::Active, Lifecycle::Leaving,
                                     Lifecycle::Drained};
constexpr election::SessionState kSessionStates[] = {
    election::SessionState::Connecting, election::SessionState::Connected,
    election::SessionState::Suspended, election::SessionState::Expired,
    election::SessionState::Closed};
}  // namespace

Agent::Impl::Impl(asio::io_context& ioc, Config cfg)
    : io(ioc),
      config(std::move(cfg)),
      healthPath(naming::healthPath(config.zookeeper.agentsPath, config.instanceId)),
      control(asio::make_strand(ioc)),
      healthTimer(control),
      reconcileTimer(control),
      routes(std::make_shared<detail::ShardRoutes>(config.gateway)),
      link(std::make_shared<detail::GatewayLink>(ioc, config.gateway, config.instanceId,
                                                 m.gatewayMissed, routes)),
      ownerLinks(std::make_shared<detail::OwnerLinks>(
          ioc, config.gateway, config.instanceId,
          detail::OwnerLinks::Families{m.ownerUp, m.ownerMissed})) {
  // Before anything routes (the device endpoint's lease writer below): an owner whose heartbeat
  // says down is passed over.
  routes->avoidDown([weak = std::weak_ptr<detail::OwnerLinks>(ownerLinks)](const std::string& url) {
    const auto links = weak.lock();
    return links && links->down(url);
  });
  for (const auto& account : config.accounts) accounts.emplace(account, AccountState{});
  http::ServerOptions options;
  options.address = config.admin.listen.host;
  options.port = config.admin.listen.port;
  options.bodyLimit = fencing::kMaxOperationBytes + 1024;
  options.handlerThreads = 4;  // status and resign read ZooKeeper; operations are deferred
  server = std::make_unique<http::Server>(io, options, router());
  endpoint = config.admin.advertise.empty()
                 ? "http://" + naming::toString({server->address(), server->port()})
                 : config.admin.advertise;
  devices = std::make_unique<detail::DeviceEndpoint>(io, config, routes);
  election::ElectionOptions eo;
  eo.session = {config.zookeeper.hosts, config.zookeeper.sessionTimeout, config.zookeeper.digest};
  eo.root = config.zookeeper.root;
  eo.instanceId = config.instanceId;
  eo.endpoint = endpoint;
  eo.deviceEndpoint = devices->endpoint();
  group = std::make_unique<election::ElectionGroup>(io, eo);
  for (auto lc : kLifecycles) m.lifecycle.with({toString(lc)}).set(lc == lifecycle ? 1 : 0);
  for (auto role : kRoles) m.accounts.with({election::toString(role)}).set(0);
  for (auto s : kSessionStates) m.sessionState.with({election::toString(s)}).set(0);
}

void Agent::Impl::start() {
  std::weak_ptr<Impl> weak = weak_from_this();
  group->onLeadership([weak](const election::LeadershipEvent& e) {
    if (auto self = weak.lock()) self->onLeadership(e);
  });
  group->onSession([weak](const election::SessionEvent& e) {
    if (auto self = weak.lock()) self->onSession(e);
  });
  link->start([weak](bool up) {
    auto self = weak.lock();
    if (!self) return;
    self->m.gatewayUp.set(up ? 1 : 0);
    spdlog::log(up ? spdlog::level::info : spdlog::level::warn, "gateway link {} instance={}",
                up ? "up" : "down", self->config.instanceId);
    asio::post(self->control, [self] { self->publishHealth(); });
    self->reconcileSoon();
  });
  ownerLinks->start([routes = routes] { return routes->owners(); });
  server->start();
  devices->start(
      [weak](std::string_view account) {
        auto self = weak.lock();
        if (!self || self->stopping)
          return GateDecision{GateDecision::Verdict::Suspended, -1, 0, std::nullopt};
        return self->group->check(account);
      },
      [weak](std::string account, std::function<void(GateDecision)> decided) {
        auto self = weak.lock();
        if (!self || self->stopping)
          return decided({GateDecision::Verdict::Suspended, -1, 0, std::nullopt});
        // On the agent's io, where operations are admitted.
        asio::post(self->io,
                   [self, account = std::move(account), decided = std::move(decided)]() mutable {
                     self->gateDecision(std::move(account), std::move(decided));
                   });
      },
      [weak] {
        auto self = weak.lock();
        return self ? self->group->sessionId() : int64_t{0};
      });
  group->start();
  asio::post(control, [self = shared_from_this()] {
    self->publishHealth();
    self->pollPeers();
    self->reconcile();
  });
}

// ---------------------------------------------------------------------------------------------
// Health

bool Agent::Impl::runtimeReady() const {
  return group->sessionState() == election::SessionState::Connected && link->up();
}

HealthReport Agent::Impl::currentReport() {
  HealthReport r;
  r.instanceId = config.instanceId;
  const bool connected = group->sessionState() == election::SessionState::Connected;
  r.runtimeReady = runtimeReady() && !stopping;
  r.status = stopping         ? HealthStatus::Down
             : r.runtimeReady ? HealthStatus::Alive
                              : HealthStatus::Suspect;
  r.errorCode = stopping      ? "stopping"
                : !connected  ? "zookeeper_disconnected"
                : !link->up() ? "gateway_unreachable"
                              : "";
  r.intervalMs = config.health.interval.count();
  r.ttlMs = config.health.ttl.count();
  r.endpoint = endpoint;
  for (const auto& s : group->status()) {
    if (s.role == Role::Leader) ++r.leading;
    if (s.standing) ++r.standing;
  }
  r.accounts = static_cast<int64_t>(config.accounts.size());
  std::lock_guard lock(mu);
  r.lifecycle = lifecycle;
  r.reportSeq = ++reportSeq;
  return r;
}

// Control strand. set() first (the node exists on every write after the first); create it when
// missing. A failed write is counted and retried on the next interval: the report going stale is
// how readers learn about it (fail closed).
void Agent::Impl::publishHealth() {
  if (group->sessionState() != election::SessionState::Connected) return;
  auto report = currentReport();
  auto data = toJson(report);
  auto self = shared_from_this();
  group->session().set(
      healthPath, data, -1, [self, report, data](election::ZkError err, election::NodeStat) {
        if (err == election::ZkError::Ok)
          return asio::post(self->control, [self, report] { self->wroteReport(report); });
        if (err != election::ZkError::NoNode) {
          self->m.reportWrites.with({"error"}).inc();
          return;
        }
        self->group->session().ensurePath(
            self->config.zookeeper.agentsPath, [self, report, data](election::ZkError) {
              self->group->session().create(
                  self->healthPath, data, election::NodeKind::Ephemeral,
                  [self, report](election::ZkError e, std::string) {
                    if (e != election::ZkError::Ok) {
                      self->m.reportWrites.with({"error"}).inc();
                      return;
                    }
                    asio::post(self->control, [self, report] { self->wroteReport(report); });
                  });
            });
      });
}

// Control strand. A report that reached ZooKeeper is as good as reading it back.
void Agent::Impl::wroteReport(const HealthReport& report) {
  m.reportWrites.with({"ok"}).inc();
  {
    std::lock_guard lock(mu);
    tracker.observe(config.instanceId, report, Clock::now());
  }
  // The first report is visible: the agent has joined.
  if (!stopping && setLifecycle(Lifecycle::Active, {Lifecycle::Joining})) publishHealth();
  reconcileSoon();
}

// Control strand: reads every agent's report (no watches: one read per agent per interval).
void Agent::Impl::pollPeers() {
  if (group->sessionState() != election::SessionState::Connected) return;
  auto self = shared_from_this();
  group->session().children(
      config.zookeeper.agentsPath, nullptr,
      [self](election::ZkError err, std::vector<std::string> names) {
        if (err != election::ZkError::Ok && err != election::ZkError::NoNode) return;
        asio::post(self->control, [self, names = std::move(names)] {
          std::vector<std::string> gone;
          {
            std::lock_guard lock(self->mu);
            for (const auto& id : self->tracker.known()) {
              if (std::find(names.begin(), names.end(), id) == names.end()) gone.push_back(id);
            }
            for (const auto& id : gone) self->tracker.observe(id, std::nullopt, Clock::now());
          }
          for (const auto& name : names) {
            self->group->session().get(
                naming::healthPath(self->config.zookeeper.agentsPath, name), nullptr,
                [self, name](election::ZkError e, std::string data, election::NodeStat) {
                  if (e != election::ZkError::Ok && e != election::ZkError::NoNode) return;
                  asio::post(self->control,
                             [self, name,
                              report = e == election::ZkError::Ok ? parseHealthReport(data)
                                                                  : std::nullopt] {
                               std::lock_guard lock(self->mu);
                               self->tracker.observe(name, report, Clock::now());
                             });
                });
          }
        });
      });
}

// Our own blocks as a peer would judge them, plus the live readiness (the report can lag it by
// one write). Lifecycle is the caller's business.
std::vector<std::string> Agent::Impl::ownBlocks(Clock::time_point now) {
  std::vector<std::string> blocks;
  {
    std::lock_guard lock(mu);
    for (auto& b : schedulingBlocks(tracker.judge(config.instanceId, now, config.health.ttl))) {
      if (!b.starts_with("lifecycle_")) blocks.push_back(std::move(b));
    }
  }
  if (!runtimeReady() &&
      std::find(blocks.begin(), blocks.end(), "runtime_not_ready") == blocks.end()) {
    blocks.emplace_back("runtime_not_ready");
  }
  return blocks;
}

// ---------------------------------------------------------------------------------------------
// Placement

void Agent::Impl::reconcileSoon() {
  if (reconcileQueued.exchange(true)) return;
  asio::post(control, [self = shared_from_this()] { self->reconcile(); });
}

std::optional<Successor> Agent::Impl::successorOf(const AccountState& state,
                                                  Clock::time_point now) {
  if (!state.successor) return std::nullopt;
  auto seen = tracker.judge(*state.successor, now, config.health.ttl);
  return Successor{*state.successor, schedulingBlocks(seen), seen.age};
}

// Control strand: one pass of the placement table over every account.
void Agent::Impl::reconcile() {
  reconcileQueued = false;
  if (stopping) return;
  // A lost connection is the election's business (SUSPEND closes the gate; the same session
  // resumes its leadership on reconnect). Withdrawing here would turn every blip into a handover.
  if (group->sessionState() != election::SessionState::Connected) {
    m.runtimeReady.set(0);
    return;
  }
  const auto now = Clock::now();
  const auto blocks = ownBlocks(now);
  std::map<std::string, election::AccountStatus, std::less<>> status;
  for (auto& s : group->status()) status.emplace(s.account, std::move(s));

  std::vector<std::string> joins, withdrawals, lookups;
  size_t leading = 0, standing = 0;
  std::map<std::string, size_t> blockedByCause;
  std::map<Role, size_t> roles;
  Lifecycle current;
  {
    std::lock_guard lock(mu);
    current = lifecycle;
    const auto ownAge = tracker.judge(config.instanceId, now, config.health.ttl);
    m.ownReportAge.set(ownAge.report ? static_cast<double>(ownAge.age.count()) / 1000.0 : 0.0);
    for (auto& [account, state] : accounts) {
      auto it = status.find(account);
      const Role role = it == status.end() ? Role::Init : it->second.role;
      const bool isLeader = role == Role::Leader;
      const bool isStanding = it != status.end() && it->second.standing;
      ++roles[role];
      if (!isLeader) state.successorKnown = false;
      if (state.successorKnown && now - state.successorReadAt > config.health.interval) {
        state.successorKnown = false;  // the queue may have changed: look again
      }
      PlacementInput in{current,
                        blocks,
                        isLeader,
                        isStanding,
                        state.successorKnown,
                        state.successorKnown ? successorOf(state, now) : std::nullopt};
      state.decision = decide(in);
      state.healthReportAgeMs = in.successor
                                    ? std::optional<int64_t>(in.successor->reportAge.count())
                                : ownAge.report ? std::optional<int64_t>(ownAge.age.count())
                                                : std::nullopt;
      switch (state.decision.action) {
        case PlacementAction::Join:
          joins.push_back(account);
          break;
        case PlacementAction::Withdraw:
          withdrawals.push_back(account);
          break;
        case PlacementAction::LookUpSuccessor:
          if (!state.lookupInFlight) {
            state.lookupInFlight = true;
            lookups.push_back(account);
          }
          break;
        case PlacementAction::None:
          break;
      }
      if (!state.decision.blockedReasons.empty()) {
        ++blockedByCause[state.decision.blockedByHealth ? "health" : "other"];
      }
      if (isLeader) ++leading;
      if (isStanding) ++standing;
    }
  }
  for (auto role : kRoles)
    m.accounts.with({election::toString(role)}).set(static_cast<double>(roles[role]));
  for (const char* cause : {"health", "other"})
    m.blocked.with({cause}).set(static_cast<double>(blockedByCause[cause]));
  m.runtimeReady.set(runtimeReady() ? 1 : 0);
  m.schedulable.set(blocks.empty() && current == Lifecycle::Active ? 1 : 0);

  for (const auto& a : joins) group->join(a);
  for (const auto& a : withdrawals) {
    if (status.count(a) && status[a].role == Role::Leader) {
      spdlog::info("handing over account={} instance={} lifecycle={} reasons={}", a,
                   config.instanceId, toString(current),
                   blocks.empty() ? "lifecycle" : blocks.front());
    }
    group->withdraw(a);
  }
  for (const auto& a : lookups) lookUpSuccessor(a);
  rebalance(status, now, blocks.empty() && current == Lifecycle::Active);

  if (current == Lifecycle::Leaving && leading == 0 && standing == 0 && withdrawals.empty()) {
    if (setLifecycle(Lifecycle::Drained, {Lifecycle::Leaving})) {
      spdlog::info("drained instance={}", config.instanceId);
      publishHealth();
    }
  }
}

// The member that takes over when we leave: the smallest one that is not us.
void Agent::Impl::lookUpSuccessor(const std::string& account, std::function<void()> answered) {
  auto self = shared_from_this();
  group->members(account, [self, account, answered = std::move(answered)](
                              election::ZkError err, std::vector<election::MemberInfo> members) {
    asio::post(self->control, [self, account, answered, err, members = std::move(members)] {
      if (answered) answered();
      {
        std::lock_guard lock(self->mu);
        auto& state = self->accounts[account];
        state.lookupInFlight = false;
        if (err != election::ZkError::Ok) return;
        state.queue = members;
        for (const auto& member : members) self->balance.standing.insert(member.instanceId);
        state.successor.reset();
        for (const auto& member : members) {
          if (member.instanceId != self->config.instanceId) {
            state.successor = member.instanceId;
            break;
          }
        }
        state.successorKnown = true;
        state.successorReadAt = Clock::now();
      }
      self->reconcileSoon();
    });
  });
}

// One place changes the lifecycle. With `onlyFrom`, changes only from those states (a drain that
// raced the first report must not be undone by it).
bool Agent::Impl::setLifecycle(Lifecycle next, std::initializer_list<Lifecycle> onlyFrom) {
  Lifecycle before;
  {
    std::lock_guard lock(mu);
    before = lifecycle;
    if (onlyFrom.size() && std::find(onlyFrom.begin(), onlyFrom.end(), before) == onlyFrom.end())
      return false;
    lifecycle = next;
  }
  for (auto lc : kLifecycles) m.lifecycle.with({toString(lc)}).set(lc == next ? 1 : 0);
  if (before != next) {
    spdlog::info("lifecycle changed instance={} from={} to={}", config.instanceId, toString(before),
                 toString(next));
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Election events (the gate: gate.cpp)

void Agent::Impl::onLeadership(const election::LeadershipEvent& e) {
  using Kind = election::LeadershipEvent::Kind;
  const auto now = Clock::now();
  if (e.kind == Kind::Acquired) {
    const std::string reason = e.previousExpired ? "session_expired"
                               : e.previous      ? "handover"
                                                 : "elected";
    m.transitions.with({"acquired", reason}).inc();
    std::lock_guard lock(mu);
    auto& state = accounts[e.account];
    state.successorKnown = false;
    if (e.previousExpired && config.lockDelay.count() > 0) {
      state.lockDelayUntil = now + config.lockDelay;
      spdlog::info("lock delay account={} seq={} ms={}", e.account, e.token,
                   config.lockDelay.count());
    }
    if (e.previousExpired && e.previous) {
      if (auto last = tracker.lastChange(e.previous->instanceId)) {
        m.failoverSeconds.observe(std::chrono::duration<double>(now - *last).count());
      }
    }
  } else {
    // Whatever the reason, its leases stop at once and its devices go to the new leader.
    devices->leadershipLost(e.account);
    m.transitions.with({"lost", std::string(election::toString(e.reason))}).inc();
    std::lock_guard lock(mu);
    accounts[e.account].lockDelayUntil = {};
  }
  reconcileSoon();
}

void Agent::Impl::onSession(const election::SessionEvent& e) {
  for (auto s : kSessionStates)
    m.sessionState.with({election::toString(s)}).set(s == e.state ? 1 : 0);
  if (e.state == election::SessionState::Expired) m.sessionExpirations.inc();
  if (e.state == election::SessionState::Suspended) m.sessionDisconnects.inc();
  spdlog::info("session {} instance={} session={} timeout_ms={}", election::toString(e.state),
               config.instanceId, hexSession(e.sessionId), e.negotiatedTimeout.count());
  if (e.state == election::SessionState::Connected) {
    asio::post(control, [self = shared_from_this()] {
      self->publishHealth();
      self->pollPeers();
    });
    readGatewayCluster();
  }
  reconcileSoon();
}

void Agent::Impl::readGatewayCluster() {
  const auto path = naming::gatewayClusterPath(config.zookeeper.root);
  std::weak_ptr<Impl> weak = weak_from_this();
  group->session().get(
      path, nullptr, [weak, path](election::ZkError err, std::string data, election::NodeStat) {
        auto self = weak.lock();
        if (!self || self->stopping) return;
        if (err == election::ZkError::NoNode) {
          // No cluster (yet): a single gateway, until the first cluster gateway creates the node.
          self->group->session().exists(
              path,
              [weak] {
                if (auto again = weak.lock()) again->readGatewayCluster();
              },
              [weak](election::ZkError exists, std::optional<election::NodeStat> stat) {
                // Created between the two reads: no event will come for it.
                if (auto again = weak.lock(); again && exists == election::ZkError::Ok && stat) {
                  again->readGatewayCluster();
                }
              });
          return;
        }
        if (err != election::ZkError::Ok) return;  // the next Connected reads it again
        const auto shards = naming::parseClusterNode(data);
        if (!shards) {
          spdlog::warn("{} holds '{}', not {{\"shards\": N}}: routing to the configured gateway",
                       path, data);
          return;
        }
        const auto& zk = self->config.zookeeper;
        self->routes->watch(self->io, {zk.hosts, zk.sessionTimeout, zk.digest},
                            naming::gatewayShardsRoot(zk.root), *shards);
      });
}

// ---------------------------------------------------------------------------------------------
// Timers, drain, shutdown

void Agent::Impl::every(asio::steady_timer& timer, milliseconds period,
                        std::function<void(Impl&)> fn) {
  timer.expires_after(period);
  timer.async_wait([&timer, period, weak = weak_from_this(), fn](boost::system::error_code ec) {
    auto self = weak.lock();
    if (ec || !self || self->stopping) return;
    fn(*self);
    self->every(timer, period, fn);
  });
}

void Agent::Impl::drain() {
  if (stopping || !setLifecycle(Lifecycle::Leaving, {Lifecycle::Joining, Lifecycle::Active}))
    return;
  spdlog::info("drain requested instance={}", config.instanceId);
  asio::post(control, [self = shared_from_this()] { self->publishHealth(); });
  reconcileSoon();
}

void Agent::Impl::shutdown(std::function<void()> done) {
  if (stopping.exchange(true)) return;
  spdlog::info("stopping instance={}: refusing operations, resigning every account",
               config.instanceId);
  setLifecycle(Lifecycle::Leaving);
  healthTimer.cancel();
  reconcileTimer.cancel();
  link->stop();
  ownerLinks->stop();
  auto self = shared_from_this();
  group->stop(
      [self, done = std::move(done)]() mutable {
        // Every account was reported lost (its devices got 4001); the rest get 1001.
        self->devices->stop([self, done = std::move(done)] {
          spdlog::info("stopped instance={}", self->config.instanceId);
          self->routes->stop();  // after the devices' last lease writes went to their owners
          self->server->stop();
          done();
        });
      },
      [self, since = std::chrono::steady_clock::now()] {
        spdlog::info(
            "accounts handed over instance={} after_ms={}", self->config.instanceId,
            std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - since)
                .count());
        self->devices->successorsTookOver();
      });
}

void Agent::Impl::closeNow() {
  stopping = true;
  devices->closeNow();
  link->stop();
  ownerLinks->stop();
  routes->stop();
  server->stop();
}

// ---------------------------------------------------------------------------------------------

Agent::Agent(asio::io_context& io, Config config)
    : impl_(std::make_shared<Impl>(io, std::move(config))) {}

Agent::~Agent() {
  impl_->closeNow();
  // The device endpoint's thread calls the gate, which locks the Impl: end it while we still
  // hold the Impl, so its last reference is never dropped on that thread.
  impl_->devices->halt();
}

void Agent::start() {
  impl_->start();
  const auto period = impl_->config.health.interval;
  impl_->every(impl_->healthTimer, period, [](Impl& self) {
    self.publishHealth();
    self.pollPeers();
  });
  impl_->every(impl_->reconcileTimer, std::min(period, milliseconds(500)),
               [](Impl& self) { self.reconcile(); });
}

uint16_t Agent::adminPort() const { return impl_->server->port(); }
const std::string& Agent::deviceEndpoint() const { return impl_->devices->endpoint(); }
Gate& Agent::gate() { return *impl_; }

void Agent::drain() { impl_->drain(); }

void Agent::shutdown(std::function<void()> done) { impl_->shutdown(std::move(done)); }
std::string Agent::statusJson() const { return impl_->statusJson(); }
std::string Agent::metricsText() const { return impl_->metricsText(); }

}  // namespace zkagent::agent
