#include "zktest/zookeeper_server.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "loopback.hpp"

namespace zktest {

namespace {

constexpr const char* zookeeperJar = "/usr/share/java/zookeeper.jar";
constexpr const char* loggerJar =
    "/usr/share/java/slf4j-simple.jar";  // the server log, readable on failure
constexpr std::string_view startMarker = "=== zktest: starting ";

std::filesystem::path makeTemporaryDirectory() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/zktest-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) detail::throwErrno("mkdtemp " + pattern);
  // ZooKeeper reports its data dir as configured; compare against the canonical form.
  return std::filesystem::canonical(pattern);
}

std::vector<std::string> javaArguments(const std::filesystem::path& config, bool quorum,
                                       bool serverDefaults) {
  std::vector<std::string> args;
  if (!serverDefaults) {
    args = {
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-XX:-UsePerfData",
        "-Dzookeeper.forceSync=no",       // test data need not survive a power cut
        "-Dzookeeper.preAllocSize=1024",  // KiB; the default preallocates 64 MiB per log
    };
  }
  args.insert(args.end(),
              {
                  "-Djava.net.preferIPv4Stack=true",
                  "-Dzookeeper.cnxTimeout=1000",  // do not wait 5 s on a dead or paused peer
                  "-Dzookeeper.fastleader.maxNotificationInterval=500",  // re-send votes often
                  "-Dorg.slf4j.simpleLogger.showDateTime=true",
                  "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
                  "-cp",
                  std::string(zookeeperJar) + ":" + loggerJar,
                  quorum ? "org.apache.zookeeper.server.quorum.QuorumPeerMain"
                         : "org.apache.zookeeper.server.ZooKeeperServerMain",
                  config.string(),
              });
  return args;
}

bool contains(const std::optional<std::string>& text, std::string_view part) {
  return text && text->find(part) != std::string::npos;
}

}  // namespace

std::optional<std::string> fourLetterWord(std::uint16_t port, std::string_view word,
                                          milliseconds timeout) {
  const Deadline deadline(timeout);
  detail::UniqueFd socket = detail::connectToLoopback(port, deadline);
  if (!socket) return std::nullopt;
  if (::send(socket.get(), word.data(), word.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(word.size())) {
    return std::nullopt;
  }
  std::string answer;
  char buffer[4096];
  while (true) {  // the server closes the connection after its answer
    pollfd readable{socket.get(), POLLIN, 0};
    if (::poll(&readable, 1, static_cast<int>(deadline.remaining().count())) != 1)
      return std::nullopt;
    const ssize_t got = ::recv(socket.get(), buffer, sizeof buffer, 0);
    if (got == 0) return answer;
    if (got < 0) return std::nullopt;
    answer.append(buffer, static_cast<std::size_t>(got));
  }
}

ZooKeeperServer::ZooKeeperServer(ZooKeeperOptions options)
    : options_(options), directory_(makeTemporaryDirectory()) {
  try {
    const Deadline deadline(options_.startTimeout);
    for (int attempt = 1;; ++attempt) {
      clientPort_ = detail::reserveLoopbackPorts(1).front();
      writeConfig();
      launch();
      try {
        awaitServing(deadline);
        return;
      } catch (const std::runtime_error&) {
        if (attempt == detail::maxPortRaceAttempts || !lostPortRace()) throw;
      }
    }
  } catch (...) {
    if (process_) process_->kill();
    std::filesystem::remove_all(directory_);
    throw;
  }
}

ZooKeeperServer::ZooKeeperServer(ZooKeeperOptions options, int myid, std::vector<Peer> peers)
    : options_(options),
      myid_(myid),
      peers_(std::move(peers)),
      clientPort_(peers_.at(static_cast<std::size_t>(myid - 1)).clientPort),
      directory_(makeTemporaryDirectory()) {
  try {
    writeConfig();
    launch();
  } catch (...) {
    if (process_) process_->kill();
    std::filesystem::remove_all(directory_);
    throw;
  }
}

ZooKeeperServer::~ZooKeeperServer() {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  if (test != nullptr && test->result()->Failed()) {
    std::cerr << "--- server.log of ZooKeeper on " << connectString()
              << " (tail), for the failed test " << test->test_suite_name() << "." << test->name()
              << ":\n"
              << logTail() << "---\n";
  }
  if (process_) process_->kill();
  std::error_code ignored;  // a destructor must not throw; a leftover temp dir is harmless
  std::filesystem::remove_all(directory_, ignored);
}

std::string ZooKeeperServer::connectString() const {
  return "127.0.0.1:" + std::to_string(clientPort_);
}

pid_t ZooKeeperServer::pid() const { return running() ? process_->pid() : -1; }

bool ZooKeeperServer::running() const { return process_ && process_->running(); }

void ZooKeeperServer::writeConfig() const {
  std::filesystem::create_directories(directory_ / "data");
  std::ofstream config(directory_ / "zoo.cfg", std::ios::trunc);
  config << "tickTime=" << options_.tickTime.count() << "\n"
         << "initLimit=10\nsyncLimit=5\n"
         << "dataDir=" << (directory_ / "data").string() << "\n"
         << "clientPort=" << clientPort_ << "\n"
         << "clientPortAddress=127.0.0.1\n"
         << "admin.enableServer=false\n"
         << "4lw.commands.whitelist=*\n"
         << "minSessionTimeout=" << options_.minSessionTimeout.count() << "\n"
         << "maxSessionTimeout=" << options_.maxSessionTimeout.count() << "\n";
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    config << "server." << i + 1 << "=127.0.0.1:" << peers_[i].quorumPort << ":"
           << peers_[i].electionPort << "\n";
  }
  if (!config) throw std::runtime_error("cannot write " + (directory_ / "zoo.cfg").string());
  if (myid_ != 0) std::ofstream(directory_ / "data" / "myid", std::ios::trunc) << myid_ << "\n";
}

void ZooKeeperServer::launch() {
  for (const char* jar : {zookeeperJar, loggerJar}) {
    if (!std::filesystem::exists(jar)) {
      throw std::runtime_error(std::string(jar) +
                               " not found: install the Debian packages zookeeper and "
                               "default-jre-headless (scripts/setup)");
    }
  }
  std::ofstream(directory_ / "server.log", std::ios::app)
      << startMarker
      << (myid_ != 0 ? "ensemble member " + std::to_string(myid_) : "standalone server") << " on "
      << connectString() << "\n";
  process_ = std::make_unique<ChildProcess>(
      "java", javaArguments(directory_ / "zoo.cfg", myid_ != 0, options_.serverDefaults),
      directory_ / "server.log");
}

bool ZooKeeperServer::serving() const {
  constexpr milliseconds probeTimeout(1000);
  if (myid_ == 0 && fourLetterWord(clientPort_, "ruok", probeTimeout) != "imok") return false;
  if (!contains(fourLetterWord(clientPort_, "conf", probeTimeout), (directory_ / "data").string()))
    return false;
  if (myid_ == 0) return true;
  const auto status = fourLetterWord(clientPort_, "srvr", probeTimeout);
  return contains(status, "Mode: leader") || contains(status, "Mode: follower");
}

void ZooKeeperServer::awaitServing(const Deadline& deadline) {
  const bool settled = eventually([&] { return !process_->running() || serving(); },
                                  deadline.remaining(), milliseconds(50));
  if (!process_->running()) {
    throw std::runtime_error("ZooKeeper on " + connectString() + " ended with " +
                             process_->tryWait()->describe() + " before serving; server.log:\n" +
                             logTail());
  }
  if (!settled) {
    throw std::runtime_error("ZooKeeper on " + connectString() + " (pid " +
                             std::to_string(process_->pid()) + ") not serving after " +
                             std::to_string(deadline.budget().count()) + " ms; server.log:\n" +
                             logTail());
  }
}

bool ZooKeeperServer::lostPortRace() const {
  if (running()) return false;
  const std::string log = logTail(400);
  const auto lastStart = log.rfind(startMarker);  // earlier attempts may have lost their ports too
  return log.find("Address already in use", lastStart == std::string::npos ? 0 : lastStart) !=
         std::string::npos;
}

void ZooKeeperServer::stop(milliseconds grace) {
  if (!running()) return;
  process_->signal(SIGTERM);
  process_->signal(SIGCONT);  // a paused server must run to act on SIGTERM
  if (!eventually([&] { return !process_->running(); }, grace)) process_->kill();
}

void ZooKeeperServer::kill9() {
  if (process_) process_->kill();
}

void ZooKeeperServer::pause() {
  if (!running())
    throw std::runtime_error("cannot pause ZooKeeper on " + connectString() + ": not running");
  process_->signal(SIGSTOP);
}

void ZooKeeperServer::resume() {
  if (!running())
    throw std::runtime_error("cannot resume ZooKeeper on " + connectString() + ": not running");
  process_->signal(SIGCONT);
}

void ZooKeeperServer::restart() {
  stop();
  launch();
  awaitServing(Deadline(options_.startTimeout));
}

std::string ZooKeeperServer::fourLetter(std::string_view word, milliseconds timeout) const {
  if (auto answer = fourLetterWord(clientPort_, word, timeout)) return *std::move(answer);
  throw std::runtime_error("ZooKeeper on " + connectString() + " did not answer '" +
                           std::string(word) + "' within " + std::to_string(timeout.count()) +
                           " ms");
}

std::string ZooKeeperServer::logTail(std::size_t lines) const {
  std::ifstream log(directory_ / "server.log");
  std::deque<std::string> tail;
  for (std::string line; std::getline(log, line);) {
    tail.push_back(std::move(line));
    if (tail.size() > lines) tail.pop_front();
  }
  std::string text;
  for (const auto& line : tail) text += line + "\n";
  return text;
}

ZooKeeperServer& sharedZooKeeper() {
  static ZooKeeperServer server;
  return server;
}

std::string uniqueTestRoot() {
  static std::atomic<int> counter{0};
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name =
      test != nullptr ? std::string(test->test_suite_name()) + "." + test->name() : "harness";
  for (char& c : name) {  // parameterised tests carry '/' in their names
    const bool allowed =
        std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '-';
    if (!allowed) c = '_';
  }
  return "/zktest/" + name + "-" + std::to_string(::getpid()) + "-" + std::to_string(++counter);
}

}  // namespace zktest
