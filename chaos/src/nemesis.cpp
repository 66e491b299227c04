// One fault of the schedule, run to its heal; returns its record for history.json. A gateway fault
// in a cluster hits the owner of the most shards, named in the record's "gateway".
#include <signal.h>

#include "run.hpp"

namespace zkagent::chaos {

json Run::runFault(const Fault& fault, int eventIndex) {
  json record{{"event", eventIndex},
              {"kind", std::string(toString(fault.kind))},
              {"agent", fault.agent},
              {"duration_ms", fault.durationMs},
              {"start_ms", now()}};
  const auto wait = [&](int ms) { std::this_thread::sleep_for(milliseconds(ms)); };
  switch (fault.kind) {
    case FaultKind::agent_kill:
      killAgent(fault.agent);
      wait(fault.durationMs);
      startAgent(fault.agent);
      break;
    case FaultKind::agent_pause:
      agents_[fault.agent]->signal(SIGSTOP);
      wait(fault.durationMs);
      agents_[fault.agent]->signal(SIGCONT);
      break;
    case FaultKind::agent_partition:
      for (auto& p : zkProxies_[fault.agent]) p->setMode(zktest::TcpProxy::Mode::blackhole);
      wait(fault.durationMs);
      for (auto& p : zkProxies_[fault.agent]) p->setMode(zktest::TcpProxy::Mode::pass);
      break;
    case FaultKind::zk_kill_agent_server:
    case FaultKind::zk_kill_leader: {
      std::optional<std::size_t> server;
      if (fault.kind == FaultKind::zk_kill_leader) {
        zk_->awaitQuorum();
        server = zk_->leaderIndex();
      } else {
        server = connectedServer(fault.agent);
      }
      if (!server) {
        // Killing some other server would not be the fault the schedule names: the event is
        // recorded as not carried out, and the report counts it.
        record["not_done"] = fault.kind == FaultKind::zk_kill_leader
                                 ? "no leader found"
                                 : "the agent's session is on no server";
        note("event " + std::to_string(eventIndex) + ": " + std::string(toString(fault.kind)) +
             " not carried out: " + record["not_done"].get<std::string>());
        wait(fault.durationMs);
        break;
      }
      record["target"] = "zk-" + std::to_string(*server);
      zk_->kill9(*server);
      wait(fault.durationMs);
      spawners_->run([&] { zk_->restart(*server); });
      break;
    }
    case FaultKind::gateway_kill: {
      const int g = gatewayTarget(record);
      killGateway(g);
      wait(fault.durationMs);
      startGateway(g);
      break;
    }
    case FaultKind::agent_gateway_partition:
      gatewayCuts_[fault.agent]->setMode(zktest::TcpProxy::Mode::blackhole);
      wait(fault.durationMs);
      gatewayCuts_[fault.agent]->setMode(zktest::TcpProxy::Mode::pass);
      break;
    case FaultKind::gateway_zk_partition: {
      auto& proxies = gateways_[static_cast<std::size_t>(gatewayTarget(record))].zkProxies;
      for (auto& p : proxies) p->setMode(zktest::TcpProxy::Mode::blackhole);
      wait(fault.durationMs);
      for (auto& p : proxies) p->setMode(zktest::TcpProxy::Mode::pass);
      break;
    }
    case FaultKind::agent_clock_step:
    case FaultKind::gateway_clock_step: {
      const std::string name = fault.kind == FaultKind::gateway_clock_step
                                   ? gatewayName(gatewayTarget(record))
                                   : agentIds_[fault.agent];
      record["step_s"] = fault.stepSeconds;
      setClockOffset(name, fault.stepSeconds);
      wait(fault.durationMs);
      setClockOffset(name, 0);
      break;
    }
    case FaultKind::device_storm:
      // The agent's accounts fail over while every device is reconnecting, all at the same time.
      killAgent(fault.agent);
      restartDevices();
      record["devices"] = o_.devicesPerAccount * o_.accounts;
      wait(fault.durationMs);
      startAgent(fault.agent);
      break;
    case FaultKind::gateway_disk_full: {
      record["filled_bytes"] = gatewayDisk_->fill();
      wait(fault.durationMs);
      gatewayDisk_->free();
      break;
    }
    case FaultKind::gateway_pause: {
      const int g = gatewayTarget(record);
      std::lock_guard lock(gatewayMu_);
      auto& process = gateways_[static_cast<std::size_t>(g)].process;
      process->signal(SIGSTOP);
      wait(fault.durationMs);
      process->signal(SIGCONT);
      break;
    }
    case FaultKind::stale_delivery: {
      // The agent that leads the most accounts: the most operations in flight to hold.
      int target = 0;
      std::map<std::string, std::int64_t> led;
      for (int i = 0; i < o_.agents; ++i) {
        auto l = leadingOf(i, -1);
        if (l.size() > led.size()) {
          led = std::move(l);
          target = i;
        }
      }
      record["agent"] = target;
      record["accounts_led"] = led.size();
      gatewayProxies_[target]->hold();
      record["held_ms"] = now();  // anything this agent forwards from now on arrives late
      // Cut ZooKeeper before the held heartbeats mark the gateway link down (700 ms), so the
      // agent cannot hand over cleanly: its session must expire and a successor take over.
      wait(150);
      for (auto& p : zkProxies_[target]) p->setMode(zktest::TcpProxy::Mode::blackhole);
      const auto deadline = SteadyClock::now() + milliseconds(2 * o_.sessionTimeoutMs + 5000);
      std::size_t moved = 0;
      while (SteadyClock::now() < deadline) {
        moved = 0;
        for (const auto& [account, token] : led) {
          const auto active = observer_->latest(account);
          if (active && active->present && active->seq != token) ++moved;
        }
        if (!led.empty() && moved == led.size()) break;
        wait(50);
      }
      record["accounts_moved"] = moved;
      // Deliver well after the successors lead (more than the checker's slack), and before a
      // successor's lock delay (negative control) lets its own operations raise the HWM.
      wait(kStaleDeliveryDelayMs);
      record["delivered_ms"] = now();
      gatewayProxies_[target]->release();
      wait(fault.durationMs);
      for (auto& p : zkProxies_[target]) p->setMode(zktest::TcpProxy::Mode::pass);
      break;
    }
  }
  record["heal_ms"] = now();
  return record;
}

}  // namespace zkagent::chaos
