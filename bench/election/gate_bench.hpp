#pragma once
// The leadership gate's cost, measured in process on an ElectionGroup that leads every account.
#include <cstddef>
#include <string>

namespace zkbench {

struct GateResult {
  size_t accounts = 0;
  double acquireMs = 0;       // in process: start() -> every account led, one session
  double fastNs = 0;          // check(), one thread (Google Benchmark, ns per check)
  double fastNs2Threads = 0;  // check() from two threads at once, per check per thread
  double strictUsMean = 0;    // checkStrict() (sync + read of `active`), one at a time
  double strictUsP50 = 0, strictUsP99 = 0;
  double strictPipelinedPerSecond = 0;  // 64 strict checks kept in flight
  double statusMs = 0;  // one status() snapshot of every account (zk-elect polls it for READY)
};

// Starts an ElectionGroup for `accounts` accounts on `zk` under `root`, waits until it leads them
// all, then measures the gate. Throws when leadership or a strict check does not come in time.
GateResult measureGate(const std::string& zk, const std::string& root, size_t accounts);

}  // namespace zkbench
