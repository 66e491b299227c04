#pragma once
// A program run by a test: started with fork/exec in its own process group, its stdout read line
// by line with deadlines, stdin written line by line, signals delivered on request. The
// destructor kills the whole process group, so a failing test leaves nothing running, and the
// child is also killed if the test process dies (PR_SET_PDEATHSIG; spawn from a thread that
// outlives the child, such as the test's main thread).
//
//   zktest::ChildProcess elect(zktest::binaryPath("zk-elect"), {"--zk", zk.connectString(), ...});
//   elect.waitForLine("READY", 10s);
//   elect.signal(SIGTERM);
//   EXPECT_EQ(elect.wait(5s).code, 0);
//
// Failures (a line that does not come in time, a process that does not exit) throw
// std::runtime_error whose message holds everything the process printed so far; GoogleTest
// reports it as the test's failure. The first ChildProcess sets SIGPIPE to ignored in the test
// process, so writing to a dead child's stdin is an error, not a crash. Use a ChildProcess from
// one thread (its output is collected by a thread of its own).

#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zktest/deadline.hpp"

namespace zktest {

// How a process ended.
struct ExitStatus {
  int code = 0;    // exit code, meaningful when signal == 0
  int signal = 0;  // the signal that terminated it, 0 when it exited
  bool exitedWith(int exitCode) const { return signal == 0 && code == exitCode; }
  std::string describe() const;  // "exit code 2" or "killed by signal 9 (Killed)"
};

// The path of an executable of this project's build (build/bin/<name>). Throws when it does not
// exist, naming the target to build.
std::filesystem::path binaryPath(std::string_view name);

class ChildProcess {
 public:
  // Runs `program` (a path, or a name looked up in PATH) with `args`. By default stdout and
  // stderr are pipes read by this object; with `outputFile` both go to that file instead (for
  // long-running servers whose output is only read on failure). stdin is a pipe either way.
  // Throws if the program cannot be executed.
  ChildProcess(std::string program, std::vector<std::string> args,
               std::filesystem::path outputFile = {});
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const;
  // A short name for messages: the program and its pid.
  std::string name() const;

  // The next stdout line not returned yet (without '\n'), or nullopt when none arrives in time
  // or stdout is closed. For tests that check that nothing is printed.
  std::optional<std::string> tryReadLine(milliseconds timeout);
  // As tryReadLine, but throws when no line comes.
  std::string readLine(milliseconds timeout);
  // Reads lines until one starts with `prefix` / satisfies `matches`, and returns it; throws when
  // none does in time. Skipped lines stay in the transcript.
  std::string waitForLine(std::string_view prefix, milliseconds timeout);
  std::string waitForLine(const std::function<bool(std::string_view)>& matches,
                          milliseconds timeout, std::string_view description);

  // Every stdout line received so far, read or not; and everything written to stderr so far.
  std::vector<std::string> stdoutLines() const;
  std::string stderrText() const;
  // A readable report of the process: its state, stdout lines and stderr, for failure messages.
  std::string transcript() const;

  void writeLine(std::string_view line);
  void closeStdin();

  // Sends `signal` to the process. SIGSTOP and SIGCONT return once the process is stopped or
  // running again, so a test can act on the new state at once.
  void signal(int signal);
  // Whether the process has not been reaped yet (a stopped process is running).
  bool running();
  // Reaps the process if it has exited; nullopt while it runs.
  std::optional<ExitStatus> tryWait();
  // Waits for the process to exit and for its output to be read; throws on timeout.
  ExitStatus wait(milliseconds timeout);
  // SIGKILL to the whole process group, then reaps the process.
  ExitStatus kill();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace zktest
