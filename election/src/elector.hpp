// Elector: the election of one account (seed 001). All of its work runs on its own strand; the
// only state shared with other threads is the gate snapshot behind `gateMu_`.
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <memory>
#include <mutex>

#include "state_table.hpp"
#include "zk_session.hpp"

namespace zkagent::election::detail {

struct ElectorContext {
  std::shared_ptr<ZkSession> session;
  ElectionOptions options;
  ElectionGroup::LeadershipHandler onLeadership;
};

class Elector : public std::enable_shared_from_this<Elector> {
 public:
  using Strand = boost::asio::strand<boost::asio::io_context::executor_type>;

  Elector(boost::asio::io_context& io, std::shared_ptr<const ElectorContext> ctx,
          std::string account);

  // Each posts onto the strand.
  void join();
  void withdraw();
  void resign();
  void sessionChanged(const SessionEvent& event);
  // Reports Lost(stopped), writes the handover record and deletes our nodes; `done` on the strand.
  void stop(std::function<void()> done);

  GateDecision check() const;
  void checkStrict(std::function<void(GateDecision)> done);
  void members(std::function<void(ZkError, std::vector<MemberInfo>)> done);
  AccountStatus status() const;

 private:
  void feed(Event event, LossReason reason = LossReason::Drift);
  void perform(Action action, Role before, LossReason reason);

  void registerMember();
  void onCreated(uint64_t epoch, int64_t session, ZkError err, std::string path);
  void adoptOrRegister();
  void verifyMember();
  void requestEvaluate();
  void evaluate();
  void finishEvaluate();
  void acquire(uint64_t epoch);
  void armActiveWatch(uint64_t epoch);
  void watchOwnMember();
  void writeHandover(int64_t seq, LossReason reason, std::function<void()> written = {});
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
  ActiveInfo ownRecord() const;
  bool isOwnRecord(const ActiveInfo& a) const;

  Strand strand_;
  boost::asio::steady_timer retryTimer_;
  std::shared_ptr<const ElectorContext> ctx_;
  ZkSession& zk_;
  const std::string account_;
  const std::string base_, members_, active_, handover_;

  // Strand-only state.
  Role role_ = Role::Init;
  bool standing_ = false;
  std::string memberName_;  // "m-0000000007", empty when not registered
  int64_t seq_ = -1;
  int64_t memberSession_ = 0;    // session that owns memberName_
  bool createInFlight_ = false;  // a member create is on its way (meaningful in createEpoch_)
  uint64_t createEpoch_ = 0;
  bool replyLost_ = false;  // ...and its reply was lost: adopt by ephemeralOwner
  bool evaluating_ = false, dirty_ = false;
  uint64_t epoch_ = 0;          // bumped on every registration/session change: stale replies drop
  int32_t activeVersion_ = -1;  // version of our own active node
  std::optional<ActiveInfo> lastLeaderSeen_;
  std::pair<std::string, uint64_t> ownWatch_;  // (member, link epoch) the own-member watch is on //
                                               // the last `active` record read or written
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
