// Runs build/bin/presence-experiments as a user would and checks its report: exactly the keys
// detection_latency, renewal_peak and negative_control, results within their bounds, the renewal
// peak (5000/s without jitter) and negative-control numbers, and determinism per seed.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;

struct CliRun {
  int exitCode;
  std::string output;  // stdout and stderr
};

// Each case has a directory of its own (mkdtemp under gtest's temp dir), removed when it ends:
// ctest runs the cases as parallel processes, and a log or report path shared between them let
// one case read another's output, or find a file it must not have written.
class PresenceExperiments : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::path(testing::TempDir()) / "presence-experiments-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << pattern << ": " << std::strerror(errno);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    if (!dir_.empty()) fs::remove_all(dir_, ignored);
  }

  // Every run has a deadline: `timeout` kills a hung binary. Each run's output goes to a log of
  // its own.
  CliRun runExperiments(const std::string& arguments) {
    const fs::path log = dir_ / ("run-" + std::to_string(runs_++) + ".log");
    const std::string command = "timeout 120 " + std::string(PRESENCE_EXPERIMENTS_BIN) + " " +
                                arguments + " >" + log.string() + " 2>&1";
    const int status = std::system(command.c_str());
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    return CliRun{WIFEXITED(status) ? WEXITSTATUS(status) : -1, text.str()};
  }

  std::string reportPath(const std::string& name) const { return (dir_ / name).string(); }

 private:
  fs::path dir_;
  int runs_ = 0;
};

nlohmann::json readJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void collectKeys(const nlohmann::json& node, const std::string& prefix,
                 std::set<std::string>& out) {
  for (const auto& [key, value] : node.items()) {
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    if (value.is_object()) {
      collectKeys(value, path, out);
    } else {
      out.insert(path);
    }
  }
}

std::set<std::string> expectedKeys() {
  std::set<std::string> keys;
  for (const char* way : {"close", "half_open", "gateway_crash"}) {
    for (const char* stat : {"min", "median", "max", "bound"}) {
      keys.insert(std::string("detection_latency.") + way + "." + stat);
    }
  }
  for (const char* mode : {"no_jitter", "jitter"}) {
    keys.insert(std::string("renewal_peak.") + mode + ".peak_per_second");
    keys.insert(std::string("renewal_peak.") + mode + ".final_leases");
  }
  for (const char* key :
       {"lease_expirations", "published_debounce_20", "published_debounce_0", "device_flaps"}) {
    keys.insert(std::string("negative_control.") + key);
  }
  return keys;
}

TEST_F(PresenceExperiments, ReportHasExactlyTheIssueKeysAndResultsWithinBounds) {
  const std::string path = reportPath("report-seed-7.json");
  const CliRun run = runExperiments("--out " + path + " --seed 7");
  ASSERT_EQ(run.exitCode, 0) << run.output;
  EXPECT_NE(run.output.find("half-open"), std::string::npos) << run.output;  // the table
  const nlohmann::json report = readJson(path);

  std::set<std::string> keys;
  collectKeys(report, "", keys);
  EXPECT_EQ(keys, expectedKeys());

  const auto& latency = report["detection_latency"];
  const std::pair<const char*, double> expectedBounds[] = {
      {"close", 20}, {"half_open", 100}, {"gateway_crash", 175}};
  for (const auto& [way, bound] : expectedBounds) {
    const auto& stats = latency[way];
    EXPECT_EQ(stats["bound"].get<double>(), bound) << way;
    EXPECT_LE(stats["min"].get<double>(), stats["median"].get<double>()) << way;
    EXPECT_LE(stats["median"].get<double>(), stats["max"].get<double>()) << way;
    EXPECT_LE(stats["max"].get<double>(), bound) << way;
    EXPECT_GT(stats["min"].get<double>(), 0) << way;
  }
  EXPECT_EQ(latency["close"]["min"].get<double>(), 20);
  EXPECT_EQ(latency["close"]["max"].get<double>(), 20);
  // One batch renewed every lease of the crashed agent, so they all expire together.
  EXPECT_EQ(latency["gateway_crash"]["min"], latency["gateway_crash"]["max"]);
  EXPECT_GE(latency["gateway_crash"]["min"].get<double>(), 150 - 60 * 1.1 + 20);
  EXPECT_LT(latency["half_open"]["min"], latency["half_open"]["max"]);

  const auto& renewal = report["renewal_peak"];
  EXPECT_EQ(renewal["no_jitter"]["peak_per_second"], 5000);
  EXPECT_LE(renewal["jitter"]["peak_per_second"].get<int>(), 1250);  // a few agents per second
  EXPECT_EQ(renewal["no_jitter"]["final_leases"], 5000);
  EXPECT_EQ(renewal["jitter"]["final_leases"], 5000);

  const auto& control = report["negative_control"];
  EXPECT_EQ(control["lease_expirations"], 16);
  EXPECT_EQ(control["published_debounce_20"], 1);
  EXPECT_EQ(control["published_debounce_0"], 33);
  EXPECT_EQ(control["device_flaps"], 33);
}

TEST_F(PresenceExperiments, SameSeedGivesTheSameReportAndAnotherSeedAnotherSample) {
  const std::string first = reportPath("report-a.json");
  const std::string second = reportPath("report-b.json");
  const std::string other = reportPath("report-c.json");
  ASSERT_EQ(runExperiments("--seed 3 --out " + first).exitCode, 0);
  ASSERT_EQ(runExperiments("--seed 3 --out " + second).exitCode, 0);
  ASSERT_EQ(runExperiments("--seed 4 --out " + other).exitCode, 0);
  EXPECT_EQ(readJson(first), readJson(second));
  EXPECT_NE(readJson(first)["detection_latency"]["half_open"],
            readJson(other)["detection_latency"]["half_open"]);
}

TEST_F(PresenceExperiments, BadArgumentsExitWithCode2AndSayWhatIsWrong) {
  const std::string path = reportPath("never-written.json");
  const std::pair<std::string, std::string> cases[] = {
      {"", "--out is required"},
      {"--seed 5", "--out is required"},
      {"--out " + path + " --seed banana", "--seed must be an unsigned integer"},
      {"--out " + path + " --seed -1", "--seed must be an unsigned integer"},
      {"--out", "--out needs a value"},
      {"--out " + path + " --fast", "unknown argument '--fast'"},
  };
  for (const auto& [arguments, message] : cases) {
    const CliRun run = runExperiments(arguments);
    EXPECT_EQ(run.exitCode, 2) << arguments;
    EXPECT_NE(run.output.find(message), std::string::npos) << arguments << "\n" << run.output;
    EXPECT_NE(run.output.find("usage:"), std::string::npos) << arguments;
  }
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
