// The gateway's HTTP API: each handler maps one request onto the TokenValidator and its answer
// onto HTTP, counts it and logs what an operator needs (account, token, hwm, reason).
#include "gateway.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "identity.hpp"
#include "presence_store.hpp"
#include "zkagent/naming.hpp"

namespace zkagent::gateway {
namespace {

using nlohmann::json;

http::Response jsonResponse(int status, const json& body) {
  return http::Response::json(status, body.dump());
}

}  // namespace

std::string_view toString(CheckMode mode) {
  switch (mode) {
    case CheckMode::ZooKeeper:
      return "zookeeper";
    case CheckMode::HwmOnly:
      return "hwm_only";
    case CheckMode::Refusing:
      return "refusing";
  }
  return "unknown";
}

std::string_view toString(ShardOwnership::Standing standing) {
  switch (standing) {
    case ShardOwnership::Standing::Standing:
      return "standing";
    case ShardOwnership::Standing::Draining:
      return "draining";
    case ShardOwnership::Standing::Drained:
      return "drained";
  }
  return "unknown";
}

Gateway::Gateway(const Config& config, fencing::TokenValidator& validator, LeaderSource* leaders,
                 metrics::Registry& registry, PresenceStore* presence, ShardOwnership* shards)
    : config_(config),
      validator_(validator),
      leaders_(leaders),
      registry_(registry),
      presence_(presence),
      shards_(shards),
      mode_(CheckMode::HwmOnly),
      ops_(registry.counter("zkagent_gateway_ops_total",
                            "Operations decided, by result (accepted, stale_token, "
                            "not_current_leader, account_fenced, zookeeper_unavailable) and by "
                            "the checks applied (zookeeper, hwm_only, refusing).",
                            {"result", "check"})),
      replayed_(registry
                    .counter("zkagent_gateway_replayed_ops_total",
                             "Retries answered with the first result of the same opId.")
                    .with({})),
      badRequests_(registry
                       .counter("zkagent_gateway_bad_requests_total",
                                "Operations refused with 400 (malformed, missing fields, bad "
                                "account or token); nothing was changed.")
                       .with({})),
      hwmResets_(
          registry
              .counter("zkagent_gateway_hwm_resets_total", "High-water marks reset by an operator.")
              .with({})),
      storageErrors_(registry
                         .counter("zkagent_gateway_storage_errors_total",
                                  "Failed writes to the durable log; the gateway then refuses "
                                  "every operation until the log recovers.")
                         .with({})),
      viewReconfirmations_(registry.counter(
          "zkagent_gateway_view_reconfirmations_total",
          "Cached views of an active node whose seq was below the account's HWM, read again after "
          "a ZooKeeper sync before deciding, by result: fenced (the read agreed: the account is "
          "fenced), corrected (the cache lagged; nothing fenced), unavailable (the read failed).",
          {"result"})),
      storageFailedGauge_(registry
                              .gauge("zkagent_gateway_storage_failed",
                                     "1 while a failed durable log makes the gateway refuse every "
                                     "write (it retries the log every second).")
                              .with({})),
      storageRecoveries_(registry
                             .counter("zkagent_gateway_storage_recoveries_total",
                                      "Times the durable log was taken back into use after a "
                                      "failure (space freed, an I/O error gone).")
                             .with({})),
      opSeconds_(registry
                     .histogram("zkagent_gateway_op_duration_seconds",
                                "Time to decide an operation, including its durable commit.",
                                metrics::latencyBuckets())
                     .with({})),
      checkMode_(registry.gauge("zkagent_gateway_check_mode",
                                "1 for the checks applied to operations right now: zookeeper "
                                "(HWM and active seq), hwm_only, or refusing.",
                                {"mode"})),
      fencedAccounts_(registry
                          .gauge("zkagent_gateway_fenced_accounts",
                                 "Accounts failing closed because ZooKeeper's active seq fell "
                                 "below their HWM; an operator must reset their HWM.")
                          .with({})),
      zookeeperTrusted_(registry
                            .gauge("zkagent_gateway_zookeeper_trusted",
                                   "1 when the ZooKeeper cache of active nodes is trusted, 0 when "
                                   "unreachable or not configured.")
                            .with({})),
      agentsByState_(registry.gauge("zkagent_gateway_agents",
                                    "Agents heard on /healthz?instance=, by state: alive, or "
                                    "gone when silent longer than the agent timeout.",
                                    {"state"})),
      misdirected_(registry.counter("zkagent_gateway_misdirected_total",
                                    "Requests for an account whose shard another gateway owns "
                                    "(421) or none owns right now (503), by route; cluster mode.",
                                    {"route"})),
      shardsOwned_(registry
                       .gauge("zkagent_gateway_shards_owned",
                              "Shards of the cluster this gateway owns now (0 outside cluster "
                              "mode).")
                       .with({})),
      clusterStanding_(registry.gauge("zkagent_gateway_cluster_standing",
                                      "Cluster mode: 1 for where this gateway is: standing (for "
                                      "every shard), draining (handing its shards over after POST "
                                      "/v1/drain), drained (standing for none until restarted).",
                                      {"state"})) {
  const auto& recovery = validator.recovery();
  registry.gauge("zkagent_gateway_recovered_records", "Log records replayed at start-up.")
      .with({})
      .set(static_cast<double>(recovery.replayedRecords));
  registry
      .gauge("zkagent_gateway_recovery_truncated_bytes",
             "Bytes of a torn or corrupt log tail cut off at start-up.")
      .with({})
      .set(static_cast<double>(recovery.truncatedBytes));
  registry.gauge("zkagent_gateway_build_info", "Always 1; the version as a label.", {"version"})
      .with({ZKAGENT_VERSION})
      .set(1);
  for (auto mode : {CheckMode::ZooKeeper, CheckMode::HwmOnly, CheckMode::Refusing}) {
    checkMode_.with({std::string(toString(mode))}).set(0);
  }
  checkMode_.with({std::string(toString(CheckMode::HwmOnly))}).set(1);
  refreshCheckMode();
  refreshStanding();
}

void Gateway::refreshStanding() {
  if (shards_ == nullptr) return;
  const auto now = shards_->standing();
  for (auto state : {ShardOwnership::Standing::Standing, ShardOwnership::Standing::Draining,
                     ShardOwnership::Standing::Drained}) {
    clusterStanding_.with({std::string(toString(state))}).set(state == now ? 1 : 0);
  }
}

CheckMode Gateway::refreshCheckMode() {
  CheckMode now = CheckMode::HwmOnly;
  bool trusted = leaders_ != nullptr && leaders_->trusted();
  if (trusted) {
    now = CheckMode::ZooKeeper;
  } else if (leaders_ != nullptr && config_.untrusted == UntrustedPolicy::Refuse) {
    now = CheckMode::Refusing;
  }
  std::lock_guard lock(modeMutex_);
  zookeeperTrusted_.set(trusted ? 1 : 0);
  CheckMode before = mode_.exchange(now);
  if (before != now) {
    checkMode_.with({std::string(toString(before))}).set(0);
    checkMode_.with({std::string(toString(now))}).set(1);
    if (now == CheckMode::ZooKeeper) {
      spdlog::info("check mode {}: ZooKeeper cache trusted, token must equal the active seq",
                   toString(now));
    } else if (leaders_ != nullptr) {
      spdlog::warn("check mode {}: ZooKeeper unreachable, {}", toString(now),
                   now == CheckMode::Refusing ? "refusing every operation"
                                              : "accepting on the high-water mark alone");
    }
  }
  return now;
}

http::Router Gateway::router() {
  // Agents send the bearer token (and, with TLS, their certificate); operator actions need the
  // operator token, which no agent holds.
  http::Router router(
      {.bearerToken = config_.bearerToken,
       .operatorToken = config_.operatorToken,
       .operatorTokenSetting =
           "ZKAGENT_GATEWAY_OPERATOR_TOKEN, operatorTokenFile or --operator-token-file"});
  router.add(http::Method::Post, "/v1/ops",
             [this](const http::Request& request) { return submitOperation(request); });
  // The fencing tuple and the raw lease view are for operators: with an operator token, no
  // agent's or subscriber's credential reads them.
  router.add(
      http::Method::Get, "/v1/accounts/{id}",
      [this](const http::Request& request) { return accountStatus(request); },
      http::Access::OperatorRead);
  router.add(
      http::Method::Post, "/v1/accounts/{id}/reset-hwm",
      [this](const http::Request& request) { return resetHighWaterMark(request); },
      http::Access::Operator);
  router.add(http::Method::Get, "/metrics", [this](const http::Request&) { return metricsText(); });
  router.add(http::Method::Get, "/healthz",
             [this](const http::Request& request) { return health(request); });
  router.add(http::Method::Get, "/v1/agents", [this](const http::Request&) { return agents(); });
  router.add(
      http::Method::Post, "/v1/drain",
      [this](const http::Request& request) { return drain(request); }, http::Access::Operator);
  if (presence_ != nullptr) {
    router.add(http::Method::Post, "/v1/presence/leases",
               [this](const http::Request& request) { return presenceLeases(request); });
    router.add(
        http::Method::Get, "/v1/presence/{account}",
        [this](const http::Request& request) { return presenceOf(request); },
        http::Access::OperatorRead);
    router.add(
        http::Method::Put, "/v1/presence/privacy/{account}",
        [this](const http::Request& request) { return presencePrivacy(request); },
        http::Access::Operator);
    router.add(http::Method::Get, "/v1/presence/privacy/{account}",
               [this](const http::Request& request) { return presencePrivacy(request); });
  }
  return router;
}

http::Response Gateway::submitOperation(const http::Request& request) {
  auto started = std::chrono::steady_clock::now();
  if (!storageUsable()) {
    return http::Response::error(503, "durable log failed; the gateway retries it every second");
  }
  // The server takes bodies up to a lease batch's size; an operation must stay much smaller.
  if (request.body.size() > fencing::kMaxOperationBytes) {
    badRequests_.inc();
    return http::Response::error(
        413, "operation larger than " + std::to_string(fencing::kMaxOperationBytes) + " bytes");
  }
  fencing::Operation operation;
  try {
    operation = fencing::parseOperation(request.body);
    if (!config_.serves(operation.fencing.account)) {
      throw fencing::BadRequest("unknown account '" + operation.fencing.account +
                                "': not in the gateway's accounts list");
    }
  } catch (const fencing::BadRequest& error) {
    badRequests_.inc();
    return http::Response::error(400, error.what());
  }
  if (auto refused = refuseForeignInstance(config_, request, {operation.fencing.instanceId})) {
    return *refused;
  }
  const auto& account = operation.fencing.account;
  auto shard = checkShard(account, "ops");
  if (shard.refusal) return *shard.refusal;

  CheckMode mode = refreshCheckMode();
  const auto refuseUnavailable = [&] {
    ops_.with({"zookeeper_unavailable", std::string(toString(mode))}).inc();
    auto hwm = validator_.status(account).value_or(fencing::AccountStatus{}).hwm;
    return jsonResponse(503, {{"accepted", false},
                              {"reason", "zookeeper_unavailable"},
                              {"hwm", hwm},
                              {"detail",
                               "ZooKeeper is unreachable and the gateway is "
                               "configured to refuse operations meanwhile"}});
  };
  const auto active = activeView(account, mode, shard.read);
  if (!active) return refuseUnavailable();
  if (shard.read == ViewRead::confirmed && mode == CheckMode::ZooKeeper) {
    confirmedOnTake(account, shard.take);
  }

  fencing::Decision decision;
  try {
    decision = validator_.submit(operation, *active);
    if (decision.confirmFirst) {
      auto confirmed = reconfirmedView(account, mode, *active, decision.hwm);
      if (!confirmed) return refuseUnavailable();
      decision = validator_.submit(operation, *confirmed);
    }
  } catch (const fencing::BadRequest& error) {
    badRequests_.inc();
    return http::Response::error(400, error.what());
  } catch (const fencing::StorageError& error) {
    return http::Response::error(503, storageFailed(error));
  }
  ops_.with({std::string(fencing::reasonCode(decision.verdict)), std::string(toString(mode))})
      .inc();
  if (decision.replayed) replayed_.inc();
  opSeconds_.observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  if (!decision.accepted()) {
    spdlog::info("op rejected account={} token={} hwm={} instance={} opId={} reason={} check={}{}",
                 account, operation.fencing.token, decision.hwm, operation.fencing.instanceId,
                 operation.opId, fencing::reasonCode(decision.verdict), toString(mode),
                 decision.detail.empty() ? "" : " detail=" + decision.detail);
  }
  return jsonResponse(decision.accepted() ? 200 : 409, fencing::toJson(decision));
}

http::Response Gateway::accountStatus(const http::Request& request) {
  const auto& account = request.params.at("id");
  if (auto error = naming::accountIdError(account)) {
    return http::Response::error(400, "account: " + *error);
  }
  auto status = validator_.status(account);
  if (!status) return http::Response::error(404, "no operation seen for account " + account);
  json body = {{"account", account},
               {"hwm", status->hwm},
               {"accepted", status->accepted},
               {"rejected", status->rejected},
               {"fenced", status->fenced}};
  if (status->fenced) body["fencedAtActiveSeq"] = status->fencedAtActiveSeq;
  // What ZooKeeper says now, when trusted: the seq an operation must carry (null: no leader).
  if (refreshCheckMode() == CheckMode::ZooKeeper) {
    auto active = leaders_->active(account);
    if (active.state == fencing::ActiveView::State::present) {
      body["activeSeq"] = active.seq;
      if (!active.instanceId.empty()) {
        body["activeInstance"] = active.instanceId;
        body["activeSession"] = active.sessionId;
      }
    }
    if (active.state == fencing::ActiveView::State::absent) body["activeSeq"] = nullptr;
  }
  return jsonResponse(200, body);
}

http::Response Gateway::resetHighWaterMark(const http::Request& request) {
  const auto& account = request.params.at("id");
  if (auto error = naming::accountIdError(account)) {
    return http::Response::error(400, "account: " + *error);
  }
  json body = json::parse(request.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return http::Response::error(400, "body must be a JSON object {\"hwm\":N,\"reason\":\"...\"}");
  }
  if (!body.contains("hwm") || !body["hwm"].is_number_unsigned()) {
    return http::Response::error(400, "field 'hwm' must be a non-negative integer");
  }
  if (!body.contains("reason") || !body["reason"].is_string() ||
      body["reason"].get<std::string>().empty()) {
    return http::Response::error(400, "field 'reason' must be a non-empty string");
  }
  if (body.contains("actor") && !body["actor"].is_string()) {
    return http::Response::error(400, "field 'actor' must be a string");
  }
  auto hwm = body["hwm"].get<uint64_t>();
  auto reason = body["reason"].get<std::string>();
  auto actor = body.value("actor", std::string("operator")) + "@" + request.remoteAddress;
  fencing::AccountStatus status;
  try {
    status = validator_.resetHighWaterMark(account, hwm, actor, reason);
  } catch (const fencing::BadRequest& error) {
    return http::Response::error(400, error.what());
  } catch (const fencing::StorageError& error) {
    return http::Response::error(503, storageFailed(error));
  }
  hwmResets_.inc();
  spdlog::warn("hwm reset account={} hwm={} actor={} reason={}", account, hwm, actor, reason);
  return jsonResponse(200, {{"account", account}, {"hwm", status.hwm}, {"fenced", status.fenced}});
}

std::string Gateway::storageFailed(const fencing::StorageError& error) {
  {
    std::lock_guard lock(storageRecoveryMutex_);
    lastStorageRecovery_ = std::chrono::steady_clock::now();  // the first retry a period later
    storageFailed_ = true;
    storageFailedGauge_.set(1);
  }
  storageErrors_.inc();
  spdlog::error("durable log failed, refusing every write until it recovers: {}", error.what());
  return std::string("durable log failed: ") + error.what();
}

bool Gateway::storageUsable() {
  if (!storageFailed_) return true;
  std::unique_lock lock(storageRecoveryMutex_, std::try_to_lock);
  if (!lock) return false;  // another request is trying now
  const auto now = std::chrono::steady_clock::now();
  if (now - lastStorageRecovery_ < kStorageRetry) return false;
  lastStorageRecovery_ = now;
  if (!validator_.recoverStorage()) return false;
  storageFailed_ = false;
  storageFailedGauge_.set(0);
  storageRecoveries_.inc();
  spdlog::warn("durable log recovered: taking operations and writes again");
  return true;
}

http::Response Gateway::health(const http::Request& request) {
  // "instance=ID" marks an agent's heartbeat; anything else in the query is ignored.
  constexpr std::string_view kInstance = "instance=";
  if (request.query.starts_with(kInstance)) {
    std::string instance =
        request.query.substr(kInstance.size(), request.query.find('&') - kInstance.size());
    if (auto error = naming::printableIdError(instance)) {
      return http::Response::error(400, "instance: " + *error);
    }
    std::lock_guard lock(agentsMutex_);
    auto& beat = agents_[instance];
    if (beat.gone) spdlog::info("agent {} is back", instance);
    beat = {std::chrono::steady_clock::now(), false};
  }
  if (!storageUsable()) return http::Response::json(503, R"({"status":"storage_failed"})");
  json body = {{"status", "ok"}, {"check", toString(mode_.load())}};
  if (shards_ != nullptr) {
    body["cluster"] = toString(shards_->standing());
    body["shards_owned"] = shards_->owned();
  }
  return jsonResponse(200, body);
}

http::Response Gateway::drain(const http::Request& request) {
  if (shards_ == nullptr) {
    return http::Response::error(
        409,
        "POST /v1/drain hands a cluster gateway's shards to the others; this gateway is not in "
        "cluster mode (no cluster.shards): it owns no shards, stop it with SIGTERM instead");
  }
  spdlog::info("drain requested by {}", request.remoteAddress);
  const auto answer = shards_->drain(std::chrono::seconds(5));
  refreshStanding();
  if (answer.refused) {
    spdlog::warn("drain refused: {}", *answer.refused);
    return http::Response::error(answer.timedOut ? 503 : 409, "drain refused: " + *answer.refused);
  }
  const bool drained = answer.state == ShardOwnership::Standing::Drained;
  return jsonResponse(drained ? 200 : 202,
                      {{"cluster", toString(answer.state)}, {"shards_owned", shards_->owned()}});
}

void Gateway::sweepAgents() {
  const auto now = std::chrono::steady_clock::now();
  const auto timeout = std::chrono::milliseconds(config_.agentTimeoutMs);
  double alive = 0, gone = 0;
  std::lock_guard lock(agentsMutex_);
  for (auto& [instance, beat] : agents_) {
    if (!beat.gone && now - beat.lastSeen > timeout) {
      beat.gone = true;
      spdlog::warn("agent {} gone: no heartbeat for {} ms", instance, config_.agentTimeoutMs);
    }
    (beat.gone ? gone : alive) += 1;
  }
  agentsByState_.with({"alive"}).set(alive);
  agentsByState_.with({"gone"}).set(gone);
}

http::Response Gateway::agents() {
  sweepAgents();
  const auto now = std::chrono::steady_clock::now();
  nlohmann::json list = nlohmann::json::array();
  std::lock_guard lock(agentsMutex_);
  for (const auto& [instance, beat] : agents_) {
    list.push_back(
        {{"instance", instance},
         {"last_seen_ms_ago",
          std::chrono::duration_cast<std::chrono::milliseconds>(now - beat.lastSeen).count()},
         {"state", beat.gone ? "gone" : "alive"}});
  }
  return jsonResponse(200, {{"agents", list}, {"timeout_ms", config_.agentTimeoutMs}});
}

std::optional<fencing::ActiveView> Gateway::activeView(const std::string& account, CheckMode& mode,
                                                       ViewRead read) {
  if (mode == CheckMode::ZooKeeper) {
    auto active =
        read == ViewRead::cached ? leaders_->active(account) : leaders_->confirmedActive(account);
    if (active.state != fencing::ActiveView::State::unknown) return active;
    // The cache could not answer for this account in time: the untrusted policy decides.
    mode = config_.untrusted == UntrustedPolicy::Refuse ? CheckMode::Refusing : CheckMode::HwmOnly;
  }
  if (mode == CheckMode::Refusing) return std::nullopt;
  return fencing::ActiveView::unknown();
}

Gateway::ShardCheck Gateway::checkShard(const std::string& account, std::string_view route) {
  ShardCheck check;
  if (shards_ == nullptr) return check;
  const auto answer = shards_->owner(account);
  using Kind = ShardOwnership::Answer::Kind;
  if (answer.kind == Kind::Owned) {
    check.take = answer.take;
    check.epoch = answer.epoch;
    std::lock_guard lock(confirmedTakesMutex_);
    auto confirmed = confirmedTakes_.find(account);
    if (confirmed == confirmedTakes_.end() || confirmed->second != answer.take) {
      check.read = ViewRead::confirmed;
    }
    return check;
  }
  misdirected_.with({std::string(route)}).inc();
  if (answer.kind == Kind::Elsewhere) {
    check.why = "account " + account + " is in " + answer.shard + ", owned by " + answer.owner;
    check.refusal = jsonResponse(421, {{"error", check.why},
                                       {"shard", answer.shard},
                                       {"shards", config_.clusterShards},
                                       {"owner", answer.owner}});
  } else {
    check.why = "account " + account + " is in " + answer.shard +
                ", which no gateway owns right now (a new owner is being elected)";
    auto refusal = jsonResponse(503, {{"error", check.why}, {"shard", answer.shard}});
    refusal.headers.emplace_back("Retry-After", "1");
    check.refusal = std::move(refusal);
  }
  return check;
}

void Gateway::confirmedOnTake(const std::string& account, int64_t take) {
  std::lock_guard lock(confirmedTakesMutex_);
  confirmedTakes_[account] = take;
}

std::optional<fencing::ActiveView> Gateway::reconfirmedView(const std::string& account,
                                                            CheckMode& mode,
                                                            const fencing::ActiveView& cached,
                                                            std::uint64_t hwm) {
  auto confirmed = activeView(account, mode, ViewRead::confirmed);
  const bool read = confirmed && confirmed->state != fencing::ActiveView::State::unknown;
  const bool agrees = read && confirmed->state == cached.state && confirmed->seq == cached.seq;
  const char* result = !read ? "unavailable" : agrees ? "fenced" : "corrected";
  viewReconfirmations_.with({result}).inc();
  spdlog::warn(
      "cached active seq below hwm, read again after a sync account={} cachedSeq={} hwm={} "
      "confirmedSeq={} result={}",
      account, cached.seq, hwm,
      !read                                                    ? std::string("unknown")
      : confirmed->state == fencing::ActiveView::State::absent ? std::string("none")
                                                               : std::to_string(confirmed->seq),
      result);
  return confirmed;
}

http::Response Gateway::presenceLeases(const http::Request& request) {
  if (!storageUsable()) {
    return presence_->refuseLeases("durable log failed; the gateway retries it every second");
  }
  const CheckMode mode = refreshCheckMode();
  if (mode == CheckMode::Refusing) {
    return presence_->refuseLeases(
        "ZooKeeper is unreachable and the gateway is configured to refuse writes meanwhile");
  }
  if (auto refused = refuseForeignInstance(config_, request, topLevelInstanceIds(request.body))) {
    return *refused;
  }
  // Lease writes are decided by the operations' rule, and raise the HWM as operations do: a
  // deposed leader can write neither, whatever the check mode.
  return presence_->postLeases(
      request.body,
      [this, mode](std::span<const fencing::FencingToken> tokens)
          -> std::variant<std::vector<fencing::Decision>, std::string> {
        std::vector<fencing::FencedWrite> writes;
        writes.reserve(tokens.size());
        std::map<std::string, fencing::ActiveView, std::less<>> views;  // one look-up per account
        for (const auto& token : tokens) {
          auto view = views.find(token.account);
          if (view == views.end()) {
            // A lease batch is one request: an account whose shard is elsewhere refuses it all
            // (an agent sends each shard's leases to its owner).
            auto shard = checkShard(token.account, "leases");
            if (shard.refusal) return shard.why + "; nothing applied";
            // Versions for the shard's targets start above every earlier owner's only once this
            // take's epoch is known (a few ms after the take).
            if (shard.take >= 0 && shard.epoch == 0) {
              return "account " + token.account +
                     "'s shard was taken a moment ago and its presence epoch is being read from "
                     "ZooKeeper; nothing applied";
            }
            CheckMode accountMode = mode;
            auto active = activeView(token.account, accountMode, shard.read);
            if (!active) {
              return "ZooKeeper cannot tell the leader of account " + token.account +
                     " now and the gateway is configured to refuse meanwhile; nothing applied";
            }
            if (shard.read == ViewRead::confirmed && accountMode == CheckMode::ZooKeeper) {
              confirmedOnTake(token.account, shard.take);
            }
            view = views.emplace(token.account, std::move(*active)).first;
          }
          writes.push_back({token, view->second});
        }
        try {
          auto decisions = validator_.admit(writes);
          // Writes refused on a cached view below the HWM are decided again, on a confirmed view
          // per account; nothing of theirs was applied. Without one they stay refused (transient).
          std::vector<std::size_t> again;
          std::map<std::string, std::optional<fencing::ActiveView>, std::less<>> confirmed;
          for (std::size_t i = 0; i < decisions.size(); ++i) {
            if (!decisions[i].confirmFirst) continue;
            const std::string& account = writes[i].fencing.account;
            if (!confirmed.contains(account)) {
              CheckMode accountMode = mode;
              confirmed[account] =
                  reconfirmedView(account, accountMode, writes[i].active, decisions[i].hwm);
            }
            if (!confirmed[account]) continue;
            writes[i].active = *confirmed[account];
            again.push_back(i);
          }
          if (again.empty()) return decisions;
          std::vector<fencing::FencedWrite> retried;
          for (std::size_t i : again) retried.push_back(writes[i]);
          auto redecided = validator_.admit(retried);
          for (std::size_t k = 0; k < again.size(); ++k) decisions[again[k]] = redecided[k];
          return decisions;
        } catch (const fencing::StorageError& error) {
          return storageFailed(error);
        }
      });
}

std::optional<http::Response> Gateway::refusedAccount(const std::string& account) const {
  if (auto error = naming::accountIdError(account)) {
    return http::Response::error(400, "account: " + *error);
  }
  if (!config_.serves(account)) {
    return http::Response::error(404, "account " + account + " is not served by this gateway");
  }
  return std::nullopt;
}

http::Response Gateway::presenceOf(const http::Request& request) {
  const auto& account = request.params.at("account");
  if (auto refused = refusedAccount(account)) return std::move(*refused);
  return presence_->accountPresence(account);
}

http::Response Gateway::presencePrivacy(const http::Request& request) {
  const auto& account = request.params.at("account");
  if (auto refused = refusedAccount(account)) return std::move(*refused);
  if (request.method == http::Method::Put) return presence_->putPrivacy(account, request.body);
  return presence_->getPrivacy(account);
}

http::Response Gateway::metricsText() {
  refreshCheckMode();
  sweepAgents();
  if (presence_ != nullptr) presence_->refreshMetrics();
  fencedAccounts_.set(static_cast<double>(validator_.fencedAccounts().size()));
  if (shards_ != nullptr) shardsOwned_.set(static_cast<double>(shards_->owned()));
  refreshStanding();
  return http::Response::text(200, registry_.expose(), std::string(metrics::kContentType));
}

}  // namespace zkagent::gateway
