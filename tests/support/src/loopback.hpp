#pragma once
// Internal socket helpers of the harness: everything it does with sockets is on 127.0.0.1.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "zktest/deadline.hpp"

namespace zktest::detail {

// Owns a file descriptor; closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Throws std::runtime_error "<what>: <strerror(errno)>".
[[noreturn]] void throwErrno(const std::string& what);

void setNonBlocking(int fd);

// A listening socket on 127.0.0.1:port (0: the kernel picks a free port), SO_REUSEADDR so a
// restarted listener gets its port back while old connections sit in TIME_WAIT.
UniqueFd listenOnLoopback(std::uint16_t port, bool nonBlocking);
std::uint16_t localPort(int socketFd);

// A listening socket on a free port below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), for a listener that will close and listen on the same port
// again: no outgoing connection of any process can take that port as its local port meanwhile.
// Other listeners pick such ports at random too, so a clash is a rare bind error, tried again.
UniqueFd listenOnLoopbackForRebinding(bool nonBlocking);

// `count` distinct ports that were free a moment ago (all bound at once, then released), below
// the ephemeral range as above, so that a server restarted on one gets it back. Whoever uses
// them must still cope with losing one to another listener in between.
std::vector<std::uint16_t> reserveLoopbackPorts(std::size_t count);
// How many times a server start picks fresh ports after losing one that way.
constexpr int maxPortRaceAttempts = 5;

// Starts a non-blocking connect to 127.0.0.1:port; the socket is writable once it completes.
UniqueFd startConnectToLoopback(std::uint16_t port);
// Connects to 127.0.0.1:port within the deadline; an empty fd when refused or timed out.
UniqueFd connectToLoopback(std::uint16_t port, const Deadline& deadline);

// Closes with RST instead of FIN, as a crashed peer or a middlebox reset would.
void closeWithReset(UniqueFd& fd);

}  // namespace zktest::detail
