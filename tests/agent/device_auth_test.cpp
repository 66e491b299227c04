// Device identity at the agent's device endpoint, tried as an attacker would: real ZooKeeper, a
// real fencing-gateway, real zk-agent processes with presence.auth, tokens signed with the keys of
// scripts/make-test-certs. Every forged upgrade is refused before the handshake and before the
// leader/redirect decision, and next to each the real device stays online with its lease
// untouched at the gateway (same epoch, never removed).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "device_auth_fixture.hpp"
#include "device_socket.hpp"
#include "zkagent/auth.hpp"
#include "zkagent/http.hpp"
#include "zktest/agent_process.hpp"
#include "zktest/child_process.hpp"
#include "zktest/deadline.hpp"
#include "zktest/test_certs.hpp"

namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using zktest::Device;
using zktest::eventually;
using zktest::metricSample;
namespace auth = zkagent::auth;
using Agent = zktest::AgentProcess;
using zktest::DeviceAuthTest;
using zktest::devicePath;
using zktest::Mint;
using zktest::mint;

// The real device: connected with its own token, welcomed, answered.
struct RealDevice {
  Device socket;
  json welcome;
  uint64_t seq = 0;
  bool answers() {
    socket.ping(++seq);
    const auto pong = socket.read();
    return pong && *pong == json{{"type", "pong"}, {"seq", seq}};
  }
};

TEST_F(DeviceAuthTest, ForgedDevicesAreRefusedAndTheRealDeviceKeepsItsLease) {
  auto& a = addAgent(config("host-a", {"acct-0", "acct-1"}));
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0") && a.leads("acct-1"); }, 15s));
  auto& b = addAgent(config("host-b", {"acct-0"}));
  ASSERT_TRUE(eventually(
      [&] {
        const auto leader = b.account("acct-0")["leader"];
        return leader.is_object() && leader.value("instance", "") == "host-a";
      },
      10s))
      << b.status().dump();

  RealDevice real;
  ASSERT_FALSE(real.socket.connect(a.devicePort, devicePath("acct-0", "phone"), mint({})));
  const auto welcome = real.socket.read();
  ASSERT_TRUE(welcome && (*welcome)["type"] == "welcome");
  ASSERT_TRUE(eventually([&] { return !lease("phone").is_null(); }, 3s));
  const json held = lease("phone");
  EXPECT_EQ(held["counter"], (*welcome)["counter"]);

  struct Case {
    std::string name;
    std::string bearer;      // Authorization: Bearer (empty: none)
    std::string queryToken;  // ?token= (empty: none)
    int status;
    std::string reason;  // zkagent_device_auth_refused_total{reason}
  };
  const std::vector<Case> cases = {
      {"no token", "", "", 401, "missing"},
      {"not a JWT", "not.a.jwt", "", 401, "malformed"},
      {"wrong signature", mint({.secret = "other-hs256.secret"}), "", 401, "bad_signature"},
      {"expired", mint({.ttl = -120}), "", 401, "expired"},
      {"wrong audience", mint({.audience = "elsewhere"}), "", 401, "wrong_audience"},
      {"wrong scope", mint({.scope = "viewer"}), "", 401, "wrong_scope"},
      {"other account's token", mint({.account = "acct-1"}), "", 403, "wrong_account"},
      {"other device's token", mint({.subject = "tablet"}), "", 403, "wrong_device"},
      {"other device's token in the query", "", mint({.subject = "tablet"}), 403, "wrong_device"},
  };
  std::map<std::string, double> expected;
  for (const auto& c : cases) {
    // At the leader, at the non-leader (307 path) and at the non-leader in band: refused alike,
    // never redirected.
    for (const auto& [port, suffix] : std::vector<std::pair<uint16_t, std::string>>{
             {a.devicePort, ""}, {b.devicePort, ""}, {b.devicePort, "&redirect=close"}}) {
      std::string target = devicePath("acct-0", "phone") + suffix;
      if (!c.queryToken.empty()) target += "&token=" + c.queryToken;
      Device forged;
      const auto refused = forged.connect(port, target, c.bearer);
      ASSERT_TRUE(refused) << c.name << " was upgraded at " << port << suffix;
      EXPECT_EQ(refused->status, c.status) << c.name << ": " << refused->body;
      EXPECT_TRUE(refused->location.empty()) << c.name << " was redirected";
      EXPECT_FALSE(json::parse(refused->body, nullptr, false).value("error", "").empty())
          << c.name << ": " << refused->body;
      // The real device is still online, answered, and its lease is the one it had.
      EXPECT_TRUE(real.answers()) << "after " << c.name;
      EXPECT_EQ(lease("phone"), held) << "after " << c.name;
    }
    if (expected.contains(c.reason)) {
      expected[c.reason] += 2;
    } else {
      expected[c.reason] = 2;
    }
  }
  const auto aMetrics = a.metrics();
  const auto bMetrics = b.metrics();
  for (const auto& [reason, total] : expected) {
    const std::string series = "zkagent_device_auth_refused_total{reason=\"" + reason + "\"}";
    EXPECT_EQ(metricSample(aMetrics, series), total / 2) << series << "\n" << aMetrics;
    EXPECT_EQ(metricSample(bMetrics, series), total) << series;
  }
  EXPECT_EQ(metricSample(bMetrics, "zkagent_presence_redirects_total{code=\"307\"}"), std::nullopt);
  EXPECT_EQ(metricSample(bMetrics, "zkagent_presence_redirects_total{code=\"4001\"}"),
            std::nullopt);
  EXPECT_EQ(a.account("acct-0")["devices"], 1);
  EXPECT_EQ(b.account("acct-0")["devices"], 0);

  // The attack of issue 21: connect under the real device's id and close at once, repeatedly.
  // Refused every time, so no removal (and no tombstone) is written: the real device's renewals
  // keep its lease, with the same epoch, over several renewal ticks (400 ms) and lease TTLs.
  for (int i = 0; i < 5; ++i) {
    Device attacker;
    const auto refused = attacker.connect(a.devicePort, devicePath("acct-0", "phone"));
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 401);
  }
  EXPECT_FALSE(eventually([&] { return lease("phone") != held; }, 2500ms))
      << "the real device's lease changed: " << lease("phone").dump();
  EXPECT_TRUE(real.answers());

  // The valid paths: a device with its own token in the query (browsers), and an ES256 token.
  Device browser;
  ASSERT_FALSE(browser.connect(a.devicePort,
                               devicePath("acct-0", "tv") + "&token=" + mint({.subject = "tv"})))
      << "a valid token in the query was refused";
  ASSERT_TRUE(browser.read());
  EXPECT_TRUE(eventually([&] { return !lease("tv").is_null(); }, 3s));
  const auto es =
      auth::mint({"e1", auth::Algorithm::ES256,
                  [] {
                    std::ifstream in(zktest::testCertificates() / "tokens" / "es256.key");
                    return std::string(std::istreambuf_iterator<char>(in), {});
                  }()},
                 {.subject = "watch",
                  .account = "acct-0",
                  .scope = "device",
                  .audience = "zkagent",
                  .expiresAt = auth::unixNow() + 600,
                  .notBefore = std::nullopt});
  Device watch;
  ASSERT_FALSE(watch.connect(a.devicePort, devicePath("acct-0", "watch"), es));
  ASSERT_TRUE(watch.read());
  EXPECT_EQ(lease("phone"), held);
}

// A token that lapses closes its connection with 4003 (leeway 0); a fresh token reconnects.
TEST_F(DeviceAuthTest, AConnectionWhoseTokenExpiresIsClosedWith4003AndAFreshTokenReconnects) {
  auto& a = addAgent(config("host-a", {"acct-0"}, 0));
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s));
  Device device;
  ASSERT_FALSE(device.connect(a.devicePort, devicePath("acct-0", "phone"), mint({.ttl = 3})));
  ASSERT_TRUE(device.read());
  const auto closed = device.awaitClose(10s);
  ASSERT_TRUE(closed) << "not closed after its token expired";
  EXPECT_EQ(closed->code, 4003);
  EXPECT_EQ(closed->reason, "token expired");
  const auto metrics = a.metrics();
  EXPECT_EQ(metricSample(metrics, "zkagent_device_token_expired_total"), 1) << metrics;
  EXPECT_EQ(metricSample(metrics, "zkagent_presence_closes_total{code=\"4003\"}"), 1);
  EXPECT_TRUE(eventually([&] { return lease("phone").is_null(); }, 3s)) << "lease left behind";

  // The same expired token is refused now; a fresh one is welcomed.
  Device again;
  const auto refused =
      again.connect(a.devicePort, devicePath("acct-0", "phone"), mint({.ttl = -1}));
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 401);
  Device fresh;
  ASSERT_FALSE(fresh.connect(a.devicePort, devicePath("acct-0", "phone"), mint({})));
  const auto welcome = fresh.read();
  ASSERT_TRUE(welcome && (*welcome)["type"] == "welcome");
  EXPECT_TRUE(eventually([&] { return !lease("phone").is_null(); }, 3s));
}

// zk-device as a device application runs it: a token signed per device with the account system's
// key gets it online; with a key the agent does not know it never connects and says why; a token
// file is read again after a refusal, so a renewed file lets the device in without a restart.
TEST_F(DeviceAuthTest, ZkDeviceSignsOrReadsItsTokenAndARefusedTokenKeepsItOut) {
  auto& a = addAgent(config("host-a", {"acct-0"}));
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s));
  const auto tokens = zktest::testCertificates() / "tokens";
  const std::string url = "ws://127.0.0.1:" + std::to_string(a.devicePort);
  auto device = [&](std::vector<std::string> extra) {
    std::vector<std::string> args{"--connect",      url,    "--account",        "acct-0",
                                  "--heartbeat-ms", "200",  "--backoff-max-ms", "300",
                                  "--device",       "phone"};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<zktest::ChildProcess>(zktest::binaryPath("zk-device").string(), args);
  };

  auto forged = device({"--sign-key", (tokens / "es256.key").string(), "--sign-alg", "ES256",
                        "--sign-kid", "k1", "--sign-aud", "zkagent"});
  EXPECT_NE(forged->waitForLine("DISCONNECTED ", 10s).find("unauthorized"), std::string::npos);
  EXPECT_TRUE(lease("phone").is_null()) << "a refused device has no lease";
  forged.reset();

  auto signing = device({"--sign-key", (tokens / "es256.key").string(), "--sign-alg", "ES256",
                         "--sign-kid", "e1", "--sign-aud", "zkagent"});
  signing->waitForLine("CONNECTED acct-0 phone host-a ", 10s);
  EXPECT_TRUE(eventually([&] { return !lease("phone").is_null(); }, 5s));
  signing.reset();

  zktest::ChildProcess noFile(zktest::binaryPath("zk-device").string(),
                              {"--connect", url, "--account", "acct-0", "--device", "laptop",
                               "--token-file", (tokens / "no-such-file").string()});
  EXPECT_TRUE(noFile.wait(5s).exitedWith(2)) << "a missing token file is a usage error";
  const auto file = std::filesystem::temp_directory_path() /
                    ("zk-device-auth-" + std::to_string(::getpid()) + ".token");
  std::ofstream(file) << mint({.subject = "laptop", .account = "acct-1"}) << "\n";
  auto reading = device({"--token-file", file.string()});
  EXPECT_NE(reading->waitForLine("DISCONNECTED ", 10s).find("forbidden"), std::string::npos)
      << "another account's token";
  std::ofstream(file) << mint({.subject = "phone"}) << "\n";
  reading->waitForLine("CONNECTED acct-0 phone host-a ", 10s);
  std::filesystem::remove(file);
}

// A device that pings as fast as it can (and reads every pong, so the pong queue's own bound
// never trips) is closed with 1008 once over the rate limit (20 per second, bursts of 40): it
// gets about its burst answered, not the thousands it asked for; the agent's memory does not grow
// with its pings, and the honest device beside it keeps getting its pongs and keeps its lease.
TEST_F(DeviceAuthTest, APingFloodIsCutWith1008AndNeitherGrowsTheAgentNorSlowsTheOthers) {
  auto& a = addAgent(config("host-a", {"acct-0"}));
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s));
  RealDevice phone;
  ASSERT_FALSE(phone.socket.connect(a.devicePort, devicePath("acct-0", "phone"), mint({})));
  ASSERT_TRUE(phone.socket.read()) << "welcome";
  ASSERT_TRUE(phone.answers());
  const auto rssKiB = [&] {
    std::ifstream status("/proc/" + std::to_string(a.process->pid()) + "/status");
    for (std::string line; std::getline(status, line);) {
      if (line.starts_with("VmRSS:")) return std::stol(line.substr(6));
    }
    return 0L;
  };
  const long before = rssKiB();

  Device flooder;
  ASSERT_FALSE(
      flooder.connect(a.devicePort, devicePath("acct-0", "tablet"), mint({.subject = "tablet"})));
  ASSERT_TRUE(flooder.read()) << "welcome";
  uint64_t answered = 0;
  for (uint64_t seq = 1; seq <= 5000; ++seq) {
    flooder.ping(seq);
    const auto pong = flooder.read(2s);
    if (!pong) break;
    ASSERT_EQ(*pong, (json{{"type", "pong"}, {"seq", seq}}));
    ++answered;
  }
  const auto closed = flooder.awaitClose(2s);
  ASSERT_TRUE(closed) << "the flooder was not closed after " << answered << " pongs";
  EXPECT_EQ(closed->code, 1008);
  EXPECT_EQ(closed->reason, "pings faster than 20 per second");
  EXPECT_GE(answered, 40u) << "the burst is answered";
  EXPECT_LT(answered, 200u) << "the flood is not";
  EXPECT_EQ(metricSample(a.metrics(), "zkagent_presence_ping_floods_total"), 1.0);

  EXPECT_TRUE(phone.answers()) << "the honest device is still answered";
  // Nothing is kept per ping (one time point per connection): what the flooder's connection
  // itself costs stays within a few MiB, sanitizer shadow memory included (2.5 MiB under TSan).
  EXPECT_LT(rssKiB() - before, 16 * 1024) << "KiB grown by the flood";
  EXPECT_TRUE(eventually([&] { return lease("tablet").is_null(); }, 5s))
      << "the flooder's lease goes with it";
  // The honest device heartbeats on and is present (its lease renewed, as heartbeating keeps it).
  EXPECT_TRUE(eventually([&] { return phone.answers() && !lease("phone").is_null(); }, 5s));
}

// wss:// (presence.tls): the device library checks the agent's certificate against its CA and
// the host it dialled; a device that does not trust the certificate, or dialled a name the
// certificate does not hold, sends nothing (no token leaves it, no lease is written), and a plain
// ws:// client gets no upgrade from the TLS listener. Next to each, the honest device connects
// through the non-leader's 307 to the leader's wss:// endpoint and holds its lease.
TEST_F(DeviceAuthTest, WssDevicesCheckTheAgentsCertificateAndItsNameAndFollowRedirectsOverTls) {
  const auto certs = zktest::testCertificates();
  auto tlsConfig = [&](const std::string& id) {
    auto c = config(id, {"acct-0"});
    c["presence"]["listen"] = "localhost:0";  // advertised as wss://localhost:PORT
    c["presence"]["tls"] = {{"cert", (certs / "localhost-only.pem").string()},
                            {"key", (certs / "localhost-only.key").string()}};
    return c;
  };
  auto& a = addAgent(tlsConfig("host-a"));
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s));
  auto& b = addAgent(tlsConfig("host-b"));
  EXPECT_EQ(a.deviceUrl, "wss://localhost:" + std::to_string(a.devicePort));

  const auto tokens = certs / "tokens";
  auto device = [&](const std::string& id, const std::string& url, const std::string& ca) {
    return std::make_unique<zktest::ChildProcess>(
        zktest::binaryPath("zk-device").string(),
        std::vector<std::string>{"--connect",
                                 url,
                                 "--ca",
                                 ca,
                                 "--account",
                                 "acct-0",
                                 "--device",
                                 id,
                                 "--heartbeat-ms",
                                 "200",
                                 "--backoff-max-ms",
                                 "300",
                                 "--sign-key",
                                 (tokens / "hs256.secret").string(),
                                 "--sign-alg",
                                 "HS256",
                                 "--sign-kid",
                                 "k1",
                                 "--sign-aud",
                                 "zkagent"});
  };
  const std::string viaB = "wss://localhost:" + std::to_string(b.devicePort);
  const auto ca = (certs / "ca.pem").string();

  auto untrusting = device("spy", viaB, (certs / "other-ca.pem").string());
  const auto refused = untrusting->waitForLine("DISCONNECTED ", 10s);
  EXPECT_NE(refused.find("tls_failed:certificate_verify_failed:unable_to_get_local_issuer"),
            std::string::npos)
      << refused;
  untrusting.reset();

  auto byAddress = device("spy", "wss://127.0.0.1:" + std::to_string(b.devicePort), ca);
  const auto mismatch = byAddress->waitForLine("DISCONNECTED ", 10s);
  EXPECT_NE(mismatch.find("tls_failed:certificate_verify_failed:IP_address_mismatch"),
            std::string::npos)
      << mismatch;
  byAddress.reset();
  EXPECT_TRUE(lease("spy").is_null()) << "no device got through";

  Device plain;
  const auto answer = plain.connect(b.devicePort, devicePath("acct-0", "spy"), mint({}));
  ASSERT_TRUE(answer.has_value()) << "a plain ws:// client is not upgraded by a TLS listener";
  EXPECT_TRUE(answer->body.empty()) << "nor answered in plain HTTP: " << answer->body;
  EXPECT_TRUE(eventually(
      [&] {
        return metricSample(b.metrics(),
                            R"(zkagent_presence_refused_upgrades_total{reason="tls_handshake"})")
                   .value_or(0) >= 1;
      },
      5s))
      << b.metrics();

  // b leads nothing: the device goes through its 307 to a.
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0") && !b.leads("acct-0"); }, 5s));
  auto honest = device("phone", viaB, ca);
  EXPECT_NE(honest->waitForLine("REDIRECTED ", 10s)
                .find("wss://localhost:" + std::to_string(a.devicePort) + "/v1/devices"),
            std::string::npos);
  honest->waitForLine("CONNECTED acct-0 phone host-a ", 10s);
  EXPECT_TRUE(eventually(
      [&] {
        const auto held = lease("phone");
        return held.is_object() && held["agent"] == "host-a";
      },
      5s));
}

}  // namespace
