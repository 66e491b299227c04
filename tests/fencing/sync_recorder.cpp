#include "sync_recorder.hpp"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <string>

namespace {

std::atomic<int> reportFd{-1};
std::atomic<bool> failing{false};

using SyncCall = int (*)(int);

// The C library's own function of that name: the next definition after this binary's.
SyncCall next(const char* name) { return reinterpret_cast<SyncCall>(::dlsym(RTLD_NEXT, name)); }

int syncAndReport(SyncCall real, int fd) {
  if (failing.load()) {
    errno = EIO;
    return -1;
  }
  const int out = reportFd.load();
  struct stat before {};
  const bool sized = out >= 0 && ::fstat(fd, &before) == 0 && S_ISREG(before.st_mode);
  const int rc = real(fd);
  if (rc != 0 || !sized) return rc;
  char path[PATH_MAX];
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t length = ::readlink(link.c_str(), path, sizeof path - 1);
  if (length <= 0) return rc;
  const std::string line = "S " + std::string(path, static_cast<size_t>(length)) + " " +
                           std::to_string(before.st_size) + "\n";
  if (::write(out, line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(3);
  return rc;
}

}  // namespace

extern "C" int fsync(int fd) {
  static const SyncCall real = next("fsync");
  return syncAndReport(real, fd);
}

extern "C" int fdatasync(int fd) {
  static const SyncCall real = next("fdatasync");
  return syncAndReport(real, fd);
}

namespace zkagent::fencing::testing {

void recordSyncsTo(int fd) { reportFd.store(fd); }

void failSyncs(bool fail) { failing.store(fail); }

}  // namespace zkagent::fencing::testing
