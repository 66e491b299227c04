#include "zk_session.hpp"

#include <spdlog/spdlog.h>
#include <zookeeper/zookeeper.h>

#include <atomic>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <memory>

#include "multi_batches.hpp"

namespace zkagent::election::detail {
namespace asio = boost::asio;

namespace {

constexpr int kResolveEveryMs = 10000;  // see openHandle
// Bytes of creates per multi: far below the server's 1 MiB request limit (jute.maxbuffer).
constexpr size_t kCreateBatchBytes = 64 * 1024;

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

NodeStat toNodeStat(const Stat* stat) {
  NodeStat out;
  if (stat != nullptr) {
    out.ephemeralOwner = stat->ephemeralOwner;
    out.version = stat->version;
    out.mzxid = stat->mzxid;
  }
  return out;
}

// Heap state of one asynchronous call; the C client invokes its completion exactly once (with
// ZCLOSING when the handle closes first), and the completion frees it.
template <typename Done>
struct Call {
  Call(ZkSession* s, uint64_t gen, Executor ex, Done d, const void* o = nullptr, TypedWatch w = {},
       std::string p = {})
      : session(s),
        generation(gen),
        executor(std::move(ex)),
        done(std::move(d)),
        owner(o),
        watch(std::move(w)),
        path(std::move(p)) {}
  ZkSession* session;
  uint64_t generation;
  Executor executor;
  Done done;
  // Watch registration, applied on the completion thread so it is ordered before any event.
  const void* owner;
  TypedWatch watch;
  std::string path;
};

// The plain watches most callers want, as a typed one.
TypedWatch typed(Session::Watch watch) {
  if (!watch) return {};
  return [watch = std::move(watch)](WatchEvent) { watch(); };
}

// Closes a handle and frees its watcher context once the C client's threads are joined.
void closeHandle(zhandle_t* zh) {
  auto* ctx = static_cast<HandleContext*>(const_cast<void*>(zoo_get_context(zh)));
  zookeeper_close(zh);
  delete ctx;
}

template <typename Done, typename... Args>
void deliver(Call<Done>* call, ZkError err, Args&&... args) {
  if (!ZkSession::linkLost(err)) {
    call->session->noteContact();  // any answer proves the server still knows our session
  }
  asio::post(call->executor,
             [done = std::move(call->done), err, ... a = std::forward<Args>(args)]() mutable {
               done(err, std::move(a)...);
             });
  delete call;
}

// Reports a call that the C client refused synchronously (bad state, marshalling error).
template <typename... Args>
void refuse(Executor ex, std::function<void(ZkError, Args...)> done, ZkError err) {
  asio::post(ex, [done = std::move(done), err] { done(err, std::decay_t<Args>{}...); });
}

int createMode(NodeKind kind) {
  switch (kind) {
    case NodeKind::Persistent:
      return ZOO_PERSISTENT;
    case NodeKind::Ephemeral:
      return ZOO_EPHEMERAL;
    case NodeKind::EphemeralSequential:
      return ZOO_EPHEMERAL_SEQUENTIAL;
  }
  return ZOO_PERSISTENT;
}

// With a digest: all rights for the creator's authenticated identities ("auth" scheme, as
// ZOO_CREATOR_ALL_ACL), read for anyone. The C client wants mutable strings.
char kAuthScheme[] = "auth";
char kNoId[] = "";
char kWorldScheme[] = "world";
char kAnyone[] = "anyone";
ACL kAuthenticatedAcls[] = {{ZOO_PERM_ALL, {kAuthScheme, kNoId}},
                            {ZOO_PERM_READ, {kWorldScheme, kAnyone}}};
ACL_vector kAuthenticatedAcl{2, kAuthenticatedAcls};

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

void ZkSession::onWatcherEvent(uint64_t generation, int type, int state, const char* path) {
  if (type == ZOO_SESSION_EVENT) {
    // The gate must close the instant the link drops, before anything is posted: a leader that
    // cannot hear ZooKeeper must not act.
    if (state != ZOO_CONNECTED_STATE) {
      connected_.store(false);
      linkEpoch_.fetch_add(1);
    }
    asio::post(strand_, [weak = weak_from_this(), generation, state] {
      if (auto self = weak.lock()) self->handleSessionState(generation, state);
    });
    return;
  }
  const std::string nodePath = path != nullptr ? path : "";
  const bool data =
      type == ZOO_CREATED_EVENT || type == ZOO_DELETED_EVENT || type == ZOO_CHANGED_EVENT;
  const bool child = type == ZOO_CHILD_EVENT || type == ZOO_DELETED_EVENT;
  const WatchEvent event = type == ZOO_CREATED_EVENT   ? WatchEvent::Created
                           : type == ZOO_DELETED_EVENT ? WatchEvent::Deleted
                           : type == ZOO_CHANGED_EVENT ? WatchEvent::Changed
                                                       : WatchEvent::Children;
  fireWatches(generation, event, data, child, nodePath);
}

void ZkSession::addWatch(uint64_t generation, bool childWatch, const std::string& path,
                         const void* owner, const Executor& ex, TypedWatch watch) {
  std::lock_guard lock(mu_);
  if (generation != generation_) return;  // the handle that armed it is gone
  auto& entries = (childWatch ? childWatches_ : dataWatches_)[path];
  for (auto& e : entries) {
    if (owner != nullptr && e.owner == owner) {
      e.watch = std::move(watch);
      e.executor = ex;
      return;
    }
  }
  entries.push_back({owner, ex, std::move(watch)});
}

void ZkSession::fireWatches(uint64_t generation, WatchEvent event, bool data, bool child,
                            const std::string& path) {
  std::vector<WatchEntry> fired;
  {
    std::lock_guard lock(mu_);
    if (generation != generation_) return;
    for (auto* table : {data ? &dataWatches_ : nullptr, child ? &childWatches_ : nullptr}) {
      if (table == nullptr) continue;
      if (auto it = table->find(path); it != table->end()) {
        for (auto& e : it->second) fired.push_back(std::move(e));
        table->erase(it);
      }
    }
  }
  for (auto& e : fired) {
    asio::post(e.executor, [watch = std::move(e.watch), event] { watch(event); });
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

// ZooKeeper 3.8's C client re-sends every watch in one SetWatches packet on reconnect; past
// jute.maxbuffer (1 MiB, ~29000 watches: ZOOKEEPER-706) the server drops the connection and the
// session can never resume. So on every disconnect we forget all watches locally (no network
// involved) and the owners re-arm them by re-reading after the reconnect, as they must anyway to
// learn what changed while we were away.
void ZkSession::dropWatchesLocally() {
  std::lock_guard lock(mu_);
  if (zh_ != nullptr) {
    for (auto* table : {&dataWatches_, &childWatches_}) {
      for (auto& [path, entries] : *table) {
        // Local removal only edits the client's table; the call returns without a round trip.
        zoo_remove_all_watches(zh_, path.c_str(), ZWATCHTYPE_ANY, 1);
      }
    }
  }
  dataWatches_.clear();
  childWatches_.clear();
}

// The server expires a session `timeout` after it last heard from us, and only tells us once we
// reconnect. Keep the same deadline locally on the monotonic clock (Mesos' group.cpp,
// CURATOR-460/ZOOKEEPER-4508): when it passes while disconnected, the session is gone for us too.
void ZkSession::armDeadline() {
  const auto timeout = negotiatedTimeout().count() > 0 ? negotiatedTimeout() : options_.timeout;
  deadlineTimer_.expires_at(Clock::time_point(Clock::duration(lastContactTicks_.load())) + timeout);
  deadlineTimer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
    auto self = weak.lock();
    if (ec || !self || self->state_.load() != SessionState::Suspended) return;
    self->expireLocally("client-side deadline passed");
  });
}

// A cheap read every third of the timeout keeps proof of contact fresh when the session is idle.
void ZkSession::armPing() {
  const auto period = std::max(negotiatedTimeout() / 3, Millis(50));
  pingTimer_.expires_after(period);
  pingTimer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
    auto self = weak.lock();
    if (ec || !self || self->state_.load() != SessionState::Connected) return;
    self->existsOn(self->strand_, "/", nullptr, nullptr,
                   [weak2 = std::weak_ptr(self)](ZkError, std::optional<NodeStat>) {
                     auto s = weak2.lock();
                     if (s && s->state_.load() == SessionState::Connected) s->armPing();
                   });
  });
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
  closers_.emplace_back([zh] { closeHandle(zh); });
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
  closers_.emplace_back([zh, done = std::move(done), ex = io_.get_executor()]() mutable {
    if (zh != nullptr) closeHandle(zh);  // closeSession: the server drops our ephemerals at once
    if (done) asio::post(ex, std::move(done));
  });
}

// ---- operations -----------------------------------------------------------------------------

// Every call goes through here: the handle lock is held while the C client queues the request, so
// a handle is never closed under a call; a request it refuses at once is answered on `ex`.
template <typename Done, typename Issue>
void ZkSession::submit(Executor ex, Done done, const void* owner, TypedWatch watch,
                       std::string path, Issue issue) {
  std::unique_lock lock(mu_);
  auto* call = new Call<Done>(this, generation_, std::move(ex), std::move(done), owner,
                              std::move(watch), std::move(path));
  const int rc = zh_ == nullptr ? ZINVALIDSTATE : issue(zh_, call);
  lock.unlock();
  if (rc != ZOK) {
    refuse(std::move(call->executor), std::move(call->done), fromRc(rc));
    delete call;
  }
}

void ZkSession::create(std::string path, std::string data, NodeKind kind,
                       std::function<void(ZkError, std::string)> done) {
  createOn(io_.get_executor(), std::move(path), std::move(data), kind, std::move(done));
}
void ZkSession::set(std::string path, std::string data, int32_t version,
                    std::function<void(ZkError, NodeStat)> done) {
  using Done = std::function<void(ZkError, NodeStat)>;
  submit(io_.get_executor(), Done(std::move(done)), nullptr, nullptr, std::move(path),
         [&](zhandle_t* zh, Call<Done>* call) {
           return zoo_aset(
               zh, call->path.c_str(), data.data(), static_cast<int>(data.size()), version,
               [](int rc, const Stat* stat, const void* p) {
                 deliver(static_cast<Call<Done>*>(const_cast<void*>(p)), fromRc(rc),
                         toNodeStat(stat));
               },
               call);
         });
}
void ZkSession::get(std::string path, Watch watch,
                    std::function<void(ZkError, std::string, NodeStat)> done) {
  getOn(io_.get_executor(), std::move(path), nullptr, std::move(watch), std::move(done));
}
void ZkSession::exists(std::string path, Watch watch,
                       std::function<void(ZkError, std::optional<NodeStat>)> done) {
  existsOn(io_.get_executor(), std::move(path), nullptr, std::move(watch), std::move(done));
}
void ZkSession::children(std::string path, Watch watch,
                         std::function<void(ZkError, std::vector<std::string>)> done) {
  childrenOn(io_.get_executor(), std::move(path), nullptr, std::move(watch), std::move(done));
}
void ZkSession::remove(std::string path, int32_t version, std::function<void(ZkError)> done) {
  removeOn(io_.get_executor(), std::move(path), version, std::move(done));
}
void ZkSession::ensurePath(std::string path, std::function<void(ZkError)> done) {
  ensurePathOn(io_.get_executor(), std::move(path), std::move(done));
}

void ZkSession::createOn(Executor ex, std::string path, std::string data, NodeKind kind,
                         std::function<void(ZkError, std::string)> done) {
  using Done = std::function<void(ZkError, std::string)>;
  submit(std::move(ex), std::move(done), nullptr, nullptr, std::move(path),
         [&](zhandle_t* zh, Call<Done>* call) {
           return zoo_acreate(
               zh, call->path.c_str(), data.data(), static_cast<int>(data.size()),
               options_.digest.empty() ? &ZOO_OPEN_ACL_UNSAFE : &kAuthenticatedAcl,
               createMode(kind),
               [](int rc, const char* value, const void* p) {
                 deliver(static_cast<Call<Done>*>(const_cast<void*>(p)), fromRc(rc),
                         std::string(value != nullptr ? value : ""));
               },
               call);
         });
}

void ZkSession::createBatchedOn(Executor ex, std::string path, std::string data, NodeKind kind,
                                std::function<void(ZkError, std::string)> done, std::string guard) {
  bool flushNow = false;
  {
    std::lock_guard lock(mu_);
    pendingCreates_.push_back(
        {std::move(ex), std::move(path), std::move(data), kind, std::move(done), std::move(guard)});
    flushNow = !flushPosted_ && createsInFlight_ == 0;
    flushPosted_ = flushPosted_ || flushNow;
  }
  if (flushNow) asio::post(strand_, [self = shared_from_this()] { self->flushCreates(); });
}

void ZkSession::whenCreatesIdle(Executor ex, std::function<void()> fn) {
  {
    std::lock_guard lock(mu_);
    if (flushPosted_ || createsInFlight_ > 0 || !pendingCreates_.empty()) {
      afterCreates_.emplace_back(std::move(ex), std::move(fn));
      return;
    }
  }
  asio::post(ex, std::move(fn));
}

// Nagle's rule: the first create goes out at once; those that arrive while batches are being
// answered wait for the next answer and go out together (in as many multis as their size needs,
// all pipelined), however they trickle in. When nothing is pending or in flight, the work deferred
// by whenCreatesIdle goes.
void ZkSession::flushCreates() {
  std::vector<std::vector<PendingCreate>> batches;
  std::vector<std::pair<Executor, std::function<void()>>> idle;
  {
    std::lock_guard lock(mu_);
    flushPosted_ = false;
    MultiBatches<PendingCreate> packer(kCreateBatchBytes);
    for (auto& c : pendingCreates_) {
      // + header, ACL, flags; a guard's check is its path and a header
      const size_t bytes =
          c.path.size() + c.data.size() + 64 + (c.guard.empty() ? 0 : c.guard.size() + 16);
      if (auto full = packer.add(std::move(c), bytes)) batches.push_back(std::move(*full));
    }
    if (!packer.empty()) batches.push_back(packer.take());
    pendingCreates_.clear();
    createsInFlight_ += batches.size();
    if (createsInFlight_ == 0) idle.swap(afterCreates_);
  }
  for (auto& [ex, fn] : idle) asio::post(ex, std::move(fn));
  for (auto& batch : batches) sendCreateBatch(std::move(batch));
}

// A batch was answered (on the session strand): send what accumulated meanwhile, or, when
// nothing is left anywhere, release the deferred work.
void ZkSession::createBatchAnswered() {
  {
    std::lock_guard lock(mu_);
    --createsInFlight_;
    if (pendingCreates_.empty() && createsInFlight_ > 0) return;
  }
  flushCreates();
}

// Answers each create on its own executor, then flushes the next batch (on the session strand).
void ZkSession::sendCreateBatch(std::vector<PendingCreate> creates) {
  if (creates.size() == 1) return sendCreateAlone(std::move(creates.front()), true);
  std::vector<MultiOp> ops;
  std::vector<size_t> createAt;  // index of each create's own op (its guard's check is before it)
  ops.reserve(2 * creates.size());
  createAt.reserve(creates.size());
  for (auto& c : creates) {
    if (!c.guard.empty()) ops.push_back({MultiOp::Kind::Check, c.guard, "", -1});
    createAt.push_back(ops.size());
    ops.push_back({MultiOp::Kind::Create, c.path, c.data, -1, c.kind});
  }
  const size_t opCount = ops.size();
  multiOn(strand_, std::move(ops),
          [self = shared_from_this(), creates = std::move(creates), createAt = std::move(createAt),
           opCount](ZkError err, std::vector<MultiResult> results) mutable {
            // No per-operation results when the client refused the multi outright (handle closed).
            const bool perOperation = results.size() == opCount;
            for (size_t i = 0; i < creates.size(); ++i) {
              auto& one = creates[i];
              const size_t at = createAt[i];
              // The create's own result, unless its guard is what failed.
              int rc = perOperation ? results[at].rc : ZOK;
              if (perOperation && !one.guard.empty() && results[at - 1].rc != ZOK &&
                  results[at - 1].rc != ZRUNTIMEINCONSISTENCY) {
                rc = results[at - 1].rc;
              }
              const bool rolledBack = err != ZkError::Ok && !linkLost(err) && perOperation &&
                                      (rc == ZOK || rc == ZRUNTIMEINCONSISTENCY);
              if (!rolledBack) {
                // Created, the link's fate, or this create is the one that failed.
                const ZkError mine =
                    err == ZkError::Ok || linkLost(err) || !perOperation ? err : fromRc(rc);
                std::string path = perOperation ? std::move(results[at].path) : std::string();
                asio::post(one.executor, [done = std::move(one.done), mine,
                                          path = std::move(path)] { done(mine, path); });
              } else {
                // Rolled back because another create failed: send it again on its own.
                self->sendCreateAlone(std::move(one), false);
              }
            }
            self->createBatchAnswered();
          });
}

void ZkSession::sendCreateAlone(PendingCreate c, bool ofBatch) {
  auto answer = [self = shared_from_this(), ex = std::move(c.executor), done = std::move(c.done),
                 ofBatch](ZkError err, std::string path) mutable {
    asio::post(ex, [done = std::move(done), err, path = std::move(path)] { done(err, path); });
    if (ofBatch) self->createBatchAnswered();
  };
  if (c.guard.empty()) {
    return createOn(strand_, std::move(c.path), std::move(c.data), c.kind, std::move(answer));
  }
  multiOn(strand_,
          {{MultiOp::Kind::Check, std::move(c.guard), "", -1},
           {MultiOp::Kind::Create, std::move(c.path), std::move(c.data), -1, c.kind}},
          [answer = std::move(answer)](ZkError err, std::vector<MultiResult> results) mutable {
            if (err == ZkError::Ok || results.size() != 2) {
              return answer(err, results.size() == 2 ? std::move(results[1].path) : "");
            }
            // The guard's failure (NoNode) wins; else the create's own error.
            const int rc = results[0].rc != ZOK && results[0].rc != ZRUNTIMEINCONSISTENCY
                               ? results[0].rc
                               : results[1].rc;
            answer(linkLost(err) ? err : fromRc(rc), "");
          });
}

// Watches are recorded on the completion thread, before any event for them can be processed.
void ZkSession::getOn(Executor ex, std::string path, const void* owner, Watch watch,
                      std::function<void(ZkError, std::string, NodeStat)> done) {
  getWatchingOn(std::move(ex), std::move(path), owner, typed(std::move(watch)), std::move(done));
}

void ZkSession::getWatchingOn(Executor ex, std::string path, const void* owner, TypedWatch watch,
                              std::function<void(ZkError, std::string, NodeStat)> done) {
  using Done = std::function<void(ZkError, std::string, NodeStat)>;
  submit(std::move(ex), std::move(done), owner, std::move(watch), std::move(path),
         [](zhandle_t* zh, Call<Done>* call) {
           return zoo_aget(
               zh, call->path.c_str(), call->watch ? 1 : 0,
               [](int rc, const char* value, int len, const Stat* stat, const void* p) {
                 auto* c = static_cast<Call<Done>*>(const_cast<void*>(p));
                 if (rc == ZOK && c->watch)
                   c->session->addWatch(c->generation, false, c->path, c->owner, c->executor,
                                        std::move(c->watch));
                 deliver(c, fromRc(rc),
                         value != nullptr && len > 0 ? std::string(value, len) : std::string(),
                         toNodeStat(stat));
               },
               call);
         });
}

void ZkSession::existsOn(Executor ex, std::string path, const void* owner, Watch watch,
                         std::function<void(ZkError, std::optional<NodeStat>)> done) {
  using Done = std::function<void(ZkError, std::optional<NodeStat>)>;
  submit(std::move(ex), std::move(done), owner, typed(std::move(watch)), std::move(path),
         [](zhandle_t* zh, Call<Done>* call) {
           return zoo_aexists(
               zh, call->path.c_str(), call->watch ? 1 : 0,
               [](int rc, const Stat* stat, const void* p) {
                 auto* c = static_cast<Call<Done>*>(const_cast<void*>(p));
                 // exists() leaves a watch both when the node is there and when it is not.
                 if ((rc == ZOK || rc == ZNONODE) && c->watch)
                   c->session->addWatch(c->generation, false, c->path, c->owner, c->executor,
                                        std::move(c->watch));
                 std::optional<NodeStat> st;
                 if (rc == ZOK) st = toNodeStat(stat);
                 deliver(c, rc == ZNONODE ? ZkError::Ok : fromRc(rc), st);
               },
               call);
         });
}

void ZkSession::childrenOn(Executor ex, std::string path, const void* owner, Watch watch,
                           std::function<void(ZkError, std::vector<std::string>)> done) {
  using Done = std::function<void(ZkError, std::vector<std::string>)>;
  submit(std::move(ex), std::move(done), owner, typed(std::move(watch)), std::move(path),
         [](zhandle_t* zh, Call<Done>* call) {
           return zoo_aget_children(
               zh, call->path.c_str(), call->watch ? 1 : 0,
               [](int rc, const String_vector* strings, const void* p) {
                 auto* c = static_cast<Call<Done>*>(const_cast<void*>(p));
                 if (rc == ZOK && c->watch)
                   c->session->addWatch(c->generation, true, c->path, c->owner, c->executor,
                                        std::move(c->watch));
                 std::vector<std::string> names;
                 if (rc == ZOK && strings != nullptr) {
                   names.reserve(static_cast<size_t>(strings->count));
                   for (int i = 0; i < strings->count; ++i) names.emplace_back(strings->data[i]);
                 }
                 deliver(c, fromRc(rc), std::move(names));
               },
               call);
         });
}

void ZkSession::removeOn(Executor ex, std::string path, int32_t version,
                         std::function<void(ZkError)> done) {
  using Done = std::function<void(ZkError)>;
  submit(std::move(ex), std::move(done), nullptr, nullptr, std::move(path),
         [version](zhandle_t* zh, Call<Done>* call) {
           return zoo_adelete(
               zh, call->path.c_str(), version,
               [](int rc, const void* p) {
                 deliver(static_cast<Call<Done>*>(const_cast<void*>(p)), fromRc(rc));
               },
               call);
         });
}

// All missing ancestors are created in one pipelined burst: ZooKeeper applies a session's
// requests in order, so each create finds its parent already made.
void ZkSession::ensurePathOn(Executor ex, std::string path, std::function<void(ZkError)> done) {
  std::vector<std::string> prefixes;
  for (size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    prefixes.push_back(path.substr(0, pos));
  }
  prefixes.push_back(path);
  // Prefixes this session created or saw exist (or has a create on the way for) are skipped: the
  // server handles a session's requests in order, so a create sent after another one's finds its
  // parent. Ten thousand accounts thus create the shared root once, not ten thousand times.
  std::vector<std::string> missing;
  {
    std::lock_guard lock(mu_);
    for (auto& p : prefixes) {
      if (knownPaths_.insert(p).second) missing.push_back(p);
    }
  }
  if (missing.empty()) return asio::post(ex, [done = std::move(done)] { done(ZkError::Ok); });
  // The answers may run on different threads at once (`ex` need not be a strand).
  struct Join {
    std::atomic<size_t> pending;
    std::atomic<ZkError> result{ZkError::Ok};
    std::function<void(ZkError)> done;
  };
  auto join = std::make_shared<Join>();
  join->pending = missing.size();
  join->done = std::move(done);
  for (auto& p : missing) {
    createOn(ex, p, "", NodeKind::Persistent,
             [self = shared_from_this(), join, prefixes](ZkError err, std::string) {
               if (err != ZkError::Ok && err != ZkError::NodeExists) {
                 // Not there after all (the tree was deleted under us, CURATOR-724): forget the
                 // whole path so the next attempt creates every level again.
                 std::lock_guard lock(self->mu_);
                 for (auto& p2 : prefixes) self->knownPaths_.erase(p2);
                 ZkError first = ZkError::Ok;
                 join->result.compare_exchange_strong(first, err);
               }
               if (join->pending.fetch_sub(1) == 1) join->done(join->result.load());
             });
  }
}

void ZkSession::forgetPath(const std::string& path) {
  std::lock_guard lock(mu_);
  for (size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    knownPaths_.erase(path.substr(0, pos));
  }
  knownPaths_.erase(path);
}

void ZkSession::multiOn(Executor ex, std::vector<MultiOp> ops, MultiDone done) {
  struct MultiCall {
    ZkSession* session;
    std::vector<MultiOp> ops;
    std::vector<zoo_op_t> zops;
    std::vector<zoo_op_result_t> results;
    std::vector<std::string> created;  // buffers for the paths Create ops make
    Executor executor;
    MultiDone done;
  };
  auto* call = new MultiCall{this, std::move(ops), {}, {}, {}, ex, std::move(done)};
  const size_t n = call->ops.size();
  call->zops.resize(n);
  call->results.resize(n);
  call->created.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const auto& op = call->ops[i];
    switch (op.kind) {
      case MultiOp::Kind::Create:
        call->created[i].assign(op.path.size() + 16, '\0');  // room for a sequence suffix
        zoo_create_op_init(&call->zops[i], op.path.c_str(), op.data.data(),
                           static_cast<int>(op.data.size()),
                           options_.digest.empty() ? &ZOO_OPEN_ACL_UNSAFE : &kAuthenticatedAcl,
                           createMode(op.nodeKind), call->created[i].data(),
                           static_cast<int>(call->created[i].size()));
        break;
      case MultiOp::Kind::Remove:
        zoo_delete_op_init(&call->zops[i], op.path.c_str(), op.version);
        break;
      case MultiOp::Kind::Set:
        zoo_set_op_init(&call->zops[i], op.path.c_str(), op.data.data(),
                        static_cast<int>(op.data.size()), op.version, nullptr);
        break;
      case MultiOp::Kind::Check:
        zoo_check_op_init(&call->zops[i], op.path.c_str(), op.version);
        break;
    }
  }
  std::unique_lock lock(mu_);  // held while submitting: a handle is never closed under a call
  const int rc =
      zh_ == nullptr
          ? ZINVALIDSTATE
          : zoo_amulti(
                zh_, static_cast<int>(n), call->zops.data(), call->results.data(),
                [](int rc2, const void* p) {
                  std::unique_ptr<MultiCall> c(static_cast<MultiCall*>(const_cast<void*>(p)));
                  const ZkError err = fromRc(rc2);
                  if (!linkLost(err)) c->session->noteContact();
                  std::vector<MultiResult> results(c->ops.size());
                  for (size_t i = 0; i < results.size(); ++i) {
                    results[i].rc = linkLost(err) ? rc2 : c->results[i].err;
                    if (err == ZkError::Ok && c->ops[i].kind == MultiOp::Kind::Create) {
                      results[i].path = c->created[i].c_str();
                    }
                  }
                  asio::post(c->executor, [done = std::move(c->done), err,
                                           results = std::move(results)]() mutable {
                    done(err, std::move(results));
                  });
                },
                call);
  lock.unlock();
  if (rc != ZOK) {
    refuse(std::move(call->executor), std::move(call->done), fromRc(rc));
    delete call;
  }
}

void ZkSession::syncOn(Executor ex, std::string path, std::function<void(ZkError)> done) {
  using Done = std::function<void(ZkError)>;
  submit(std::move(ex), std::move(done), nullptr, nullptr, std::move(path),
         [](zhandle_t* zh, Call<Done>* call) {
           return zoo_async(
               zh, call->path.c_str(),
               [](int rc, const char*, const void* p) {
                 deliver(static_cast<Call<Done>*>(const_cast<void*>(p)), fromRc(rc));
               },
               call);
         });
}

}  // namespace zkagent::election::detail
