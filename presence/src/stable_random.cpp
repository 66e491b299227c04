#include "zkagent/presence/stable_random.hpp"

#include <boost/crc.hpp>

namespace zkagent::presence {

std::uint32_t crc32(std::string_view bytes) {
  boost::crc_32_type crc;
  crc.process_bytes(bytes.data(), bytes.size());
  return crc.checksum();
}

StableRandom::StableRandom(std::string_view name, std::uint64_t runSeed)
    : engine_((std::uint64_t{crc32(name)} << 32) ^ runSeed) {}

double StableRandom::uniform(double low, double high) {
  // 53 random bits give every double in [0, 1] an equal step.
  const double unit = static_cast<double>(engine_() >> 11) * 0x1.0p-53;
  return low + (high - low) * unit;
}

Millis StableRandom::scale(Millis base, double low, double high) {
  const std::chrono::duration<double, std::milli> scaled = base * uniform(low, high);
  return std::chrono::round<Millis>(scaled);
}

}  // namespace zkagent::presence
