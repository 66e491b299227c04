// chaos-runner: a real 3-server ZooKeeper ensemble, one fencing-gateway with its durable log (or a
// cluster of 2 or 3, --gateways), several zk-agents standing for the same accounts, clients sending
// operations through every agent, and a seeded schedule of faults. Writes DIR/history.json for
// chaos/check.py.
// Usage: chaos-runner --help and docs/testing.md "Chaos runs".
#include <signal.h>

#include <iostream>

#include "options.hpp"
#include "run.hpp"

namespace {
extern "C" void onInterrupt(int) { zkagent::chaos::interrupted = true; }
}  // namespace

int main(int argc, char** argv) {
  const auto options = zkagent::chaos::parseOptions(argc, argv);
  if (options.printSchedule) {
    std::cout << zkagent::chaos::scheduleJson(
                     zkagent::chaos::makeSchedule(zkagent::chaos::scheduleOptions(options)))
                     .dump(1)
              << "\n";
    return 0;
  }
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGINT, onInterrupt);
  ::signal(SIGTERM, onInterrupt);
  try {
    zkagent::chaos::Run run(options);
    return run.execute();
  } catch (const std::exception& e) {
    std::cerr << "chaos-runner: " << e.what() << "\nseed " << options.seed << "; logs kept in "
              << options.out << "\n";
    return 3;
  }
}
