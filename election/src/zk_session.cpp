// ZkSession: the handle's lifecycle: open, session states (connected, suspended, expired), and
// close. Watches, liveness, operations, the create batcher and the path cache live in
// zk_session_*.cpp beside this file.
#include "zk_session.hpp"

#include <spdlog/spdlog.h>
#include <zookeeper/zookeeper.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <memory>

#include "zk_session_calls.hpp"

namespace zkagent::election::detail {
namespace asio = boost::asio;

namespace {

constexpr int kResolveEveryMs = 10000;  // see openHandle

// The watcher context of one handle: lives until that handle is closed (threads joined).
struct HandleContext {
  ZkSession* session;
  uint64_t generation;
};

// The C client's own log lines (connection refused, timeouts) go through our logger.
void clientLog(const char* message) { spdlog::debug("zookeeper client: {}", message); }

void globalWatcher(zhandle_t*, int type, int state, const char* path, void* ctx) {
  auto* hc = static_cast<HandleContext*>(ctx);
  hc->session->onWatcherEvent(hc->generation, type, state, path);
}

}  // namespace

ZkSession::ZkSession(asio::io_context& io, SessionOptions options)
    : io_(io),
      strand_(asio::make_strand(io)),
      options_(std::move(options)),
      pingTimer_(strand_),
      deadlineTimer_(strand_) {}

ZkSession::~ZkSession() {
  zhandle_t* zh = nullptr;
  std::vector<std::thread> closers;
  {
    std::lock_guard lock(mu_);
    zh = std::exchange(zh_, nullptr);
    closers.swap(closers_);
  }
  if (zh != nullptr) closeHandle(zh);  // joins the C client's threads: no callback runs after
  for (auto& t : closers) t.join();
}

// The watcher context is freed once the C client's threads are joined; so are the calls it never
// answered (in_flight_calls.hpp), answered Closing on their executors.
void ZkSession::closeHandle(zhandle_t* zh) {
  auto* ctx = static_cast<HandleContext*>(const_cast<void*>(zoo_get_context(zh)));
  const uint64_t generation = ctx->generation;
  zookeeper_close(zh);
  delete ctx;
  for (auto& dropped : inFlight_.takeGeneration(generation)) dropped->answerClosing();
}

ZkError ZkSession::fromRc(int rc) {
  switch (rc) {
    case ZOK:
      return ZkError::Ok;
    case ZNONODE:
      return ZkError::NoNode;
    case ZNODEEXISTS:
      return ZkError::NodeExists;
    case ZNOTEMPTY:
      return ZkError::NotEmpty;
    case ZBADVERSION:
      return ZkError::BadVersion;
    case ZCONNECTIONLOSS:
    case ZOPERATIONTIMEOUT:
      return ZkError::ConnectionLoss;
    case ZSESSIONEXPIRED:
    case ZSESSIONMOVED:
    case ZINVALIDSTATE:
      return ZkError::SessionExpired;
    case ZCLOSING:
      return ZkError::Closing;
    default:
      return ZkError::Other;
  }
}

void ZkSession::start(EventHandler onEvent) {
  onEvent_ = std::move(onEvent);
  static std::once_flag clientLogLevel;
  std::call_once(clientLogLevel, [] { zoo_set_debug_level(ZOO_LOG_LEVEL_WARN); });
  asio::post(strand_, [self = shared_from_this()] { self->openHandle(); });
}

void ZkSession::openHandle() {
  std::lock_guard lock(mu_);
  if (closing_) return;
  auto* ctx = new HandleContext{this, ++generation_};
  zh_ = zookeeper_init2(options_.hosts.c_str(), globalWatcher,
                        static_cast<int>(options_.timeout.count()), nullptr, ctx, 0, clientLog);
  if (zh_ == nullptr) {
    delete ctx;
    // Bad host string or out of resources: retry later rather than give up silently.
    spdlog::error("cannot open a ZooKeeper handle for '{}' ({}); retrying in 1 s", options_.hosts,
                  std::strerror(errno));
    auto timer = std::make_shared<asio::steady_timer>(strand_, std::chrono::seconds(1));
    timer->async_wait([self = shared_from_this(), timer](auto) { self->openHandle(); });
    return;
  }
  // By default the C client resolves the host list again on every turn of its I/O loop: a
  // getaddrinfo (netlink socket, /etc/hosts, ...) per request sent or reply read, which was most of
  // its CPU time with thousands of requests in flight. Re-resolving every 10 s still follows DNS
  // changes; a lost connection resolves at once regardless.
  zoo_set_servers_resolution_delay(zh_, kResolveEveryMs);
  // Queued before any request, so every create of this handle is made as the digest user.
  if (!options_.digest.empty()) {
    zoo_add_auth(zh_, "digest", options_.digest.data(), static_cast<int>(options_.digest.size()),
                 nullptr, nullptr);
  }
}
void ZkSession::publish(SessionState state, bool newSession) {
  state_.store(state);
  if (onEvent_) onEvent_(SessionEvent{state, sessionId_.load(), negotiatedTimeout(), newSession});
}

void ZkSession::handleSessionState(uint64_t generation, int zkState) {
  if (closing_) return;
  if (zkState == ZOO_CONNECTED_STATE) {
    int64_t id = 0;
    int negotiated = 0;
    {
      std::lock_guard lock(mu_);
      if (generation != generation_ || zh_ == nullptr) return;
      id = zoo_client_id(zh_)->client_id;
      negotiated = zoo_recv_timeout(zh_);
    }
    const bool newSession = id != everConnectedId_;
    everConnectedId_ = id;
    sessionId_.store(id);
    negotiatedMs_.store(negotiated);
    noteContact();
    deadlineTimer_.cancel();
    // Only now that every listener will hear "connected" may the gate open again.
    connected_.store(true);
    publish(SessionState::Connected, newSession);
    armPing();
    return;
  }
  {
    std::lock_guard lock(mu_);
    if (generation != generation_) return;
  }
  if (zkState == ZOO_EXPIRED_SESSION_STATE || zkState == ZOO_AUTH_FAILED_STATE) {
    expireLocally(zkState == ZOO_EXPIRED_SESSION_STATE ? "expired" : "auth failed");
  } else {  // CONNECTING / ASSOCIATING: the link is down, the session may still live
    if (state_.load() == SessionState::Suspended) return;
    pingTimer_.cancel();
    dropWatchesLocally();
    publish(SessionState::Suspended, false);
    armDeadline();
  }
}
void ZkSession::expireLocally(const char* why) {
  spdlog::warn("zookeeper session 0x{:x} lost: {}; opening a new session", sessionId_.load(), why);
  pingTimer_.cancel();
  deadlineTimer_.cancel();
  connected_.store(false);
  linkEpoch_.fetch_add(1);
  zhandle_t* old = nullptr;
  {
    std::lock_guard lock(mu_);
    old = std::exchange(zh_, nullptr);
    ++generation_;  // drops every event and watch of the old handle
    dataWatches_.clear();
    childWatches_.clear();
  }
  sessionId_.store(0);
  publish(SessionState::Expired, false);
  if (old != nullptr) retireHandle(old);
  openHandle();
}

void ZkSession::retireHandle(zhandle_t* zh) {
  std::lock_guard lock(mu_);
  closers_.emplace_back([this, zh] { closeHandle(zh); });
}

void ZkSession::close(std::function<void()> done) {
  asio::post(strand_, [self = shared_from_this(), done = std::move(done)]() mutable {
    self->closeOnStrand(std::move(done));
  });
}

// Both closes: no handle is opened any more, the current one is taken out, and what was armed on
// it goes (callbacks hold their owners, and their owners this session: nothing may keep them
// here); batched creates not sent yet are answered Closing. Returns the handle to close.
zhandle_t* ZkSession::detachForClose() {
  zhandle_t* zh = nullptr;
  std::vector<PendingCreate> creates;
  {
    std::lock_guard lock(mu_);
    closing_ = true;  // under mu_: openHandle checks it under mu_ too
    zh = std::exchange(zh_, nullptr);
    ++generation_;
    dataWatches_.clear();
    childWatches_.clear();
    creates.swap(pendingCreates_);
    afterCreates_.clear();
  }
  connected_.store(false);
  for (auto& c : creates) refuse(std::move(c.executor), std::move(c.done), ZkError::Closing);
  return zh;
}

void ZkSession::closeNow() {
  zhandle_t* zh = detachForClose();
  // The ping and deadline timers act only while Connected or Suspended.
  state_.store(SessionState::Closed);
  if (zh != nullptr) closeHandle(zh);  // joins the C client's threads
  std::vector<std::thread> closers;
  {
    std::lock_guard lock(mu_);
    closers.swap(closers_);
  }
  for (auto& t : closers) t.join();
}

void ZkSession::closeOnStrand(std::function<void()> done) {
  pingTimer_.cancel();
  deadlineTimer_.cancel();
  zhandle_t* zh = detachForClose();
  publish(SessionState::Closed, false);
  sessionId_.store(0);
  std::lock_guard lock(mu_);
  closers_.emplace_back([this, zh, done = std::move(done), ex = io_.get_executor()]() mutable {
    if (zh != nullptr) closeHandle(zh);  // closeSession: the server drops our ephemerals at once
    if (done) asio::post(ex, std::move(done));
  });
}
}  // namespace zkagent::election::detail
