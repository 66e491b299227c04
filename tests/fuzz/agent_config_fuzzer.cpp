// zk-agent's config: any text is either a Config or a ConfigError naming a field; never another
// exception (a JSON type error escaping would be a crash at start-up), and describe() of an
// accepted config never throws.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "zkagent/agent/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto config = zkagent::agent::parseConfig(text, "/nonexistent-fuzz-dir");
    static_cast<void>(zkagent::agent::describe(config));
  } catch (const zkagent::agent::ConfigError& error) {
    if (error.field().empty()) __builtin_trap();
  }
  return 0;
}
