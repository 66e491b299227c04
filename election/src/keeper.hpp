// Keeper: what the election needs of ZooKeeper, and nothing more (ClickHouse's IKeeper): the
// operations, an atomic multi, batched creates with their idle hook, watch arming, and the link
// facts a gate decision rests on. ZkSession implements it on the C client; the unit tests drive the
// real Elector on an in-memory tree (tests/election/fake_keeper.hpp).
//
// Every answer runs on the executor passed with the call, never on the caller's stack. A watch
// fires at most once and is dropped when the link drops; one armed again for the same path and
// `owner` replaces the earlier one. ZooKeeper delivers a watch event before any reply sent after
// the change, and the election relies on that order.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "zkagent/election.hpp"

namespace zkagent::election::detail {

using Executor = boost::asio::any_io_executor;

// What a fired watch saw happen to its node.
enum class WatchEvent { Created, Deleted, Changed, Children };
using TypedWatch = std::function<void(WatchEvent)>;

// The plain watches most callers want, as a typed one.
inline TypedWatch typed(Session::Watch watch) {
  if (!watch) return {};
  return [watch = std::move(watch)](WatchEvent) { watch(); };
}

// The link or the session failed, not the operation: such an answer proves no contact with the
// server.
constexpr bool linkLost(ZkError err) {
  return err == ZkError::ConnectionLoss || err == ZkError::SessionExpired ||
         err == ZkError::Closing;
}

// The operation may or may not have happened, and this session can find out (or send it again)
// once the link is back (Mesos' ZooKeeper::retryable). An expired or closed session cannot: what it
// made is gone with it.
constexpr bool retryable(ZkError err) { return err == ZkError::ConnectionLoss; }

// One operation of an atomic multi (only the kinds the election needs). Check fails the multi when
// the node is missing (or, with a version >= 0, at another version); it writes nothing.
struct MultiOp {
  enum class Kind { Create, Remove, Set, Check } kind;
  std::string path;
  std::string data;  // Create, Set
  int32_t version = -1;
  NodeKind nodeKind = NodeKind::Persistent;  // Create
};

// One operation's part of a multi's answer.
struct MultiResult {
  // The error of the operation that failed the multi; nullopt for the others (done, or rolled back
  // because another failed) and for all when the link failed.
  std::optional<ZkError> failure;
  std::string path;  // what a Create made, when the multi succeeded
};

class Keeper {
 public:
  using Watch = Session::Watch;
  using MultiDone = std::function<void(ZkError, std::vector<MultiResult>)>;
  virtual ~Keeper() = default;

  // Link facts, readable from any thread.
  // False from the instant the link is lost, true again once every listener heard "connected".
  virtual bool usable() const = 0;
  // The server was heard from within two thirds of the session timeout (the C client's own bound
  // before it calls the link lost; the idle ping answers every third). False after a pause of the
  // process (SIGSTOP, a frozen VM) that may have cost the session before anyone said so: the gate
  // must not open on such a session. Only the gate asks; the rest waits for link events.
  virtual bool heardRecently() const = 0;
  // Counts link losses: a leader confirmed under an older count is not trusted until it confirms
  // again.
  virtual uint64_t linkEpoch() const = 0;
  virtual int64_t sessionId() const = 0;

  virtual void createOn(Executor ex, std::string path, std::string data, NodeKind kind,
                        std::function<void(ZkError, std::string)> done) = 0;
  virtual void setOn(Executor ex, std::string path, std::string data, int32_t version,
                     std::function<void(ZkError, NodeStat)> done) = 0;
  // A get whose watch is told what happened (a change, or the node deleted).
  virtual void getWatchingOn(Executor ex, std::string path, const void* owner, TypedWatch watch,
                             std::function<void(ZkError, std::string, NodeStat)> done) = 0;
  void getOn(Executor ex, std::string path, const void* owner, Watch watch,
             std::function<void(ZkError, std::string, NodeStat)> done) {
    getWatchingOn(std::move(ex), std::move(path), owner, typed(std::move(watch)), std::move(done));
  }
  // Answers Ok with nullopt for a missing node, and leaves the watch either way.
  virtual void existsOn(Executor ex, std::string path, const void* owner, Watch watch,
                        std::function<void(ZkError, std::optional<NodeStat>)> done) = 0;
  virtual void childrenOn(Executor ex, std::string path, const void* owner, Watch watch,
                          std::function<void(ZkError, std::vector<std::string>)> done) = 0;
  virtual void removeOn(Executor ex, std::string path, int32_t version,
                        std::function<void(ZkError)> done) = 0;
  // Creates every missing persistent level of `path`, each at most once per session.
  virtual void ensurePathOn(Executor ex, std::string path, std::function<void(ZkError)> done) = 0;
  // Makes ensurePathOn create `path` and every level above it again: a create found it missing.
  virtual void forgetPath(const std::string& path) = 0;
  // `done` gets one result per operation.
  virtual void multiOn(Executor ex, std::vector<MultiOp> ops, MultiDone done) = 0;
  // Makes the next read on this session see everything the ensemble leader has committed.
  virtual void syncOn(Executor ex, std::string path, std::function<void(ZkError)> done) = 0;
  // Like createOn, but creates issued while earlier ones are being answered go out together in
  // multis. A non-empty `guard` must exist for the create to happen (a Check in the same multi);
  // when it is missing the create is not made and `done` gets NoNode.
  virtual void createBatchedOn(Executor ex, std::string path, std::string data, NodeKind kind,
                               std::function<void(ZkError, std::string)> done,
                               std::string guard) = 0;
  // Runs `fn` on `ex` once no batched create is waiting or being answered.
  virtual void whenCreatesIdle(Executor ex, std::function<void()> fn) = 0;
};

}  // namespace zkagent::election::detail
