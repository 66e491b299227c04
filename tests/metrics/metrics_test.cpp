#include "zkagent/metrics.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace zkagent::metrics;

TEST(Metrics, CounterWithoutLabelsIsExposedWithHelpAndType) {
  Registry registry;
  registry.counter("requests_total", "Requests served.").with({}).inc(3);
  EXPECT_EQ(registry.expose(),
            "# HELP requests_total Requests served.\n"
            "# TYPE requests_total counter\n"
            "requests_total 3\n");
}

TEST(Metrics, LabelledSeriesAreKeptApartAndExposedWithEscapedValues) {
  Registry registry;
  auto& ops = registry.counter("ops_total", "Ops by result.", {"result", "mode"});
  ops.with({"accepted", "hwm"}).inc();
  ops.with({"accepted", "hwm"}).inc();
  ops.with({"quote\"back\\slash\nnewline", "x"}).inc(0.5);
  EXPECT_EQ(ops.with({"accepted", "hwm"}).value(), 2);
  std::string text = registry.expose();
  EXPECT_NE(text.find("\nops_total{result=\"accepted\",mode=\"hwm\"} 2\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("\nops_total{result=\"quote\\\"back\\\\slash\\nnewline\",mode=\"x\"} 0.5\n"),
            std::string::npos)
      << text;
}

TEST(Metrics, WrongNumberOfLabelValuesIsRejected) {
  Registry registry;
  auto& ops = registry.counter("ops_total", "Ops.", {"result"});
  EXPECT_THROW(ops.with({}), std::invalid_argument);
  EXPECT_THROW(ops.with({"a", "b"}), std::invalid_argument);
}

// A series whose label value went away leaves the exposition; the reference a holder kept stays
// usable, and the same values bring the series back with the value it had (never backwards).
TEST(Metrics, ARemovedSeriesLeavesTheExpositionAndComesBackWithItsValue) {
  Registry registry;
  auto& failures = registry.counter("beats_failed_total", "Failed beats.", {"peer"});
  auto& kept = failures.with({"http://a"});
  kept.inc(2);
  failures.with({"http://b"}).inc();
  failures.remove({"http://a"});
  failures.remove({"http://never"});  // nothing to remove: no error
  auto text = registry.expose();
  EXPECT_EQ(text.find("http://a"), std::string::npos) << text;
  EXPECT_NE(text.find("\nbeats_failed_total{peer=\"http://b\"} 1\n"), std::string::npos) << text;
  kept.inc();  // a late update to a removed series is harmless and not shown
  EXPECT_EQ(registry.expose().find("http://a"), std::string::npos);
  EXPECT_EQ(&failures.with({"http://a"}), &kept);
  text = registry.expose();
  EXPECT_NE(text.find("\nbeats_failed_total{peer=\"http://a\"} 3\n"), std::string::npos) << text;
  EXPECT_THROW(failures.remove({}), std::invalid_argument);
}

TEST(Metrics, CounterRefusesToGoDown) {
  Registry registry;
  auto& counter = registry.counter("x_total", "X.").with({});
  EXPECT_THROW(counter.inc(-1), std::invalid_argument);
  EXPECT_EQ(counter.value(), 0);
}

TEST(Metrics, GaugeGoesUpAndDown) {
  Registry registry;
  auto& gauge = registry.gauge("connections", "Open connections.").with({});
  gauge.inc();
  gauge.inc(4);
  gauge.dec(2);
  EXPECT_EQ(gauge.value(), 3);
  gauge.set(-1.25);
  EXPECT_NE(registry.expose().find("\nconnections -1.25\n"), std::string::npos);
}

TEST(Metrics, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  Registry registry;
  auto& latency = registry.histogram("op_seconds", "Latency.", {0.1, 1}, {"path"});
  latency.with({"a"}).observe(0.05);
  latency.with({"a"}).observe(0.1);  // upper bounds are inclusive
  latency.with({"a"}).observe(0.5);
  latency.with({"a"}).observe(7);
  EXPECT_EQ(registry.expose(),
            "# HELP op_seconds Latency.\n"
            "# TYPE op_seconds histogram\n"
            "op_seconds_bucket{path=\"a\",le=\"0.1\"} 2\n"
            "op_seconds_bucket{path=\"a\",le=\"1\"} 3\n"
            "op_seconds_bucket{path=\"a\",le=\"+Inf\"} 4\n"
            "op_seconds_sum{path=\"a\"} 7.65\n"
            "op_seconds_count{path=\"a\"} 4\n");
}

TEST(Metrics, InvalidNamesAndBoundsAreRejected) {
  Registry registry;
  EXPECT_THROW(registry.counter("requests", "no _total suffix"), std::invalid_argument);
  EXPECT_THROW(registry.gauge("9lives", "starts with a digit"), std::invalid_argument);
  EXPECT_THROW(registry.gauge("has-dash", "dash"), std::invalid_argument);
  EXPECT_THROW(registry.gauge("g", "reserved label", {"__name"}), std::invalid_argument);
  EXPECT_THROW(registry.histogram("h", "le is reserved", {1}, {"le"}), std::invalid_argument);
  EXPECT_THROW(registry.histogram("h", "descending", {2, 1}), std::invalid_argument);
  EXPECT_EQ(registry.expose(), "");
}

TEST(Metrics, RegisteringTheSameFamilyTwiceReturnsItButAClashThrows) {
  Registry registry;
  auto& first = registry.counter("a_total", "A.", {"x"});
  EXPECT_EQ(&registry.counter("a_total", "A.", {"x"}), &first);
  EXPECT_THROW(registry.counter("a_total", "A.", {"y"}), std::invalid_argument);
  EXPECT_THROW(registry.gauge("a_total", "A."), std::invalid_argument);
}

TEST(Metrics, ConcurrentUpdatesAreAllCounted) {
  Registry registry;
  auto& family = registry.counter("hits_total", "Hits.", {"worker"});
  auto& histogram = registry.histogram("h_seconds", "H.", {1}).with({});
  constexpr int kThreads = 4;
  constexpr int kPerThread = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        family.with({t % 2 == 0 ? "even" : "odd"}).inc();
        histogram.observe(0.5);
        if (i % 1000 == 0) (void)registry.expose();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(family.with({"even"}).value() + family.with({"odd"}).value(), kThreads * kPerThread);
  EXPECT_EQ(histogram.snapshot().count, static_cast<uint64_t>(kThreads * kPerThread));
}

TEST(Metrics, ExpositionPassesPromtool) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) GTEST_SKIP() << "promtool absent";
  Registry registry;
  registry.counter("zkagent_ops_total", "Ops by result.", {"result"}).with({"accepted"}).inc();
  registry.counter("zkagent_ops_total", "Ops by result.", {"result"}).with({"stale\"token"}).inc();
  registry.gauge("zkagent_trusted", "1 when the \\ cache\nis trusted.").with({}).set(1);
  auto& histogram = registry.histogram("zkagent_op_seconds", "Latency.", latencyBuckets(), {"m"});
  histogram.with({"x"}).observe(0.003);
  histogram.with({"y"}).observe(42);
  registry.gauge("zkagent_unused", "Declared but never set.", {"a"});

  auto path = std::filesystem::temp_directory_path() /
              ("metrics_test_" + std::to_string(::getpid()) + ".prom");
  std::ofstream(path) << registry.expose();
  int status = std::system(("promtool check metrics < " + path.string() + " 2>&1").c_str());
  std::filesystem::remove(path);
  EXPECT_EQ(status, 0) << registry.expose();
}
