// ZkSession: the one owner of a zhandle_t. Everything the C client calls back is marshalled onto
// Asio executors together with the handle generation it belongs to (Mesos' pattern); events of an
// old handle are dropped. Callbacks on ZooKeeper's completion thread only copy and post: they never
// block and never close a handle.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "in_flight_calls.hpp"
#include "keeper.hpp"
#include "zkagent/election.hpp"

typedef struct _zhandle zhandle_t;

namespace zkagent::election::detail {

using Clock = std::chrono::steady_clock;

class ZkSession : public Session, public Keeper, public std::enable_shared_from_this<ZkSession> {
 public:
  using EventHandler = std::function<void(const SessionEvent&)>;
  using Watch = Session::Watch;

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
  bool usable() const override { return connected_.load(); }
  bool heardRecently() const override;
  // Bumped on ZooKeeper's thread at the instant of a disconnect.
  uint64_t linkEpoch() const override { return linkEpoch_.load(); }

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

  // The Keeper operations (keeper.hpp), answered on `ex` (an account's strand). A watch is keyed
  // by `owner`: re-arming the same path for the same owner replaces the callback, so repeated
  // evaluations never pile up.
  void createOn(Executor ex, std::string path, std::string data, NodeKind kind,
                std::function<void(ZkError, std::string)> done) override;
  void setOn(Executor ex, std::string path, std::string data, int32_t version,
             std::function<void(ZkError, NodeStat)> done) override;
  void getWatchingOn(Executor ex, std::string path, const void* owner, TypedWatch watch,
                     std::function<void(ZkError, std::string, NodeStat)> done) override;
  void existsOn(Executor ex, std::string path, const void* owner, Watch watch,
                std::function<void(ZkError, std::optional<NodeStat>)> done) override;
  void childrenOn(Executor ex, std::string path, const void* owner, Watch watch,
                  std::function<void(ZkError, std::vector<std::string>)> done) override;
  // When the multi fails, the create that failed gets its error and the others are sent again one
  // by one.
  void createBatchedOn(Executor ex, std::string path, std::string data, NodeKind kind,
                       std::function<void(ZkError, std::string)> done, std::string guard) override;
  // Work that can wait (arming watches after a takeover) does not queue ahead of takeovers still
  // to come.
  void whenCreatesIdle(Executor ex, std::function<void()> fn) override;
  void removeOn(Executor ex, std::string path, int32_t version,
                std::function<void(ZkError)> done) override;
  void ensurePathOn(Executor ex, std::string path, std::function<void(ZkError)> done) override;
  void forgetPath(const std::string& path) override;
  void multiOn(Executor ex, std::vector<MultiOp> ops, MultiDone done) override;
  void syncOn(Executor ex, std::string path, std::function<void(ZkError)> done) override;
  using Keeper::getOn;

  // Called by the C trampolines (ZooKeeper's threads).
  void onWatcherEvent(uint64_t generation, int type, int state, const char* path);
  void addWatch(uint64_t generation, bool childWatch, const std::string& path, const void* owner,
                const Executor& ex, TypedWatch watch);

  // The completion of `call` runs: it is no longer the session's to answer.
  void answered(InFlightCall* call) { inFlight_.remove(call); }

  static ZkError fromRc(int rc);
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
  // Closes a handle (joining the C client's threads) and answers the calls it dropped.
  void closeHandle(zhandle_t* zh);
  // Lists `call` and hands it to the C client (`issue`, under mu_ with a handle open); unlisted
  // again when the client refuses it at once. Returns the client's code.
  template <typename Issue>
  int issueListed(InFlightCall* call, Issue issue);
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
  // Changed under mu_; read without it by the watcher (a stale handle's events are ignored).
  std::atomic<uint64_t> generation_{0};
  WatchTable dataWatches_;
  WatchTable childWatches_;
  std::vector<std::thread> closers_;
  InFlightCalls inFlight_;                     // issued, not answered yet
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
