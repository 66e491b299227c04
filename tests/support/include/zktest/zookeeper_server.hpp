#pragma once
// A real ZooKeeper server (the Debian package's jars, run by java) for integration tests.
//
// Each server gets a free loopback port, its own temporary directory (zoo.cfg, data/, server.log)
// and a small tickTime, so sessions of a second or two are allowed (minSessionTimeout 400 ms).
// The constructor returns once the server answers `ruok` with `imok` and `conf` shows that the
// answer came from this server's data dir (not from someone else's server on a recycled port).
// The destructor kills the server by PID (SIGKILL: nothing of it must survive) and removes the
// directory; if the current test failed, it prints the tail of server.log first.
//
//   zktest::ZooKeeperServer zk;                 // standalone, ready
//   Client client(zk.connectString());          // "127.0.0.1:<port>"
//   zk.pause(); ...; zk.resume();               // SIGSTOP / SIGCONT: a hung server
//   zk.kill9(); zk.restart();                   // crash, then back on the same port and data
//
// Starting a JVM costs about half a second: share one server per test binary where tests allow
// it (sharedZooKeeper()) and give each test its own root path (uniqueTestRoot()). Under ctest,
// each discovered test case runs in its own process, so "per binary" means per case there.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zktest/child_process.hpp"
#include "zktest/deadline.hpp"

namespace zktest {

struct ZooKeeperOptions {
  milliseconds tickTime{200};
  milliseconds minSessionTimeout{400};  // ZooKeeper's floor is 2 ticks
  milliseconds maxSessionTimeout{60000};
  // Bound on a start or restart; generous because JVMs start slowly on a loaded 2-core machine.
  milliseconds startTimeout{60000};
  // false: the fast test settings (forceSync off, a small C1-only JVM). true: the server's own
  // defaults (fsync on every log write, the JVM's default flags), as production runs it.
  bool serverDefaults = false;
};

class ZooKeeperServer {
 public:
  // Starts a standalone server and waits until it serves; throws (with the server log) if it
  // does not. A port taken by someone else between choosing and binding it is retried.
  explicit ZooKeeperServer(ZooKeeperOptions options = {});
  ~ZooKeeperServer();
  ZooKeeperServer(const ZooKeeperServer&) = delete;
  ZooKeeperServer& operator=(const ZooKeeperServer&) = delete;

  std::uint16_t port() const { return clientPort_; }
  std::string connectString() const;  // "127.0.0.1:<port>"
  // The JVM's pid, or -1 while the server is stopped or killed.
  pid_t pid() const;
  bool running() const;
  const std::filesystem::path& directory() const { return directory_; }

  // SIGTERM, then SIGKILL by PID if it has not exited within `grace`; reaps the process.
  void stop(milliseconds grace = milliseconds(10000));
  // SIGKILL: a crash. Returns once the process is gone.
  void kill9();
  // SIGSTOP / SIGCONT: a server that hangs (GC pause, frozen VM) and then carries on.
  void pause();
  void resume();
  // Stops the server if it runs, then starts it again on the same port with the same data dir
  // and waits until it serves.
  void restart();

  // Sends a four-letter word (ruok, srvr, mntr, cons, wchs, ...) and returns the answer; throws
  // if the server does not answer within `timeout`.
  std::string fourLetter(std::string_view word, milliseconds timeout = milliseconds(5000)) const;
  // The last `lines` lines of server.log.
  std::string logTail(std::size_t lines = 60) const;

 private:
  friend class ZooKeeperEnsemble;
  struct Peer {
    std::uint16_t clientPort, quorumPort, electionPort;
  };
  // A member of an ensemble: `peers[myid - 1]` is this server. Launches without waiting; the
  // ensemble waits for all its members together.
  ZooKeeperServer(ZooKeeperOptions options, int myid, std::vector<Peer> peers);

  void writeConfig() const;
  void launch();
  // Whether this server answers on its port and, in an ensemble, has joined a quorum.
  bool serving() const;
  // Waits until serving(); throws with the log tail if the process exits or the deadline passes.
  void awaitServing(const Deadline& deadline);
  bool lostPortRace() const;

  ZooKeeperOptions options_;
  int myid_ = 0;  // 0: standalone
  std::vector<Peer> peers_;
  std::uint16_t clientPort_ = 0;
  std::filesystem::path directory_;
  std::unique_ptr<ChildProcess> process_;
};

// Sends a four-letter word to 127.0.0.1:port; nullopt if nothing answers within `timeout`.
std::optional<std::string> fourLetterWord(std::uint16_t port, std::string_view word,
                                          milliseconds timeout);

// One standalone server for the whole test binary, started on first use and stopped at exit.
ZooKeeperServer& sharedZooKeeper();

// A znode path no other test (of this or a concurrently running binary) uses:
// "/zktest/<Suite>.<Test>-<pid>-<n>". Not created; callers create what they need under it.
std::string uniqueTestRoot();

}  // namespace zktest
