#include "zktest/tcp_proxy.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <vector>

#include "loopback.hpp"

namespace zktest {

using detail::UniqueFd;

const char* toString(TcpProxy::Mode mode) {
  switch (mode) {
    case TcpProxy::Mode::pass:
      return "pass";
    case TcpProxy::Mode::blackhole:
      return "blackhole";
    case TcpProxy::Mode::close:
      return "close";
    case TcpProxy::Mode::dropReplies:
      return "dropReplies";
  }
  return "?";
}

// Named, not anonymous: TcpProxy::Loop keeps connections in a field (GCC's -Wsubobject-linkage
// once this file is part of a unity build).
namespace proxy_loop {

// One direction of a proxied connection: bytes read from `from`, not yet written to `to`.
struct Flow {
  std::string pending;
  bool sourceEnded = false;  // EOF read from the source
  bool shutDown = false;     // EOF passed on to the destination
};

struct Connection {
  std::size_t id = 0;  // accept order
  UniqueFd client, upstream;
  bool connecting = false;      // upstream connect in progress
  bool silenced = false;        // blackholed: read and drop everything, forever
  bool repliesDropped = false;  // server-to-client bytes dropped, forever
  Flow toUpstream, toClient;
};

}  // namespace proxy_loop

namespace {

using proxy_loop::Connection;
using proxy_loop::Flow;

enum class Outcome { keep, close, reset };

constexpr short gone = POLLHUP | POLLERR | POLLNVAL;

// Reads what `from` has into `flow`; false when the connection must go.
bool readInto(int from, Flow& flow) {
  char buffer[16384];
  const ssize_t got = ::recv(from, buffer, sizeof buffer, 0);
  if (got < 0) return errno == EAGAIN || errno == EINTR;
  if (got == 0) {
    flow.sourceEnded = true;
  } else {
    flow.pending.append(buffer, static_cast<std::size_t>(got));
  }
  return true;
}

// Writes what it can of `flow` to `to` and passes EOF on once all is written; what was written
// goes to `written` when given.
bool writeFrom(Flow& flow, int to, const std::function<void(std::string_view)>& written = {}) {
  if (!flow.pending.empty()) {
    const ssize_t sent = ::send(to, flow.pending.data(), flow.pending.size(), MSG_NOSIGNAL);
    if (sent < 0) return errno == EAGAIN || errno == EINTR;
    if (written && sent > 0) written({flow.pending.data(), static_cast<std::size_t>(sent)});
    flow.pending.erase(0, static_cast<std::size_t>(sent));
  }
  if (flow.pending.empty() && flow.sourceEnded && !flow.shutDown) {
    ::shutdown(to, SHUT_WR);
    flow.shutDown = true;
  }
  return true;
}

short interest(const Flow& in, const Flow& out) {
  return static_cast<short>((in.pending.empty() && !in.sourceEnded ? POLLIN : 0) |
                            (!out.pending.empty() ? POLLOUT : 0));
}

}  // namespace

class TcpProxy::Loop {
 public:
  explicit Loop(std::uint16_t targetPort)
      : targetPort_(targetPort),
        listener_(detail::listenOnLoopbackForRebinding(true)),
        port_(detail::localPort(listener_.get())) {
    int ends[2];
    if (::pipe2(ends, O_CLOEXEC | O_NONBLOCK) != 0) detail::throwErrno("pipe2");
    wakeRead_.reset(ends[0]);
    wakeWrite_.reset(ends[1]);
    thread_ = std::thread(&Loop::run, this);
  }

  ~Loop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake();
    thread_.join();
  }

  std::uint16_t port() const { return port_; }
  std::size_t openConnections() const { return openConnections_.load(); }

  void record() {
    std::lock_guard lock(recordMutex_);
    recording_ = true;
  }
  std::vector<Forwarded> forwarded() const {
    std::lock_guard lock(recordMutex_);
    return forwarded_;
  }

  Mode mode() const {
    std::lock_guard lock(mutex_);
    return requested_;
  }

  void setMode(Mode mode) {
    std::unique_lock lock(mutex_);
    requested_ = mode;
    const std::uint64_t request = ++requestCount_;
    wake();
    if (!applied_.wait_for(lock, std::chrono::seconds(10),
                           [&] { return appliedCount_ >= request; })) {
      throw std::runtime_error(std::string("TcpProxy did not switch to ") + toString(mode) +
                               " within 10 s");
    }
    if (!applyError_.empty()) throw std::runtime_error(std::exchange(applyError_, {}));
  }

 private:
  void wake() {
    const char byte = 1;
    [[maybe_unused]] const auto written =
        ::write(wakeWrite_.get(), &byte, 1);  // a full pipe wakes anyway
  }

  void run() {
    std::vector<pollfd> fds;
    while (true) {
      {
        std::lock_guard lock(mutex_);
        if (stopping_) break;
        if (appliedCount_ != requestCount_) applyMode();
      }
      fds.assign({{wakeRead_.get(), POLLIN, 0}, {listener_ ? listener_.get() : -1, POLLIN, 0}});
      for (const auto& connection : connections_) {
        const auto [clientEvents, upstreamEvents] = interests(*connection);
        fds.push_back({connection->client ? connection->client.get() : -1, clientEvents, 0});
        fds.push_back({connection->upstream ? connection->upstream.get() : -1, upstreamEvents, 0});
      }
      if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) break;
      if (fds[0].revents != 0) {
        char drained[64];
        while (::read(wakeRead_.get(), drained, sizeof drained) > 0) {
        }
      }
      // Serve existing connections before accepting, so indices into `fds` stay valid.
      std::vector<std::unique_ptr<Connection>> kept;
      for (std::size_t i = 0; i < connections_.size(); ++i) {
        auto& connection = *connections_[i];
        const Outcome outcome = service(connection, fds[2 + 2 * i].revents, fds[3 + 2 * i].revents);
        if (outcome == Outcome::keep) {
          kept.push_back(std::move(connections_[i]));
        } else if (outcome == Outcome::reset) {
          detail::closeWithReset(connection.client);
          detail::closeWithReset(connection.upstream);
        }
      }
      connections_ = std::move(kept);
      if (fds[1].revents != 0) acceptNew();
      openConnections_ = connections_.size();
    }
    connections_.clear();
    openConnections_ = 0;
  }

  std::pair<short, short> interests(const Connection& connection) const {
    if (connection.silenced) return {POLLIN, POLLIN};  // drain and drop
    if (connection.connecting) return {0, POLLOUT};
    return {interest(connection.toUpstream, connection.toClient),
            interest(connection.toClient, connection.toUpstream)};
  }

  // Called by the loop thread with mutex_ held.
  void applyMode() {
    current_ = requested_;
    appliedCount_ = requestCount_;
    if (current_ == Mode::close) {
      for (auto& connection : connections_) {
        detail::closeWithReset(connection->client);
        detail::closeWithReset(connection->upstream);
      }
      connections_.clear();
      listener_.reset();  // new connections are refused
    } else {
      if (current_ == Mode::dropReplies) {
        for (auto& connection : connections_) {
          connection->repliesDropped = true;
          connection->toClient = {};
        }
      }
      if (current_ == Mode::blackhole) {
        for (auto& connection : connections_) {
          connection->silenced = true;
          connection->toUpstream = {};
          connection->toClient = {};
          if (connection->connecting) connection->upstream.reset();  // never reaches the server
        }
      }
      if (!listener_) {  // back from close: listen on the same port again
        try {
          listener_ = detail::listenOnLoopback(port_, true);
        } catch (const std::exception& error) {
          applyError_ = std::string("TcpProxy cannot listen again: ") + error.what();
        }
      }
    }
    openConnections_ = connections_.size();
    applied_.notify_all();
  }

  void acceptNew() {
    while (true) {
      UniqueFd client(::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!client) return;
      auto connection = std::make_unique<Connection>();
      connection->id = accepted_++;
      connection->client = std::move(client);
      if (current_ == Mode::blackhole) {
        connection->silenced = true;
      } else {
        connection->upstream = detail::startConnectToLoopback(targetPort_);
        if (!connection->upstream) {
          detail::closeWithReset(connection->client);
          continue;
        }
        connection->connecting = true;
        connection->repliesDropped = current_ == Mode::dropReplies;
      }
      connections_.push_back(std::move(connection));
    }
  }

  Outcome service(Connection& connection, short clientEvents, short upstreamEvents) {
    if (connection.silenced) {
      drainOrDrop(connection.client, clientEvents);
      drainOrDrop(connection.upstream, upstreamEvents);
      return connection.client || connection.upstream ? Outcome::keep : Outcome::close;
    }
    if ((clientEvents | upstreamEvents) & POLLERR) return Outcome::reset;
    if (connection.connecting) {
      if (upstreamEvents == 0) return clientEvents & gone ? Outcome::reset : Outcome::keep;
      int error = 0;
      socklen_t length = sizeof error;
      ::getsockopt(connection.upstream.get(), SOL_SOCKET, SO_ERROR, &error, &length);
      if (error != 0) return Outcome::reset;
      connection.connecting = false;
      return Outcome::keep;
    }
    const bool ok =
        (!(clientEvents & POLLIN) || readInto(connection.client.get(), connection.toUpstream)) &&
        (!(upstreamEvents & POLLIN) || readInto(connection.upstream.get(), connection.toClient)) &&
        (!connection.repliesDropped || (connection.toClient.pending.clear(), true)) &&
        writeFrom(connection.toUpstream, connection.upstream.get(),
                  [&](std::string_view bytes) { keep(connection.id, bytes); }) &&
        writeFrom(connection.toClient, connection.client.get());
    if (!ok) return Outcome::reset;
    if (connection.toUpstream.shutDown && connection.toClient.shutDown) return Outcome::close;
    // A side that hung up with nothing left to read can take no more bytes: the connection is over.
    const bool hungUp = ((clientEvents & gone) && !(clientEvents & POLLIN)) ||
                        ((upstreamEvents & gone) && !(upstreamEvents & POLLIN));
    return hungUp ? Outcome::close : Outcome::keep;
  }

  void keep(std::size_t connection, std::string_view bytes) {
    std::lock_guard lock(recordMutex_);
    if (recording_) forwarded_.push_back({connection, std::string(bytes)});
  }

  // Blackhole: swallow whatever arrives; close our end once the peer has gone.
  static void drainOrDrop(UniqueFd& fd, short events) {
    if (!fd || events == 0) return;
    char buffer[16384];
    const ssize_t got = (events & POLLIN) ? ::recv(fd.get(), buffer, sizeof buffer, 0) : 0;
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) fd.reset();
  }

  const std::uint16_t targetPort_;
  UniqueFd listener_;
  const std::uint16_t port_;
  UniqueFd wakeRead_, wakeWrite_;
  std::vector<std::unique_ptr<Connection>> connections_;  // loop thread only
  Mode current_ = Mode::pass;                             // loop thread only
  std::size_t accepted_ = 0;                              // loop thread only
  std::atomic<std::size_t> openConnections_{0};

  mutable std::mutex mutex_;  // guards the requests below
  std::condition_variable applied_;
  Mode requested_ = Mode::pass;
  std::uint64_t requestCount_ = 0;
  std::uint64_t appliedCount_ = 0;
  std::string applyError_;
  bool stopping_ = false;

  mutable std::mutex recordMutex_;
  bool recording_ = false;
  std::vector<Forwarded> forwarded_;

  std::thread thread_;
};

TcpProxy::TcpProxy(std::uint16_t targetPort) : loop_(std::make_unique<Loop>(targetPort)) {}
TcpProxy::~TcpProxy() = default;

std::uint16_t TcpProxy::port() const { return loop_->port(); }
std::string TcpProxy::connectString() const { return "127.0.0.1:" + std::to_string(port()); }
void TcpProxy::setMode(Mode mode) { loop_->setMode(mode); }
TcpProxy::Mode TcpProxy::mode() const { return loop_->mode(); }
std::size_t TcpProxy::openConnections() const { return loop_->openConnections(); }
void TcpProxy::record() { loop_->record(); }
std::vector<TcpProxy::Forwarded> TcpProxy::forwarded() const { return loop_->forwarded(); }

}  // namespace zktest
