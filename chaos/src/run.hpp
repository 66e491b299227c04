// One chaos run: the processes (ensemble, gateway, agents behind proxies), the client load, the
// fault schedule and the history written for chaos/check.py. The members are defined by topic:
// run.cpp (the schedule), processes.cpp, load.cpp (clients and status polling), nemesis.cpp
// (one fault), history.cpp (history.json).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "hold_proxy.hpp"
#include "observer.hpp"
#include "options.hpp"
#include "schedule.hpp"
#include "spawners.hpp"
#include "zkagent/http.hpp"
#include "zktest/child_process.hpp"
#include "zktest/small_filesystem.hpp"
#include "zktest/tcp_proxy.hpp"
#include "zktest/zookeeper_ensemble.hpp"

namespace zkagent::chaos {

namespace fs = std::filesystem;
using json = nlohmann::json;
using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

constexpr const char* kRoot = "/chaos/accounts";
constexpr const char* kAgentsPath = "/chaos/agents";
constexpr const char* kLeaseJournal = "lease-journal.jsonl";  // in the output dir
constexpr const char* kZooKeeperLogs = "zookeeper";           // in the output dir
constexpr int kBreakLockDelayMs =
    4000;  // the successor's first ops wait; held stale ops land first
constexpr int kStaleDeliveryDelayMs = 2000;
// How long after a heal (beyond the session timeout) the runner waits for every account to be
// led again before it records the event as unsettled and goes on.
constexpr int kSettleMarginMs = 5000;
// A gateway cluster's shard count (--gateways > 1): 4 each over 3 gateways, 6 each over 2.
constexpr std::uint32_t kClusterShards = 12;

// Presence timings of the run's devices, agents and gateway: short, so that a device follows
// its account's leader within a fault's length. Timeout > 2 x heartbeat, TTL > 2 x renewal.
// A soak scales them all (--device-timing-scale): 10 000 devices at these rates would take more
// CPU than a 2-core machine has, and the soak measures growth, not follow speed.
struct DeviceTimings {
  int heartbeatMs = 300;
  int timeoutMs = 900;  // the agent's ping timeout and the device's own
  int checkIntervalMs = 100;
  int renewIntervalMs = 400;
  int leaseTtlMs = 1000;
  int leaseSweepMs = 100;
  int backoffMaxMs = 1000;

  static DeviceTimings scaled(int scale) {
    DeviceTimings t;
    for (int* ms : {&t.heartbeatMs, &t.timeoutMs, &t.checkIntervalMs, &t.renewIntervalMs,
                    &t.leaseTtlMs, &t.leaseSweepMs, &t.backoffMaxMs}) {
      *ms *= scale;
    }
    return t;
  }
};

// Set by SIGINT/SIGTERM: the schedule ends early; the run then finishes as usual (final probes,
// history).
extern std::atomic<bool> interrupted;

// The planned schedule as history.json records it (also chaos-runner --print-schedule).
json scheduleJson(const std::vector<Event>& schedule);

struct OpRecord {
  std::int64_t invoked = 0;
  std::int64_t completed = 0;
  int agent = 0;
  std::string account;
  std::string opId;
  int status = 0;
  std::string outcome;
  std::int64_t token = -1;
  bool probe = false;
};

struct AgentStatus {
  std::int64_t fetchedMs = -1;
  std::map<std::string, std::int64_t> leading;  // account -> token
};

class Run {
 public:
  explicit Run(Options options)
      : o_(std::move(options)), t0_(SteadyClock::now()), t0WallMs_(wallMs()) {
    for (int i = 0; i < o_.accounts; ++i) accounts_.push_back("acct-" + std::to_string(i));
    for (int i = 0; i < o_.agents; ++i) agentIds_.push_back("agent-" + std::to_string(i));
  }
  ~Run() {
    stopThreads();
    // A run cut short keeps the gateway's files too, for the checker (--disk-faults).
    try {
      if (gatewayDisk_) gatewayDisk_->keep();
    } catch (const std::exception&) {
    }
  }
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  int execute();

 private:
  std::int64_t now() const {
    return std::chrono::duration_cast<milliseconds>(SteadyClock::now() - t0_).count();
  }
  static std::int64_t wallMs() {
    return std::chrono::duration_cast<milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  fs::path binary(const std::string& name) const {
    return o_.binDir.empty() ? zktest::binaryPath(name) : o_.binDir / name;
  }
  void note(const std::string& text) {
    std::lock_guard lock(mu_);
    std::cerr << "[chaos " << now() << " ms] " << text << std::endl;
  }

  // ---- processes ----
  // `binary(name)` with `args`, its output to `log`; with --clock-steps under libfaketime, its
  // wall clock offset by what clockFile(process) says (the monotonic clock untouched).
  std::unique_ptr<zktest::ChildProcess> spawn(const std::string& name,
                                              std::vector<std::string> args,
                                              const std::string& process, const fs::path& log);
  fs::path clockFile(const std::string& process) const { return o_.out / "clock" / process; }
  void setClockOffset(const std::string& process, int seconds);
  // Gateway g of o_.gateways: its process name ("gateway" alone, the single mode's; else
  // "gateway-G", also its id in the shards' elections) and its files in the output dir.
  std::string gatewayName(int g) const {
    return o_.gateways == 1 ? "gateway" : "gateway-" + std::to_string(g);
  }
  fs::path gatewayData(int g) const { return o_.out / (gatewayName(g) + "-data"); }
  fs::path gatewayArchive(int g) const { return o_.out / (gatewayName(g) + "-log-archive"); }
  fs::path gatewayJournal(int g) const {
    return o_.out /
           (o_.gateways == 1 ? std::string(kLeaseJournal) : gatewayName(g) + "-" + kLeaseJournal);
  }
  void startGateway(int g);
  void killGateway(int g);
  // Cluster mode: per shard, the gateway its `active` node names as owner (-1: none, or ZooKeeper
  // did not answer); empty in the single mode.
  std::vector<int> shardOwners();
  bool everyShardOwned();
  // The target of a gateway fault: the owner of the most shards (on a tie, by the event's index
  // in turn); named in `record`.
  int gatewayTarget(json& record);
  void startAgent(int i);
  void killAgent(int i);
  bool agentAlive(int i);
  std::optional<std::size_t> connectedServer(int agent);
  void startDevices();  // one zk-device process for every simulated device
  void stopDevices();
  void restartDevices();  // kill -9 the simulator and start it again: every device at once

  // ---- devices' leases ----
  // (account, device) of every simulated device, as zk-device spreads them.
  std::vector<std::pair<std::string, std::string>> deviceKeys() const;
  void pollLeases();
  // Hard-links every log file of each gateway into its archive (DIR/gateway-log-archive) as it
  // appears, so a compaction's deleting a log loses nothing the checker reads (check 3 over a
  // soak).
  void archiveGatewayLogs();
  std::string archiveError() {
    std::lock_guard lock(mu_);
    return archiveError_;
  }
  // The token of the device's lease in the gateway's last answer when it is the account's
  // current active seq.
  std::optional<std::int64_t> leaseUnderLeader(const std::string& account,
                                               const std::string& device);
  bool everyDeviceLeased();
  // After the last heal: every device leased under its account's current token (check 7).
  void awaitDevicesLeased(std::int64_t lastHeal);

  // ---- load and status ----
  void worker(int agent, int index);
  void pollStatus(int agent);
  OpRecord sendOp(int agent, zkagent::http::Client& client, const std::string& account,
                  const std::string& opId, bool probe);
  std::map<std::string, std::int64_t> leadingOf(int agent, std::int64_t freshAfter);
  bool settled(std::int64_t freshAfter);
  json unsettledAccounts(std::int64_t freshAfter);

  void stopThreads() {
    stopLoad_ = true;
    for (auto& t : workers_) t.join();
    workers_.clear();
    stopPolling_ = true;
    for (auto& t : pollers_) t.join();
    pollers_.clear();
  }
  int runSchedule();
  // After the last heal: every account led again and answering through its leader (check 5).
  void probeAfterLastHeal(std::int64_t lastHeal);

  // ---- faults ----
  json runFault(const Fault& fault, int eventIndex);
  void writeHistory();
  // Each server's transaction logs (what the checker reads every `active` node's life from) into
  // DIR/zookeeper/server-N/, without the zeros the server preallocates past the last transaction.
  void copyZooKeeperLogs();

  Options o_;
  const DeviceTimings timings_ = DeviceTimings::scaled(o_.deviceTimingScale);
  SteadyClock::time_point t0_;
  // ZooKeeper stamps its transactions with its wall clock: the checker carries those times into
  // the run's milliseconds by the wall clock read at t0_ and at the history's writing.
  std::int64_t t0WallMs_;
  std::vector<std::string> accounts_;
  std::vector<std::string> agentIds_;
  std::mutex mu_;
  std::string archiveError_;  // the first log the archive could not link (e.g. across mounts)

  // Declared first so it is destroyed last: its threads' exit kills the children they started.
  std::unique_ptr<Spawners> spawners_;
  std::unique_ptr<zktest::ZooKeeperEnsemble> zk_;
  std::vector<std::vector<std::unique_ptr<zktest::TcpProxy>>> zkProxies_;  // per agent, per server
  std::vector<std::unique_ptr<HoldProxy>> gatewayProxies_;                 // per agent
  // Per agent, in front of its HoldProxy: agent -> cut -> hold -> gateway.
  std::vector<std::unique_ptr<zktest::TcpProxy>> gatewayCuts_;
  std::unique_ptr<ActiveObserver> observer_;

  struct Gateway {
    std::unique_ptr<zktest::ChildProcess> process;
    std::uint16_t port = 0;  // the same after every restart (and its advertised URL's)
    int runs = 0;
    std::vector<std::unique_ptr<zktest::TcpProxy>> zkProxies;  // per server, with partitions
  };
  std::mutex gatewayMu_;
  std::vector<Gateway> gateways_;
  std::unique_ptr<zktest::SmallFilesystem> gatewayDisk_;  // with --disk-faults (one gateway)
  json gatewayRunLog_ = json::array();

  std::vector<std::unique_ptr<std::mutex>> agentMu_;
  std::vector<std::unique_ptr<zktest::ChildProcess>> agents_;
  std::vector<std::uint16_t> agentPorts_;
  std::vector<std::uint16_t> devicePorts_;  // kept across restarts: the devices know them
  std::vector<int> agentRuns_;
  std::vector<AgentStatus> statuses_;
  std::mutex statusMu_;

  std::vector<std::thread> workers_;
  std::vector<std::thread> pollers_;
  std::FILE* zkLog_ = nullptr;  // left open: the C client may log until the process exits
  json events_ = json::array();
  json final_ = json::object();
  std::vector<Event> schedule_;
  std::atomic<bool> stopLoad_{false};
  std::atomic<bool> stopPolling_{false};
  std::mutex opsMu_;
  std::vector<OpRecord> ops_;

  std::unique_ptr<zktest::ChildProcess> devices_;
  std::mutex leasesMu_;
  // Device leases read from the gateway: counted only (check 6 judges the gateway's own journal
  // of every write; keeping every sample took ~90 MB a minute with 10 000 devices).
  std::int64_t leaseSamples_ = 0;
  static constexpr std::size_t kBadAnswersKept = 20;
  std::vector<std::string> badAnswers_;  // the first malformed presence answers
  std::int64_t badAnswerCount_ = 0;
  // Per account, the devices of the gateway's last answer: device -> token.
  std::map<std::string, std::map<std::string, std::int64_t>> latestLeases_;
};

}  // namespace zkagent::chaos
