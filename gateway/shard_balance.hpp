// The shard balance of a gateway cluster (docs/gateway-cluster.md, "Balance"): the agents'
// balance rule (balance/) applied to the gateways standing for the cluster's shards. Each gateway
// counts the shards every gateway owns, plans with the same rule as every other gateway, and hands
// over only its own row: a queue jump to put the receiver next, then a resign (reason rebalance).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "zkagent/balance.hpp"
#include "zkagent/election.hpp"

namespace zkagent::gateway {

// Everything runs on the io_context of the shards' elections (one thread): no locks.
class ShardBalancer {
 public:
  ShardBalancer(boost::asio::io_context& io, election::ElectionGroup& group, std::string gatewayId,
                std::string shardsRoot);
  void start();     // passes from now on: periodically and after leadership changes
  void passSoon();  // after a leadership change
  // The gateway is leaving: no more passes nor moves. Reads who owns the other shards (the head of
  // each queue), plans the next owners of its own over the other gateways (the same rule, without
  // itself), puts each receiver next in the shard's queue, then `done` (the election's stop hands
  // every shard to the next in one multi each): the others own their shares at once instead of
  // after a second round of moves. All of it within kLeaveJumps, or `done` without the rest.
  void leave(std::function<void()> done);
  // The other gateways seen standing (the members the plan spreads shards over, without this one).
  std::vector<std::string> others() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Move {
    std::string to;
    Clock::time_point startedAt;
    bool reading = false;  // of `active`, while our candidate has not seen the new owner
    Clock::time_point readAt{};
    std::optional<std::string> seenLeader{};
  };

  void pass();
  void probeMembers(const std::vector<election::AccountStatus>& status, Clock::time_point now);
  bool updateMembership(Clock::time_point now);
  void startMove(const std::string& shard, const std::string& to);
  std::optional<balance::QueueJump> receiverNext(const std::vector<election::MemberInfo>& queue,
                                                 const std::string& to) const;
  void readLanding(const std::string& shard);
  void arm();
  void handOver(const std::vector<std::string>& led,
                const std::map<std::string, std::size_t>& owned);
  void left();

  boost::asio::io_context& io_;
  election::ElectionGroup& group_;
  const std::string id_;
  const std::string shardsRoot_;
  boost::asio::steady_timer timer_;
  boost::asio::steady_timer leaveTimer_;
  std::function<void()> leaveDone_;  // until the leaving jumps are done or cut short
  bool started_ = false, leaving_ = false, passQueued_ = false, probing_ = false;
  std::size_t probeNext_ = 0;                          // the shard whose queue is read next
  std::map<std::string, Clock::time_point> lastSeen_;  // gateway: standing or owning, seen
  std::vector<std::string> membership_;                // gateways standing now, sorted
  Clock::time_point membershipSince_{};
  bool giving_ = false;  // started giving for this membership: goes on down to its target
  std::map<std::string, Move> moves_;  // shards handed over, not yet seen owned by the receiver
  std::string lastReport_;             // the last balance log line (logged on change only)
};

}  // namespace zkagent::gateway
