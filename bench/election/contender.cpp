#include "contender.hpp"

#include <algorithm>
#include <csignal>
#include <sstream>
#include <stdexcept>

#include "zktest/deadline.hpp"

namespace zkbench {

namespace {

// What a failure report keeps of a process's stderr: its start and its end (where a stack trace
// names the exception), not megabytes of repeated traces.
std::string shortened(const std::string& text, size_t head = 300, size_t tail = 900) {
  if (text.size() <= head + tail) return text;
  return text.substr(0, head) + "\n[... " + std::to_string(text.size() - head - tail) +
         " bytes ...]\n" + text.substr(text.size() - tail);
}

}  // namespace

int64_t unixNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Implementation zkagentImplementation(const std::filesystem::path& zkElect) {
  return {"zkagent",
          zkElect.empty() ? zktest::binaryPath("zk-elect").string() : zkElect.string(),
          {},
          true};
}

Implementation floorImplementation(size_t multiBytes) {
  std::vector<std::string> args;
  if (multiBytes > 0) args = {"--multi-bytes", std::to_string(multiBytes)};
  return {"floor", zktest::binaryPath("election-floor-probe").string(), std::move(args), true};
}

Implementation kazooImplementation(const std::filesystem::path& peersDir) {
  // The Debian python3-kazoo lives in the system interpreter, not in whatever python3 PATH names.
  return {"kazoo", "/usr/bin/python3", {(peersDir / "kazoo_peer.py").string()}, false};
}

Implementation curatorImplementation(const std::filesystem::path& peersDir,
                                     const std::filesystem::path& classesDir) {
  // The Curator jars' manifests name the rest (client, framework, zookeeper, guava, slf4j-api).
  const std::string jars = "/usr/share/java/curator-recipes.jar:/usr/share/java/slf4j-nop.jar";
  std::filesystem::create_directories(classesDir);
  zktest::ChildProcess javac("javac", {"-nowarn", "-d", classesDir.string(), "-cp", jars,
                                       (peersDir / "CuratorPeer.java").string()});
  auto status = javac.wait(milliseconds(120000));
  if (!status.exitedWith(0)) {
    throw std::runtime_error("javac CuratorPeer.java failed (" + status.describe() + ")\n" +
                             javac.transcript());
  }
  return {"curator", "java", {"-cp", classesDir.string() + ":" + jars, "CuratorPeer"}, false};
}

Contender::Contender(const Implementation& impl, const ContenderOptions& options,
                     std::string instanceId)
    : implName_(impl.name), accounts_(options.accounts) {
  auto args = impl.leadingArgs;
  for (std::string arg : {"--zk", options.zk.c_str(), "--root", options.root.c_str(),
                          "--instance-id", instanceId.c_str(), "--accounts-file",
                          options.accountsFile.c_str(), "--session-timeout-ms"}) {
    args.push_back(std::move(arg));
  }
  args.push_back(std::to_string(options.sessionTimeout.count()));
  spawnedAtNs_ = unixNanos();
  process_ = std::make_unique<zktest::ChildProcess>(impl.program, std::move(args));
}

void Contender::consume(const std::string& line) {
  std::istringstream in(line);
  std::string kind;
  in >> kind;
  if (kind == "SESSION") {
    int64_t ms = 0;
    in >> sessionAtNs_ >> ms;
    negotiatedTimeout_ = milliseconds(ms);
  } else if (kind == "READY") {
    ready_ = true;
  } else if (kind == "LEADER") {
    std::string account;
    int64_t token = 0, at = 0;
    in >> account >> token >> at;
    leading_.insert(account);
    leaderAtNs_.push_back(at);
  } else if (kind == "LOST") {
    std::string account, reason;
    int64_t at = 0;
    in >> account >> reason >> at;
    leading_.erase(account);
    if (at > 0) lostAtNs_.push_back(at);
  }
}

LineTimeline Contender::timelineOf(const std::vector<int64_t>& lineTimes, int64_t sinceNs) {
  std::vector<int64_t> times;
  for (int64_t at : lineTimes) {
    if (at >= sinceNs) times.push_back(at);
  }
  LineTimeline t;
  t.lines = times.size();
  if (times.empty()) return t;
  std::sort(times.begin(), times.end());
  int64_t pause = 0;
  for (size_t i = 1; i < times.size(); ++i) {
    if (times[i] - times[i - 1] > pause) {
      pause = times[i] - times[i - 1];
      t.pauseAfter = i;
    }
  }
  auto ms = [](int64_t ns) { return static_cast<double>(ns) / 1e6; };
  t.firstMs = ms(times.front() - sinceNs);
  t.halfMs = ms(times[times.size() / 2] - sinceNs);
  t.lastMs = ms(times.back() - sinceNs);
  t.longestPauseMs = ms(pause);
  return t;
}

template <typename Done>
void Contender::pump(Done done, milliseconds timeout, const char* what) {
  const zktest::Deadline deadline(timeout);
  while (!done()) {
    auto line = process_->tryReadLine(deadline.remaining());
    if (!line) {
      throw std::runtime_error(implName_ + ": " + what + " not reached within " +
                               std::to_string(timeout.count()) + " ms (" +
                               std::to_string(leading_.size()) + "/" + std::to_string(accounts_) +
                               " accounts led)\n" + shortened(process_->stderrText()));
    }
    consume(*line);
  }
}

void Contender::awaitSession(milliseconds timeout) {
  pump([this] { return sessionAtNs_ != 0; }, timeout, "SESSION");
}

void Contender::awaitReady(milliseconds timeout) {
  pump([this] { return ready_; }, timeout, "READY");
}

void Contender::awaitLeadingAll(milliseconds timeout) {
  pump([this] { return leading_.size() >= accounts_; }, timeout, "leadership of every account");
}

int64_t Contender::terminate() {
  const int64_t at = unixNanos();
  process_->signal(SIGTERM);
  return at;
}

int64_t Contender::crash() {
  const int64_t at = unixNanos();
  process_->kill();
  return at;
}

void Contender::reap(milliseconds timeout) {
  try {
    process_->wait(timeout);
  } catch (const std::runtime_error&) {
    process_->kill();
  }
  // What it printed last (a stop's LOST lines) counts too.
  while (auto line = process_->tryReadLine(milliseconds(0))) consume(*line);
}

}  // namespace zkbench
