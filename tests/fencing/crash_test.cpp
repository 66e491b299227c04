// Crash durability: a child process submits operations from several threads and reports each
// answer on a pipe; it is killed with SIGKILL in the middle of the burst. Every operation it
// reported as accepted must be in the log afterwards, and none it reported as rejected.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>
#include <zkagent/fencing.hpp>

#include "temp_dir.hpp"

namespace zkagent::fencing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Runs in the forked child: never returns. Lines "A <opId>" (accepted) and "R <opId>"
// (rejected) go to `out` after the validator answered; each line is one write(2) shorter than
// PIPE_BUF, so lines from different threads never interleave.
[[noreturn]] void submitUntilKilled(const std::filesystem::path& dir, int out) {
  ValidatorOptions options;
  options.dataDir = dir;
  TokenValidator validator(options);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (std::uint64_t i = 0;; ++i) {
        // Thread 0 is an old leader (token 1); the others are the current leader (token 2).
        const std::uint64_t token = t == 0 ? 1 : 2;
        const std::string id = std::to_string(t) + "-" + std::to_string(i);
        const Decision decision =
            validator.submit(Operation{{"acct", token, "host", 1}, id, R"("burst")"});
        const std::string line = (decision.accepted() ? "A " : "R ") + id + "\n";
        if (::write(out, line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(3);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  _exit(0);
}

class KilledChild {
 public:
  explicit KilledChild(pid_t pid) : pid_(pid) {}
  ~KilledChild() { killAndReap(); }
  void killAndReap() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_;
};

TEST(FencingCrash, AcknowledgedOperationsSurviveSigkillMidBurst) {
  testing::TempDir dir;
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    submitUntilKilled(dir.path(), fds[1]);
  }
  ::close(fds[1]);
  KilledChild child(pid);

  // Read answers until enough were acknowledged, then kill while the burst goes on.
  std::set<std::string> accepted;
  std::set<std::string> rejected;
  std::string buffer;
  const auto deadline = Clock::now() + 30s;
  while (accepted.size() < 400 && Clock::now() < deadline) {
    pollfd readable{fds[0], POLLIN, 0};
    if (::poll(&readable, 1, 100) <= 0) continue;
    char chunk[4096];
    const ssize_t got = ::read(fds[0], chunk, sizeof chunk);
    ASSERT_GT(got, 0) << "the child died before it was killed";
    buffer.append(chunk, static_cast<std::size_t>(got));
    for (std::size_t end; (end = buffer.find('\n')) != std::string::npos; buffer.erase(0, end + 1)) {
      const std::string line = buffer.substr(0, end);
      (line[0] == 'A' ? accepted : rejected).insert(line.substr(2));
    }
  }
  child.killAndReap();
  ::close(fds[0]);
  ASSERT_GE(accepted.size(), 400u) << "the child did not acknowledge enough operations in time";

  std::set<std::string> logged;
  for (const LoggedOperation& operation : readLoggedOperations(dir.path())) {
    EXPECT_TRUE(logged.insert(operation.operation.opId).second) << "logged twice";
  }
  for (const std::string& id : accepted) EXPECT_EQ(logged.count(id), 1u) << "lost " << id;
  for (const std::string& id : rejected) EXPECT_EQ(logged.count(id), 0u) << "rejected " << id;

  ValidatorOptions options;
  options.dataDir = dir.path();
  options.rememberedOpsPerAccount = 1'000'000;  // every logged opId, so any can be retried
  TokenValidator reopened(options);
  EXPECT_EQ(reopened.status("acct")->accepted, logged.size());
  const std::string someAccepted = *accepted.begin();
  const std::uint64_t token = someAccepted.starts_with("0-") ? 1 : 2;
  EXPECT_TRUE(reopened.submit(Operation{{"acct", token, "host", 1}, someAccepted, "null"}).replayed);
}

}  // namespace
}  // namespace zkagent::fencing
