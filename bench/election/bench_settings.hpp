// election-bench's command line: what a run measures, against which peers, on which server.
#pragma once

#include <cstddef>
#include <filesystem>
#include <set>
#include <string>

namespace zkagent::bench {

struct Settings {
  std::filesystem::path out;
  std::set<std::string> peers{"kazoo", "curator"};
  std::set<std::string> scenarios{"handover", "crash", "cold", "gate"};
  size_t maxAccounts = 10000;
  std::set<size_t> sizes;         // empty: every planned size (up to maxAccounts)
  int rounds = 0;                 // > 0: this many rounds of every series instead of the plan's
  bool quick = false;             // fewer rounds and sizes: a smoke run of a minute or two
  std::filesystem::path zkElect;  // empty: this build's zk-elect
  // ZooKeeper with fsync on and default JVM flags; false: --zk-settings fast
  bool serverDefaults = true;
  size_t servers = 1;          // 1: standalone; an odd number above: an ensemble
  bool floor = true;           // run the floor probe beside zkagent and the peers
  size_t floorMultiBytes = 0;  // > 0: the probe's takeover multis carry at most this
  int warmups = 1;             // unmeasured rounds at the start of every series
};

// Exits 2 naming the flag on bad input, 0 after --help.
Settings parseArgs(int argc, char** argv);

}  // namespace zkagent::bench
