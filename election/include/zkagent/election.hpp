// zkagent election: leader election per account on Apache ZooKeeper: a queue of ephemeral
// sequential members per account, the oldest leads and holds the ephemeral `active` node.
//
// Layout under the configurable root (default /wx-accounts):
//   {root}/{account}                       persistent
//   {root}/{account}/members/m-0000000007  ephemeral-sequential, MemberInfo JSON
//   {root}/{account}/active                ephemeral, ActiveInfo JSON
//
// Every candidate watches only its predecessor; the smallest member creates `active`; the leader's
// fencing token is its member sequence number. A disconnected session suspends every account at
// once (the gate closes before ZooKeeper decides anything). ZooKeeper's C API stays inside this
// library: callers see the types below.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zkagent/naming.hpp"

namespace boost::asio {
class io_context;
}

namespace zkagent::election {

using Millis = std::chrono::milliseconds;

// Why `id` is not a valid account id, or nullopt: the one rule, zkagent/naming.hpp.
using naming::accountIdError;

// The ZooKeeper digest identity in `path`: its first line, user:password (a trailing CR dropped).
// Throws std::invalid_argument naming the file, never the secret, when the file cannot be read
// or the line is not user:password.
std::string readDigestFile(const std::string& path);

// ---------------------------------------------------------------------------------------------
// Session: one ZooKeeper session, re-created after expiry. Callbacks run on the io_context.

enum class SessionState { Connecting, Connected, Suspended, Expired, Closed };
std::string_view toString(SessionState state);

struct SessionOptions {
  std::string hosts;      // "127.0.0.1:2181,127.0.0.1:2182"
  Millis timeout{10000};  // requested session timeout; the server may negotiate another
  // "user:password" for ZooKeeper's digest scheme; empty: none. When set, the session
  // authenticates on every handle (zoo_add_auth) and every node it creates gets an ACL of all
  // rights for the authenticated identity and read for the world: only agents with the same
  // credentials can create or delete members and `active`. Nodes created before with open ACLs
  // keep them, so a tree shared with open-ACL electors stays open (docs/election.md).
  std::string digest{};
};

struct SessionEvent {
  SessionState state;
  int64_t sessionId;         // 0 when no session
  Millis negotiatedTimeout;  // valid when Connected
  bool newSession;  // Connected on a session that did not exist before (first or after expiry)
};

// Outcome of one ZooKeeper operation, in our own terms.
enum class ZkError {
  Ok,
  NoNode,
  NodeExists,
  NotEmpty,
  BadVersion,
  ConnectionLoss,
  SessionExpired,
  Closing,
  Other
};
std::string_view toString(ZkError error);

struct NodeStat {
  int64_t ephemeralOwner = 0;
  int32_t version = 0;
  int64_t mzxid = 0;
};

enum class NodeKind { Persistent, Ephemeral, EphemeralSequential };

// The generic asynchronous operations observers and health publishers need. Results are delivered
// on the io_context (never on ZooKeeper's completion thread). A `watch` callback fires at most
// once: every watch is forgotten when the link drops (ZOOKEEPER-706), so after any Connected
// event re-read what you watch.
class Session {
 public:
  using Watch = std::function<void()>;
  virtual ~Session() = default;

  virtual SessionState state() const = 0;
  virtual int64_t sessionId() const = 0;
  virtual Millis negotiatedTimeout() const = 0;

  virtual void create(std::string path, std::string data, NodeKind kind,
                      std::function<void(ZkError, std::string createdPath)> done) = 0;
  virtual void set(std::string path, std::string data, int32_t version,
                   std::function<void(ZkError, NodeStat)> done) = 0;
  virtual void get(std::string path, Watch watch,
                   std::function<void(ZkError, std::string data, NodeStat)> done) = 0;
  virtual void exists(std::string path, Watch watch,
                      std::function<void(ZkError, std::optional<NodeStat>)> done) = 0;
  virtual void children(std::string path, Watch watch,
                        std::function<void(ZkError, std::vector<std::string>)> done) = 0;
  virtual void remove(std::string path, int32_t version, std::function<void(ZkError)> done) = 0;
  // Creates every missing persistent node of `path` (like mkdir -p).
  virtual void ensurePath(std::string path, std::function<void(ZkError)> done) = 0;
};

// ---------------------------------------------------------------------------------------------
// Node data (JSON: any elector of this layout reads and writes the same fields).

struct MemberInfo {
  std::string instanceId;
  int64_t pid = 0;
  int64_t startTime = 0;  // unix ms
  std::string endpoint;
  int64_t seq = -1;            // from the node name, not the data
  std::string deviceEndpoint;  // where devices connect (ws://host:port); empty: none
};

struct ActiveInfo {
  int64_t seq = -1;
  std::string instanceId;
  int64_t sessionId = 0;
  int64_t activeSince = 0;  // unix ms
  std::string endpoint;
  std::string deviceEndpoint;  // where the leader takes the account's devices; empty: none
};

std::string toJson(const MemberInfo& member);
std::string toJson(const ActiveInfo& active);
// nullopt when the bytes are not a valid record (the caller treats that as drift).
std::optional<MemberInfo> parseMember(std::string_view json);
std::optional<ActiveInfo> parseActive(std::string_view json);

// ---------------------------------------------------------------------------------------------
// Election of many accounts on one session.

enum class Role { Init, Candidate, Waiting, Leader, Suspend, Stopped };
std::string_view toString(Role role);

// Why an instance stopped leading (the `reason=` of the leadership log line).
// Rebalance: a resign that moves the account to a less loaded agent (the agent's balancing).
enum class LossReason { Suspended, SessionExpired, Drift, Resigned, Stopped, Rebalance };
std::string_view toString(LossReason reason);

struct LeadershipEvent {
  enum class Kind { Acquired, Lost } kind;
  std::string account;
  int64_t token = -1;                  // our seq (the fencing token) for this leadership
  LossReason reason{};                 // Lost only
  std::optional<ActiveInfo> previous;  // Acquired: the leader we last saw before us, if any
  bool previousExpired = false;        // Acquired: the previous leader left without a clean resign
  std::chrono::system_clock::time_point at;
};

struct ElectionOptions {
  SessionOptions session;
  std::string root = "/wx-accounts";
  std::string instanceId;
  std::string endpoint;        // advertised in member and active data (e.g. the admin URL)
  std::string deviceEndpoint;  // advertised as deviceEndpoint when not empty
};

struct AccountStatus {
  std::string account;
  Role role = Role::Init;
  int64_t seq = -1;                  // own member seq, -1 when not registered
  std::optional<ActiveInfo> leader;  // last seen active node
  std::string lastReason;            // why the last transition happened
  std::chrono::system_clock::time_point since;
  bool standing = false;  // joined (wants to be a candidate)
};

// Answer of the leadership gate for one outbound operation.
struct GateDecision {
  enum class Verdict { Allowed, NotLeader, Suspended, Drifted, UnknownAccount } verdict;
  int64_t token = -1;  // Allowed: the fencing token to attach
  int64_t sessionId = 0;
  std::optional<ActiveInfo> leader;  // refusals: who leads, when known
  bool allowed() const { return verdict == Verdict::Allowed; }
};
std::string_view toString(GateDecision::Verdict verdict);

class ElectionGroup {
 public:
  // Handlers run on the io_context; an account's leadership events come in order from its strand.
  using LeadershipHandler = std::function<void(const LeadershipEvent&)>;
  using SessionHandler = std::function<void(const SessionEvent&)>;

  ElectionGroup(boost::asio::io_context& io, ElectionOptions options);
  // Closes the session without a hand-over. Waits only for the ZooKeeper client's threads: once it
  // returns they post nothing more to the io_context (answers posted before still run there).
  ~ElectionGroup();
  ElectionGroup(const ElectionGroup&) = delete;
  ElectionGroup& operator=(const ElectionGroup&) = delete;

  void onLeadership(LeadershipHandler handler);  // set before start()
  void onSession(SessionHandler handler);        // set before start()

  void start();  // opens the session; joined accounts register once connected
  void join(
      std::string_view account);  // stand as candidate; throws std::invalid_argument on bad id
  void withdraw(std::string_view account);  // stop standing: deletes own active+member in one multi
  // Hand over now (one multi), then stand again at the back. `reason` goes into the handover
  // record and the log lines: Resigned or Rebalance.
  void resign(std::string_view account, LossReason reason = LossReason::Resigned);
  // Queue jump before a resign: in one multi, checks that the member `receiverSeq` exists and
  // deletes the members `aheadSeqs` (other candidates between us and it), so the receiver is next
  // when we resign. A candidate whose node went registers again at the back on its next
  // evaluation; leadership does not change. `done` runs on the io_context: Ok, or the error that
  // left every node in place (the receiver or one of them gone already, the link failed).
  void jumpQueue(std::string_view account, int64_t receiverSeq, std::vector<int64_t> aheadSeqs,
                 std::function<void(ZkError)> done);
  // Reports Lost(stopped) for every led account, then closes the session (the server removes every
  // ephemeral node in one request). `done` runs on the io_context once closed. `handedOver`, if
  // given, runs on the io_context before that, as soon as every led account has been handed over
  // (its successor may take it from then on; also when the stop deadline cuts the hand-over
  // short): the moment to send the accounts' clients on.
  void stop(std::function<void()> done, std::function<void()> handedOver = {});

  // Thread-safe, fast: the in-memory gate.
  GateDecision check(std::string_view account) const;
  // Strict gate: sync with the leader of the ensemble, read `active`, compare with our identity.
  void checkStrict(std::string_view account, std::function<void(GateDecision)> done);

  // Current members of an account (successor selection), read from ZooKeeper, sorted by seq.
  void members(std::string_view account,
               std::function<void(ZkError, std::vector<MemberInfo>)> done);

  std::vector<AccountStatus> status() const;  // thread-safe snapshot
  SessionState sessionState() const;
  int64_t sessionId() const;
  Millis negotiatedTimeout() const;
  Session& session();  // the shared session, for health reports and observers

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// ---------------------------------------------------------------------------------------------
// Observer of `active` nodes (for the fencing gateway): a watched cache per account.

class LeaderObserver {
 public:
  struct View {
    enum class State { Unknown, NoLeader, Leader } state = State::Unknown;
    ActiveInfo active;  // valid when state == Leader
  };

  LeaderObserver(boost::asio::io_context& io, SessionOptions session, std::string root);
  ~LeaderObserver();
  void start();
  void stop();
  // Thread-safe cached view; Unknown while the session is not connected or the account was never
  // read (starts watching it).
  View current(std::string_view account) const;
  // Cached view when trusted, else reads `active` (arming the watch) and answers on the io_context.
  void lookup(std::string_view account, std::function<void(View)> done);
  bool trusted() const;  // session connected
  // Calls `done(true)` once the cache holds every change ZooKeeper had made `maxAge` before this
  // call (a read sent since then has been answered: ZooKeeper delivers the watch events of what it
  // changed before the answers that follow, and a fired watch leaves its account unknown until
  // read again), at once when a recent read already proves it; `done(false)` when the session
  // cannot answer. Answered on the io_context or the calling thread. A decision on the cache
  // after it has missed at most what changed in the last `maxAge`, even if this process was
  // stopped (SIGSTOP, a stalled VM) with requests waiting.
  void confirmFresh(Millis maxAge, std::function<void(bool)> done);
  // Reads the account's `active` node after a ZooKeeper `sync` on this session: the view holds
  // every change the quorum's leader had committed when the sync reached it, however far behind
  // the server this session is on (the cache may serve a lagging server's view). Two round trips;
  // for decisions that cannot be undone (fencing an account). Refreshes the cached entry when it
  // differs. Unknown when the session cannot answer. Answered on the io_context.
  void readConfirmed(std::string_view account, std::function<void(View)> done);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace zkagent::election
