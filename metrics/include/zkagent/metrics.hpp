// zkagent metrics: one small Prometheus registry (text exposition format 0.0.4).
//
// A metric family has a name, a help text and a fixed list of label names declared when it is
// registered; each distinct tuple of label values is one time series, created on first use and
// kept for the life of the registry (remove() only takes it out of the exposition). Keep label
// values low-cardinality (no account, session, device or op ids as labels): a family grows by one
// series per distinct value tuple.
//
//   zkagent::metrics::Registry registry;
//   auto& ops = registry.counter("gateway_ops_total", "Operations by result.", {"result"});
//   ops.with({"accepted"}).inc();
//   auto& latency = registry.histogram("gateway_op_seconds", "Op latency.", {0.001, 0.01, 0.1});
//   latency.with({}).observe(0.004);
//   std::string text = registry.expose();   // serve as text/plain; version=0.0.4
//
// Everything is thread-safe: updates are lock-free atomics (histograms take a short lock),
// series creation and exposition take the family's lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace zkagent::metrics {

// Content-Type of Registry::expose().
inline constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

// A value that only goes up (resets only when the process restarts).
class Counter {
 public:
  void inc(double amount = 1.0);  // throws std::invalid_argument if amount < 0
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down.
class Gauge {
 public:
  void set(double value) { value_.store(value, std::memory_order_relaxed); }
  void inc(double amount = 1.0);
  void dec(double amount = 1.0) { inc(-amount); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Observations counted into fixed buckets (upper bounds, ascending; +Inf is implicit).
class Histogram {
 public:
  explicit Histogram(std::vector<double> upperBounds);
  void observe(double value);

  struct Snapshot {
    std::vector<double> upperBounds;
    std::vector<uint64_t> cumulativeCounts;  // one per bound, then +Inf (== count)
    double sum = 0.0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  std::vector<double> upperBounds_;
  mutable std::mutex mutex_;
  std::vector<uint64_t> bucketCounts_;  // non-cumulative, last one is +Inf
  double sum_ = 0.0;
};

// Buckets (seconds) suited to request latencies from 100 µs to 10 s.
std::vector<double> latencyBuckets();

// One metric family: series keyed by label values, in the order of the declared label names.
class FamilyBase {
 public:
  virtual ~FamilyBase() = default;
  const std::string& name() const { return name_; }
  const std::vector<std::string>& labelNames() const { return labelNames_; }
  const std::string& help() const { return help_; }
  virtual void expose(std::string& out) const = 0;

 protected:
  FamilyBase(std::string name, std::string help, std::vector<std::string> labelNames);
  void checkValueCount(const std::vector<std::string>& values) const;

 private:
  std::string name_;
  std::string help_;
  std::vector<std::string> labelNames_;
};

template <typename Metric>
class Family final : public FamilyBase {
 public:
  // Use Registry::counter/gauge/histogram to create families.
  Family(std::string name, std::string help, std::vector<std::string> labelNames,
         std::vector<double> histogramBounds = {})
      : FamilyBase(std::move(name), std::move(help), std::move(labelNames)),
        histogramBounds_(std::move(histogramBounds)) {}

  // The series for these label values (one per declared label name, in order); created on first
  // use, and the reference stays valid for the life of the registry. Throws std::invalid_argument
  // when the number of values does not match the declared label names.
  Metric& with(std::initializer_list<std::string_view> values) {
    return with(std::vector<std::string>(values.begin(), values.end()));
  }
  Metric& with(const std::vector<std::string>& values);
  // Takes the series out of the exposition (a label value that went away, such as a peer no
  // longer known). The series object stays, so references from with() remain valid; with() of
  // the same values brings it back with its value (a counter never goes backwards).
  void remove(const std::vector<std::string>& values);

  void expose(std::string& out) const override;

 private:
  std::vector<double> histogramBounds_;
  mutable std::mutex mutex_;
  std::map<std::vector<std::string>, std::unique_ptr<Metric>> series_;
  std::map<std::vector<std::string>, std::unique_ptr<Metric>> removed_;  // kept for references
};

// Defined in metrics.cpp for exactly these three metric types.
extern template class Family<Counter>;
extern template class Family<Gauge>;
extern template class Family<Histogram>;

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

class Registry {
 public:
  // Names must match [a-zA-Z_:][a-zA-Z0-9_:]*, counters must end in `_total`; label names must
  // match [a-zA-Z_][a-zA-Z0-9_]* and not start with `__` (histograms also reserve `le`).
  // Registering a name again with the same type and labels returns the existing family; any other
  // clash or invalid name throws std::invalid_argument.
  CounterFamily& counter(std::string name, std::string help,
                         std::vector<std::string> labelNames = {});
  GaugeFamily& gauge(std::string name, std::string help, std::vector<std::string> labelNames = {});
  HistogramFamily& histogram(std::string name, std::string help, std::vector<double> upperBounds,
                             std::vector<std::string> labelNames = {});

  // All families in registration order, in the Prometheus text format 0.0.4.
  std::string expose() const;

 private:
  template <typename Metric>
  Family<Metric>& add(std::string name, std::string help, std::vector<std::string> labelNames,
                      std::vector<double> bounds);

  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<FamilyBase>> families_;
};

}  // namespace zkagent::metrics
