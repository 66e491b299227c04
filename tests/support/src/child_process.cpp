#include "zktest/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "loopback.hpp"

#ifndef ZKAGENT_BIN_DIR
#error \
    "ZKAGENT_BIN_DIR must name the directory of the project's executables (set by tests/support/CMakeLists.txt)"
#endif

namespace zktest {

using detail::UniqueFd;

std::string ExitStatus::describe() const {
  if (signal == 0) return "exit code " + std::to_string(code);
  return "killed by signal " + std::to_string(signal) + " (" + ::strsignal(signal) + ")";
}

std::filesystem::path binaryPath(std::string_view name) {
  std::filesystem::path path = std::filesystem::path(ZKAGENT_BIN_DIR) / name;
  if (!std::filesystem::exists(path)) {
    throw std::runtime_error(path.string() + " does not exist: build the target '" +
                             std::string(name) + "' first (cmake --build <build dir> --target " +
                             std::string(name) + ")");
  }
  return path;
}

struct ChildProcess::State {
  std::string program;
  pid_t pid = -1;
  std::optional<ExitStatus> exitStatus;
  UniqueFd stdinWrite;
  UniqueFd stopReaderWrite;  // closing it tells the reader thread to finish
  std::thread reader;

  mutable std::mutex mutex;  // guards the output below, which the reader thread appends to
  std::condition_variable outputChanged;
  std::vector<std::string> lines;
  std::size_t nextLine = 0;
  std::string partialLine;
  std::string stderrText;
  bool outputDone = false;  // both pipes reached EOF (or there are none)

  void readOutput(UniqueFd stdoutRead, UniqueFd stderrRead, UniqueFd stopReaderRead);
  std::string transcriptLocked() const;
};

namespace {

void ignoreSigpipeOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    ::sigaction(SIGPIPE, nullptr, &current);
    if (current.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
  });
}

std::pair<UniqueFd, UniqueFd> makePipe() {
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) detail::throwErrno("pipe2");
  return {UniqueFd(ends[0]), UniqueFd(ends[1])};
}

ExitStatus decode(int status) {
  if (WIFSIGNALED(status)) return {0, WTERMSIG(status)};
  return {WEXITSTATUS(status), 0};
}

// The state letter of /proc/<pid>/stat ('T' when stopped), or 0 when unreadable.
char processState(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto commEnd = text.rfind(')');  // the command name may itself contain ") "
  return commEnd == std::string::npos || commEnd + 2 >= text.size() ? '\0' : text[commEnd + 2];
}

// Runs in the forked child: only async-signal-safe calls until exec.
[[noreturn]] void execChild(char* const* argv, pid_t parent, int stdinFd, int stdoutFd,
                            int stderrFd, int execErrorFd, long maxFd) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction defaultAction {};
  defaultAction.sa_handler = SIG_DFL;
  ::sigaction(SIGPIPE, &defaultAction, nullptr);
  ::dup2(stdinFd, 0);
  ::dup2(stdoutFd, 1);
  ::dup2(stderrFd, 2);
  // Keep only 0-2 and the exec error pipe (moved to 3, close-on-exec): the program must not hold
  // sockets of the test process open, or their peers would never see them close.
  if (execErrorFd != 3) {
    ::dup3(execErrorFd, 3, O_CLOEXEC);
    execErrorFd = 3;
  }
  if (::syscall(SYS_close_range, 4U, ~0U, 0U) != 0) {
    for (long fd = 4; fd < maxFd; ++fd) ::close(static_cast<int>(fd));
  }
  ::execvp(argv[0], argv);
  const int error = errno;
  [[maybe_unused]] const auto written = ::write(execErrorFd, &error, sizeof error);
  ::_exit(127);
}

}  // namespace

ChildProcess::ChildProcess(std::string program, std::vector<std::string> args,
                           std::filesystem::path outputFile)
    : state_(std::make_unique<State>()) {
  ignoreSigpipeOnce();
  state_->program = program;
  std::vector<std::string> argvStrings{program};
  argvStrings.insert(argvStrings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& arg : argvStrings) argv.push_back(arg.data());
  argv.push_back(nullptr);

  auto [stdinRead, stdinWrite] = makePipe();
  auto [execErrorRead, execErrorWrite] = makePipe();
  UniqueFd stdoutRead, stdoutWrite, stderrRead, stderrWrite;
  if (outputFile.empty()) {
    std::tie(stdoutRead, stdoutWrite) = makePipe();
    std::tie(stderrRead, stderrWrite) = makePipe();
  } else {
    stdoutWrite.reset(::open(outputFile.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (!stdoutWrite) detail::throwErrno("open " + outputFile.string());
  }
  const int stderrTarget = outputFile.empty() ? stderrWrite.get() : stdoutWrite.get();
  const long maxFd = ::sysconf(_SC_OPEN_MAX);
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) detail::throwErrno("fork");
  if (pid == 0) {
    execChild(argv.data(), parent, stdinRead.get(), stdoutWrite.get(), stderrTarget,
              execErrorWrite.get(), maxFd);
  }
  ::setpgid(pid, pid);  // also done by the child; whichever runs first wins the race with killpg
  state_->pid = pid;
  execErrorWrite.reset();
  stdinRead.reset();
  stdoutWrite.reset();
  stderrWrite.reset();

  int execError = 0;
  ssize_t got;
  do {
    got = ::read(execErrorRead.get(), &execError, sizeof execError);
  } while (got < 0 && errno == EINTR);
  if (got == sizeof execError) {
    ::waitpid(pid, nullptr, 0);
    throw std::runtime_error("cannot execute " + program + ": " + std::strerror(execError));
  }

  state_->stdinWrite = std::move(stdinWrite);
  if (outputFile.empty()) {
    auto [stopRead, stopWrite] = makePipe();
    state_->stopReaderWrite = std::move(stopWrite);
    state_->reader = std::thread(&State::readOutput, state_.get(), std::move(stdoutRead),
                                 std::move(stderrRead), std::move(stopRead));
  } else {
    state_->outputDone = true;
  }
}

ChildProcess::~ChildProcess() {
  if (!state_->exitStatus) kill();
  state_->stopReaderWrite.reset();
  if (state_->reader.joinable()) state_->reader.join();
}

void ChildProcess::State::readOutput(UniqueFd stdoutRead, UniqueFd stderrRead,
                                     UniqueFd stopReaderRead) {
  pollfd fds[3] = {{stdoutRead.get(), POLLIN, 0},
                   {stderrRead.get(), POLLIN, 0},
                   {stopReaderRead.get(), POLLIN, 0}};
  char buffer[4096];
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    if (::poll(fds, 3, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[2].revents != 0) break;  // the owner is going away
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t got = ::read(fds[i].fd, buffer, sizeof buffer);
      if (got < 0 && errno == EINTR) continue;
      std::lock_guard lock(mutex);
      if (got <= 0) {
        fds[i].fd = -1;  // negative fds are ignored by poll
        if (i == 0 && !partialLine.empty()) lines.push_back(std::exchange(partialLine, {}));
      } else if (i == 1) {
        stderrText.append(buffer, static_cast<std::size_t>(got));
      } else {
        partialLine.append(buffer, static_cast<std::size_t>(got));
        std::size_t newline;
        while ((newline = partialLine.find('\n')) != std::string::npos) {
          lines.push_back(partialLine.substr(0, newline));
          partialLine.erase(0, newline + 1);
        }
      }
      outputChanged.notify_all();
    }
  }
  std::lock_guard lock(mutex);
  outputDone = true;
  outputChanged.notify_all();
}

pid_t ChildProcess::pid() const { return state_->pid; }

std::string ChildProcess::name() const {
  return std::filesystem::path(state_->program).filename().string() + " (pid " +
         std::to_string(state_->pid) + ")";
}

std::optional<std::string> ChildProcess::tryReadLine(milliseconds timeout) {
  std::unique_lock lock(state_->mutex);
  const bool available = state_->outputChanged.wait_for(
      lock, timeout, [&] { return state_->nextLine < state_->lines.size() || state_->outputDone; });
  if (!available || state_->nextLine == state_->lines.size()) return std::nullopt;
  return state_->lines[state_->nextLine++];
}

std::string ChildProcess::readLine(milliseconds timeout) {
  if (auto line = tryReadLine(timeout)) return *std::move(line);
  throw std::runtime_error("no line from " + name() + " within " + std::to_string(timeout.count()) +
                           " ms\n" + transcript());
}

std::string ChildProcess::waitForLine(std::string_view prefix, milliseconds timeout) {
  return waitForLine([prefix](std::string_view line) { return line.starts_with(prefix); }, timeout,
                     "starting with '" + std::string(prefix) + "'");
}

std::string ChildProcess::waitForLine(const std::function<bool(std::string_view)>& matches,
                                      milliseconds timeout, std::string_view description) {
  const Deadline deadline(timeout);
  while (auto line = tryReadLine(deadline.remaining())) {
    if (matches(*line)) return *std::move(line);
  }
  throw std::runtime_error("no line " + std::string(description) + " from " + name() + " within " +
                           std::to_string(timeout.count()) + " ms\n" + transcript());
}

std::vector<std::string> ChildProcess::stdoutLines() const {
  std::lock_guard lock(state_->mutex);
  return state_->lines;
}

std::string ChildProcess::stderrText() const {
  std::lock_guard lock(state_->mutex);
  return state_->stderrText;
}

std::string ChildProcess::transcript() const {
  std::lock_guard lock(state_->mutex);
  return state_->transcriptLocked();
}

std::string ChildProcess::State::transcriptLocked() const {
  constexpr std::size_t maxLines = 200;
  constexpr std::size_t maxStderr = 8192;
  std::ostringstream out;
  out << "--- " << program << " (pid " << pid << "), "
      << (exitStatus ? exitStatus->describe() : std::string("still running")) << "; stdout ("
      << lines.size() << " lines, " << nextLine << " read):\n";
  for (std::size_t i = lines.size() > maxLines ? lines.size() - maxLines : 0; i < lines.size();
       ++i) {
    out << "  | " << lines[i] << '\n';
  }
  if (!partialLine.empty()) out << "  | " << partialLine << "   (no newline yet)\n";
  out << "--- stderr:\n"
      << (stderrText.size() > maxStderr ? "...\n" + stderrText.substr(stderrText.size() - maxStderr)
                                        : stderrText)
      << "\n---";
  return out.str();
}

void ChildProcess::writeLine(std::string_view line) {
  const std::string text = std::string(line) + '\n';
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t n =
        ::write(state_->stdinWrite.get(), text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw std::runtime_error("cannot write to stdin of " + name() + ": " + std::strerror(errno) +
                               "\n" + transcript());
    }
    written += static_cast<std::size_t>(n);
  }
}

void ChildProcess::closeStdin() { state_->stdinWrite.reset(); }

void ChildProcess::signal(int signal) {
  if (state_->exitStatus) {
    throw std::runtime_error("cannot signal " + name() + ": it already ended with " +
                             state_->exitStatus->describe());
  }
  if (::kill(state_->pid, signal) != 0) detail::throwErrno("kill " + name());
  if (signal != SIGSTOP && signal != SIGCONT) return;
  const bool wantStopped = signal == SIGSTOP;
  const auto settled = eventually([&] { return (processState(state_->pid) == 'T') == wantStopped; },
                                  milliseconds(5000), milliseconds(1));
  if (!settled) {
    throw std::runtime_error(name() + (wantStopped ? " did not stop" : " did not continue") +
                             " after " + ::strsignal(signal) + ": " + settled.message());
  }
}

bool ChildProcess::running() { return !tryWait().has_value(); }

std::optional<ExitStatus> ChildProcess::tryWait() {
  if (state_->exitStatus) return state_->exitStatus;
  int status = 0;
  pid_t reaped;
  do {
    reaped = ::waitpid(state_->pid, &status, WNOHANG);
  } while (reaped < 0 && errno == EINTR);
  if (reaped == state_->pid) {
    std::lock_guard lock(state_->mutex);
    state_->exitStatus = decode(status);
  }
  return state_->exitStatus;
}

ExitStatus ChildProcess::wait(milliseconds timeout) {
  const Deadline deadline(timeout);
  if (!eventually([&] { return tryWait().has_value(); }, timeout, milliseconds(2))) {
    throw std::runtime_error(name() + " still running after " + std::to_string(timeout.count()) +
                             " ms\n" + transcript());
  }
  // Let the reader take in the last output; a grandchild holding the pipes open must not hang us.
  std::unique_lock lock(state_->mutex);
  state_->outputChanged.wait_for(lock, deadline.remaining(), [&] { return state_->outputDone; });
  return *state_->exitStatus;
}

ExitStatus ChildProcess::kill() {
  if (auto status = tryWait()) return *status;
  ::killpg(state_->pid, SIGKILL);
  int status = 0;
  while (::waitpid(state_->pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::lock_guard lock(state_->mutex);
  state_->exitStatus = decode(status);
  return *state_->exitStatus;
}

}  // namespace zktest
