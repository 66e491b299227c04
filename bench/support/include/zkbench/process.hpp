#pragma once
// What a benchmark reads of another process from /proc: the one place that parses it.
#include <sys/types.h>

namespace zkbench {

// Resident set size in KiB (VmRSS), -1 when the process is gone.
long rssKiB(pid_t pid);
// CPU the process has used so far (user + system, all threads) in seconds, 0 when it is gone.
double cpuSeconds(pid_t pid);

}  // namespace zkbench
