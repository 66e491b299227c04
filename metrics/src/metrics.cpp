#include "zkagent/metrics.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

namespace zkagent::metrics {
namespace {

bool validName(std::string_view name, bool allowColon) {
  if (name.empty()) return false;
  auto head = [&](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allowColon && c == ':');
  };
  if (!head(name.front())) return false;
  return std::all_of(name.begin() + 1, name.end(),
                     [&](char c) { return head(c) || (c >= '0' && c <= '9'); });
}

// Prometheus floats: shortest round-trip form, and the spellings +Inf, -Inf, NaN.
void appendNumber(std::string& out, double value) {
  if (std::isnan(value)) {
    out += "NaN";
  } else if (std::isinf(value)) {
    out += value > 0 ? "+Inf" : "-Inf";
  } else {
    char buffer[64];
    auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
    out.append(buffer, result.ptr);
  }
}

void appendEscaped(std::string& out, std::string_view text, bool escapeQuotes) {
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && escapeQuotes) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
}

void atomicAdd(std::atomic<double>& target, double amount) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + amount, std::memory_order_relaxed)) {
  }
}

template <typename Metric>
std::unique_ptr<Metric> makeMetric(const std::vector<double>& bounds);
template <>
std::unique_ptr<Counter> makeMetric<Counter>(const std::vector<double>&) {
  return std::make_unique<Counter>();
}
template <>
std::unique_ptr<Gauge> makeMetric<Gauge>(const std::vector<double>&) {
  return std::make_unique<Gauge>();
}
template <>
std::unique_ptr<Histogram> makeMetric<Histogram>(const std::vector<double>& bounds) {
  return std::make_unique<Histogram>(bounds);
}

template <typename Metric>
constexpr std::string_view typeName();
template <>
constexpr std::string_view typeName<Counter>() {
  return "counter";
}
template <>
constexpr std::string_view typeName<Gauge>() {
  return "gauge";
}
template <>
constexpr std::string_view typeName<Histogram>() {
  return "histogram";
}

// `{a="x",b="y"}` for the given values, plus an optional extra label (histograms' `le`).
std::string labelText(const std::vector<std::string>& names, const std::vector<std::string>& values,
                      std::string_view extraName = {}, std::string_view extraValue = {}) {
  if (values.empty() && extraName.empty()) return {};
  std::string out = "{";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ',';
    out += names[i] + "=\"";
    appendEscaped(out, values[i], true);
    out += '"';
  }
  if (!extraName.empty()) {
    if (!values.empty()) out += ',';
    out += std::string(extraName) + "=\"" + std::string(extraValue) + '"';
  }
  out += '}';
  return out;
}

void appendSample(std::string& out, std::string_view sampleName, const std::string& labels,
                  double value) {
  out += sampleName;
  out += labels;
  out += ' ';
  appendNumber(out, value);
  out += '\n';
}

void appendSeries(std::string& out, const std::string& name, const std::vector<std::string>& names,
                  const std::vector<std::string>& values, const Counter& counter) {
  appendSample(out, name, labelText(names, values), counter.value());
}

void appendSeries(std::string& out, const std::string& name, const std::vector<std::string>& names,
                  const std::vector<std::string>& values, const Gauge& gauge) {
  appendSample(out, name, labelText(names, values), gauge.value());
}

void appendSeries(std::string& out, const std::string& name, const std::vector<std::string>& names,
                  const std::vector<std::string>& values, const Histogram& histogram) {
  Histogram::Snapshot snapshot = histogram.snapshot();
  for (size_t i = 0; i <= snapshot.upperBounds.size(); ++i) {
    std::string bound;
    appendNumber(bound, i < snapshot.upperBounds.size() ? snapshot.upperBounds[i] : INFINITY);
    appendSample(out, name + "_bucket", labelText(names, values, "le", bound),
                 static_cast<double>(snapshot.cumulativeCounts[i]));
  }
  appendSample(out, name + "_sum", labelText(names, values), snapshot.sum);
  appendSample(out, name + "_count", labelText(names, values), static_cast<double>(snapshot.count));
}

}  // namespace

void Counter::inc(double amount) {
  if (!(amount >= 0)) throw std::invalid_argument("counter increment must be >= 0");
  atomicAdd(value_, amount);
}

void Gauge::inc(double amount) { atomicAdd(value_, amount); }

Histogram::Histogram(std::vector<double> upperBounds)
    : upperBounds_(std::move(upperBounds)), bucketCounts_(upperBounds_.size() + 1, 0) {
  for (size_t i = 0; i < upperBounds_.size(); ++i) {
    if (!std::isfinite(upperBounds_[i]) || (i > 0 && upperBounds_[i] <= upperBounds_[i - 1])) {
      throw std::invalid_argument("histogram bounds must be finite and strictly ascending");
    }
  }
}

void Histogram::observe(double value) {
  size_t bucket =
      std::lower_bound(upperBounds_.begin(), upperBounds_.end(), value) - upperBounds_.begin();
  std::lock_guard lock(mutex_);
  ++bucketCounts_[bucket];
  sum_ += value;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot snapshot;
  snapshot.upperBounds = upperBounds_;
  std::lock_guard lock(mutex_);
  uint64_t running = 0;
  for (uint64_t count : bucketCounts_) {
    running += count;
    snapshot.cumulativeCounts.push_back(running);
  }
  snapshot.count = running;
  snapshot.sum = sum_;
  return snapshot;
}

std::vector<double> latencyBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
}

FamilyBase::FamilyBase(std::string name, std::string help, std::vector<std::string> labelNames)
    : name_(std::move(name)), help_(std::move(help)), labelNames_(std::move(labelNames)) {}

void FamilyBase::checkValueCount(const std::vector<std::string>& values) const {
  if (values.size() != labelNames_.size()) {
    throw std::invalid_argument("metric " + name_ + " takes " + std::to_string(labelNames_.size()) +
                                " label values, got " + std::to_string(values.size()));
  }
}

template <typename Metric>
Metric& Family<Metric>::with(const std::vector<std::string>& values) {
  checkValueCount(values);
  std::lock_guard lock(mutex_);
  auto& slot = series_[values];
  if (!slot) {
    if (auto kept = removed_.extract(values)) {
      slot = std::move(kept.mapped());
    } else {
      slot = makeMetric<Metric>(histogramBounds_);
    }
  }
  return *slot;
}

template <typename Metric>
void Family<Metric>::remove(const std::vector<std::string>& values) {
  checkValueCount(values);
  std::lock_guard lock(mutex_);
  if (auto gone = series_.extract(values)) removed_.insert(std::move(gone));
}

template <typename Metric>
void Family<Metric>::expose(std::string& out) const {
  out += "# HELP " + name() + ' ';
  appendEscaped(out, help(), false);
  out += "\n# TYPE " + name() + ' ';
  out += typeName<Metric>();
  out += '\n';
  std::lock_guard lock(mutex_);
  for (const auto& [values, metric] : series_)
    appendSeries(out, name(), labelNames(), values, *metric);
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

template <typename Metric>
Family<Metric>& Registry::add(std::string name, std::string help,
                              std::vector<std::string> labelNames, std::vector<double> bounds) {
  if (!validName(name, true)) throw std::invalid_argument("invalid metric name '" + name + "'");
  if (typeName<Metric>() == "counter" &&
      (name.size() <= 6 || name.compare(name.size() - 6, 6, "_total") != 0)) {
    throw std::invalid_argument("counter name '" + name + "' must end in _total");
  }
  for (const auto& label : labelNames) {
    bool reserved = label.starts_with("__") || (typeName<Metric>() == "histogram" && label == "le");
    if (!validName(label, false) || reserved) {
      throw std::invalid_argument("invalid label name '" + label + "' for metric " + name);
    }
  }
  if (typeName<Metric>() == "histogram") Histogram{bounds};  // validates the bounds up front

  std::lock_guard lock(mutex_);
  for (const auto& family : families_) {
    if (family->name() != name) continue;
    auto* same = dynamic_cast<Family<Metric>*>(family.get());
    if (same == nullptr || same->labelNames() != labelNames) {
      throw std::invalid_argument("metric " + name + " is already registered differently");
    }
    return *same;
  }
  auto family = std::make_unique<Family<Metric>>(std::move(name), std::move(help),
                                                 std::move(labelNames), std::move(bounds));
  auto& result = *family;
  families_.push_back(std::move(family));
  return result;
}

CounterFamily& Registry::counter(std::string name, std::string help,
                                 std::vector<std::string> labelNames) {
  return add<Counter>(std::move(name), std::move(help), std::move(labelNames), {});
}

GaugeFamily& Registry::gauge(std::string name, std::string help,
                             std::vector<std::string> labelNames) {
  return add<Gauge>(std::move(name), std::move(help), std::move(labelNames), {});
}

HistogramFamily& Registry::histogram(std::string name, std::string help,
                                     std::vector<double> upperBounds,
                                     std::vector<std::string> labelNames) {
  return add<Histogram>(std::move(name), std::move(help), std::move(labelNames),
                        std::move(upperBounds));
}

std::string Registry::expose() const {
  std::string out;
  std::lock_guard lock(mutex_);
  for (const auto& family : families_) family->expose(out);
  return out;
}

}  // namespace zkagent::metrics
