#include "hold_proxy.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "loopback.hpp"  // the harness's socket helpers (tests/support/src)

namespace zkagent::chaos {
using std::chrono::milliseconds;
namespace {

bool writeAll(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

struct HoldProxy::Impl {
  std::uint16_t target = 0;
  zktest::detail::UniqueFd listener;
  int listenFd = -1;
  std::uint16_t port = 0;
  std::mutex mu;
  std::condition_variable released;
  bool held = false;
  bool stopping = false;
  std::set<int> liveFds;
  std::vector<std::thread> threads;
  std::thread acceptor;

  void waitWhileHeld() {
    std::unique_lock lock(mu);
    released.wait(lock, [&] { return !held || stopping; });
  }

  // One direction. A broken destination does not stop the reading: the source is drained, so it
  // never sees a reset while it still has bytes in flight to the other side.
  void pump(int from, int to) {
    char buffer[16384];
    bool broken = false;
    for (;;) {
      const ssize_t n = ::recv(from, buffer, sizeof buffer, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      waitWhileHeld();
      if (!broken) broken = !writeAll(to, buffer, static_cast<std::size_t>(n));
    }
    waitWhileHeld();
    ::shutdown(to, SHUT_WR);
  }

  void serve(int client) {
    auto connected =
        zktest::detail::connectToLoopback(target, zktest::Deadline(milliseconds(2000)));
    if (!connected) {
      forget(client);
      ::close(client);
      return;
    }
    const int server = connected.get();                                // closed by `connected`
    ::fcntl(server, F_SETFL, ::fcntl(server, F_GETFL) & ~O_NONBLOCK);  // the pumps block
    const int one = 1;
    ::setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    {
      std::lock_guard lock(mu);
      liveFds.insert(server);
    }
    std::thread back([this, server, client] { pump(server, client); });
    pump(client, server);
    back.join();
    forget(client);
    forget(server);
    ::close(client);
  }

  void forget(int fd) {
    std::lock_guard lock(mu);
    liveFds.erase(fd);
  }

  void acceptLoop() {
    for (;;) {
      {
        std::lock_guard lock(mu);
        if (stopping) return;
      }
      pollfd p{listenFd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const int client = ::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      const int one = 1;
      ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      std::lock_guard lock(mu);
      if (stopping) {
        ::close(client);
        return;
      }
      liveFds.insert(client);
      threads.emplace_back([this, client] { serve(client); });
    }
  }
};

HoldProxy::HoldProxy(std::uint16_t targetPort) : impl_(std::make_unique<Impl>()) {
  impl_->target = targetPort;
  impl_->listener = zktest::detail::listenOnLoopback(0, false);
  impl_->listenFd = impl_->listener.get();
  impl_->port = zktest::detail::localPort(impl_->listenFd);
  impl_->acceptor = std::thread([impl = impl_.get()] { impl->acceptLoop(); });
}

HoldProxy::~HoldProxy() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
    for (int fd : impl_->liveFds) ::shutdown(fd, SHUT_RDWR);
  }
  impl_->released.notify_all();
  impl_->acceptor.join();
  // No new threads start once stopping is set.
  for (auto& t : impl_->threads) t.join();
}

std::uint16_t HoldProxy::port() const { return impl_->port; }

void HoldProxy::hold() {
  std::lock_guard lock(impl_->mu);
  impl_->held = true;
}

void HoldProxy::release() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->held = false;
  }
  impl_->released.notify_all();
}

}  // namespace zkagent::chaos
