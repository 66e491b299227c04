// ZkSession: the one owner of a zhandle_t. Everything the C client calls back is marshalled onto
// Asio executors together with the handle generation it belongs to (Mesos' pattern); events of an
// old handle are dropped. Callbacks on ZooKeeper's completion thread only copy and post: they never
// block and never close a handle.
#pragma once

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "zkagent/election.hpp"

typedef struct _zhandle zhandle_t;

namespace zkagent::election::detail {

using Executor = boost::asio::any_io_executor;
using Clock = std::chrono::steady_clock;

// What a fired watch saw happen to its node.
enum class WatchEvent { Created, Deleted, Changed, Children };
using TypedWatch = std::function<void(WatchEvent)>;

// One operation of an atomic multi (only the kinds the election needs). Check fails the multi when
// the node is missing (or, with a version >= 0, at another version); it writes nothing.
struct MultiOp {
  enum class Kind { Create, Remove, Set, Check } kind;
  std::string path;
  std::string data;  // Create, Set
  int32_t version = -1;
  NodeKind nodeKind = NodeKind::Persistent;  // Create
};

class ZkSession : public Session, public std::enable_shared_from_this<ZkSession> {
 public:
  using EventHandler = std::function<void(const SessionEvent&)>;

  ZkSession(boost::asio::io_context& io, SessionOptions options);
  ~ZkSession() override;

  // Opens the first handle. `onEvent` runs on the io_context for every state change.
  void start(EventHandler onEvent);
  // Closes the session (the server deletes its ephemeral nodes in one request) without blocking the
  // caller; `done` runs on the io_context afterwards.
  void close(std::function<void()> done);
  // Closes the session on the calling thread (any thread but ZooKeeper's): the server drops our
  // ephemeral nodes at once, and once this returns no ZooKeeper callback runs any more (what was
  // in flight is answered Closing on its executor). For owners that go away without close().
  void closeNow();

  boost::asio::io_context& io() const { return io_; }
  SessionState state() const override { return state_.load(); }
  int64_t sessionId() const override { return sessionId_.load(); }
  Millis negotiatedTimeout() const override { return Millis(negotiatedMs_.load()); }
  // False from the instant the C client reports a disconnect (set on its thread, before any post).
  bool usable() const { return connected_.load(); }
  // Counts link losses; bumped on ZooKeeper's thread at the instant of a disconnect, so a leader
  // confirmed under an older count is not trusted by the gate until it confirms again.
  uint64_t linkEpoch() const { return linkEpoch_.load(); }

  void create(std::string path, std::string data, NodeKind kind,
              std::function<void(ZkError, std::string)> done) override;
  void set(std::string path, std::string data, int32_t version,
           std::function<void(ZkError, NodeStat)> done) override;
  void get(std::string path, Watch watch,
           std::function<void(ZkError, std::string, NodeStat)> done) override;
  void exists(std::string path, Watch watch,
              std::function<void(ZkError, std::optional<NodeStat>)> done) override;
  void children(std::string path, Watch watch,
                std::function<void(ZkError, std::vector<std::string>)> done) override;
  void remove(std::string path, int32_t version, std::function<void(ZkError)> done) override;
  void ensurePath(std::string path, std::function<void(ZkError)> done) override;

  // Same operations, answered on `ex` (an account's strand). A watch is keyed by `owner`: re-arming
  // the same path for the same owner replaces the callback, so repeated evaluations never pile up.
  void createOn(Executor ex, std::string path, std::string data, NodeKind kind,
                std::function<void(ZkError, std::string)> done);
  void getOn(Executor ex, std::string path, const void* owner, Watch watch,
             std::function<void(ZkError, std::string, NodeStat)> done);
  // getOn whose watch is told what happened (a change, or the node deleted).
  void getWatchingOn(Executor ex, std::string path, const void* owner, TypedWatch watch,
                     std::function<void(ZkError, std::string, NodeStat)> done);
  void existsOn(Executor ex, std::string path, const void* owner, Watch watch,
                std::function<void(ZkError, std::optional<NodeStat>)> done);
  void childrenOn(Executor ex, std::string path, const void* owner, Watch watch,
                  std::function<void(ZkError, std::vector<std::string>)> done);
  // Like createOn, but creates issued while earlier batches are being answered go out together in
  // multis: one request and one transaction for many accounts instead of one each. When the
  // multi fails, the create that failed gets its error and the others are sent again one by one.
  // A non-empty `guard` must exist for the create to happen (a Check in the same multi); when it
  // is missing the create is not made and `done` gets NoNode.
  void createBatchedOn(Executor ex, std::string path, std::string data, NodeKind kind,
                       std::function<void(ZkError, std::string)> done, std::string guard = {});
  // Runs `fn` on `ex` once no batched create is waiting or being answered: work that can wait
  // (arming watches after a takeover) does not queue ahead of takeovers still to come.
  void whenCreatesIdle(Executor ex, std::function<void()> fn);
  void removeOn(Executor ex, std::string path, int32_t version, std::function<void(ZkError)> done);
  void ensurePathOn(Executor ex, std::string path, std::function<void(ZkError)> done);
  // Makes ensurePathOn create `path` and every level above it again: a create found it missing.
  void forgetPath(const std::string& path);
  // `done` gets one result per operation: its own error (on failure ZooKeeper reports the one
  // that failed; the others say RuntimeInconsistency or Ok, rolled back either way) and the path
  // a Create made.
  struct MultiResult {
    int rc = 0;  // the C client's code for this operation
    std::string path;
  };
  using MultiDone = std::function<void(ZkError, std::vector<MultiResult>)>;
  void multiOn(Executor ex, std::vector<MultiOp> ops, MultiDone done);
  // Makes the next read on this session see everything the ensemble leader has committed.
  void syncOn(Executor ex, std::string path, std::function<void(ZkError)> done);

  // Called by the C trampolines (ZooKeeper's threads).
  void onWatcherEvent(uint64_t generation, int type, int state, const char* path);
  void addWatch(uint64_t generation, bool childWatch, const std::string& path, const void* owner,
                const Executor& ex, TypedWatch watch);

  static ZkError fromRc(int rc);
  // The answer says the link or session failed, not the operation (no proof of server contact).
  static bool linkLost(ZkError err) {
    return err == ZkError::ConnectionLoss || err == ZkError::SessionExpired ||
           err == ZkError::Closing;
  }
  void noteContact() { lastContactTicks_.store(Clock::now().time_since_epoch().count()); }

 private:
  struct WatchEntry {
    const void* owner;
    Executor executor;
    TypedWatch watch;
  };
  using WatchTable = std::unordered_map<std::string, std::vector<WatchEntry>>;

  struct PendingCreate {
    Executor executor;
    std::string path, data;
    NodeKind kind;
    std::function<void(ZkError, std::string)> done;
    std::string guard;  // checked in the same multi when not empty
  };
  void flushCreates();
  void createBatchAnswered();
  void sendCreateBatch(std::vector<PendingCreate> creates);
  // One create of a batch on its own (its guard still checked), answered on its own executor.
  void sendCreateAlone(PendingCreate create, bool ofBatch);

  template <typename Done, typename Issue>
  void submit(Executor ex, Done done, const void* owner, TypedWatch watch, std::string path,
              Issue issue);
  void openHandle();  // strand
  void closeOnStrand(std::function<void()> done);
  zhandle_t* detachForClose();
  void handleSessionState(uint64_t generation, int zkState);
  void expireLocally(const char* why);
  void retireHandle(zhandle_t* zh);  // closes an old handle off the io thread
  void armPing();
  void dropWatchesLocally();
  void armDeadline();
  void fireWatches(uint64_t generation, WatchEvent event, bool data, bool child,
                   const std::string& path);
  void publish(SessionState state, bool newSession);

  boost::asio::io_context& io_;
  boost::asio::strand<boost::asio::io_context::executor_type> strand_;  // session-internal work
  SessionOptions options_;
  EventHandler onEvent_;

  mutable std::mutex mu_;  // guards zh_, generation_, watches, closers_
  zhandle_t* zh_ = nullptr;
  uint64_t generation_ = 0;
  WatchTable dataWatches_;
  WatchTable childWatches_;
  std::vector<std::thread> closers_;
  std::vector<PendingCreate> pendingCreates_;  // createBatchedOn, until the next flushCreates
  bool flushPosted_ = false;                   // a flushCreates is on its way
  size_t createsInFlight_ = 0;                 // batches sent and not answered yet
  std::vector<std::pair<Executor, std::function<void()>>> afterCreates_;  // whenCreatesIdle
  std::unordered_set<std::string> knownPaths_;  // ensurePathOn: created, seen, or on the way

  std::atomic<SessionState> state_{SessionState::Connecting};
  std::atomic<bool> connected_{false};
  std::atomic<uint64_t> linkEpoch_{0};
  std::atomic<int64_t> sessionId_{0};
  std::atomic<int64_t> negotiatedMs_{0};
  int64_t everConnectedId_ = 0;       // strand: id of the last session we announced
  std::atomic<bool> closing_{false};  // no handle is opened any more
  // Last proof that the server knew our session (a reply), as steady-clock ticks.
  std::atomic<Clock::rep> lastContactTicks_{0};
  boost::asio::steady_timer pingTimer_;
  boost::asio::steady_timer deadlineTimer_;
};

}  // namespace zkagent::election::detail
