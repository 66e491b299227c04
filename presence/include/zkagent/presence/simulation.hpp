// A device on the virtual clock, for tests, experiments and benchmarks: it heartbeats every
// heartbeatInterval x U[1 - heartbeatJitter, 1] and leaves in one of the three ways that
// bounds() covers: close, half-open, or with its agent crashing.
#pragma once

#include <cstdint>

#include "zkagent/presence/clock.hpp"
#include "zkagent/presence/connection_table.hpp"
#include "zkagent/presence/leases.hpp"
#include "zkagent/presence/params.hpp"
#include "zkagent/presence/stable_random.hpp"

namespace zkagent::presence {

class SimulatedDevice {
 public:
  // The heartbeat jitter is seeded from the CRC32 of "user/device" and runSeed.
  SimulatedDevice(Clock& clock, const Params& params, DeviceKey key, std::uint64_t runSeed);

  // Connects to `table` and heartbeats until it leaves or the table stops answering.
  void connect(ConnectionTable& table);
  // Leaves by closing the connection: the table learns it at once.
  void close();
  // Leaves silently (tunnel, pulled cable): heartbeats stop, the table is told nothing.
  void goHalfOpen();
  // The next heartbeat is lost on the way.
  void loseNextHeartbeat() { loseNext_ = true; }

  const DeviceKey& key() const { return key_; }
  Epoch epoch() const { return epoch_; }

 private:
  void scheduleHeartbeat();

  TimerScope timers_;
  Params params_;
  DeviceKey key_;
  StableRandom random_;
  ConnectionTable* table_ = nullptr;
  Epoch epoch_;
  bool loseNext_ = false;
};

}  // namespace zkagent::presence
