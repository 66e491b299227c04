// The device WebSocket's frames: the fast path (exactPing) and the full parser never disagree,
// and neither throws on any bytes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "devices/device_frames.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace zkagent::agent::detail;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto fast = exactPing(text);
  const auto full = parsePing(text);
  if (fast) {
    const auto* seq = std::get_if<uint64_t>(&full);
    if (seq == nullptr || *seq != *fast) __builtin_trap();
  }
  if (const auto* why = std::get_if<std::string>(&full); why != nullptr && why->empty()) {
    __builtin_trap();
  }
  return 0;
}
