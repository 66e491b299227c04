// The failure modes other election libraries shipped (issue 3), each against a real ZooKeeper.
// Every test here fails without the mechanism it names.
#include <gtest/gtest.h>
#include <zookeeper/zookeeper.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdio>
#include <filesystem>
#include <future>
#include <random>
#include <set>
#include <thread>

#include "contender.hpp"
#include "zk_session.hpp"
#include "zktest/deadline.hpp"
#include "zktest/tcp_proxy.hpp"
#include "zktest/zookeeper_server.hpp"

namespace zktest {
namespace {

using Verdict = el::GateDecision::Verdict;

using HardeningTest = SharedZooKeeperTest;

// CURATOR-460 / ZOOKEEPER-4508: while the server is unreachable the C client never hears that
// the session expired. The client-side deadline (timeout since the last server contact) declares
// it lost anyway, so a standby that reconnects elsewhere is not blocked by a zombie session view.
TEST_F(HardeningTest, SessionIsDeclaredExpiredLocallyWhileTheServerIsUnreachable) {
  TcpProxy proxy(sharedZooKeeper().port());
  Contender a(proxy.connectString(), root, "host-a", 2000ms);
  a.join("acct");
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 10s));
  proxy.setMode(TcpProxy::Mode::blackhole);
  ASSERT_TRUE(eventually([&] { return a.lastLoss("acct") == el::LossReason::Suspended; }, 10s));
  // Still blackholed: only the local deadline can say "expired".
  ASSERT_TRUE(eventually(
      [&] {
        return a.group().sessionState() == el::SessionState::Expired ||
               a.group().sessionState() == el::SessionState::Connecting;
      },
      10s))
      << el::toString(a.group().sessionState());
  EXPECT_EQ(a.check("acct").verdict, Verdict::Suspended) << "a session given up allows nothing";
  proxy.setMode(TcpProxy::Mode::pass);
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 15s)) << "a new session leads again";
}

// CURATOR-696: a record that looks like ours on a node another session owns is not ours.
TEST_F(HardeningTest, NeverLeadsOnAnActiveNodeOwnedByAnotherSession) {
  Contender a(hosts(), root, "host-a");
  Contender impostor(hosts(), root + "-impostor", "impostor");
  a.join("acct");
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 10s));
  const std::string record = *a.get(root + "/acct/active");
  // Replace a's active node by a byte-identical copy owned by the impostor's session.
  ASSERT_TRUE(eventually(
      [&] {
        impostor.remove(root + "/acct/active");
        return impostor.createEphemeral(root + "/acct/active", record) == el::ZkError::Ok;
      },
      10s));
  ASSERT_TRUE(eventually([&] { return !a.leads("acct"); }, 5s));
  EXPECT_EQ(a.lastLoss("acct"), el::LossReason::Drift);
  // When the impostor's session ends, a takes over for real.
  impostor.stop();
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 10s));
}

// CURATOR-202: a resign whose delete is lost with the connection must be retried until the node
// is gone; otherwise the live session keeps `active` and nobody else can ever lead.
TEST_F(HardeningTest, ResignWhoseDeleteIsLostIsRetriedAfterReconnect) {
  TcpProxy proxy(sharedZooKeeper().port());
  Contender a(proxy.connectString(), root, "host-a", 9000ms);
  Contender observer(hosts(), root + "-observer", "observer");
  auto observerSees = [&](const std::string& path) { return observer.get(path).has_value(); };
  Contender b(hosts(), root, "host-b", 9000ms);
  a.join("acct");
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 10s));
  b.join("acct");
  ASSERT_TRUE(eventually([&] { return b.group().status().at(0).seq >= 0; }, 10s));
  const int64_t session = a.group().sessionId();
  // The delete goes into a silent link, or is still queued in the client, when the link is cut:
  // either way the request is lost, not applied.
  proxy.setMode(TcpProxy::Mode::blackhole);
  a.group().resign("acct");
  ASSERT_TRUE(eventually([&] { return !a.leads("acct"); }, 5s));
  proxy.setMode(TcpProxy::Mode::close);
  ASSERT_TRUE(
      eventually([&] { return a.group().sessionState() == el::SessionState::Suspended; }, 10s));
  EXPECT_FALSE(b.leads("acct"));
  EXPECT_TRUE(observerSees(root + "/acct/active")) << "the lost delete was applied after all";
  proxy.setMode(TcpProxy::Mode::pass);
  ASSERT_TRUE(eventually([&] { return b.leads("acct"); }, 10s));
  EXPECT_EQ(a.group().sessionId(), session) << "same session: only the retry can have deleted";
  EXPECT_FALSE(a.leads("acct"));
}

// CURATOR-724: the election tree wiped with ZooKeeper's data: paths come back, a leader again.
TEST(HardeningWipe, ZooKeeperWipedAndRestartedLeadsToANewElection) {
  ZooKeeperServer zk;
  Contender a(zk.connectString(), "/wiped", "host-a", 1500ms);
  a.join("acct");
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 10s));
  zk.kill9();
  std::filesystem::remove_all(zk.directory() / "data");
  std::filesystem::create_directories(zk.directory() / "data");
  zk.restart();
  ASSERT_TRUE(eventually([&] { return a.leads("acct") && a.acquisitions("acct") >= 2; }, 20s));
  EXPECT_TRUE(a.get("/wiped/acct/active").has_value());
}

// A ZooKeeper outage shorter than the session timeout costs a suspension, not leadership.
TEST(HardeningRestart, ServerRestartShorterThanTheSessionTimeoutKeepsLeadership) {
  ZooKeeperServer zk;
  Contender a(zk.connectString(), "/restart", "host-a", 10000ms);
  a.join("acct");
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 10s));
  const int64_t token = a.check("acct").token;
  const int64_t session = a.group().sessionId();
  zk.kill9();
  ASSERT_TRUE(eventually([&] { return a.check("acct").verdict == Verdict::Suspended; }, 10s));
  zk.restart();
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 15s));
  EXPECT_EQ(a.group().sessionId(), session);
  EXPECT_EQ(a.check("acct").token, token);
}

// kazoo #732 / Curator's protected mode: the create of the member node reached the server but
// its reply was lost. On reconnect the node is found by ephemeralOwner and reused; a second
// node would sit behind our own orphan forever and nobody would lead.
TEST_F(HardeningTest, LostReplyOfTheMemberCreateIsAdoptedNotDuplicated) {
  TcpProxy proxy(sharedZooKeeper().port());
  Contender a(proxy.connectString(), root, "host-a", 4000ms);
  ASSERT_TRUE(
      eventually([&] { return a.group().sessionState() == el::SessionState::Connected; }, 10s));
  Contender observer(hosts(), root + "-observer", "observer");
  // Make the tree exist so the very first create is the member node itself.
  Contender seeder(hosts(), root, "seeder");
  seeder.join("acct");
  ASSERT_TRUE(eventually([&] { return seeder.leads("acct"); }, 10s));
  seeder.stop();
  ASSERT_TRUE(eventually([&] { return observer.children(root + "/acct/members").empty(); }, 10s));

  proxy.setMode(TcpProxy::Mode::dropReplies);
  a.join("acct");
  ASSERT_TRUE(
      eventually([&] { return observer.children(root + "/acct/members").size() == 1; }, 10s))
      << "the create did not reach the server";
  ASSERT_TRUE(
      eventually([&] { return a.group().sessionState() == el::SessionState::Suspended; }, 10s));
  proxy.setMode(TcpProxy::Mode::pass);
  ASSERT_TRUE(eventually([&] { return a.leads("acct"); }, 10s));
  EXPECT_EQ(observer.children(root + "/acct/members").size(), 1u) << "no duplicate member node";
}

// CURATOR-644: random short drops for a while never give two leaders nor a livelock, and a member
// node is created once per session: a reconnect within the session keeps the node it has.
TEST_F(HardeningTest, FlappingConnectionNeverGivesTwoLeadersNorChurnsNodes) {
  TcpProxy proxyA(sharedZooKeeper().port());
  TcpProxy proxyB(sharedZooKeeper().port());
  Contender a(proxyA.connectString(), root, "host-a", 1500ms);
  Contender b(proxyB.connectString(), root, "host-b", 1500ms);
  a.join("acct");
  b.join("acct");
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> pick(0, 1), downMs(50, 700), upMs(100, 1500);
  int overlaps = 0, flaps = 0;
  std::set<int64_t> sessions;  // every session either contender held (sampled each ms)
  const auto sample = [&] {
    overlaps += a.leads("acct") && b.leads("acct");
    for (Contender* c : {&a, &b}) {
      if (const int64_t id = c->group().sessionId(); id != 0) sessions.insert(id);
    }
  };
  const Deadline deadline(20s);
  while (!deadline.passed()) {
    TcpProxy& victim = pick(rng) ? proxyA : proxyB;
    victim.setMode(TcpProxy::Mode::close);
    const auto downUntil =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(downMs(rng));
    while (std::chrono::steady_clock::now() < downUntil) {
      sample();
      std::this_thread::sleep_for(1ms);
    }
    victim.setMode(TcpProxy::Mode::pass);
    ++flaps;
    const auto upUntil = std::chrono::steady_clock::now() + std::chrono::milliseconds(upMs(rng));
    while (std::chrono::steady_clock::now() < upUntil) {
      sample();
      std::this_thread::sleep_for(1ms);
    }
  }
  EXPECT_EQ(overlaps, 0) << "both gates open at once";
  // Settles: exactly one leader.
  ASSERT_TRUE(eventually(
      [&] {
        sample();
        return a.leads("acct") != b.leads("acct");
      },
      15s));
  // Each member create takes the next sequence number: the newest seq counts the creations.
  int64_t maxSeq = -1;
  for (auto& name : a.children(root + "/acct/members"))
    maxSeq = std::max<int64_t>(maxSeq, std::stoll(name.substr(2)));
  EXPECT_LE(maxSeq + 1, static_cast<int64_t>(sessions.size()))
      << "member nodes created: " << maxSeq + 1 << " in " << sessions.size() << " sessions ("
      << flaps << " flaps)";
}

// zookeeper_close runs off ZooKeeper's threads and completions may still be in flight: a busy
// group destroyed without stop(), its io thread still running, tears down cleanly (this test
// matters most under ASan and TSan) and its accounts go to whoever stands next.
TEST_F(HardeningTest, DestroyingAGroupWithOperationsInFlightIsClean) {
  constexpr int kAccounts = 200;
  for (int round = 0; round < 5; ++round) {
    auto c = std::make_unique<Contender>(hosts(), root, "host-" + std::to_string(round));
    for (int i = 0; i < kAccounts; ++i) c->join("acct-" + std::to_string(i));
    // Destroyed at a different point of its registration each round: at once, then after a
    // growing share of its accounts is led (the rest still in flight).
    const int led = round * kAccounts / 5;
    ASSERT_TRUE(eventually([&] { return c->leadingCount() >= led; }, 20s)) << "round " << round;
    c->abandon();
  }
  Contender last(hosts(), root, "host-last");
  last.join("acct-0");
  EXPECT_TRUE(eventually([&] { return last.leads("acct-0"); }, 10s));
}

// libzookeeper_mt 3.8.0 stops its completion thread as soon as a close is requested: answers
// still queued then are never called. The session answers those calls itself (Closing), so no
// caller waits forever and nothing a call captured (its owner, the session) is leaked.
TEST_F(HardeningTest, EveryCallInFlightIsAnsweredWhenTheSessionCloses) {
  constexpr int kCalls = 20000;
  for (int round = 0; round < 5; ++round) {
    auto c = std::make_unique<Contender>(hosts(), root, "host-" + std::to_string(round));
    ASSERT_TRUE(
        eventually([&] { return c->group().sessionState() == el::SessionState::Connected; }, 10s));
    auto answered = std::make_shared<std::atomic<int>>(0);
    for (int i = 0; i < kCalls; ++i) {
      c->group().session().exists(root, nullptr,
                                  [answered](el::ZkError, auto) { answered->fetch_add(1); });
    }
    // Closed while the answers stream in: the completion thread is busy when the close comes.
    ASSERT_TRUE(eventually([&] { return answered->load() >= kCalls / 10; }, 20s));
    c->abandon();
    EXPECT_TRUE(eventually([&] { return answered->load() == kCalls; }, 10s))
        << "round " << round << ": " << kCalls - answered->load() << " of " << kCalls
        << " calls never answered";
  }
}

// After a session expires the old handle is closed on another thread while a new one connects;
// what the old handle reports about its own end (not connected any more) must not close the gate
// of the session that replaced it, which nothing would open again until its next reconnect (a
// leader would stay Suspended for good). Seen once under TSan as a leader that never passed its
// gate again.
TEST_F(HardeningTest, AStaleHandlesSessionEventLeavesTheCurrentSessionsGateOpen) {
  boost::asio::io_context io;
  auto work = boost::asio::make_work_guard(io);
  std::thread thread([&] { io.run(); });
  auto session = std::make_shared<el::detail::ZkSession>(io, el::SessionOptions{hosts(), 2000ms});
  session->start([](const el::SessionEvent&) {});
  ASSERT_TRUE(eventually([&] { return session->usable(); }, 10s));
  const uint64_t epoch = session->linkEpoch();
  // Generation 0 is no handle's (the first handle is 1): a handle that is gone.
  session->onWatcherEvent(0, ZOO_SESSION_EVENT, ZOO_CONNECTING_STATE, nullptr);
  EXPECT_TRUE(session->usable()) << "a stale handle closed the gate";
  EXPECT_EQ(session->linkEpoch(), epoch);
  EXPECT_EQ(session->state(), el::SessionState::Connected);
  session->closeNow();
  work.reset();
  thread.join();
}

// libzookeeper_mt's zoo_amulti, given a handle whose session is dead, refuses the first op and
// then frees that op's path once for every later op: our buffer, freed again and again (glibc's
// "double free detected", seen at 10 000 accounts when a session expired under a create batch).
// Here the C client learns the expiry while the session's own thread is held, so the handle stays
// the current one; every multi given to it must be refused, not passed on, and the session must
// still recover afterwards.
TEST_F(HardeningTest, AMultiOnAHandleWhoseSessionDiedIsRefusedNotPassedToTheClient) {
  TcpProxy proxy(sharedZooKeeper().port());
  // The session's io_context (held below, so it cannot act on the expiry) and the one where the
  // multis are answered, each on its own thread; stopped and joined however the test ends.
  struct Threads {
    boost::asio::io_context io, answers;
    std::shared_ptr<el::detail::ZkSession> session;
    std::promise<void> release;
    std::thread sessionThread, answersThread;
    ~Threads() {
      try {
        release.set_value();
      } catch (const std::future_error&) {  // released already
      }
      if (session) session->closeNow();
      io.stop();
      answers.stop();
      if (sessionThread.joinable()) sessionThread.join();
      if (answersThread.joinable()) answersThread.join();
    }
  } t;
  auto work = boost::asio::make_work_guard(t.io);
  auto answersWork = boost::asio::make_work_guard(t.answers);
  t.sessionThread = std::thread([&] { t.io.run(); });
  t.answersThread = std::thread([&] { t.answers.run(); });
  t.session = std::make_shared<el::detail::ZkSession>(
      t.io, el::SessionOptions{proxy.connectString(), 2000ms});
  auto& session = *t.session;
  session.start([](const el::SessionEvent&) {});
  ASSERT_TRUE(eventually([&] { return session.usable(); }, 10s));
  const int64_t firstSession = session.sessionId();
  char sid[32];
  std::snprintf(sid, sizeof sid, "sid=0x%llx", static_cast<unsigned long long>(firstSession));

  std::shared_future<void> released = t.release.get_future().share();
  boost::asio::post(t.io, [released] { released.wait(); });  // no deadline, no event handled
  proxy.setMode(TcpProxy::Mode::blackhole);
  ASSERT_TRUE(eventually(
      [&] { return sharedZooKeeper().fourLetter("cons").find(sid) == std::string::npos; }, 20s))
      << "the server never expired " << sid;
  proxy.setMode(TcpProxy::Mode::pass);  // the client reconnects and hears "expired"

  // A node every server has, its path longer than the short-string buffer: the library's bad
  // free hits heap memory.
  const std::vector<el::detail::MultiOp> checks(
      8, {el::detail::MultiOp::Kind::Check, "/zookeeper/config", "", -1});
  struct Answers {
    std::atomic<int> expired{0}, other{0};
  };
  auto issue = [&](Answers& into) {
    session.multiOn(t.answers.get_executor(), checks,
                    [&into](el::ZkError err, const std::vector<el::detail::MultiResult>&) {
                      (err == el::ZkError::SessionExpired ? into.expired : into.other)++;
                    });
  };
  Answers first;
  ASSERT_TRUE(eventually(
      [&] {
        issue(first);
        return first.expired.load() > 0;
      },
      20s, 5ms))
      << "the client never heard of the expiry (" << first.other.load() << " other answers)";
  // The handle is still the session's current one (its thread is held): each of these goes to it.
  Answers dead;
  for (int i = 0; i < 50; ++i) issue(dead);
  EXPECT_TRUE(eventually([&] { return dead.expired.load() + dead.other.load() == 50; }, 10s));
  EXPECT_EQ(dead.expired.load(), 50) << "multis on a dead handle must be refused as expired";

  t.release.set_value();  // the session notices, opens a new one, and multis go through again
  ASSERT_TRUE(
      eventually([&] { return session.usable() && session.sessionId() != firstSession; }, 20s))
      << "no new session; state " << el::toString(session.state());
  std::atomic<bool> ok{false};
  EXPECT_TRUE(eventually(
      [&] {
        session.multiOn(t.answers.get_executor(), checks,
                        [&ok](el::ZkError err, const std::vector<el::detail::MultiResult>&) {
                          if (err == el::ZkError::Ok) ok = true;
                        });
        return ok.load();
      },
      10s, 50ms));
}

// Session marks (our own shortcut, held to the same standard): a successor tells a clean stop
// from an expired session for every account it takes over, from one watch on the leader's mark
// instead of a read per account. A stop must not cost the successor its lock-delay; an expiry must
// (the old leader may still act until it notices).
TEST_F(HardeningTest, SuccessorTellsACleanStopFromAnExpiredSessionForEveryAccount) {
  constexpr int kAccounts = 30;
  auto joinAll = [&](Contender& c) {
    for (int i = 0; i < kAccounts; ++i) c.join("acct" + std::to_string(i));
  };
  // Every account waiting right behind the leader (its mark followed from then on).
  auto settledBehind = [&](Contender& c) {
    return eventually(
        [&] {
          auto all = c.group().status();
          return all.size() == static_cast<size_t>(kAccounts) &&
                 std::all_of(all.begin(), all.end(),
                             [](const auto& s) { return s.role == el::Role::Waiting && s.leader; });
        },
        20s);
  };
  auto acquisitionsFrom = [&](const Contender& c, const std::string& previous) {
    std::vector<el::LeadershipEvent> out;
    for (auto& e : c.events()) {
      if (e.kind == el::LeadershipEvent::Kind::Acquired && e.previous &&
          e.previous->instanceId == previous) {
        out.push_back(e);
      }
    }
    return out;
  };
  auto a = std::make_unique<Contender>(hosts(), root, "host-a");
  joinAll(*a);
  ASSERT_TRUE(eventually([&] { return a->leadingCount() == kAccounts; }, 20s));
  TcpProxy proxy(sharedZooKeeper().port());
  Contender b(proxy.connectString(), root, "host-b", 1500ms);
  joinAll(b);
  ASSERT_TRUE(settledBehind(b));

  a->stop();  // clean: every handover free of lock-delay
  ASSERT_TRUE(eventually([&] { return b.leadingCount() == kAccounts; }, 20s));
  const auto fromA = acquisitionsFrom(b, "host-a");
  ASSERT_EQ(fromA.size(), static_cast<size_t>(kAccounts));
  for (auto& e : fromA) EXPECT_FALSE(e.previousExpired) << e.account;
  // The mark said "stopping", so the stop wrote no handover record: the records are still as the
  // first registration created them (empty), and yet every successor knew the stop was clean.
  for (int i = 0; i < kAccounts; ++i) {
    EXPECT_EQ(b.get(root + "/acct" + std::to_string(i) + "/handover").value_or("missing"), "")
        << "acct" << i;
  }

  Contender c(hosts(), root, "host-c");
  joinAll(c);
  ASSERT_TRUE(settledBehind(c));
  // b's link goes silent: the server expires its session and deletes all its nodes at once.
  proxy.setMode(TcpProxy::Mode::blackhole);
  ASSERT_TRUE(eventually([&] { return c.leadingCount() == kAccounts; }, 20s));
  const auto fromB = acquisitionsFrom(c, "host-b");
  ASSERT_EQ(fromB.size(), static_cast<size_t>(kAccounts));
  for (auto& e : fromB) EXPECT_TRUE(e.previousExpired) << e.account;
}

}  // namespace
}  // namespace zktest
