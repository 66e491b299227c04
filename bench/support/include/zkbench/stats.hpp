#pragma once
// Order statistics of a sample (latencies, counts): the one definition every benchmark reports
// percentiles with, so that a p99 means the same in every table of docs/benchmarks.md.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace zkbench {

// The nearest-rank quantile of a sorted sample: the smallest value with at least the fraction
// `q` of the sample at or below it (q = 0: the minimum, q = 1: the maximum; p50 of two values is
// the lower one). T{} for an empty sample.
template <class T>
T quantileOfSorted(const std::vector<T>& sorted, double q) {
  if (sorted.empty()) return T{};
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

// The same of an unsorted sample (sorted in place).
template <class T>
T quantile(std::vector<T>& sample, double q) {
  std::sort(sample.begin(), sample.end());
  return quantileOfSorted(sample, q);
}

struct Summary {
  std::size_t count = 0;
  double p50 = 0, p99 = 0, max = 0, mean = 0;
};

// All zero for an empty sample.
inline Summary summarize(std::vector<double> sample) {
  Summary s;
  s.count = sample.size();
  if (sample.empty()) return s;
  std::sort(sample.begin(), sample.end());
  s.p50 = quantileOfSorted(sample, 0.5);
  s.p99 = quantileOfSorted(sample, 0.99);
  s.max = sample.back();
  double sum = 0;
  for (double v : sample) sum += v;
  s.mean = sum / static_cast<double>(sample.size());
  return s;
}

}  // namespace zkbench
