// Presence as it runs: real ZooKeeper, a real fencing-gateway, real zk-agent processes and
// zk-device processes, real faults (SIGTERM, SIGSTOP/SIGCONT, kill -9). Parameters are compressed
// (heartbeat 200 ms, ping timeout 600 ms, renewal 400 ms, lease TTL 1200 ms) so that each way of
// leaving is seen in about a second; which way a lease ended is read from the gateway's counters,
// never from how long it took.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "presence_process_support.hpp"
#include "zkagent/http.hpp"
#include "zktest/agent_process.hpp"
#include "zktest/child_process.hpp"
#include "zktest/deadline.hpp"
#include "zktest/tcp_proxy.hpp"
#include "zktest/test_certs.hpp"
#include "zktest/zookeeper_server.hpp"

namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using std::chrono::milliseconds;
using zktest::ChildProcess;
using zktest::eventually;

using namespace zktest::presence_process;

// A lease batch from host-a (ZooKeeper session `session`) removing one device's lease under
// `epoch`: what an agent sends when the device closes (a test replays it late, or after the lease
// moved on).
json removalFromHostA(const std::string& account, const std::string& device, const Connected& epoch,
                      int64_t session) {
  return {{"instanceId", "host-a"},
          {"sessionId", session},
          {"renew", json::array()},
          {"remove",
           {{{"account", account},
             {"device", device},
             {"token", epoch.token},
             {"counter", epoch.counter},
             {"reason", "close"}}}}};
}

using Agent = zktest::AgentProcess;

double pingTimeouts(const Agent& agent) {
  return sampleOf(agent.metrics(), "zkagent_presence_ping_timeouts_total");
}
int64_t seqOf(const Agent& agent, const std::string& account) {
  return agent.account(account).value("seq", int64_t{-1});
}

class PresenceProcessTest : public zktest::AgentProcessFixture {
 protected:
  PresenceProcessTest()
      : AgentProcessFixture("zk-presence-test", {"--lease-ttl-ms", std::to_string(kLeaseTtlMs),
                                                 "--lease-sweep-ms", std::to_string(kSweepMs)}) {}
  void SetUp() override {
    AgentProcessFixture::SetUp();
    zkagent::http::ClientOptions options;
    options.port = gateway_->port();
    options.requestTimeout = 3000ms;
    gatewayClient_ = std::make_unique<zkagent::http::Client>(options);
  }
  void TearDown() override {
    devices_.clear();
    AgentProcessFixture::TearDown();
  }

  // The device endpoint on a port chosen before the agent starts.
  json agentConfig(const std::string& id, const std::vector<std::string>& accounts,
                   uint16_t devicePort) {
    return zktest::agentConfig(site(), id, accounts,
                               {{"zookeeper", {{"session_timeout_ms", kSessionTimeoutMs}}},
                                {"presence",
                                 {{"listen", "127.0.0.1:" + std::to_string(devicePort)},
                                  {"heartbeat_ms", kHeartbeatMs},
                                  {"ping_timeout_ms", kPingTimeoutMs},
                                  {"check_interval_ms", kCheckIntervalMs},
                                  {"renew_interval_ms", kRenewIntervalMs},
                                  {"lease_ttl_ms", kLeaseTtlMs}}}});
  }

  Agent& startAgent(const std::string& id, const std::vector<std::string>& accounts,
                    const std::function<void(json&)>& adjust = {}) {
    auto config = agentConfig(id, accounts, zktest::freeLoopbackPort());
    if (adjust) adjust(config);
    return addAgent(config);
  }

  ChildProcess& startDevice(const std::vector<std::string>& urls, const std::string& account,
                            const std::string& device, std::vector<std::string> extra = {}) {
    std::string connect;
    for (const auto& url : urls) connect += (connect.empty() ? "" : ",") + url;
    std::vector<std::string> args{"--connect",      connect,
                                  "--device",       device,
                                  "--heartbeat-ms", std::to_string(kHeartbeatMs),
                                  "--timeout-ms",   std::to_string(kPingTimeoutMs)};
    if (!account.empty()) args.insert(args.end(), {"--account", account});  // else in `extra`
    args.insert(args.end(), extra.begin(), extra.end());
    devices_.push_back(
        std::make_unique<ChildProcess>(zktest::binaryPath("zk-device").string(), args));
    return *devices_.back();
  }

  // The gateway's lease table for one account.
  json leases(const std::string& account) const {
    auto r = gatewayClient_->get("/v1/presence/" + account);
    if (!r.delivered() || r.status != 200) return json();
    return json::parse(r.body, nullptr, false);
  }
  // The device's lease at the gateway, or null.
  json leaseOf(const std::string& account, const std::string& device) const {
    const auto table = leases(account);
    for (const auto& d : table.value("devices", json::array())) {
      if (d["device"] == device) return d;
    }
    return json();
  }
  double gatewaySample(const std::string& sample) const {
    auto r = gatewayClient_->get("/metrics");
    return r.delivered() ? sampleOf(r.body, sample) : 0;
  }
  double removalsAccepted() const { return gatewaySample(leaseEntries("remove", "accepted")); }
  double expirations() const {
    return gatewaySample("zkagent_gateway_presence_lease_expirations_total");
  }

  std::unique_ptr<zkagent::http::Client> gatewayClient_;
  std::vector<std::unique_ptr<ChildProcess>> devices_;
};

TEST_F(PresenceProcessTest, DeviceSentToANonLeaderIsRedirectedAndHoldsALeaseUnderTheLeadersToken) {
  auto& a = startAgent("host-a", {"acct-0"});
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s));
  auto& b = startAgent("host-b", {"acct-0"});
  ASSERT_TRUE(eventually([&] { return b.account("acct-0").value("role", "") == "WAITING"; }, 15s));

  auto& device = startDevice({b.deviceUrl}, "acct-0", "phone");
  const auto redirected = device.waitForLine("REDIRECTED ", 10s);
  EXPECT_NE(redirected.find(a.deviceUrl), std::string::npos) << redirected;
  const auto connected = parseConnected(device.waitForLine("CONNECTED ", 10s));
  EXPECT_EQ(connected.agent, "host-a");
  EXPECT_EQ(static_cast<int64_t>(connected.token), seqOf(a, "acct-0"));

  ASSERT_TRUE(eventually([&] { return !leaseOf("acct-0", "phone").is_null(); }, 5s));
  const auto lease = leaseOf("acct-0", "phone");
  EXPECT_EQ(lease["agent"], "host-a");
  EXPECT_EQ(lease["epoch"]["token"].get<uint64_t>(), connected.token);
  EXPECT_EQ(lease["epoch"]["counter"].get<uint64_t>(), connected.counter);
  EXPECT_TRUE(leases("acct-0")["online"].get<bool>());
  // Renewals keep it past several TTLs while the device heartbeats.
  ASSERT_FALSE(eventually([&] { return leaseOf("acct-0", "phone").is_null(); },
                          milliseconds(3 * kLeaseTtlMs)));
}

TEST_F(PresenceProcessTest, DeviceThatClosesOrIsKilledHasItsLeaseRemovedAtOnceNotExpired) {
  // A ping timeout far beyond the test's deadlines: only the close itself can end the leases.
  auto& a =
      startAgent("host-a", {"acct-0"}, [](json& c) { c["presence"]["ping_timeout_ms"] = 60000; });
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s));
  auto& closing = startDevice({a.deviceUrl}, "acct-0", "phone");
  auto& killed = startDevice({a.deviceUrl}, "acct-0", "laptop");
  closing.waitForLine("CONNECTED ", 10s);
  killed.waitForLine("CONNECTED ", 10s);
  ASSERT_TRUE(eventually([&] { return leases("acct-0")["devices"].size() == 2; }, 5s));
  const double removalsBefore = removalsAccepted();
  const double expiredBefore = expirations();

  closing.signal(SIGTERM);  // sends a close frame
  EXPECT_TRUE(closing.wait(5s).exitedWith(0));
  ASSERT_TRUE(eventually([&] { return leaseOf("acct-0", "phone").is_null(); }, 5s));
  killed.kill();  // the kernel closes the socket: the agent reads EOF
  ASSERT_TRUE(eventually([&] { return leaseOf("acct-0", "laptop").is_null(); }, 5s));

  EXPECT_EQ(removalsAccepted() - removalsBefore, 2);
  EXPECT_EQ(expirations() - expiredBefore, 0) << "removed by the agent, not left to expire";
  EXPECT_FALSE(leases("acct-0")["online"].get<bool>());
}

TEST_F(PresenceProcessTest, HalfOpenDeviceIsTimedOutByTheAgentAndItsLeaseRemoved) {
  auto& a = startAgent("host-a", {"acct-0"});
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s));
  auto& device = startDevice({a.deviceUrl}, "acct-0", "phone");
  const auto first = parseConnected(device.waitForLine("CONNECTED ", 10s));
  ASSERT_TRUE(eventually([&] { return !leaseOf("acct-0", "phone").is_null(); }, 5s));
  const double removalsBefore = removalsAccepted();
  const double expiredBefore = expirations();

  device.signal(SIGSTOP);  // the socket stays open, heartbeats stop
  ASSERT_TRUE(eventually([&] { return leaseOf("acct-0", "phone").is_null(); }, 10s));
  EXPECT_EQ(removalsAccepted() - removalsBefore, 1) << "the agent's ping timeout removed it";
  EXPECT_EQ(expirations() - expiredBefore, 0);
  EXPECT_EQ(pingTimeouts(a), 1);
  device.signal(SIGCONT);
  // The device finds its connection closed (4002) or silent, and comes back by itself.
  device.waitForLine("DISCONNECTED ", 10s);
  const auto again = parseConnected(device.waitForLine("CONNECTED ", 10s));
  EXPECT_TRUE(eventually([&] { return !leaseOf("acct-0", "phone").is_null(); }, 5s));

  // A removal of the first connection arriving late, under the same (current) leader token: the
  // fence lets it through, the epoch does not.
  ASSERT_EQ(again.token, first.token);
  ASSERT_GT(again.counter, first.counter);
  auto answer = gatewayClient_->post(
      "/v1/presence/leases", removalFromHostA("acct-0", "phone", first, a.sessionId()).dump());
  ASSERT_EQ(answer.status, 200) << answer.body;
  const auto counts = json::parse(answer.body);
  EXPECT_EQ(counts.value("removed", -1), 0) << answer.body;
  EXPECT_EQ(counts.value("stale", -1), 1) << answer.body;
  EXPECT_EQ(leaseOf("acct-0", "phone")["epoch"]["counter"].get<uint64_t>(), again.counter);
}

TEST_F(PresenceProcessTest, LeaderSigtermMovesDevicesToTheSuccessorAndALateOldRemovalIsRejected) {
  const std::vector<std::string> accounts{"acct-0", "acct-1", "acct-2"};
  auto& a = startAgent("host-a", accounts);
  ASSERT_TRUE(
      eventually([&] { return a.leads("acct-0") && a.leads("acct-1") && a.leads("acct-2"); }, 15s));
  auto& b = startAgent("host-b", accounts);
  ASSERT_TRUE(eventually([&] { return b.account("acct-2").value("role", "") == "WAITING"; }, 15s));

  const int64_t sessionA = a.sessionId();
  std::map<std::string, Connected> first;
  std::vector<ChildProcess*> devices;
  for (const auto& account : accounts) {
    auto& d = startDevice({a.deviceUrl, b.deviceUrl}, account, "phone");
    first[account] = parseConnected(d.waitForLine("CONNECTED ", 10s));
    EXPECT_EQ(first[account].agent, "host-a");
    devices.push_back(&d);
  }
  a.process->signal(SIGTERM);
  EXPECT_TRUE(a.process->wait(10s).exitedWith(0));

  for (size_t i = 0; i < accounts.size(); ++i) {
    const auto moved = parseConnected(devices[i]->waitForLine(
        [](std::string_view l) {
          return l.starts_with("CONNECTED ") && l.find(" host-b ") != l.npos;
        },
        10s, "CONNECTED to host-b"));
    EXPECT_GT(moved.token, first[accounts[i]].token) << accounts[i];
    ASSERT_TRUE(eventually(
        [&] {
          auto lease = leaseOf(accounts[i], "phone");
          return !lease.is_null() && lease["agent"] == "host-b" &&
                 lease["epoch"]["token"].get<uint64_t>() == moved.token;
        },
        5s))
        << leases(accounts[i]).dump();
  }

  // A removal from the old leader's epoch arriving late (held up in the network) must not end
  // the new leader's lease.
  const auto& old = first["acct-0"];
  auto answer = gatewayClient_->post("/v1/presence/leases",
                                     removalFromHostA("acct-0", "phone", old, sessionA).dump());
  ASSERT_EQ(answer.status, 200) << answer.body;
  EXPECT_EQ(json::parse(answer.body).value("removed", -1), 0) << answer.body;
  EXPECT_EQ(json::parse(answer.body)["fenced"],
            json::parse(R"([{"account":"acct-0","token":)" + std::to_string(old.token) +
                        R"(,"superseded":true}])"))
      << "the old leader's token is not the active seq any more: " << answer.body;
  EXPECT_FALSE(leaseOf("acct-0", "phone").is_null());
  EXPECT_EQ(leaseOf("acct-0", "phone")["agent"], "host-b");
}

TEST_F(PresenceProcessTest, PausedLeaderLosesItsDevicesToTheSuccessorAndCannotWritePresenceAfter) {
  auto& a = startAgent("host-a", {"acct-0"});
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s));
  auto& b = startAgent("host-b", {"acct-0"});
  ASSERT_TRUE(eventually([&] { return b.account("acct-0").value("role", "") == "WAITING"; }, 15s));
  const int64_t sessionA = a.sessionId();
  auto& device = startDevice({a.deviceUrl, b.deviceUrl}, "acct-0", "phone");
  const auto before = parseConnected(device.waitForLine("CONNECTED ", 10s));
  ASSERT_EQ(before.agent, "host-a");

  a.process->signal(SIGSTOP);                // past its session: host-b takes over
  device.waitForLine("DISCONNECTED ", 10s);  // the device's own timeout noticed the silence
  const auto after = parseConnected(device.waitForLine(
      [](std::string_view l) {
        return l.starts_with("CONNECTED ") && l.find(" host-b ") != l.npos;
      },
      milliseconds(kSessionTimeoutMs + 10000), "CONNECTED to host-b"));
  EXPECT_GT(after.token, before.token);
  ASSERT_TRUE(eventually(
      [&] {
        auto lease = leaseOf("acct-0", "phone");
        return !lease.is_null() && lease["epoch"]["token"].get<uint64_t>() == after.token;
      },
      5s));

  a.process->signal(SIGCONT);
  // The old leader learns it lost the account and serves no devices.
  ASSERT_TRUE(eventually([&] { return !a.leads("acct-0"); }, 10s));
  EXPECT_TRUE(eventually([&] { return a.account("acct-0").value("devices", -1) == 0; }, 5s))
      << a.account("acct-0").dump();
  // What it might still send cannot displace the new lease, even with an epoch that would win
  // on the epoch order alone: the new leader's token with a higher counter, a removal of exactly
  // the new lease, and a device no lease covers under its own old token. Only the fence refuses
  // them (the old leader's instance and session do not hold the active node).
  const double renewFenced = gatewaySample(leaseEntries("renew", "fenced")),
               removeFenced = gatewaySample(leaseEntries("remove", "fenced"));
  const json late{
      {"instanceId", "host-a"},
      {"sessionId", sessionA},
      {"renew",
       {{{"account", "acct-0"},
         {"device", "phone"},
         {"token", after.token},
         {"counter", after.counter + 1000}},
        {{"account", "acct-0"}, {"device", "ghost"}, {"token", before.token}, {"counter", 1}}}},
      {"remove",
       {{{"account", "acct-0"},
         {"device", "phone"},
         {"token", after.token},
         {"counter", after.counter},
         {"reason", "close"}}}}};
  auto answer = gatewayClient_->post("/v1/presence/leases", late.dump());
  ASSERT_EQ(answer.status, 200) << answer.body;
  const auto counts = json::parse(answer.body);
  EXPECT_EQ(counts["renewed"], 0) << answer.body;
  EXPECT_EQ(counts["removed"], 0) << answer.body;
  ASSERT_EQ(counts["refused"].size(), 3u) << answer.body;
  // The new token from the wrong instance and session; the old token below the HWM.
  auto refusal = [](const char* list, int index, const char* reason) {
    return json{{"index", index}, {"list", list}, {"account", "acct-0"}, {"reason", reason}};
  };
  EXPECT_EQ(counts["refused"],
            (json{refusal("renew", 0, "not_current_leader"), refusal("renew", 1, "stale_token"),
                  refusal("remove", 0, "not_current_leader")}))
      << answer.body;
  // The gateway counts them as fenced; the resumed agent's own last batch may be counted too.
  EXPECT_GE(gatewaySample(leaseEntries("renew", "fenced")) - renewFenced, 2);
  EXPECT_GE(gatewaySample(leaseEntries("remove", "fenced")) - removeFenced, 1);
  const auto lease = leaseOf("acct-0", "phone");
  EXPECT_EQ(lease["agent"], "host-b") << leases("acct-0").dump();
  EXPECT_EQ(lease["epoch"], (json{{"token", after.token}, {"counter", after.counter}}));
  EXPECT_TRUE(leaseOf("acct-0", "ghost").is_null()) << leases("acct-0").dump();
}

TEST_F(PresenceProcessTest, AgentKilledWhileItsDevicesAreGoneHasTheirLeasesExpireAfterTheTtl) {
  auto& a = startAgent("host-a", {"acct-0"});
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s));
  auto& device = startDevice({a.deviceUrl}, "acct-0", "phone");
  device.waitForLine("CONNECTED ", 10s);
  ASSERT_TRUE(eventually([&] { return !leaseOf("acct-0", "phone").is_null(); }, 5s));
  const double expiredBefore = expirations();
  const double removalsBefore = removalsAccepted();

  device.signal(SIGSTOP);  // gone too: it will not reconnect anywhere
  a.process->kill();
  ASSERT_TRUE(eventually([&] { return leaseOf("acct-0", "phone").is_null(); },
                         milliseconds(kLeaseTtlMs + kSweepMs + 5000)));
  EXPECT_EQ(expirations() - expiredBefore, 1) << "nobody removed it: the TTL did";
  EXPECT_EQ(removalsAccepted() - removalsBefore, 0);
}

// The first POST /v1/presence/leases among the bytes a proxy forwarded, its body parsed; null
// until one has arrived whole.
json firstLeaseBatch(const std::vector<zktest::TcpProxy::Forwarded>& forwarded) {
  std::map<size_t, std::string> streams;  // per client connection, in the order written
  for (const auto& write : forwarded) streams[write.connection] += write.bytes;
  for (const auto& [connection, bytes] : streams) {
    const auto start = bytes.find("POST /v1/presence/leases ");
    if (start == std::string::npos) continue;
    const auto headersEnd = bytes.find("\r\n\r\n", start);
    if (headersEnd == std::string::npos) return json();
    std::string headers = bytes.substr(start, headersEnd - start);
    for (auto& c : headers) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const auto length = headers.find("content-length: ");
    if (length == std::string::npos) return json();
    const size_t size = std::stoul(headers.substr(length + 16));
    if (bytes.size() < headersEnd + 4 + size) return json();
    return json::parse(bytes.substr(headersEnd + 4, size));
  }
  return json();
}

// The gateway drops every packet (a partition neither side sees) while 150 devices keep renewing
// and one leaves: the agent's lease queue stays at its bound (100 entries with one entry per
// batch), dropping renewals and never the removal; once the network heals, the first batch that
// reaches the gateway is that removal, and the devices still connected are renewed after it.
TEST_F(PresenceProcessTest, AGatewayThatDropsPacketsLeavesTheLeaseQueueBoundedAndRemovalsGoFirst) {
  constexpr int kDevices = 150;
  constexpr double kQueueBound = 100;  // kQueuedBatches (100) x max_batch_entries (1)
  zktest::TcpProxy proxy(gateway_->port());
  auto& a = startAgent("host-a", {"acct-0"}, [&](json& c) {
    c["gateway"]["url"] = "http://" + proxy.connectString();
    c["gateway"]["request_timeout_ms"] = 500;
    c["presence"]["max_batch_entries"] = 1;  // a queue of 100 entries: fewer than the devices
  });
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s));
  // The leaver's lease is written before the others connect: one entry per request does not keep
  // up with 151 devices renewed every 400 ms even before the partition (the oldest renewals are
  // dropped, so any one device's renewal reaches the gateway only now and then and its lease may
  // lapse). The removal later is queued whether or not the lease is still there.
  auto& leaver = startDevice({a.deviceUrl}, "acct-0", "leaver");
  leaver.waitForLine("CONNECTED ", 10s);
  ASSERT_TRUE(eventually([&] { return !leaseOf("acct-0", "leaver").is_null(); }, 10s));
  auto& many = startDevice({a.deviceUrl}, "", "sim",
                           {"--devices", std::to_string(kDevices), "--accounts", "acct-0"});

  auto agentSample = [&](const std::string& sample) { return sampleOf(a.metrics(), sample); };
  const std::string queued = "zkagent_presence_lease_queued_entries";
  const std::string renewalsDropped = R"(zkagent_presence_lease_dropped_total{kind="renew"})";
  const std::string removalsDropped = R"(zkagent_presence_lease_dropped_total{kind="remove"})";
  double mostQueued = 0;
  // Samples the queue while waiting for `done`.
  auto whileQueueing = [&](const std::function<bool()>& done, milliseconds timeout) {
    return eventually(
        [&] {
          mostQueued = std::max(mostQueued, agentSample(queued));
          return done();
        },
        timeout);
  };

  auto open = [&] { return agentSample(R"(zkagent_presence_device_connections{state="open"})"); };
  ASSERT_TRUE(eventually([&] { return open() == kDevices + 1; }, 30s)) << open() << " open";

  proxy.setMode(zktest::TcpProxy::Mode::blackhole);
  // A round of renewals (every device every 400 ms) is more than the queue holds.
  const double droppedAtPartition = agentSample(renewalsDropped);
  ASSERT_TRUE(whileQueueing(
      [&] { return agentSample(renewalsDropped) >= droppedAtPartition + kDevices; }, 10s));
  leaver.kill();  // the agent reads EOF: the removal is queued behind a full queue of renewals
  ASSERT_TRUE(eventually([&] { return open() == kDevices; }, 5s));
  // Two more full rounds of renewals press on the queue while the removal waits in it.
  const double droppedAtLeave = agentSample(renewalsDropped);
  ASSERT_TRUE(whileQueueing(
      [&] { return agentSample(renewalsDropped) >= droppedAtLeave + 2 * kDevices; }, 10s));
  EXPECT_LE(mostQueued, kQueueBound);
  EXPECT_EQ(agentSample(removalsDropped), 0) << "a removal is dropped only after every renewal";
  EXPECT_TRUE(many.running());

  proxy.record();
  proxy.setMode(zktest::TcpProxy::Mode::pass);
  json first;
  ASSERT_TRUE(eventually(
      [&] {
        first = firstLeaseBatch(proxy.forwarded());
        return !first.is_null();
      },
      10s))
      << "no lease batch reached the gateway after the network healed";
  ASSERT_EQ(first.value("remove", json::array()).size(), 1u) << first.dump();
  EXPECT_EQ(first["remove"][0]["device"], "leaver") << first.dump();
  EXPECT_EQ(first.value("renew", json::array()).size(), 0u) << first.dump();
  // Then the devices still connected are renewed again (the gateway expired them meanwhile).
  EXPECT_TRUE(eventually(
      [&] { return leases("acct-0").value("devices", json::array()).size() >= kDevices / 2; },
      20s));
  EXPECT_TRUE(leaseOf("acct-0", "leaver").is_null());
}

TEST_F(PresenceProcessTest, HeartbeatsDisabledWithZeroKeepAQuietConnectionAndTheCheckStillWorks) {
  auto& quiet = startAgent("host-a", {"acct-0"}, [](json& c) {
    c["presence"]["heartbeat_ms"] = 0;
    c["presence"]["ping_timeout_ms"] = 0;  // the agent's check off
  });
  ASSERT_TRUE(eventually([&] { return quiet.leads("acct-0"); }, 15s));
  auto& silent = startDevice({quiet.deviceUrl}, "acct-0", "phone",
                             {"--heartbeat-ms", "0", "--timeout-ms", "0"});
  silent.waitForLine("CONNECTED ", 10s);
  // Many ping timeouts long: neither side gives up on the other.
  EXPECT_FALSE(silent.tryReadLine(milliseconds(5 * kPingTimeoutMs)).has_value());
  EXPECT_FALSE(leaseOf("acct-0", "phone").is_null());

  // Negative control: the same silent device on an agent whose check is on is timed out.
  auto& checking = startAgent("host-b", {"acct-1"});
  ASSERT_TRUE(eventually([&] { return checking.leads("acct-1"); }, 15s));
  auto& unchecked = startDevice({checking.deviceUrl}, "acct-1", "phone",
                                {"--heartbeat-ms", "0", "--timeout-ms", "0"});
  unchecked.waitForLine("CONNECTED ", 10s);
  const auto closed = unchecked.waitForLine("DISCONNECTED ", 10s);
  EXPECT_NE(closed.find("ping_timeout"), std::string::npos) << closed;
}

}  // namespace
