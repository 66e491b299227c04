// Throughput of the presence model on the virtual clock at 5000 and 100000 connections.
//
// SteadyState: every device heartbeats (27-30 s), 20 leader agents check timeouts and renew in
// batches, the store sweeps. Items = clock events run (heartbeats, checks, renewals, sweeps) plus
// lease entries renewed, per second of real time.
// ConnectCloseChurn: on top of N quiet connections, one device connects and closes per iteration,
// through connection table, lease store, view (debounce) and publication. Items = connects +
// closes.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "zkagent/presence.hpp"
#include "zkagent/presence/simulation.hpp"

namespace zkagent::presence {
namespace {

constexpr int kGateways = 20;

struct World {
  explicit World(const Params& p) : params(p), service(clock, params) {
    for (int g = 0; g < kGateways; ++g) {
      gateways.push_back(std::make_unique<ConnectionTable>(
          clock, params, HolderIdentity{"gateway-" + std::to_string(g), 1}, service.leases()));
    }
  }
  ConnectionTable& gatewayFor(std::size_t i) { return *gateways[i % gateways.size()]; }

  Params params;
  VirtualClock clock;
  PresenceService service;
  std::vector<std::unique_ptr<ConnectionTable>> gateways;
};

void SteadyState(benchmark::State& state) {
  const auto connections = static_cast<std::size_t>(state.range(0));
  World world{Params{}};
  std::vector<std::unique_ptr<SimulatedDevice>> devices;
  devices.reserve(connections);
  for (std::size_t i = 0; i < connections; ++i) {
    devices.push_back(std::make_unique<SimulatedDevice>(
        world.clock, world.params, DeviceKey{"user-" + std::to_string(i), "phone"}, 0));
    devices.back()->connect(world.gatewayFor(i));
  }
  world.clock.runFor(std::chrono::seconds{60});  // past the first, spread renewals

  std::uint64_t items = 0;
  for (auto _ : state) {
    const std::uint64_t events = world.clock.eventsRun();
    const std::uint64_t renewed = world.service.leases().counters().renewalsAccepted;
    world.clock.runFor(std::chrono::seconds{30});
    items += (world.clock.eventsRun() - events) +
             (world.service.leases().counters().renewalsAccepted - renewed);
  }
  if (world.service.leases().size() != connections) state.SkipWithError("leases were lost");
  state.SetItemsProcessed(static_cast<std::int64_t>(items));
  state.counters["virtual_s_per_real_s"] = benchmark::Counter(
      30.0 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(SteadyState)->Arg(5000)->Arg(100000)->Unit(benchmark::kMillisecond);

void ConnectCloseChurn(benchmark::State& state) {
  Params params;
  params.heartbeatInterval = Millis{0};  // quiet background: only renewals and sweeps
  params.pingTimeout = Millis{0};
  World world{params};
  for (std::int64_t i = 0; i < state.range(0); ++i) {
    world.gatewayFor(static_cast<std::size_t>(i))
        .connect(DeviceKey{"user-" + std::to_string(i), "phone"});
  }
  std::uint64_t next = 0;
  for (auto _ : state) {
    ConnectionTable& gateway = world.gatewayFor(next);
    const Epoch epoch = gateway.connect(DeviceKey{"churn-" + std::to_string(next % 1000), "phone"});
    gateway.close(epoch);
    world.clock.runFor(Millis{1});
    ++next;
  }
  state.SetItemsProcessed(2 * static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(ConnectCloseChurn)->Arg(5000)->Arg(100000);

}  // namespace
}  // namespace zkagent::presence

BENCHMARK_MAIN();
