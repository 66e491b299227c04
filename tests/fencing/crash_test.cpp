// Real faults in a forked child that reports each answer on a pipe: SIGKILL in the middle of a
// burst, a power cut (SIGKILL, then every write no sync covered is lost), and a write that fails
// part-way. Every operation reported as accepted must be in the log afterwards, and none reported
// as rejected.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include <zkagent/fencing.hpp>

#include "sync_recorder.hpp"
#include "temp_dir.hpp"

namespace zkagent::fencing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// One line to the parent; lines shorter than PIPE_BUF never interleave between threads.
void report(int out, const std::string& line) {
  const std::string withNewline = line + "\n";
  if (::write(out, withNewline.data(), withNewline.size()) !=
      static_cast<ssize_t>(withNewline.size())) {
    _exit(3);
  }
}

// Runs in the forked child until killed: reports "A <opId>" (accepted) or "R <opId>"
// (rejected) after each answer.
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
        report(out, (decision.accepted() ? "A " : "R ") + id);
        // Rejections need no fsync: without a pause the old leader would flood the pipe.
        if (t == 0) std::this_thread::sleep_for(1ms);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  _exit(0);
}

// A forked child that runs `body(out)` and reports on the pipe `out`, one line per write(2);
// killed and reaped when the test ends, whatever happened.
class ForkedChild {
 public:
  explicit ForkedChild(const std::function<void(int)>& body) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::close(fds[0]);
      body(fds[1]);
      _exit(0);
    }
    ::close(fds[1]);
    in_ = fds[0];
  }
  ~ForkedChild() {
    kill();
    ::close(in_);
  }
  ForkedChild(const ForkedChild&) = delete;
  ForkedChild& operator=(const ForkedChild&) = delete;

  // Lines reported so far, reading until `enough` holds, the child closes the pipe, or timeout.
  const std::vector<std::string>& readLinesUntil(
      const std::function<bool(const std::vector<std::string>&)>& enough,
      std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (!enough(lines_) && Clock::now() < deadline) {
      pollfd readable{in_, POLLIN, 0};
      if (::poll(&readable, 1, 100) <= 0) continue;
      char chunk[4096];
      const ssize_t got = ::read(in_, chunk, sizeof chunk);
      if (got <= 0) break;  // the child exited
      partial_.append(chunk, static_cast<std::size_t>(got));
      for (std::size_t end; (end = partial_.find('\n')) != std::string::npos;
           partial_.erase(0, end + 1)) {
        lines_.push_back(partial_.substr(0, end));
      }
    }
    return lines_;
  }

  // Whether the child exited by itself within `timeout` (it is killed otherwise).
  bool exitedWithin(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() >= deadline) {
        kill();
        return false;
      }
      std::this_thread::sleep_for(10ms);
    }
    pid_ = -1;
    return true;
  }

  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int in_ = -1;
  std::vector<std::string> lines_;
  std::string partial_;
};

// A readLinesUntil condition: true once `wanted` lines starting with 'A' (accepted) were read,
// counting each line once however often it is asked.
struct AcceptedLines {
  std::size_t wanted;
  std::size_t seen = 0;
  std::size_t counted = 0;
  bool operator()(const std::vector<std::string>& lines) {
    for (; counted < lines.size(); ++counted) seen += lines[counted][0] == 'A';
    return seen >= wanted;
  }
};

TEST(FencingCrash, AcknowledgedOperationsSurviveSigkillMidBurst) {
  testing::TempDir dir;
  ForkedChild child([&](int out) { submitUntilKilled(dir.path(), out); });
  std::set<std::string> accepted;
  std::set<std::string> rejected;
  AcceptedLines enoughAccepted{400};
  for (const std::string& line : child.readLinesUntil(enoughAccepted, 30s)) {
    (line[0] == 'A' ? accepted : rejected).insert(line.substr(2));
  }
  child.kill();  // in the middle of the burst: the child never stops by itself
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
  EXPECT_TRUE(
      reopened.submit(Operation{{"acct", token, "host", 1}, someAccepted, "null"}).replayed);
}

// A power cut, which SIGKILL alone is not: after SIGKILL the kernel still writes out what the
// child wrote, synced or not, so a log that never synced would pass the test above. Here the child
// reports every completed sync ("S <path> <bytes>", before the answers that rely on it), and after
// the kill each log file is cut to what its last sync covered, as a disk losing power keeps only
// that. (Only the logs' contents are cut; a power cut can also lose directory entries that were
// not synced, which this does not model.)
TEST(FencingCrash, AcknowledgedOperationsSurviveAPowerCutThatLosesEveryUnsyncedWrite) {
  namespace fs = std::filesystem;
  testing::TempDir dir;
  ForkedChild child([&](int out) {
    testing::recordSyncsTo(out);
    submitUntilKilled(dir.path(), out);
  });
  AcceptedLines enoughAccepted{400};
  child.readLinesUntil(enoughAccepted, 30s);
  child.kill();
  // Whatever the child wrote before it died is in the pipe: read it to the end.
  const auto& lines = child.readLinesUntil([](const auto&) { return false; }, 10s);
  std::set<std::string> accepted;
  std::map<fs::path, std::uintmax_t> synced;  // per file: the bytes its last sync covered
  for (const std::string& line : lines) {
    if (line[0] == 'A') accepted.insert(line.substr(2));
    if (line[0] != 'S') continue;
    std::istringstream fields(line.substr(2));
    std::string path;
    std::uintmax_t bytes = 0;
    fields >> path >> bytes;
    synced[fs::path(path)] = bytes;
  }
  ASSERT_GE(accepted.size(), 400u) << "the child did not acknowledge enough operations in time";

  std::size_t logs = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir.path())) {
    if (!entry.path().filename().string().starts_with("log.")) continue;
    ++logs;
    const auto kept = synced.find(entry.path());
    const std::uintmax_t size = fs::file_size(entry.path());
    fs::resize_file(entry.path(), kept == synced.end() ? 0 : std::min(kept->second, size));
  }
  ASSERT_GE(logs, 1u) << "no log in " << dir.path();

  std::set<std::string> logged;
  for (const LoggedOperation& operation : readLoggedOperations(dir.path())) {
    logged.insert(operation.operation.opId);
  }
  std::size_t lost = 0;
  for (const std::string& id : accepted) lost += logged.count(id) == 0;
  EXPECT_EQ(lost, 0u) << "acknowledged operations no completed sync covered, of "
                      << accepted.size();
}

// A real write failure: the file size limit (RLIMIT_FSIZE) makes a write stop part-way and the
// next one fail with EFBIG, as a full disk would.
TEST(FencingCrash, WriteFailureRefusesEverythingAndRestartRecoversTheAcknowledged) {
  testing::TempDir dir;
  ForkedChild child([&](int out) {
    ::signal(SIGXFSZ, SIG_IGN);  // get EFBIG instead of being killed
    const rlimit limit{1000, 1000};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    ValidatorOptions options;
    options.dataDir = dir.path();
    TokenValidator validator(options);
    for (std::uint64_t i = 1; i < 1000; ++i) {
      const std::string id = std::to_string(i);
      try {
        validator.submit(Operation{{"acct", i, "host", 1}, id, "null"});
        report(out, "A " + id);
      } catch (const StorageError&) {
        report(out, "failed " + id);
        break;
      }
    }
    try {
      validator.submit(Operation{{"acct", 5000, "host", 1}, "after", "null"});
      report(out, "accepted after failure");
    } catch (const StorageError&) {
      report(out, "refused after failure");
    }
  });
  const std::vector<std::string> lines = child.readLinesUntil(
      [](const auto& reported) {
        return !reported.empty() && reported.back().find("after failure") != std::string::npos;
      },
      30s);
  ASSERT_GE(lines.size(), 3u);
  EXPECT_TRUE(lines[lines.size() - 2].starts_with("failed ")) << lines[lines.size() - 2];
  EXPECT_EQ(lines.back(), "refused after failure");
  const std::size_t acknowledged = lines.size() - 2;
  ASSERT_TRUE(child.exitedWithin(10s)) << "the child hung after the write failure";

  ValidatorOptions options;
  options.dataDir = dir.path();
  TokenValidator reopened(options);
  EXPECT_GT(reopened.recovery().truncatedBytes, 0u) << "the partial write must be cut";
  EXPECT_EQ(reopened.status("acct")->accepted, acknowledged);
  EXPECT_EQ(reopened.status("acct")->hwm, acknowledged);
}

}  // namespace
}  // namespace zkagent::fencing
