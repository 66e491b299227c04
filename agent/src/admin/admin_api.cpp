// The admin HTTP API of the agent (docs/agent.md "Admin API"): routes as plain functions of the
// request, over Agent::Impl.
#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <future>

#include "agent_impl.hpp"

namespace zkagent::agent {
using detail::hexSession;

namespace {
int64_t millisOf(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<milliseconds>(d).count();
}

int64_t unixMillis(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<milliseconds>(t.time_since_epoch()).count();
}

json leaderJson(const std::optional<election::ActiveInfo>& leader) {
  if (!leader) return nullptr;
  return {{"instance", leader->instanceId}, {"endpoint", leader->endpoint}, {"seq", leader->seq}};
}
}  // namespace

http::Router Agent::adminRouter() { return impl_->router(); }

http::Router Agent::Impl::router() {
  // Drain and resign are operator actions: with no admin token they are refused unless
  // admin.open_operator_actions says otherwise (config.cpp allows that on loopback only).
  http::Router r({.bearerToken = config.admin.token,
                  .operatorToken = config.admin.token,
                  .openOperatorActions = config.admin.openOperatorActions,
                  .operatorTokenSetting = std::string("admin.token, admin.token_file or ") +
                                          kAdminTokenVariable +
                                          " (or admin.open_operator_actions: true)"});
  r.add(
      http::Method::Get, "/healthz",
      [this](const http::Request&) {
        return http::Response::json(200,
                                    json{{"status", "ok"}, {"instance", config.instanceId}}.dump());
      },
      http::Access::Public);
  r.add(
      http::Method::Get, "/readyz",
      [this](const http::Request&) {
        const auto blocks = ownBlocks(Clock::now());
        Lifecycle lc;
        {
          std::lock_guard lock(mu);
          lc = lifecycle;
        }
        const bool ready = blocks.empty() && lc == Lifecycle::Active && !stopping;
        return http::Response::json(
            ready ? 200 : 503,
            json{{"ready", ready}, {"lifecycle", toString(lc)}, {"blocked_reasons", blocks}}
                .dump());
      },
      http::Access::Public);
  r.add(
      http::Method::Get, "/metrics",
      [this](const http::Request&) {
        return http::Response::text(200, metricsText(), std::string(metrics::kContentType));
      },
      http::Access::Public);
  r.add(http::Method::Get, "/v1/status",
        [this](const http::Request&) { return http::Response::json(200, statusJson()); });
  r.add(
      http::Method::Post, "/v1/drain",
      [this](const http::Request&) {
        drain();
        std::lock_guard lock(mu);
        return http::Response::json(lifecycle == Lifecycle::Drained ? 200 : 202,
                                    json{{"lifecycle", toString(lifecycle)}}.dump());
      },
      http::Access::Operator);
  r.add(
      http::Method::Post, "/v1/accounts/{id}/resign",
      [this](const http::Request& q) { return resign(q); }, http::Access::Operator);
  // Deferred: the gate and the gateway answer later; no thread waits for them.
  r.addDeferred(http::Method::Post, "/v1/accounts/{id}/ops",
                [this](const http::Request& q, http::Responder respond) {
                  forwardOperation(q, std::move(respond));
                });
  return r;
}

http::Response Agent::Impl::resign(const http::Request& request) {
  const std::string& account = request.params.at("id");
  {
    std::lock_guard lock(mu);
    if (!accounts.contains(account))
      return http::Response::error(404, "unknown account '" + account + "'");
  }
  const auto d = group->check(account);
  if (!d.allowed()) {
    return http::Response::json(
        409, json{{"error", "not_leader"}, {"leader", leaderJson(d.leader)}}.dump());
  }
  spdlog::info("resign requested account={} seq={} instance={}", account, d.token,
               config.instanceId);
  group->resign(account);
  return http::Response::json(202, json{{"resigned", true}, {"token", d.token}}.dump());
}

void Agent::Impl::forwardOperation(const http::Request& request, http::Responder respond) {
  const std::string& account = request.params.at("id");
  const auto body =
      request.body.empty() ? json::object() : json::parse(request.body, nullptr, false);
  if (!body.is_object())
    return respond(http::Response::error(400, "body must be a JSON object {\"opId\",\"payload\"}"));
  fencing::Operation op;
  if (auto id = body.find("opId"); id != body.end()) {
    if (!id->is_string()) return respond(http::Response::error(400, "opId must be a string"));
    op.opId = id->get<std::string>();
  } else {
    op.opId = config.instanceId + "-" + std::to_string(group->sessionId()) + "-" +
              std::to_string(++opCounter);
  }
  if (auto payload = body.find("payload"); payload != body.end()) op.payload = payload->dump();

  admit(account, [self = shared_from_this(), account, op = std::move(op),
                  respond = std::move(respond)](
                     Outcome outcome, std::optional<fencing::FencingToken> token) mutable {
    if (token) return self->send(std::move(op), std::move(*token), std::move(respond));
    switch (outcome.result) {
      case Result::NotLeader:
      case Result::Drifted: {
        auto refuse = [respond = std::move(respond), reason = std::string(outcome.reason())](
                          std::optional<election::ActiveInfo> leader) {
          respond(http::Response::json(
              409, json{{"error", "not_leader"}, {"detail", reason}, {"leader", leaderJson(leader)}}
                       .dump()));
        };
        if (outcome.leader) return refuse(outcome.leader);
        return self->readActive(account, std::move(refuse));
      }
      case Result::Suspended:
      case Result::Stopping:
        return respond(http::Response::json(503, json{{"error", outcome.reason()}}.dump()));
      case Result::UnknownAccount:
        return respond(http::Response::error(404, "unknown account '" + account + "'"));
      case Result::Executed:
        break;
    }
    respond(http::Response::error(500, "unexpected gate result"));
  });
}

// The admitted operation, under `token`, to the gateway; its answer goes back as it is.
void Agent::Impl::send(fencing::Operation op, fencing::FencingToken token,
                       http::Responder respond) {
  op.fencing = std::move(token);
  try {
    fencing::validateOperation(op);
  } catch (const fencing::BadRequest& e) {
    return respond(http::Response::error(400, e.what()));
  }
  const auto sentAt = Clock::now();
  link->forward(
      op.fencing.account, fencing::toJson(op).dump(),
      [self = shared_from_this(), sentAt,
       respond = std::move(respond)](http::ClientResponse answer) {
        auto& metrics = self->m;
        metrics.forwardSeconds.observe(
            std::chrono::duration<double>(Clock::now() - sentAt).count());
        if (!answer.delivered()) {
          metrics.forwarded.with({"gateway_error"}).inc();
          return respond(http::Response::json(
              502,
              json{{"error", "gateway_unreachable"}, {"detail", answer.transportError}}.dump()));
        }
        (answer.status == 200 ? metrics.forwardedAccepted
                              : metrics.forwarded.with({answer.status == 409  ? "rejected"
                                                        : answer.status < 500 ? "bad_request"
                                                                              : "gateway_error"}))
            .inc();
        respond(http::Response::json(answer.status, std::move(answer.body)));
      });
}

// A caller redirected with 409 needs the leader's endpoint even when this agent does not stand
// for the account (and so does not watch `active`): read it.
void Agent::Impl::readActive(const std::string& account,
                             std::function<void(std::optional<election::ActiveInfo>)> done) {
  auto answer = detail::answerWithin<std::optional<election::ActiveInfo>>(
      io, config.gateway.requestTimeout, std::nullopt, std::move(done));
  group->session().get(
      naming::activePath(config.zookeeper.root, account), nullptr,
      [answer = std::move(answer)](election::ZkError err, std::string data, election::NodeStat) {
        answer(err == election::ZkError::Ok ? election::parseActive(data) : std::nullopt);
      });
}

std::string Agent::Impl::statusJson() {
  const auto now = Clock::now();
  const auto blocks = ownBlocks(now);
  std::map<std::string, election::AccountStatus, std::less<>> status;
  for (auto& s : group->status()) status.emplace(s.account, std::move(s));
  json out;
  out["instance"] = config.instanceId;
  out["endpoint"] = endpoint;
  out["device_endpoint"] = devices->endpoint();
  out["version"] = ZKAGENT_VERSION;
  out["session"] = {{"state", election::toString(group->sessionState())},
                    {"id", hexSession(group->sessionId())},
                    {"timeout_ms", group->negotiatedTimeout().count()}};
  const auto sinceBeat = link->sinceLastAnswer();
  json owners = json::array();
  for (const auto& owner : ownerLinks->links()) {
    owners.push_back(
        {{"url", owner.owner},
         {"up", owner.state == "up"},
         {"state", owner.state},
         {"last_heartbeat_age_ms",
          owner.sinceLastAnswer ? json(owner.sinceLastAnswer->count()) : json(nullptr)},
         {"failed_heartbeats", owner.failedBeats}});
  }
  out["gateway"] = {{"up", link->up()},
                    {"heartbeat", link->heartbeatEnabled()},
                    {"last_heartbeat_age_ms", sinceBeat ? json(sinceBeat->count()) : json(nullptr)},
                    {"failed_heartbeats", link->missedHeartbeats()},
                    {"owners", std::move(owners)}};
  std::lock_guard lock(mu);
  out["lifecycle"] = toString(lifecycle);
  const auto own = tracker.judge(config.instanceId, now, config.health.ttl);
  out["health"] = {{"status", own.report ? toString(own.report->status) : "unknown"},
                   {"runtime_ready", runtimeReady()},
                   {"freshness", toString(own.freshness)},
                   {"report_seq", own.report ? own.report->reportSeq : 0},
                   {"report_age_ms", own.report ? json(own.age.count()) : json(nullptr)},
                   {"interval_ms", config.health.interval.count()},
                   {"ttl_ms", config.health.ttl.count()},
                   {"schedulable", blocks.empty() && lifecycle == Lifecycle::Active && !stopping},
                   {"blocked_reasons", blocks}};
  json peers = json::array();
  for (const auto& id : tracker.known()) {
    const auto seen = tracker.judge(id, now, config.health.ttl);
    const auto peerBlocks = schedulingBlocks(seen);
    peers.push_back({{"instance", id},
                     {"freshness", toString(seen.freshness)},
                     {"report_age_ms", seen.age.count()},
                     {"lifecycle", toString(seen.report->lifecycle)},
                     {"schedulable", peerBlocks.empty()},
                     {"blocked_reasons", peerBlocks}});
  }
  out["peers"] = std::move(peers);
  json list = json::array();
  size_t leading = 0;
  for (const auto& [account, state] : accounts) {
    auto it = status.find(account);
    election::AccountStatus s;
    s.account = account;
    if (it != status.end()) s = it->second;
    const bool isLeader = s.role == Role::Leader;
    leading += isLeader;
    const auto leader = s.leader;
    list.push_back(
        {{"account", account},
         {"role", election::toString(s.role)},
         {"seq", s.seq},
         {"token", isLeader ? json(s.seq) : json(nullptr)},
         {"standing", s.standing},
         {"leader", leaderJson(leader)},
         {"since", unixMillis(s.since)},
         {"last_reason", s.lastReason},
         {"blocked_by_health", state.decision.blockedByHealth},
         {"health_report_age_ms",
          state.healthReportAgeMs ? json(*state.healthReportAgeMs) : json(nullptr)},
         {"blocked_reasons", state.decision.blockedReasons},
         {"lock_delay_remaining_ms", std::max<int64_t>(0, millisOf(state.lockDelayUntil - now))},
         {"devices", devices->devices(account)}});
  }
  out["leading"] = leading;
  out["balance"] = balanceJson(now);
  out["accounts"] = std::move(list);
  return out.dump();
}

std::string Agent::Impl::metricsText() {
  m.gatewayUp.set(link->up() ? 1 : 0);
  m.runtimeReady.set(runtimeReady() ? 1 : 0);
  {
    std::lock_guard lock(mu);
    const auto now = Clock::now();
    std::map<Freshness, size_t> counts;
    for (const auto& id : tracker.known())
      ++counts[tracker.judge(id, now, config.health.ttl).freshness];
    for (auto f : {Freshness::Fresh, Freshness::Stale})
      m.peers.with({toString(f)}).set(static_cast<double>(counts[f]));
  }
  return registry.expose() + devices->metricsText();
}

}  // namespace zkagent::agent
