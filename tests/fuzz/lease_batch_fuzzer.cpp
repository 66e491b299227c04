// POST /v1/presence/leases bodies: parseLeaseBatch throws only BadRequest naming a field, and the
// identity check reads the same instanceId the batch parser keeps (a body the two read
// differently would let one instance write leases as another).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "identity.hpp"
#include "presence_store.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace zkagent;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  gateway::LeaseBatch batch;
  try {
    batch = gateway::parseLeaseBatch(text);
  } catch (const fencing::BadRequest& error) {
    if (std::string_view(error.what()).find(": ") == std::string_view::npos) __builtin_trap();
    return 0;
  }
  const auto ids = gateway::topLevelInstanceIds(text);
  bool seen = false;
  for (const auto& id : ids) seen = seen || id == batch.instanceId;
  if (!seen) __builtin_trap();
  return 0;
}
