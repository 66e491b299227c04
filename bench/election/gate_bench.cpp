#include "gate_bench.hpp"

#include <benchmark/benchmark.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <future>
#include <map>
#include <stdexcept>
#include <thread>

#include "zkagent/election.hpp"
#include "zkbench/stats.hpp"

namespace zkbench {

namespace asio = boost::asio;
using namespace zkagent::election;
using Clock = std::chrono::steady_clock;

namespace {

// Keeps Google Benchmark's console output and remembers each run's time per iteration.
class CollectingReporter : public benchmark::ConsoleReporter {
 public:
  CollectingReporter() : ConsoleReporter(OO_Tabular) {}  // no colour codes in a redirected table
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& run : runs) {
      if (run.error_occurred)
        throw std::runtime_error(run.benchmark_name() + ": " + run.error_message);
      timePerIteration[run.run_name.function_name + "/threads:" + std::to_string(run.threads)] =
          run.GetAdjustedRealTime();
    }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, double> timePerIteration;
};

// One strict check, waited for; throws when it is refused or does not answer.
void checkStrictOnce(ElectionGroup& group, const std::string& account) {
  std::promise<GateDecision> answer;
  auto future = answer.get_future();
  group.checkStrict(account, [&answer](GateDecision d) { answer.set_value(std::move(d)); });
  if (future.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    throw std::runtime_error("strict check of " + account + " did not answer within 10 s");
  }
  if (auto d = future.get(); !d.allowed()) {
    throw std::runtime_error("strict check of " + account +
                             " refused: " + std::string(toString(d.verdict)));
  }
}

// Strict checks per second with `inFlight` of them outstanding at any time, for `duration`.
double strictThroughput(ElectionGroup& group, const std::vector<std::string>& accounts,
                        size_t inFlight, std::chrono::milliseconds duration) {
  struct Pipeline {
    std::mutex mu;
    std::condition_variable drained;
    size_t outstanding = 0, completed = 0, refused = 0;
    bool stopping = false;
  };
  auto pipeline = std::make_shared<Pipeline>();
  std::function<void(size_t)> issue = [&, pipeline](size_t n) {
    group.checkStrict(accounts[n % accounts.size()], [&, pipeline, n](GateDecision d) {
      std::lock_guard lock(pipeline->mu);
      ++pipeline->completed;
      if (!d.allowed()) ++pipeline->refused;
      if (pipeline->stopping) {
        if (--pipeline->outstanding == 0) pipeline->drained.notify_all();
        return;
      }
      issue(n + inFlight);
    });
  };
  const auto started = Clock::now();
  {
    std::lock_guard lock(pipeline->mu);
    pipeline->outstanding = inFlight;
  }
  for (size_t i = 0; i < inFlight; ++i) issue(i);
  std::this_thread::sleep_for(duration);
  std::unique_lock lock(pipeline->mu);
  pipeline->stopping = true;
  const size_t completedAtStop = pipeline->completed;
  const auto elapsed = Clock::now() - started;
  if (!pipeline->drained.wait_for(lock, std::chrono::seconds(10),
                                  [&] { return pipeline->outstanding == 0; })) {
    throw std::runtime_error("pipelined strict checks did not drain within 10 s");
  }
  if (pipeline->refused > 0) {
    throw std::runtime_error(std::to_string(pipeline->refused) +
                             " pipelined strict checks were refused");
  }
  return static_cast<double>(completedAtStop) / std::chrono::duration<double>(elapsed).count();
}

}  // namespace

GateResult measureGate(const std::string& zk, const std::string& root, size_t accountCount) {
  GateResult result;
  result.accounts = accountCount;
  std::vector<std::string> accounts;
  for (size_t i = 0; i < accountCount; ++i) accounts.push_back("acc-" + std::to_string(i));

  asio::io_context io;
  auto work = asio::make_work_guard(io);
  std::thread ioThread([&io] { io.run(); });
  ElectionOptions options;
  options.session.hosts = zk;
  options.session.timeout = std::chrono::milliseconds(2000);
  options.root = root;
  options.instanceId = "gate-bench";
  ElectionGroup group(io, options);
  std::atomic<size_t> led{0};
  std::promise<void> allLed;
  group.onLeadership([&](const LeadershipEvent& ev) {
    if (ev.kind == LeadershipEvent::Kind::Acquired && ++led == accountCount) allLed.set_value();
  });
  for (auto& a : accounts) group.join(a);

  auto finish = [&] {
    std::promise<void> stopped;
    group.stop([&stopped] { stopped.set_value(); });
    stopped.get_future().wait_for(std::chrono::seconds(10));
    work.reset();
    io.stop();
    ioThread.join();
  };
  try {
    const auto started = Clock::now();
    group.start();
    if (allLed.get_future().wait_for(std::chrono::seconds(120)) != std::future_status::ready) {
      throw std::runtime_error("gate bench: only " + std::to_string(led.load()) + " of " +
                               std::to_string(accountCount) + " accounts led after 120 s");
    }
    result.acquireMs = std::chrono::duration<double, std::milli>(Clock::now() - started).count();

    const std::string fastName = "gate_check_fast/accounts:" + std::to_string(accountCount);
    const std::string strictName = "gate_check_strict/accounts:" + std::to_string(accountCount);
    benchmark::RegisterBenchmark(fastName.c_str(),
                                 [&](benchmark::State& state) {
                                   size_t i = static_cast<size_t>(state.thread_index()) *
                                              7919;  // threads spread over accounts
                                   for (auto _ : state) {
                                     auto decision = group.check(accounts[i++ % accounts.size()]);
                                     if (!decision.allowed())
                                       state.SkipWithError("fast check refused");
                                     benchmark::DoNotOptimize(decision);
                                   }
                                 })
        ->Threads(1)
        ->Threads(2)
        ->MinTime(0.5)
        ->UseRealTime()
        ->Unit(benchmark::kNanosecond);
    benchmark::RegisterBenchmark(strictName.c_str(),
                                 [&](benchmark::State& state) {
                                   size_t i = 0;
                                   for (auto _ : state)
                                     checkStrictOnce(group, accounts[i++ % accounts.size()]);
                                 })
        ->MinTime(1.0)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    CollectingReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    benchmark::ClearRegisteredBenchmarks();
    result.fastNs = reporter.timePerIteration.at(fastName + "/threads:1");
    result.fastNs2Threads = reporter.timePerIteration.at(fastName + "/threads:2");
    result.strictUsMean = reporter.timePerIteration.at(strictName + "/threads:1");

    // Google Benchmark reports the mean; the tail of the strict check matters too.
    std::vector<double> strictUs;
    for (size_t i = 0; i < 2000; ++i) {
      const auto t0 = Clock::now();
      checkStrictOnce(group, accounts[(i * 7) % accounts.size()]);
      strictUs.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    auto summary = summarize(strictUs);
    result.strictUsP50 = summary.p50;
    result.strictUsP99 = summary.p99;
    result.strictPipelinedPerSecond =
        strictThroughput(group, accounts, 64, std::chrono::milliseconds(1000));
    const auto statusStarted = Clock::now();
    constexpr int kSnapshots = 20;
    for (int i = 0; i < kSnapshots; ++i) benchmark::DoNotOptimize(group.status());
    result.statusMs =
        std::chrono::duration<double, std::milli>(Clock::now() - statusStarted).count() /
        kSnapshots;
  } catch (...) {
    finish();
    throw;
  }
  finish();
  return result;
}

}  // namespace zkbench
