// The real Elector on the in-memory ZooKeeper, wired as ElectionGroup wires it: what the Elector
// unit tests share.
#pragma once

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "elector.hpp"
#include "fake_keeper.hpp"

namespace zkagent::election::fake {
using detail::Elector;
using detail::ElectorContext;
using detail::SessionMarks;
using Kind = LeadershipEvent::Kind;

inline constexpr const char* kRoot = "/wx-accounts";
inline constexpr const char* kAccount = "acct";
inline const std::string kMembers = std::string(kRoot) + "/" + kAccount + "/members";
inline const std::string kActive = std::string(kRoot) + "/" + kAccount + "/active";
inline const std::string kHandover = std::string(kRoot) + "/" + kAccount + "/handover";

// One elector on its own session, wired as ElectionGroup wires it.
struct Member {
  Member(FakeZooKeeper& zk, boost::asio::io_context& io, const std::string& instance)
      : keeper(std::make_shared<FakeKeeper>(zk, io)) {
    ElectionOptions options;
    options.root = kRoot;
    options.instanceId = instance;
    auto ctx = std::make_shared<ElectorContext>(
        ElectorContext{keeper, options, [this](const LeadershipEvent& e) { events.push_back(e); },
                       std::make_shared<SessionMarks>(io, keeper, kRoot)});
    ctx->onTransition = [this](Role from, const detail::Transition& row) {
      transitions.emplace_back(from, row);
    };
    marks = ctx->marks;
    elector = std::make_shared<Elector>(io, ctx, kAccount);
    keeper->onEvent = [this](const SessionEvent& e) {
      if (e.state == SessionState::Connected && e.newSession) marks->announce(e.sessionId);
      elector->sessionChanged(e);
    };
  }
  Role role() const { return elector->status().role; }
  int64_t seq() const { return elector->status().seq; }

  std::shared_ptr<FakeKeeper> keeper;
  std::shared_ptr<SessionMarks> marks;
  std::shared_ptr<Elector> elector;
  std::vector<LeadershipEvent> events;
  std::vector<std::pair<Role, detail::Transition>> transitions;  // every row taken, in order
};

class ElectorTest : public ::testing::Test {
 protected:
  // Runs the io_context until nothing is ready to run (timers not yet due stay pending).
  void drain() {
    for (int round = 0; round < 1000; ++round) {
      io.restart();
      if (io.poll() == 0) return;
    }
    FAIL() << "the election never settled";
  }
  // For what waits on a timer (a retry, a refresh).
  template <typename Pred>
  bool runUntil(Pred done, std::chrono::milliseconds limit = std::chrono::seconds(2)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      io.restart();
      io.run_one_for(std::chrono::milliseconds(10));
    }
    return true;
  }
  std::unique_ptr<Member> standing(const std::string& instance) {
    auto m = std::make_unique<Member>(zk, io, instance);
    m->elector->join();
    m->keeper->connect();
    drain();
    return m;
  }
  std::optional<ActiveInfo> active() const {
    const auto* node = zk.find(kActive);
    return node ? parseActive(node->data) : std::nullopt;
  }
  std::vector<std::string> members() const { return zk.children(kMembers); }
  // The tree a first candidate makes, so that registering is one create.
  void makeTree() {
    for (const std::string& path :
         {std::string(kRoot), std::string(kRoot) + "/" + kAccount, kMembers, kHandover}) {
      ASSERT_EQ(zk.create(path), ZkError::Ok) << path;
    }
  }

  FakeZooKeeper zk;  // before io: handlers still queued hold keepers, which leave the tree last
  boost::asio::io_context io;
};

}  // namespace zkagent::election::fake
