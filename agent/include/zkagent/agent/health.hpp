// Health reports, freshness, schedulability and placement decisions (docs/agent.md).
//
// Pure functions and one small clock-agnostic tracker, so the rules are tested as tables:
//
//   HealthTracker tracker;                       // one per reading agent
//   tracker.observe("host-b", report, now);      // every time the node is read
//   auto seen = tracker.judge("host-b", now, ttl);   // fresh / stale / missing, age, report
//   auto blocks = schedulingBlocks(seen);        // empty: host-b may lead
//   auto d = decide({lifecycle, ownBlocks, leading, standing, successor});
//
// Freshness is judged on the reader's own monotonic clock since it last saw the report change
// (its report_seq), never from a timestamp written by the reporter.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zkagent::agent {

using SteadyTime = std::chrono::steady_clock::time_point;

enum class Lifecycle { Joining, Active, Leaving, Drained };
enum class HealthStatus { Alive, Suspect, Down };
enum class Freshness { Fresh, Stale, Missing };
std::string_view toString(Lifecycle lifecycle);
std::string_view toString(HealthStatus status);
std::string_view toString(Freshness freshness);

// The bounded report an agent writes to {agents}/{instanceId}: no per-account detail.
struct HealthReport {
  std::string instanceId;
  HealthStatus status = HealthStatus::Down;
  bool runtimeReady = false;  // ZooKeeper connected and gateway link up
  Lifecycle lifecycle = Lifecycle::Joining;
  uint64_t reportSeq = 0;  // bumped on every write; the reader's freshness clock restarts on change
  int64_t intervalMs = 0;
  int64_t ttlMs = 0;
  int64_t accounts = 0, leading = 0, standing = 0;
  std::string errorCode;  // bounded machine-readable reason, empty when alive
  std::string endpoint;
};
std::string toJson(const HealthReport& report);
std::optional<HealthReport> parseHealthReport(std::string_view json);  // nullopt: not a report

// What a reader knows about one agent right now.
struct SeenHealth {
  Freshness freshness = Freshness::Missing;
  std::optional<HealthReport> report;  // last report read (also when stale)
  std::chrono::milliseconds age{0};    // since the report last changed, on the reader's clock
};

// Tracks when each agent's report last changed, on the reader's clock. Not thread-safe.
class HealthTracker {
 public:
  // The node was read: a report (or nullopt when the node does not exist / is not a report).
  void observe(const std::string& instanceId, std::optional<HealthReport> report, SteadyTime now);
  SeenHealth judge(std::string_view instanceId, SteadyTime now,
                   std::chrono::milliseconds ttl) const;
  std::vector<std::string> known() const;  // every instance whose report exists now
  // When the instance's report last changed, kept after its node vanished (failover metric).
  std::optional<SteadyTime> lastChange(std::string_view instanceId) const;

 private:
  struct Entry {
    std::optional<HealthReport> report;
    SteadyTime changedAt{};
  };
  std::map<std::string, Entry, std::less<>> entries_;
};

// Why an agent may not lead right now; empty means schedulable. Reasons (bounded set):
// health_missing, health_stale, lifecycle_joining|leaving|drained, status_suspect|down,
// runtime_not_ready.
std::vector<std::string> schedulingBlocks(const SeenHealth& seen);
bool isHealthReason(std::string_view reason);  // reasons about health evidence, not lifecycle

// The next queued member that would take over one account, as the deciding agent sees it.
struct Successor {
  std::string instanceId;
  std::vector<std::string> blocks;  // schedulingBlocks of its health; empty: schedulable
  std::chrono::milliseconds reportAge{0};
};

struct PlacementInput {
  Lifecycle lifecycle = Lifecycle::Active;
  std::vector<std::string>
      ownBlocks;  // schedulingBlocks of our own health (lifecycle ignored here)
  bool leading = false;
  bool standing = false;
  // For a leader that must hand over: nullopt while not looked up, or no other member exists
  // (`successorKnown` tells which).
  bool successorKnown = false;
  std::optional<Successor> successor;
};

enum class PlacementAction {
  None,
  Join,            // stand as candidate
  Withdraw,        // stop standing (deletes active + member when leading: the handover)
  LookUpSuccessor  // must hand over; read the members first, then decide again
};
std::string_view toString(PlacementAction action);

struct PlacementDecision {
  PlacementAction action = PlacementAction::None;
  std::vector<std::string> blockedReasons;  // why a wanted handover or candidacy cannot happen
  bool blockedByHealth = false;             // a reason is about health evidence
};

// The placement table of one account (docs/agent.md has it as a table).
PlacementDecision decide(const PlacementInput& input);

}  // namespace zkagent::agent
