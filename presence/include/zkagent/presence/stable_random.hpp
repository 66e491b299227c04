// Reproducible randomness for jitter: seeded from a CRC32 of a stable name, never std::hash, whose
// value may change between runs or builds (a per-process randomized string hash made one command
// measure a gateway-crash detection delay of 130 s in one run and 170 s in the next; with CRC32
// it is 135 s every time).
#pragma once

#include <cstdint>
#include <random>
#include <string_view>

#include "zkagent/presence/clock.hpp"

namespace zkagent::presence {

std::uint32_t crc32(std::string_view bytes);

class StableRandom {
 public:
  // The same (name, runSeed) gives the same sequence on every platform and run.
  StableRandom(std::string_view name, std::uint64_t runSeed);
  // Uniform in [low, high]; computed from raw bits, as std distributions differ between libraries.
  double uniform(double low, double high);
  // base x uniform(low, high), rounded to the millisecond.
  Millis scale(Millis base, double low, double high);

 private:
  std::mt19937_64 engine_;
};

}  // namespace zkagent::presence
