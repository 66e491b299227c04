#include "zkagent/presence/simulation.hpp"

namespace zkagent::presence {

SimulatedDevice::SimulatedDevice(Clock& clock, const Params& params, DeviceKey key,
                                 std::uint64_t runSeed)
    : timers_(clock),
      params_(params),
      key_(std::move(key)),
      random_(key_.user + "/" + key_.device, runSeed) {}

void SimulatedDevice::connect(ConnectionTable& table) {
  timers_.cancelAll();
  table_ = &table;
  epoch_ = table.connect(key_);
  scheduleHeartbeat();
}

void SimulatedDevice::close() {
  timers_.cancelAll();
  if (table_ != nullptr) table_->close(epoch_);
  table_ = nullptr;
}

void SimulatedDevice::goHalfOpen() {
  timers_.cancelAll();
  table_ = nullptr;
}

void SimulatedDevice::scheduleHeartbeat() {
  if (params_.heartbeatInterval == Millis{0}) return;
  const Millis delay = random_.scale(params_.heartbeatInterval, 1 - params_.heartbeatJitter, 1);
  timers_.after(delay, [this] {
    if (loseNext_) {
      loseNext_ = false;
    } else if (!table_->ping(epoch_)) {
      table_ = nullptr;  // the other end is gone (closed us, or crashed)
      return;
    }
    scheduleHeartbeat();
  });
}

}  // namespace zkagent::presence
