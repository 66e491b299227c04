#pragma once
// Order statistics of a sample of latencies.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace zkbench {

struct Summary {
  size_t count = 0;
  double p50 = 0, p99 = 0, max = 0, mean = 0;
};

// Nearest-rank percentiles (p50 of 2 values is the lower one); all zero for an empty sample.
inline Summary summarize(std::vector<double> sample) {
  Summary s;
  s.count = sample.size();
  if (sample.empty()) return s;
  std::sort(sample.begin(), sample.end());
  auto rank = [&](double q) {
    auto index = static_cast<size_t>(std::ceil(q * static_cast<double>(sample.size())));
    return sample[std::clamp<size_t>(index, 1, sample.size()) - 1];
  };
  s.p50 = rank(0.5);
  s.p99 = rank(0.99);
  s.max = sample.back();
  double sum = 0;
  for (double v : sample) sum += v;
  s.mean = sum / static_cast<double>(sample.size());
  return s;
}

}  // namespace zkbench
