// ShardBalancer (shard_balance.hpp): the balance passes, the moves and the leaving hand-over.
#include "shard_balance.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <memory>
#include <sstream>

#include "zkagent/balance.hpp"
#include "zkagent/naming.hpp"

namespace zkagent::gateway {

namespace {
// A pass every interval, besides the ones after leadership changes; each reads one shard's queue
// to see which gateways stand (every gateway stands for every shard).
constexpr std::chrono::milliseconds kPassInterval{250};
// A gateway not seen standing or owning for this long has left (several queue reads missed it).
constexpr std::chrono::milliseconds kMemberFresh{2000};
// Nothing moves until the gateways standing have been the same for this long: gateways start and
// stop one at a time, and a shard moved needlessly costs its new owner a confirmed read per
// account. Shorter than the agents' default: a cluster has few members that change rarely.
constexpr std::chrono::milliseconds kSettle{2000};
// The agents' default band: share +- max(1, 10 %).
constexpr double kTolerance = 0.1;
// Moves at once per giver: a cluster's shards are few (the agents' default, 16, is for thousands
// of accounts), and every move costs its receiver a fence per account.
constexpr std::size_t kMaxMovesInFlight = 4;
// A leaving gateway waits this long at most for its queue reads and jumps: a slow ZooKeeper must
// not hold the stop (the shards then go to the next in their queues).
constexpr std::chrono::milliseconds kLeaveJumps{500};
}  // namespace

ShardBalancer::ShardBalancer(boost::asio::io_context& io, election::ElectionGroup& group,
                             std::string gatewayId, std::string shardsRoot)
    : io_(io),
      group_(group),
      id_(std::move(gatewayId)),
      shardsRoot_(std::move(shardsRoot)),
      timer_(io),
      leaveTimer_(io) {}

void ShardBalancer::start() {
  started_ = true;
  membershipSince_ = Clock::now();
  arm();
}

void ShardBalancer::arm() {
  timer_.expires_after(kPassInterval);
  timer_.async_wait([this](const boost::system::error_code& error) {
    if (error || leaving_) return;
    pass();
    arm();
  });
}

void ShardBalancer::passSoon() {
  if (!started_ || leaving_ || passQueued_) return;
  passQueued_ = true;
  boost::asio::post(io_, [this] { pass(); });
}

std::vector<std::string> ShardBalancer::others() const {
  std::vector<std::string> others;
  for (const auto& id : membership_) {
    if (id != id_) others.push_back(id);
  }
  return others;
}

void ShardBalancer::leave(std::function<void()> done) {
  leaving_ = true;
  timer_.cancel();
  std::map<std::string, std::size_t> others;
  for (const auto& id : this->others()) others[id] = 0;
  std::vector<std::string> led, rest;
  for (const auto& shard : group_.status()) {
    (shard.role == election::Role::Leader ? led : rest).push_back(shard.account);
  }
  if (others.empty() || led.empty()) return done();
  leaveDone_ = std::move(done);
  leaveTimer_.expires_after(kLeaveJumps);
  leaveTimer_.async_wait([this](const boost::system::error_code& error) {
    if (!error) left();
  });
  // Who owns the other shards is read from their queues, not taken from our watched view: a shard
  // handed over a moment ago (by us or by another gateway) may not be in that view yet, and a plan
  // on a stale count gives one gateway too many. A queue's head leads, or is about to.
  if (rest.empty()) return handOver(led, others);
  struct Reading {
    std::vector<std::string> led;
    std::map<std::string, std::size_t> owned;
    std::size_t unread;
  };
  auto reading = std::make_shared<Reading>(Reading{std::move(led), std::move(others), rest.size()});
  for (const auto& shard : rest) {
    group_.members(shard,
                   [this, reading](election::ZkError err, std::vector<election::MemberInfo> queue) {
                     if (err == election::ZkError::Ok && !queue.empty()) {
                       auto& owned = reading->owned;
                       if (auto it = owned.find(queue.front().instanceId); it != owned.end())
                         ++it->second;
                     }
                     if (--reading->unread == 0) handOver(reading->led, reading->owned);
                   });
  }
}

void ShardBalancer::handOver(const std::vector<std::string>& led,
                             const std::map<std::string, std::size_t>& owned) {
  if (!leaveDone_) return;  // cut short: the election's stop hands over to the next in each queue
  // Our shards are unplaced for the others' plan: each receiver is given up to its target.
  const auto plan = balance::planBalance(owned, led.size(), kTolerance, true);
  std::vector<std::pair<std::string, std::string>> handovers;  // shard, receiver
  auto next = led.begin();
  for (const auto& [id, count] : owned) {
    for (auto n = count; n < plan.target.at(id) && next != led.end(); ++n) {
      handovers.emplace_back(*next++, id);
    }
  }
  spdlog::info("cluster balance: leaving, {} shards to {} gateways", handovers.size(),
               owned.size());
  if (handovers.empty()) return left();
  const auto jumped = [this, pending = std::make_shared<std::size_t>(handovers.size())] {
    if (--*pending == 0) left();
  };
  for (const auto& [handedShard, receiver] : handovers) {
    // Named copies: clang 14, which builds the sanitizer runs, captures no structured binding.
    group_.members(
        handedShard, [this, shard = handedShard, to = receiver, jumped](
                         election::ZkError err, std::vector<election::MemberInfo> queue) {
          const auto jump = err == election::ZkError::Ok ? receiverNext(queue, to) : std::nullopt;
          if (!jump || jump->ahead.empty()) return jumped();
          group_.jumpQueue(shard, jump->receiverSeq, jump->ahead,
                           [jumped](election::ZkError) { jumped(); });
        });
  }
}

void ShardBalancer::left() {
  if (!leaveDone_) return;
  leaveTimer_.cancel();
  auto done = std::move(leaveDone_);
  leaveDone_ = nullptr;
  done();
}

void ShardBalancer::pass() {
  passQueued_ = false;
  if (leaving_) return;
  const auto now = Clock::now();
  const auto status = group_.status();
  std::map<std::string, std::optional<std::string>> owners;  // shard: the owner seen, if any
  for (const auto& shard : status) {
    auto& owner = owners[shard.account];
    if (shard.role == election::Role::Leader) {
      owner = id_;
    } else if (shard.leader && shard.leader->instanceId != id_) {
      // (Our own node seen while not leading is what we resigned: its next owner is not seen yet.)
      owner = shard.leader->instanceId;
      lastSeen_[*owner] = now;
    }
  }
  // A move counts for its receiver until we see it own the shard (the rule every giver follows).
  for (auto it = moves_.begin(); it != moves_.end();) {
    auto& [shard, move] = *it;
    const bool leading = owners[shard] == id_;
    const auto seen = owners[shard] ? owners[shard] : move.seenLeader;
    const auto state = balance::moveState(leading, seen, id_, now - move.startedAt);
    if (state == balance::MoveState::InFlight && !leading && !move.reading &&
        now - move.readAt > balance::kLandingRead) {
      move.reading = true;
      move.readAt = now;
      readLanding(shard);
    }
    if (state == balance::MoveState::Over) {
      spdlog::warn("cluster balance: shard {} not seen at {} in time", shard, move.to);
    }
    it = state == balance::MoveState::InFlight ? std::next(it) : moves_.erase(it);
  }
  probeMembers(status, now);
  const bool changed = updateMembership(now);

  std::map<std::string, std::size_t> counts;
  for (const auto& id : membership_) counts[id] = 0;
  std::size_t unplaced = 0;
  bool electing = false;
  for (const auto& [shard, owner] : owners) {
    const auto move = moves_.find(shard);
    const auto* counted = move != moves_.end() ? &move->second.to : owner ? &*owner : nullptr;
    if (!counted) {
      ++unplaced;
      electing = true;
    } else if (counts.contains(*counted)) {
      ++counts[*counted];
    }
  }
  // Shards with no owner seen are being elected (at start, or between two owners): planning now
  // would move what the elections are about to place. One more settle window at most.
  if (changed || now - membershipSince_ < kSettle ||
      (electing && now - membershipSince_ < 2 * kSettle)) {
    return;
  }
  const auto plan = balance::planBalance(counts, unplaced, kTolerance, giving_);
  auto row = balance::rowOf(plan, id_);
  giving_ = !row.empty();

  // Logged when it changes: a rebalance shows as a few lines, a balanced cluster as none.
  std::ostringstream report;
  const auto target = plan.target.find(id_);
  report << "cluster balance: " << membership_.size() << " gateways, " << plan.accounts
         << " shards, target " << (target != plan.target.end() ? target->second : 0);
  if (row.empty()) report << ", balanced owning " << counts[id_];
  for (const auto& [to, n] : row) {
    report << (to == row.begin()->first ? ", giving " : " ") << to << ":" << n;
  }
  if (report.str() != lastReport_) {
    lastReport_ = report.str();
    spdlog::info("{}", lastReport_);
  }

  // This gateway's row, a few shards at a time; each receiver stands for every shard.
  for (const auto& [shard, owner] : owners) {
    if (moves_.size() >= kMaxMovesInFlight || row.empty()) break;
    if (owner != id_ || moves_.contains(shard)) continue;
    auto next = row.begin();
    moves_[shard] = Move{.to = next->first, .startedAt = now};
    startMove(shard, next->first);
    if (--next->second == 0) row.erase(next);
  }
}

// One shard's queue per pass, in turn: who stands (every gateway stands for every shard).
void ShardBalancer::probeMembers(const std::vector<election::AccountStatus>& status,
                                 Clock::time_point now) {
  lastSeen_[id_] = now;  // standing for every shard until stop()
  if (probing_ || status.empty()) return;
  probing_ = true;
  const auto shard = status[probeNext_++ % status.size()].account;
  group_.members(shard, [this](election::ZkError err, std::vector<election::MemberInfo> queue) {
    probing_ = false;
    if (err != election::ZkError::Ok) return;
    const auto seen = Clock::now();
    for (const auto& member : queue) lastSeen_[member.instanceId] = seen;
  });
}

// True when the gateways standing changed: the settle window starts again.
bool ShardBalancer::updateMembership(Clock::time_point now) {
  std::vector<std::string> members;
  for (auto it = lastSeen_.begin(); it != lastSeen_.end();) {
    if (now - it->second > kMemberFresh) {
      it = lastSeen_.erase(it);
    } else {
      members.push_back((it++)->first);
    }
  }
  if (members == membership_) return false;
  std::ostringstream list;
  for (const auto& id : members) list << (id == members.front() ? "" : ",") << id;
  spdlog::info("cluster balance: gateways {} (settling {} ms)", list.str(), kSettle.count());
  membership_ = std::move(members);
  membershipSince_ = now;
  giving_ = false;
  return true;
}

// Only gateways stand under the shards' root: any of them may step back.
std::optional<balance::QueueJump> ShardBalancer::receiverNext(
    const std::vector<election::MemberInfo>& queue, const std::string& to) const {
  return balance::jumpTo(
      queue, id_, [&](const std::string& id) { return id == to; },
      [](const std::string&) { return true; });
}

// Reads the shard's queue, steps back the gateways between us and the receiver, then resigns:
// the receiver owns the shard in one handover (and fences from ZooKeeper before accepting).
void ShardBalancer::startMove(const std::string& shard, const std::string& to) {
  group_.members(
      shard, [this, shard, to](election::ZkError err, std::vector<election::MemberInfo> queue) {
        if (leaving_) return;
        const auto jump = err == election::ZkError::Ok ? receiverNext(queue, to) : std::nullopt;
        if (!jump) {
          spdlog::warn("cluster balance: shard {} not given to {}: {}", shard, to,
                       err == election::ZkError::Ok ? "not in its queue" : election::toString(err));
          moves_.erase(shard);
          return;
        }
        spdlog::info("cluster balance: giving shard {} to {} stepping_back={}", shard, to,
                     jump->ahead.size());
        group_.jumpQueue(
            shard, jump->receiverSeq, jump->ahead, [this, shard](election::ZkError jumped) {
              if (jumped == election::ZkError::Ok && !leaving_ && group_.check(shard).allowed()) {
                group_.resign(shard, election::LossReason::Rebalance);
                return;
              }
              if (leaving_) return;
              spdlog::warn("cluster balance: shard {} not moved: {}", shard,
                           election::toString(jumped));
              moves_.erase(shard);
            });
      });
}

// Who holds `active` of a shard we handed over: our candidate, now at the back, may see it late.
void ShardBalancer::readLanding(const std::string& shard) {
  group_.session().get(naming::activePath(shardsRoot_, shard), nullptr,
                       [this, shard](election::ZkError err, std::string data, election::NodeStat) {
                         auto move = moves_.find(shard);
                         if (move == moves_.end()) return;
                         move->second.reading = false;
                         auto active = err == election::ZkError::Ok ? election::parseActive(data)
                                                                    : std::nullopt;
                         if (active) move->second.seenLeader = active->instanceId;
                       });
}

}  // namespace zkagent::gateway
