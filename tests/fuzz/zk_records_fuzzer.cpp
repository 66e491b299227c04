// What the agents and the gateway read from ZooKeeper, where any process can write anything:
// member and active records and health reports. Parsing never throws, and whatever is accepted
// survives its own round trip.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "zkagent/agent/health.hpp"
#include "zkagent/election.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace zkagent;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto member = election::parseMember(text)) {
    if (!election::parseMember(election::toJson(*member))) __builtin_trap();
  }
  if (auto active = election::parseActive(text)) {
    auto again = election::parseActive(election::toJson(*active));
    if (!again || again->seq != active->seq || again->instanceId != active->instanceId ||
        again->sessionId != active->sessionId) {
      __builtin_trap();
    }
  }
  if (auto report = agent::parseHealthReport(text)) {
    if (!agent::parseHealthReport(agent::toJson(*report))) __builtin_trap();
  }
  return 0;
}
