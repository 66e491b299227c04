// Elector: the election of one account (queue of members, the oldest leads). All of its work runs
// on its own strand; the only state shared with other threads is the gate snapshot behind
// `gateMu_`.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <memory>
#include <mutex>

#include "keeper.hpp"
#include "session_marks.hpp"
#include "state_table.hpp"
#include "zkagent/naming.hpp"

namespace zkagent::election::detail {

struct ElectorContext {
  std::shared_ptr<Keeper> keeper;
  ElectionOptions options;
  ElectionGroup::LeadershipHandler onLeadership;
  std::shared_ptr<SessionMarks> marks;
  // Told every row the machine takes and the role it was taken from (on the account's strand):
  // for tests and tracing; empty in production.
  std::function<void(Role from, const Transition& row)> onTransition{};
};

class Elector : public std::enable_shared_from_this<Elector> {
 public:
  using Strand = boost::asio::strand<boost::asio::io_context::executor_type>;

  Elector(boost::asio::io_context& io, std::shared_ptr<const ElectorContext> ctx,
          std::string account);

  // Each posts onto the strand.
  void join();
  void withdraw();
  void resign(LossReason reason);
  void jumpQueue(int64_t receiverSeq, const std::vector<int64_t>& aheadSeqs,
                 std::function<void(ZkError)> done);
  void sessionChanged(const SessionEvent& event);
  // Reports Lost(stopped) and stops standing. `done` (on the strand) gets the operations that hand
  // the account over (member and `active` deleted, and the handover record when `withRecord`) when
  // we led it, else none; the group sends them batched into multis before it closes the session.
  void stop(bool withRecord, std::function<void(std::vector<MultiOp>)> done);

  GateDecision check() const;
  void checkStrict(std::function<void(GateDecision)> done);
  void members(std::function<void(ZkError, std::vector<MemberInfo>)> done);
  AccountStatus status() const;

 private:
  void feed(Event event, LossReason reason = LossReason::Drift);
  void perform(Action action, LossReason reason);
  void forgetMember();
  // Our member (registered, being created, or with its reply lost) belongs to `session`.
  bool memberOf(int64_t session) const;

  void registerMember();
  void registerAfresh();  // forgets the member name (gone, or of an old session) and registers
  void onCreated(uint64_t epoch, int64_t session, ZkError err, std::string path);
  void onRegistered(const std::string& path);
  std::string memberRecord() const;  // our member node's data
  void createTree(uint64_t epoch);
  void repairTree(uint64_t epoch);
  void adoptOrRegister();
  void verifyMember();
  void removeOwnActive();
  // What changed: the member queue, `active` (both from watches), or not known (anything else).
  enum class Change { Members, Active, Unknown };
  void requestEvaluate(Change change = Change::Unknown);
  void evaluate();
  void finishEvaluate();
  void onPredecessorGone();
  void onActiveChanged();
  // The watch every read of `active` arms, keyed by &active_ (armed again, it replaces the last).
  Keeper::Watch activeWatch();
  void refreshLeaderSoon();
  // `knownHandover`: the predecessor's handover record when already known (no read needed).
  // `departingSession`: the session of the leader we take over from, whose stop mark can stand
  // in for the record (0: read the record).
  void acquire(uint64_t epoch, std::optional<std::string> knownHandover = std::nullopt,
               int64_t departingSession = 0);
  void armActiveWatch(uint64_t epoch);
  std::vector<MultiOp> releaseOps(LossReason reason, bool withRecord = true) const;
  void confirm(uint64_t epoch);
  void prepareAnnouncement(const std::string* handover, uint64_t linkAtRead);
  void watchActive(uint64_t epoch);
  void noteLeader(std::optional<ActiveInfo> leader);
  void releaseLeadership(LossReason reason, bool standAgain, std::function<void()> done);
  void removeUntilGone(std::string path, int32_t version);
  void retryRemovals();

  void announce();
  void reportLoss(LossReason reason);
  void setRole(Role role, std::string reason);
  // {root}/{account}/members/{name}
  std::string memberPath(std::string_view name) const {
    return naming::memberPath(ctx_->options.root, account_, name);
  }
  ActiveInfo ownRecord() const;
  bool isOwnRecord(const ActiveInfo& a) const;

  Strand strand_;
  boost::asio::steady_timer retryTimer_;
  boost::asio::steady_timer leaderRefresh_;
  std::shared_ptr<const ElectorContext> ctx_;
  Keeper& keeper_;
  const std::string account_;
  const std::string base_, members_, active_, handover_;

  // Strand-only state.
  Role role_ = Role::Init;
  bool standing_ = false;
  std::string memberName_;  // "m-0000000007", empty when not registered
  int64_t seq_ = -1;
  int64_t memberSession_ = 0;    // session that owns memberName_, or made the create in flight
  bool createInFlight_ = false;  // a member create is on its way (meaningful in createEpoch_)
  uint64_t createEpoch_ = 0;
  bool replyLost_ = false;  // ...and its reply was lost: adopt by ephemeralOwner
  bool evaluating_ = false, dirty_ = false;
  // Within an evaluation: the listing, or the read/create of `active`, has not been answered yet.
  // A watch event that arrives before that answer is already reflected in it (ZooKeeper delivers
  // an event before any reply sent after the change), so it needs no second evaluation.
  bool listingPending_ = false, activePending_ = false;
  std::string freshQueueMember_;  // our member, made together with its members node (see evaluate)
  std::string predecessor_;       // the member we wait behind; empty when first in the queue
  bool predecessorIsHead_ = false;  // ...and it was first in the queue at our last listing
  int64_t predecessorSession_ = 0;  // ...and the session that owns it
  uint64_t epoch_ = 0;          // bumped on every registration/session change: stale replies drop
  int32_t activeVersion_ = -1;  // version of our own active node
  std::optional<ActiveInfo> lastLeaderSeen_;  // the last `active` record read or written
  std::vector<std::pair<std::string, int32_t>> pendingRemovals_;  // deletes to retry on reconnect
  // What the next AnnounceLeader reports (set just before the Elected event is fed).
  std::optional<ActiveInfo> pendingPrevious_;
  std::string pendingHandoverReason_;
  uint64_t pendingLink_ = 0;

  // Gate snapshot (any thread).
  mutable std::mutex gateMu_;
  int64_t gateToken_ = -1;
  uint64_t gateLinkEpoch_ = 0;
  int64_t gateSession_ = 0;
  bool gateDrifted_ = false;  // lost leadership through drift and not elected since
  AccountStatus status_;
};

}  // namespace zkagent::election::detail
