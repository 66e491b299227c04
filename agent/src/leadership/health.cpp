#include "zkagent/agent/health.hpp"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>

namespace zkagent::agent {

namespace {
// Wire names, indexed by each enum's value (declaration order).
constexpr std::array<std::string_view, 4> kLifecycleNames{"joining", "active", "leaving",
                                                          "drained"};
constexpr std::array<std::string_view, 3> kStatusNames{"alive", "suspect", "down"};
constexpr std::array<std::string_view, 3> kFreshnessNames{"fresh", "stale", "missing"};
constexpr std::array<std::string_view, 4> kActionNames{"none", "join", "withdraw",
                                                       "look_up_successor"};

template <typename Enum, size_t N>
std::optional<Enum> enumFrom(std::string_view text, const std::array<std::string_view, N>& names) {
  const auto it = std::find(names.begin(), names.end(), text);
  if (it == names.end()) return std::nullopt;
  return static_cast<Enum>(it - names.begin());
}
constexpr size_t kMaxErrorCode = 128;  // reasons stay short: reports are read by every agent
}  // namespace

std::string_view toString(Lifecycle v) { return kLifecycleNames.at(static_cast<size_t>(v)); }
std::string_view toString(HealthStatus v) { return kStatusNames.at(static_cast<size_t>(v)); }
std::string_view toString(Freshness v) { return kFreshnessNames.at(static_cast<size_t>(v)); }
std::string_view toString(PlacementAction v) { return kActionNames.at(static_cast<size_t>(v)); }

std::string toJson(const HealthReport& r) {
  return nlohmann::json{
      {"instance_id", r.instanceId},
      {"status", toString(r.status)},
      {"runtime_ready", r.runtimeReady},
      {"lifecycle", toString(r.lifecycle)},
      {"report_seq", r.reportSeq},
      {"interval_ms", r.intervalMs},
      {"ttl_ms", r.ttlMs},
      {"counts", {{"accounts", r.accounts}, {"leading", r.leading}, {"standing", r.standing}}},
      {"error_code", r.errorCode.substr(0, kMaxErrorCode)},
      {"endpoint", r.endpoint}}
      .dump();
}

std::optional<HealthReport> parseHealthReport(std::string_view text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  try {
    HealthReport r;
    r.instanceId = j.at("instance_id").get<std::string>();
    auto status = enumFrom<HealthStatus>(j.at("status").get<std::string>(), kStatusNames);
    auto lifecycle = enumFrom<Lifecycle>(j.at("lifecycle").get<std::string>(), kLifecycleNames);
    if (!status || !lifecycle) return std::nullopt;
    r.status = *status;
    r.lifecycle = *lifecycle;
    r.runtimeReady = j.at("runtime_ready").get<bool>();
    r.reportSeq = j.at("report_seq").get<uint64_t>();
    r.intervalMs = j.value("interval_ms", int64_t{0});
    r.ttlMs = j.value("ttl_ms", int64_t{0});
    if (auto counts = j.find("counts"); counts != j.end() && counts->is_object()) {
      r.accounts = counts->value("accounts", int64_t{0});
      r.leading = counts->value("leading", int64_t{0});
      r.standing = counts->value("standing", int64_t{0});
    }
    r.errorCode = j.value("error_code", std::string()).substr(0, kMaxErrorCode);
    r.endpoint = j.value("endpoint", std::string());
    return r;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

void HealthTracker::observe(const std::string& instanceId, std::optional<HealthReport> report,
                            SteadyTime now) {
  auto [it, inserted] = entries_.try_emplace(instanceId);
  if (!report) {
    it->second.report.reset();  // the time of the last change stays: the last proof of life
    if (inserted) entries_.erase(it);
    return;
  }
  Entry& entry = it->second;
  // Only a new report_seq restarts the clock: re-reading an unchanged node proves nothing.
  if (inserted || !entry.report || entry.report->reportSeq != report->reportSeq)
    entry.changedAt = now;
  entry.report = std::move(report);
}

SeenHealth HealthTracker::judge(std::string_view instanceId, SteadyTime now,
                                std::chrono::milliseconds ttl) const {
  auto it = entries_.find(instanceId);
  if (it == entries_.end() || !it->second.report) return {};
  SeenHealth seen;
  seen.report = it->second.report;
  seen.age = std::chrono::duration_cast<std::chrono::milliseconds>(now - it->second.changedAt);
  if (seen.age < std::chrono::milliseconds(0)) seen.age = std::chrono::milliseconds(0);
  seen.freshness = seen.age > ttl ? Freshness::Stale : Freshness::Fresh;
  return seen;
}

std::vector<std::string> HealthTracker::known() const {
  std::vector<std::string> out;
  for (const auto& [id, entry] : entries_) {
    if (entry.report) out.push_back(id);
  }
  return out;
}

std::optional<SteadyTime> HealthTracker::lastChange(std::string_view instanceId) const {
  auto it = entries_.find(instanceId);
  if (it == entries_.end()) return std::nullopt;
  return it->second.changedAt;
}

std::vector<std::string> schedulingBlocks(const SeenHealth& seen) {
  if (seen.freshness == Freshness::Missing || !seen.report) return {"health_missing"};
  std::vector<std::string> blocks;
  if (seen.freshness == Freshness::Stale) blocks.emplace_back("health_stale");
  if (seen.report->lifecycle != Lifecycle::Active) {
    blocks.push_back("lifecycle_" + std::string(toString(seen.report->lifecycle)));
  }
  if (seen.report->status != HealthStatus::Alive) {
    blocks.push_back("status_" + std::string(toString(seen.report->status)));
  }
  if (!seen.report->runtimeReady) blocks.emplace_back("runtime_not_ready");
  return blocks;
}

bool isHealthReason(std::string_view reason) {
  if (reason.starts_with("successor_")) reason.remove_prefix(10);
  return reason == "health_missing" || reason == "health_stale" || reason.starts_with("status_") ||
         reason == "runtime_not_ready";
}

PlacementDecision decide(const PlacementInput& in) {
  PlacementDecision d;
  const bool wantsToStand = in.lifecycle == Lifecycle::Active && in.ownBlocks.empty();
  auto explain = [&d](std::vector<std::string> reasons) {
    d.blockedByHealth = std::any_of(reasons.begin(), reasons.end(),
                                    [](const std::string& r) { return isHealthReason(r); });
    d.blockedReasons = std::move(reasons);
  };
  if (!in.leading) {
    if (wantsToStand && !in.standing) d.action = PlacementAction::Join;
    if (!wantsToStand && in.standing) d.action = PlacementAction::Withdraw;
    // Not standing while active: say why (a lifecycle of leaving/drained explains itself).
    if (!wantsToStand && in.lifecycle == Lifecycle::Active) explain(in.ownBlocks);
    return d;
  }
  if (wantsToStand) return d;
  // A leader that should not lead: hand over only to a schedulable successor (fail closed).
  if (!in.successorKnown) {
    d.action = PlacementAction::LookUpSuccessor;
    return d;
  }
  if (!in.successor) {
    explain({"no_successor"});
    return d;
  }
  if (!in.successor->blocks.empty()) {
    std::vector<std::string> reasons{"successor_unschedulable"};
    for (const auto& b : in.successor->blocks) reasons.push_back("successor_" + b);
    explain(std::move(reasons));
    return d;
  }
  d.action = PlacementAction::Withdraw;
  return d;
}

}  // namespace zkagent::agent
