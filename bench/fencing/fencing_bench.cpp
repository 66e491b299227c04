// Benchmarks of the fencing library.
//
//   ValidatorCheck/*   cost of one in-memory decision (no data directory)
//   DurableCommit/*    accepted operations per second with fdatasync before every answer, with
//                      group commit and with one fsync per operation, at 1 and 64 submitters;
//                      ops_per_sync shows how many records one fdatasync carried, p50_us/p99_us
//                      are per-thread latency percentiles averaged over the threads.
//
// The data directory is under $TMPDIR (default /tmp): run it on the disk you care about.
#include <benchmark/benchmark.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>
#include <zkagent/fencing.hpp>

#include "zkbench/stats.hpp"

namespace {

using namespace zkagent::fencing;

// Distinct opIds, more than the validator remembers, so that cycling through them never
// replays an earlier answer.
std::vector<Operation> distinctOperations(std::uint64_t token, std::size_t count,
                                          const std::string& prefix) {
  std::vector<Operation> operations;
  operations.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    operations.push_back(Operation{{"wx_account_1", token, "host-a-001", 72057594037927937LL},
                                   prefix + std::to_string(i),
                                   R"({"to":"u1","text":"hello"})"});
  }
  return operations;
}

void ValidatorCheckAccepted(benchmark::State& state) {
  TokenValidator validator;
  const std::vector<Operation> operations = distinctOperations(5, 4096, "op-");
  std::size_t next = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(validator.submit(operations[next]));
    next = (next + 1) % operations.size();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(ValidatorCheckAccepted);

void ValidatorCheckAcceptedWithActiveView(benchmark::State& state) {
  TokenValidator validator;
  const std::vector<Operation> operations = distinctOperations(5, 4096, "op-");
  std::size_t next = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(validator.submit(operations[next], ActiveView::present(5)));
    next = (next + 1) % operations.size();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(ValidatorCheckAcceptedWithActiveView);

void ValidatorCheckStale(benchmark::State& state) {
  TokenValidator validator;
  validator.submit(distinctOperations(9, 1, "raise-")[0]);
  const Operation stale = distinctOperations(4, 1, "stale-")[0];
  for (auto _ : state) benchmark::DoNotOptimize(validator.submit(stale));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(ValidatorCheckStale);

void ValidatorCheckReplayedRetry(benchmark::State& state) {
  TokenValidator validator;
  const Operation retried = distinctOperations(5, 1, "retry-")[0];
  validator.submit(retried);
  for (auto _ : state) benchmark::DoNotOptimize(validator.submit(retried));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(ValidatorCheckReplayedRetry);

// Shared by the threads of one DurableCommit run; thread 0 opens and closes it (Google
// Benchmark starts and ends the timed loop of all threads together).
std::unique_ptr<TokenValidator> sharedValidator;
std::filesystem::path sharedDir;

void DurableCommit(benchmark::State& state) {
  const auto mode = static_cast<CommitMode>(state.range(0));
  if (state.thread_index() == 0) {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "fencing-bench-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      state.SkipWithError("mkdtemp failed");
      return;
    }
    sharedDir = pattern;
    ValidatorOptions options;
    options.dataDir = sharedDir;
    options.commitMode = mode;
    sharedValidator = std::make_unique<TokenValidator>(options);
  }
  std::string prefix = std::to_string(state.thread_index());
  prefix += '-';
  const std::vector<Operation> operations = distinctOperations(5, 4096, prefix);
  std::vector<std::uint64_t> latenciesNs;
  std::size_t next = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(sharedValidator->submit(operations[next]));
    latenciesNs.push_back(
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                       std::chrono::steady_clock::now() - start)
                                       .count()));
    next = (next + 1) % operations.size();
  }
  std::sort(latenciesNs.begin(), latenciesNs.end());
  state.counters["p50_us"] =
      benchmark::Counter(static_cast<double>(zkbench::quantileOfSorted(latenciesNs, 0.50)) / 1000,
                         benchmark::Counter::kAvgThreads);
  state.counters["p99_us"] =
      benchmark::Counter(static_cast<double>(zkbench::quantileOfSorted(latenciesNs, 0.99)) / 1000,
                         benchmark::Counter::kAvgThreads);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  if (state.thread_index() == 0) {
    const CommitStats stats = sharedValidator->commitStats();
    state.counters["ops_per_sync"] = static_cast<double>(stats.recordsWritten) /
                                     static_cast<double>(std::max<std::uint64_t>(stats.syncs, 1));
    sharedValidator.reset();
    std::filesystem::remove_all(sharedDir);
  }
}
BENCHMARK(DurableCommit)
    ->ArgName("per_operation")
    ->Arg(static_cast<int>(CommitMode::group))
    ->Arg(static_cast<int>(CommitMode::per_operation))
    ->Threads(1)
    ->Threads(64)
    ->UseRealTime()
    ->MinTime(2.0);

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);  // one "store opened" line per run would drown the table
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
