// An in-memory ZooKeeper for unit tests of the election: FakeZooKeeper is the tree (persistent,
// ephemeral and sequential nodes, versions, ephemeralOwner, atomic multi with Check), FakeKeeper
// one client session on it implementing the Keeper interface (one-shot data and child watches,
// delivered before any later reply, owner-keyed like ZkSession's). Everything runs on the test's
// io_context: an operation is applied when it is called and answered by a post, so a test is a
// deterministic sequence of calls and runs of the io_context.
//
// Fault hooks on a FakeKeeper: drop a reply (the operation happens, the caller hears
// ConnectionLoss), lose the link and reconnect on the same session, expire the session, and hold
// everything it would deliver (replies and watch events) to release it in a chosen order.
#pragma once

#include <boost/asio/io_context.hpp>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "keeper.hpp"

namespace zkagent::election::fake {

using detail::Executor;
using detail::MultiOp;
using detail::MultiResult;
using detail::TypedWatch;
using detail::WatchEvent;

class FakeKeeper;

class FakeZooKeeper {
 public:
  struct Node {
    std::string data;
    int32_t version = 0;
    int64_t ephemeralOwner = 0;
    int32_t cversion = 0;  // counts child creates and deletes; names the next sequential child
  };

  // What someone else (an operator, another client) does to the tree, watches firing as for any
  // client's change.
  ZkError create(const std::string& path, const std::string& data = "");
  ZkError set(const std::string& path, const std::string& data);
  ZkError remove(const std::string& path);

  const Node* find(const std::string& path) const;
  std::vector<std::string> children(const std::string& path) const;  // names, sorted

 private:
  friend class FakeKeeper;
  struct Change {
    std::string path;
    WatchEvent event;  // Created, Deleted or Changed, on `path`
  };
  // Applies `ops` atomically for `session`: all or none. Fills one result per operation and the
  // changes made, in order.
  ZkError apply(int64_t session, const std::vector<MultiOp>& ops, std::vector<MultiResult>& results,
                std::vector<Change>& changes);
  ZkError applyOne(std::map<std::string, Node>& nodes, int64_t session, const MultiOp& op,
                   std::string& created, std::vector<Change>& changes) const;
  void notify(const std::vector<Change>& changes);
  ZkError change(const MultiOp& op);  // one operation by nobody's session, watches notified
  void endSession(int64_t session);   // deletes its ephemeral nodes

  std::map<std::string, Node> nodes_{{"/", Node{}}};
  std::vector<FakeKeeper*> clients_;
  int64_t nextSession_ = 0x1000;
};

class FakeKeeper : public detail::Keeper {
 public:
  using EventHandler = std::function<void(const SessionEvent&)>;

  FakeKeeper(FakeZooKeeper& zk, boost::asio::io_context& io);
  ~FakeKeeper() override;

  // Session states, told to `onEvent` as ZkSession tells its listeners.
  EventHandler onEvent;
  void connect();    // a new session (the first, or after expire())
  void loseLink();   // Suspended: the gate closes, every watch is dropped
  void reconnect();  // Connected on the same session
  void expire();     // the server ends the session (its ephemeral nodes go), then Expired

  // The next reply to an operation of `kind` on a path starting with `pathPrefix` says
  // ConnectionLoss; the operation happens all the same.
  enum class Op { Create, Get, Exists, Children, Remove, Set, Multi };
  void dropNextReply(Op kind, std::string pathPrefix);
  // While held, replies and watch events queue up instead of going out.
  void hold();
  std::vector<std::string> held() const;  // what each held delivery is, e.g. "reply multi /a"
  void release(size_t index);             // sends one held delivery now
  void releaseAll();                      // sends the rest in order and stops holding

  // Keeper.
  bool usable() const override { return connected_; }
  bool heardRecently() const override { return connected_; }  // no clock: heard while linked
  uint64_t linkEpoch() const override { return linkEpoch_; }
  int64_t sessionId() const override { return session_; }
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
  void removeOn(Executor ex, std::string path, int32_t version,
                std::function<void(ZkError)> done) override;
  void ensurePathOn(Executor ex, std::string path, std::function<void(ZkError)> done) override;
  void forgetPath(const std::string&) override {}  // every ensurePathOn looks at the tree
  void multiOn(Executor ex, std::vector<MultiOp> ops, MultiDone done) override;
  void syncOn(Executor ex, std::string path, std::function<void(ZkError)> done) override;
  void createBatchedOn(Executor ex, std::string path, std::string data, NodeKind kind,
                       std::function<void(ZkError, std::string)> done, std::string guard) override;
  void whenCreatesIdle(Executor ex, std::function<void()> fn) override;

  // Watches armed now (data and child), for tests that count them.
  size_t watchCount() const;

 private:
  friend class FakeZooKeeper;
  struct ArmedWatch {
    const void* owner;
    Executor executor;
    TypedWatch watch;
  };
  using WatchTable = std::map<std::string, std::vector<ArmedWatch>>;
  struct Delivery {
    Executor executor;
    std::function<void()> run;
    std::string what;
  };

  // Applies `ops` (or refuses them) and answers, dropping the reply when a dropNextReply(kind,
  // a prefix of `path`) says so.
  void submit(Executor ex, std::vector<MultiOp> ops, Op kind, const std::string& path,
              MultiDone done);
  // The error every operation gets while there is no usable session, else nullopt.
  std::optional<ZkError> refusal() const;
  // Whether this reply is to be dropped (consumes the matching dropNextReply).
  bool dropping(Op kind, const std::string& path);
  void deliver(Executor ex, std::function<void()> run, std::string what);
  void arm(WatchTable& table, const std::string& path, const void* owner, Executor ex,
           TypedWatch watch);
  void fire(WatchTable& table, const std::string& path, WatchEvent event);
  void publish(SessionState state, bool newSession);

  FakeZooKeeper& zk_;
  boost::asio::io_context& io_;
  int64_t session_ = 0;
  bool connected_ = false;
  uint64_t linkEpoch_ = 0;
  WatchTable dataWatches_, childWatches_;
  std::vector<std::pair<Op, std::string>> drops_;
  bool holding_ = false;
  std::vector<Delivery> held_;
  size_t createsUnanswered_ = 0;  // batched creates whose reply has not run yet
  std::vector<std::pair<Executor, std::function<void()>>> afterCreates_;
};

}  // namespace zkagent::election::fake
