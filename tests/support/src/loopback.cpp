#include "loopback.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>

namespace zktest::detail {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) reset(std::exchange(other.fd_, -1));
  return *this;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

void throwErrno(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

void setNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) throwErrno("fcntl(O_NONBLOCK)");
}

namespace {

sockaddr_in loopbackAddress(std::uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

UniqueFd newTcpSocket(bool nonBlocking) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (nonBlocking ? SOCK_NONBLOCK : 0), 0));
  if (!fd) throwErrno("socket");
  return fd;
}

}  // namespace

UniqueFd listenOnLoopback(std::uint16_t port, bool nonBlocking) {
  UniqueFd fd = newTcpSocket(nonBlocking);
  const int on = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  const sockaddr_in address = loopbackAddress(port);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    throwErrno("bind 127.0.0.1:" + std::to_string(port));
  }
  if (::listen(fd.get(), SOMAXCONN) != 0) throwErrno("listen");
  return fd;
}

std::uint16_t localPort(int socketFd) {
  sockaddr_in address{};
  socklen_t length = sizeof address;
  if (::getsockname(socketFd, reinterpret_cast<sockaddr*>(&address), &length) != 0)
    throwErrno("getsockname");
  return ntohs(address.sin_port);
}

namespace {

// The first port of the kernel's ephemeral range (32768 when it cannot be read).
std::uint16_t ephemeralRangeStart() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  unsigned low = 0;
  if (!(range >> low) || low < 2048 || low > 65535) low = 32768;
  return static_cast<std::uint16_t>(low);
}

}  // namespace

UniqueFd listenOnLoopbackForRebinding(bool nonBlocking) {
  static const std::uint16_t limit = ephemeralRangeStart();
  constexpr std::uint16_t kLowest = 10000;  // above the ports services usually listen on
  if (limit <= kLowest + 100) return listenOnLoopback(0, nonBlocking);
  thread_local std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<unsigned> pick(kLowest, limit - 1u);
  for (int attempt = 0; attempt < 200; ++attempt) {
    try {
      return listenOnLoopback(static_cast<std::uint16_t>(pick(random)), nonBlocking);
    } catch (const std::runtime_error&) {
      // taken: another one
    }
  }
  return listenOnLoopback(0, nonBlocking);
}

std::vector<std::uint16_t> reserveLoopbackPorts(std::size_t count) {
  std::vector<UniqueFd> held;  // held open together so the ports are distinct
  std::vector<std::uint16_t> ports;
  for (std::size_t i = 0; i < count; ++i) {
    held.push_back(listenOnLoopbackForRebinding(false));
    ports.push_back(localPort(held.back().get()));
  }
  return ports;
}

UniqueFd startConnectToLoopback(std::uint16_t port) {
  UniqueFd fd = newTcpSocket(true);
  const sockaddr_in address = loopbackAddress(port);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 &&
      errno != EINPROGRESS) {
    return {};
  }
  return fd;
}

UniqueFd connectToLoopback(std::uint16_t port, const Deadline& deadline) {
  UniqueFd fd = startConnectToLoopback(port);
  if (!fd) return {};
  pollfd waiting{fd.get(), POLLOUT, 0};
  if (::poll(&waiting, 1, static_cast<int>(deadline.remaining().count())) != 1) return {};
  int error = 0;
  socklen_t length = sizeof error;
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0) return {};
  return fd;
}

void closeWithReset(UniqueFd& fd) {
  if (!fd) return;
  const linger resetOnClose{1, 0};
  ::setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &resetOnClose, sizeof resetOnClose);
  fd.reset();
}

}  // namespace zktest::detail
