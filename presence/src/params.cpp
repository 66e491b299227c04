#include "zkagent/presence/params.hpp"

#include <stdexcept>

namespace zkagent::presence {
namespace {

std::string millis(Millis value) { return std::to_string(value.count()) + " ms"; }

}  // namespace

std::vector<std::string> validationErrors(const Params& p) {
  std::vector<std::string> errors;
  const Millis zero{0};
  auto require = [&errors](bool ok, std::string message) {
    if (!ok) errors.push_back(std::move(message));
  };
  require(p.heartbeatInterval >= zero, "heartbeatInterval must be >= 0 (0 disables heartbeats)");
  require(p.heartbeatJitter >= 0 && p.heartbeatJitter < 1, "heartbeatJitter must be in [0, 1)");
  require(p.pingTimeout >= zero, "pingTimeout must be >= 0 (0 disables the timeout check)");
  require(p.pingTimeout == zero || p.checkInterval > zero,
          "checkInterval must be > 0 while pingTimeout is enabled");
  require(!(p.heartbeatInterval == zero && p.pingTimeout > zero),
          "pingTimeout must be 0 when heartbeatInterval is 0: without heartbeats every connection "
          "would time out");
  require(p.allowUnsafe || p.heartbeatInterval == zero || p.pingTimeout == zero ||
              p.pingTimeout > 2 * p.heartbeatInterval,
          "pingTimeout (" + millis(p.pingTimeout) + ") must be > 2 x heartbeatInterval (" +
              millis(p.heartbeatInterval) +
              ") so one lost heartbeat is tolerated; set allowUnsafe only for a negative control");
  require(p.renewInterval > zero, "renewInterval must be > 0");
  require(p.renewJitter >= 0 && p.renewJitter < 1, "renewJitter must be in [0, 1)");
  require(p.leaseTtl > zero, "leaseTtl must be > 0");
  require(p.allowUnsafe || p.leaseTtl > 2 * p.renewInterval,
          "leaseTtl (" + millis(p.leaseTtl) + ") must be > 2 x renewInterval (" +
              millis(p.renewInterval) +
              ") so one failed renewal is tolerated; set allowUnsafe only for a negative control");
  require(p.sweepInterval > zero, "sweepInterval must be > 0");
  require(p.offlineDebounce >= zero, "offlineDebounce must be >= 0");
  require(p.coarseRecentWindow > zero, "coarseRecentWindow must be > 0");
  return errors;
}

void validate(const Params& params) {
  const auto errors = validationErrors(params);
  if (errors.empty()) return;
  std::string message = "invalid presence parameters:";
  for (const auto& error : errors) message += "\n  " + error;
  throw std::invalid_argument(message);
}

Bounds bounds(const Params& p) {
  Bounds result{.close = p.offlineDebounce,
                .halfOpen = std::nullopt,
                .gatewayCrash = p.leaseTtl + p.sweepInterval + p.offlineDebounce};
  if (p.pingTimeout > Millis{0})
    result.halfOpen = p.pingTimeout + p.checkInterval + p.offlineDebounce;
  return result;
}

}  // namespace zkagent::presence
