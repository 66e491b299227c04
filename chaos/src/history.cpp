// history.json: the schedule, each event, every operation and every observed active change.
#include <fstream>

#include "run.hpp"

namespace zkagent::chaos {
using namespace std::chrono_literals;

json scheduleJson(const std::vector<Event>& schedule) {
  json planned = json::array();
  for (const auto& e : schedule) {
    json faults = json::array();
    for (const auto& f : e.faults) {
      json fault{{"kind", std::string(toString(f.kind))},
                 {"agent", f.agent},
                 {"duration_ms", f.durationMs}};
      if (f.stepSeconds != 0) fault["step_s"] = f.stepSeconds;
      faults.push_back(std::move(fault));
    }
    planned.push_back({{"index", e.index}, {"faults", faults}, {"calm_after_ms", e.calmAfterMs}});
  }
  return planned;
}

void Run::writeHistory() {
  const json planned = scheduleJson(schedule_);
  const auto leaseSamples = [this] {
    std::lock_guard lock(leasesMu_);
    return leaseSamples_;
  }();
  // The steady clock is the system's monotonic one, which the gateway's lease journal stamps
  // too: its times less this are the run's.
  const auto t0Steady = std::chrono::duration_cast<milliseconds>(t0_.time_since_epoch()).count();
  json gatewayFiles = json::array();
  for (int g = 0; g < o_.gateways; ++g) {
    gatewayFiles.push_back({{"id", gatewayName(g)},
                            {"data", gatewayData(g).filename().string()},
                            {"log_archive", gatewayArchive(g).filename().string()},
                            {"lease_journal", gatewayJournal(g).filename().string()}});
  }
  json meta{
      {"seed", o_.seed},
      {"events", o_.events},
      {"duration_s", o_.durationS},
      {"accounts", accounts_},
      {"agents", agentIds_},
      {"session_timeout_ms", o_.sessionTimeoutMs},
      {"break_fencing", o_.breakFencing},
      {"gateway_partitions", o_.gatewayPartitions},
      {"clock_steps", o_.clockSteps},
      {"gateway_mode", o_.breakFencing ? "hwm_only" : "zookeeper (untrusted: refuse)"},
      {"lock_delay_ms", o_.breakFencing ? kBreakLockDelayMs : 0},
      {"root", kRoot},
      // The first gateway's files under the single mode's keys, for older readers; every
      // gateway's in "gateways".
      {"gateway_data", gatewayData(0).filename().string()},
      {"lease_journal", gatewayJournal(0).filename().string()},
      {"gateways", gatewayFiles},
      {"cluster_shards", o_.gateways > 1 ? kClusterShards : 0},
      {"t0_steady_ms", t0Steady},
      {"zookeeper_logs", kZooKeeperLogs},
      {"gateway_log_archive", gatewayArchive(0).filename().string()},
      {"gateway_log_archive_error", archiveError()},
      {"wall_clock", json::array({json::array({0, t0WallMs_}), json::array({now(), wallMs()})})},
      {"devices",
       {{"count", o_.devicesPerAccount * o_.accounts},
        {"per_account", o_.devicesPerAccount},
        {"heartbeat_ms", timings_.heartbeatMs},
        {"timeout_ms", timings_.timeoutMs},
        {"renew_interval_ms", timings_.renewIntervalMs},
        {"lease_ttl_ms", timings_.leaseTtlMs},
        {"backoff_max_ms", timings_.backoffMaxMs},
        {"lease_samples", leaseSamples}}},
      {"ended_ms", now()}};
  json badAnswers;
  {
    std::lock_guard lock(leasesMu_);
    badAnswers = {{"count", badAnswerCount_}, {"first", badAnswers_}};
  }
  const fs::path tmp = o_.out / "history.json.tmp";
  std::ofstream out(tmp);
  out << "{\"meta\":" << meta.dump() << ",\n\"schedule\":" << planned.dump()
      << ",\n\"events\":" << events_.dump() << ",\n\"final\":" << final_.dump()
      << ",\n\"gateway_runs\":" << gatewayRunLog_.dump()
      << ",\n\"bad_gateway_answers\":" << badAnswers.dump()
      << ",\n\"observer_fields\":[\"t_ms\",\"server\",\"account\",\"present\",\"seq\",\"instance\","
         "\"session\",\"zxid\"],\n\"observer\":[";
  bool first = true;
  for (const auto& s : observer_ ? observer_->samples() : std::vector<ActiveSample>{}) {
    out << (first ? "\n" : ",\n")
        << json::array(
               {s.tMs, s.server, s.account, s.present, s.seq, s.instance, s.sessionId, s.zxid})
               .dump();
    first = false;
  }
  out << "],\n\"ops_fields\":[\"invoked_ms\",\"completed_ms\",\"agent\",\"account\",\"op_id\","
         "\"status\",\"outcome\",\"token\",\"probe\"],\n\"ops\":[";
  first = true;
  std::lock_guard lock(opsMu_);
  for (const auto& r : ops_) {
    out << (first ? "\n" : ",\n")
        << json::array({r.invoked, r.completed, r.agent, r.account, r.opId, r.status, r.outcome,
                        r.token, r.probe})
               .dump();
    first = false;
  }
  out << "]}\n";
  out.close();
  fs::rename(tmp, o_.out / "history.json");
  copyZooKeeperLogs();
  for (std::size_t s = 0; zk_ && s < zk_->size(); ++s) {
    std::error_code ignored;
    fs::copy_file(zk_->server(s).directory() / "server.log",
                  o_.out / "logs" / ("zk-" + std::to_string(s) + ".log"),
                  fs::copy_options::overwrite_existing, ignored);
  }
}

void Run::archiveGatewayLogs() {
  while (!stopPolling_) {
    for (int g = 0; g < o_.gateways; ++g) {
      const fs::path from = gatewayData(g);
      const fs::path to = gatewayArchive(g);
      std::error_code error;
      for (const auto& entry : fs::directory_iterator(from, error)) {
        const auto name = entry.path().filename();
        if (!name.string().starts_with("log.") || fs::exists(to / name)) continue;
        std::error_code linkError;
        fs::create_hard_link(entry.path(), to / name, linkError);
        // A log compacted away between the listing and the link is gone: the runner polls far
        // more often than the gateway rotates, so that is a log it linked before.
        if (linkError && linkError != std::errc::no_such_file_or_directory) {
          std::lock_guard lock(mu_);
          if (archiveError_.empty())
            archiveError_ = (to / name).string() + ": " + linkError.message();
        }
      }
    }
    std::this_thread::sleep_for(250ms);
  }
}

void Run::copyZooKeeperLogs() {
  for (std::size_t s = 0; zk_ && s < zk_->size(); ++s) {
    const fs::path from = zk_->server(s).directory() / "data" / "version-2";
    const fs::path to = o_.out / kZooKeeperLogs / ("server-" + std::to_string(s));
    fs::remove_all(to);
    fs::create_directories(to);
    std::error_code missing;
    for (const auto& entry : fs::directory_iterator(from, missing)) {
      const std::string name = entry.path().filename().string();
      if (!name.starts_with("log.")) continue;
      std::ifstream in(entry.path(), std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      bytes.resize(bytes.find_last_not_of('\0') + 1);  // npos + 1 == 0: all zeros
      std::ofstream(to / name, std::ios::binary) << bytes;
    }
  }
}

}  // namespace zkagent::chaos
