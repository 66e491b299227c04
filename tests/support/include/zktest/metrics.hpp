#pragma once
// Prometheus text exposition as the tests read it: a series is matched on the whole sample line,
// so that "..._total 5" never passes for "..._total 50" nor "x_total" for "prefix_x_total".
//
//   EXPECT_EQ(zktest::metricSample(text, R"(zkagent_ops_total{result="accepted"})"), 1);

#include <optional>
#include <string>

namespace zktest {

// The value of one series in a Prometheus text exposition, named exactly as exposed (the family
// and its labels: `zkagent_presence_lease_dropped_total{kind="renew"}`), or nullopt when absent.
// Exact, so that "..._total 5" never matches "..._total 50".
std::optional<double> metricSample(const std::string& exposition, const std::string& series);

// Whether the exposition has a sample of the family `name` (a sample line, not a comment, whose
// metric name is exactly `name`, with any labels and value).
bool hasMetricFamily(const std::string& exposition, const std::string& name);

}  // namespace zktest
