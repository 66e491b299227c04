#include "run.hpp"

#include <zookeeper/zookeeper.h>

#include <future>
#include <set>

#include "loopback.hpp"  // the harness's socket helpers (tests/support/src)
#include "zkagent/naming.hpp"

namespace zkagent::chaos {
using namespace std::chrono_literals;

std::atomic<bool> interrupted{false};

int Run::execute() {
  try {
    const int code = runSchedule();
    writeHistory();
    return code;
  } catch (const std::exception& e) {
    final_["error"] = e.what();
    stopThreads();
    try {
      writeHistory();
    } catch (const std::exception&) {
    }
    throw;
  }
}

int Run::runSchedule() {
  fs::remove_all(o_.out / "logs");  // a reused DIR: the logs are of this run only
  fs::create_directories(o_.out / "logs");
  gateways_.resize(static_cast<std::size_t>(o_.gateways));
  for (int g = 0; g < o_.gateways; ++g) {
    fs::remove_all(gatewayData(g));
    fs::create_directories(gatewayData(g));
    fs::remove(gatewayJournal(g));  // the gateway appends to it
    fs::remove_all(gatewayArchive(g));
    fs::create_directories(gatewayArchive(g));
  }
  // 64 MiB: more than a long run's log between compactions, and quick to fill.
  if (o_.diskFaults)
    gatewayDisk_ = std::make_unique<zktest::SmallFilesystem>(gatewayData(0), 64 << 20);
  spawners_ = std::make_unique<Spawners>(4);
  schedule_ = makeSchedule(scheduleOptions(o_));
  const auto& schedule = schedule_;
  note("seed " + std::to_string(o_.seed) + ", " + std::to_string(schedule.size()) + " events, " +
       std::to_string(o_.accounts) + " accounts, " + std::to_string(o_.agents) + " agents" +
       (o_.gateways > 1 ? ", " + std::to_string(o_.gateways) + " gateways" : std::string()) +
       (o_.breakFencing ? ", FENCING BROKEN (negative control)" : ""));

  // The observer's ZooKeeper client logs to a file of its own, warnings and up.
  zkLog_ = std::fopen((o_.out / "logs" / "observer-zk-client.log").c_str(), "a");
  if (zkLog_ != nullptr) zoo_set_log_stream(zkLog_);
  zoo_set_debug_level(ZOO_LOG_LEVEL_WARN);
  spawners_->run([&] { zk_ = std::make_unique<zktest::ZooKeeperEnsemble>(3); });
  std::vector<std::string> serverHosts;
  for (std::size_t s = 0; s < zk_->size(); ++s)
    serverHosts.push_back(zk_->server(s).connectString());
  observer_ = std::make_unique<ActiveObserver>(serverHosts, kRoot, accounts_, t0_);

  // The gateway and every agent restart on the ports of their first start: ports below the
  // ephemeral range, which no client connection can hold when a process comes back.
  const auto ports = zktest::detail::reserveLoopbackPorts(static_cast<std::size_t>(o_.gateways) +
                                                          2 * static_cast<std::size_t>(o_.agents));
  const auto agentPort0 = static_cast<std::size_t>(o_.gateways);
  std::string gatewayHosts;
  for (int g = 0; g < o_.gateways; ++g) {
    Gateway& gateway = gateways_[static_cast<std::size_t>(g)];
    gateway.port = ports[static_cast<std::size_t>(g)];
    // Only runs that cut the gateway's links put proxies in them. (With the gateway's ZooKeeper
    // links behind proxies a restarted gateway once fenced accounts on a cached view below their
    // HWM; a fence now waits for a read after a sync: docs/testing.md, "The fix".)
    if (o_.gatewayPartitions) {
      for (std::size_t s = 0; s < zk_->size(); ++s)
        gateway.zkProxies.push_back(std::make_unique<zktest::TcpProxy>(zk_->server(s).port()));
    }
    startGateway(g);
    gatewayHosts += (g == 0 ? "127.0.0.1:" : ", 127.0.0.1:") + std::to_string(gateway.port);
  }
  if (o_.gateways > 1) {
    // Every shard owned before the agents start (their first operations go to the owners).
    const auto ownedDeadline = SteadyClock::now() + 60s;
    while (!everyShardOwned() && SteadyClock::now() < ownedDeadline)
      std::this_thread::sleep_for(200ms);
    if (!everyShardOwned())
      throw std::runtime_error("the gateways' shards are not all owned 60 s after the start");
  }
  for (int i = 0; i < o_.agents; ++i) {
    std::vector<std::unique_ptr<zktest::TcpProxy>> proxies;
    for (std::size_t s = 0; s < zk_->size(); ++s)
      proxies.push_back(std::make_unique<zktest::TcpProxy>(zk_->server(s).port()));
    zkProxies_.push_back(std::move(proxies));
    // The agent's configured gateway (in a cluster the fallback of its routing, and the one its
    // heartbeats watch): the agents spread over the gateways.
    gatewayProxies_.push_back(
        std::make_unique<HoldProxy>(gateways_[static_cast<std::size_t>(i % o_.gateways)].port));
    if (o_.gatewayPartitions) {
      gatewayCuts_.push_back(std::make_unique<zktest::TcpProxy>(gatewayProxies_.back()->port()));
    }
    agentMu_.push_back(std::make_unique<std::mutex>());
    agents_.emplace_back();
    agentPorts_.push_back(ports[agentPort0 + 2 * static_cast<std::size_t>(i)]);
    devicePorts_.push_back(ports[agentPort0 + 1 + 2 * static_cast<std::size_t>(i)]);
    agentRuns_.push_back(0);
    statuses_.emplace_back();
  }
  for (int i = 0; i < o_.agents; ++i) startAgent(i);
  note("ensemble " + zk_->connectString() + ", gateway " + gatewayHosts);

  for (int i = 0; i < o_.agents; ++i) pollers_.emplace_back([this, i] { pollStatus(i); });
  const auto startDeadline = SteadyClock::now() + 60s;
  while (!settled(-1) && SteadyClock::now() < startDeadline) std::this_thread::sleep_for(100ms);
  if (!settled(-1)) throw std::runtime_error("the accounts are not all led 60 s after the start");
  startDevices();
  pollers_.emplace_back([this] { pollLeases(); });
  pollers_.emplace_back([this] { archiveGatewayLogs(); });
  // The agents' first balance moves accounts (and their devices) while the devices connect: a
  // few rounds of reconnect and renewal on top, which --device-timing-scale stretches.
  const auto devicesWait = 30s + 5 * milliseconds(timings_.renewIntervalMs + timings_.backoffMaxMs);
  const auto devicesDeadline = SteadyClock::now() + devicesWait;
  while (!everyDeviceLeased() && SteadyClock::now() < devicesDeadline)
    std::this_thread::sleep_for(100ms);
  if (!everyDeviceLeased())
    throw std::runtime_error("the devices are not all leased under their leaders " +
                             std::to_string(devicesWait.count() / 1000) +
                             " s after the start; see logs/devices.log");
  note("every account led" +
       (o_.devicesPerAccount > 0
            ? ", " + std::to_string(o_.devicesPerAccount * o_.accounts) + " devices leased"
            : std::string()) +
       "; load starts");
  for (int i = 0; i < o_.agents; ++i)
    for (int w = 0; w < o_.workersPerAgent; ++w)
      workers_.emplace_back([this, i, w] { worker(i, w); });
  std::this_thread::sleep_for(2s);

  auto& events = events_;
  std::int64_t lastHeal = now();
  const std::int64_t loadStarted = lastHeal;
  std::size_t ran = 0;
  for (const auto& event : schedule) {
    if (interrupted) {
      note("interrupted: the schedule ends early");
      final_["interrupted_before_event"] = event.index;
      break;
    }
    std::vector<std::future<json>> running;
    const std::int64_t started = now();
    for (const auto& fault : event.faults)
      running.push_back(
          std::async(std::launch::async, [&, fault] { return runFault(fault, event.index); }));
    json faults = json::array();
    std::int64_t heal = started;
    for (auto& f : running) {
      faults.push_back(f.get());
      heal = std::max(heal, faults.back()["heal_ms"].get<std::int64_t>());
    }
    lastHeal = heal;
    ++ran;
    const bool timeUp = o_.durationS > 0 && heal - loadStarted >= o_.durationS * 1000LL;
    std::string kinds;
    for (const auto& f : faults) {
      if (!kinds.empty()) kinds += '+';
      kinds += f["kind"].get<std::string>();
    }
    if (event.index == schedule.back().index || timeUp) {
      // The last heal: probeAfterLastHeal measures from it, at once (check 5).
      events.push_back({{"index", event.index},
                        {"kinds", kinds},
                        {"start_ms", started},
                        {"heal_ms", heal},
                        {"faults", faults},
                        {"settled_ms", nullptr},
                        {"unsettled", json::array()},
                        {"reelect_ms", nullptr},
                        {"last", true}});
      note("event " + std::to_string(event.index) + " " + kinds + ": healed after " +
           std::to_string(heal - started) + " ms (the last)");
      break;
    }
    // Settling: every account led again (the re-election time after this heal).
    const auto deadline = SteadyClock::now() + milliseconds(o_.sessionTimeoutMs + kSettleMarginMs);
    std::optional<std::int64_t> settledAt;
    while (SteadyClock::now() < deadline) {
      if (settled(heal)) {
        settledAt = now();
        break;
      }
      std::this_thread::sleep_for(50ms);
    }
    json unsettled = settledAt ? json::array() : unsettledAccounts(heal);
    events.push_back({{"index", event.index},
                      {"kinds", kinds},
                      {"start_ms", started},
                      {"heal_ms", heal},
                      {"faults", faults},
                      {"settled_ms", settledAt ? json(*settledAt) : json(nullptr)},
                      {"unsettled", unsettled},
                      {"reelect_ms", settledAt ? json(*settledAt - heal) : json(nullptr)}});
    if (!settledAt && o_.gateways > 1) {
      // A cluster's heal also waits for every shard owned (settled()): which were not.
      json unowned = json::array();
      const auto owners = shardOwners();
      for (std::size_t shard = 0; shard < owners.size(); ++shard) {
        if (owners[shard] < 0)
          unowned.push_back(zkagent::naming::shardId(static_cast<std::uint32_t>(shard)));
      }
      events.back()["shards_unowned"] = unowned;
    }
    note("event " + std::to_string(event.index) + " " + kinds + ": healed after " +
         std::to_string(heal - started) + " ms, " +
         (settledAt ? "led again " + std::to_string(*settledAt - heal) + " ms after the heal"
                    : std::string("NOT led again")));
    std::this_thread::sleep_for(milliseconds(event.calmAfterMs + o_.extraCalmMs));
  }

  // A timed run (--duration-s) keeps in its history only the events it ran.
  schedule_.resize(ran);
  probeAfterLastHeal(lastHeal);
  awaitDevicesLeased(lastHeal);

  stopDevices();
  stopThreads();
  for (int i = 0; i < o_.agents; ++i) killAgent(i);
  {
    std::lock_guard lock(gatewayMu_);
    for (auto& gateway : gateways_) gateway.process->signal(SIGTERM);
    for (auto& gateway : gateways_) gateway.process->wait(10s);
  }
  if (gatewayDisk_) gatewayDisk_->keep();  // the checker reads the gateway's log
  std::this_thread::sleep_for(300ms);      // the observer sees the last changes
  return 0;
}

// Every account led again, and an operation through its leader succeeds.
void Run::probeAfterLastHeal(std::int64_t lastHeal) {
  // The workers stop after their current operation (joined later, not to delay the probes).
  stopLoad_ = true;
  std::vector<std::unique_ptr<zkagent::http::Client>> probeClients;
  for (int i = 0; i < o_.agents; ++i) {
    zkagent::http::ClientOptions options;
    options.port = agentPorts_[i];
    options.connectTimeout = 500ms;
    options.requestTimeout = 2000ms;
    probeClients.push_back(std::make_unique<zkagent::http::Client>(options));
  }
  json perAccount = json::object();
  std::set<std::string> pending(accounts_.begin(), accounts_.end());
  // The checker's bound is session timeout + lock delay + 2 s; probing on past it only measures
  // how late an account comes back.
  const auto probeDeadline =
      SteadyClock::now() +
      milliseconds(o_.sessionTimeoutMs + (o_.breakFencing ? kBreakLockDelayMs : 0) + 10000);
  for (int round = 0; !pending.empty() && SteadyClock::now() < probeDeadline; ++round) {
    for (auto it = pending.begin(); it != pending.end();) {
      const auto active = observer_->latest(*it);
      int leader = -1;
      for (int i = 0; i < o_.agents && active && active->present; ++i) {
        if (agentIds_[i] == active->instance) leader = i;
      }
      if (leader >= 0) {
        const auto r = sendOp(leader, *probeClients[leader], *it,
                              "probe." + *it + "." + std::to_string(round), true);
        if (r.status == 200) {
          perAccount[*it] = {
              {"led_ms", r.completed - lastHeal}, {"agent", agentIds_[leader]}, {"token", r.token}};
          it = pending.erase(it);
          continue;
        }
      }
      ++it;
    }
    if (!pending.empty()) std::this_thread::sleep_for(100ms);
  }
  final_["last_heal_ms"] = lastHeal;
  final_["accounts"] = perAccount;
  final_["not_led"] = std::vector<std::string>(pending.begin(), pending.end());
  note(pending.empty() ? "every account led and answering after the last heal"
                       : std::to_string(pending.size()) + " accounts not led after the last heal");
}

}  // namespace zkagent::chaos
