// The fencing-gateway process over TLS with client certificates from scripts/make-test-certs:
// who may connect, as which instance, and when plain HTTP is allowed at all; and its subscribers
// over wss:// as zk-presence-watch sees them.
#include <gtest/gtest.h>
#include <signal.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/host_name.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <tuple>
#include <vector>

#include "temp_dir.hpp"
#include "zkagent/auth.hpp"
#include "zkagent/http.hpp"
#include "zktest/child_process.hpp"
#include "zktest/deadline.hpp"
#include "zktest/test_certs.hpp"

using namespace zkagent;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

std::string certFile(const std::string& name) {
  return (zktest::testCertificates() / name).string();
}

std::vector<std::string> gatewayArgs(const std::filesystem::path& dataDir, std::string listen) {
  return {"--listen", std::move(listen), "--data-dir", dataDir.string()};
}

class TlsGateway {
 public:
  explicit TlsGateway(const std::filesystem::path& dataDir) {
    auto args = gatewayArgs(dataDir, "127.0.0.1:0");
    for (std::string extra :
         {"--tls-cert", "gateway.pem", "--tls-key", "gateway.key", "--tls-client-ca", "ca.pem"}) {
      args.push_back(extra.starts_with("--") ? extra : certFile(extra));
    }
    process_ = std::make_unique<zktest::ChildProcess>(
        zktest::binaryPath("fencing-gateway").string(), args);
    auto line = process_->waitForLine("LISTENING 127.0.0.1:", 20s);
    port_ = static_cast<uint16_t>(std::stoi(line.substr(line.rfind(':') + 1)));
  }
  // A client presenting `certificate` (empty: none) and trusting the test CA.
  http::ClientResponse submit(const std::string& certificate, std::string_view instance,
                              std::string_view opId, uint64_t token = 3) {
    http::ClientTls tls{.ca = certFile("ca.pem")};
    if (!certificate.empty()) {
      tls.cert = certFile(certificate + ".pem");
      tls.key = certFile(certificate + ".key");
    }
    http::Client client({.port = port_, .tls = tls});
    return client.post("/v1/ops", json{{"account", "acc"},
                                       {"token", token},
                                       {"instanceId", instance},
                                       {"sessionId", 9},
                                       {"opId", opId},
                                       {"payload", {{"n", 1}}}}
                                      .dump());
  }
  uint16_t port() const { return port_; }

 private:
  std::unique_ptr<zktest::ChildProcess> process_;
  uint16_t port_ = 0;
};

TEST(GatewayTlsProcess, OnlyTheCertificatesOwnInstanceGetsThrough) {
  fencing::testing::TempDir dir;
  TlsGateway gateway(dir.path());
  auto own = gateway.submit("agent-a", "agent-a", "a-1");
  ASSERT_TRUE(own.delivered()) << own.transportError;
  EXPECT_EQ(own.status, 200) << own.body;
  auto foreign = gateway.submit("agent-a", "agent-b", "b-1");
  EXPECT_EQ(foreign.status, 403) << foreign.body;
  // Under a token of its own: token 3 is agent-a's (the HWM's holder).
  EXPECT_EQ(gateway.submit("agent-b", "agent-b", "b-1", 4).status, 200);
}

// Each client is refused by the TLS handshake itself, for its own reason (the alert the gateway
// sends, in OpenSSL's words): "no answer" alone would pass for a gateway that is not running.
TEST(GatewayTlsProcess, NoForeignOrExpiredCertificateIsServed) {
  fencing::testing::TempDir dir;
  TlsGateway gateway(dir.path());
  const std::pair<std::string, std::string> cases[] = {{"", "alert certificate required"},
                                                       {"stranger", "alert unknown ca"},
                                                       {"expired", "alert certificate expired"}};
  for (const auto& [certificate, reason] : cases) {
    auto response = gateway.submit(certificate, "agent-a", "op-" + certificate);
    EXPECT_FALSE(response.delivered())
        << "certificate '" << certificate << "' got " << response.status;
    EXPECT_NE(response.transportError.find(reason), std::string::npos)
        << "certificate '" << certificate << "': expected a refusal naming '" << reason
        << "', got: " << response.transportError;
  }
  // Plain HTTP to the TLS port gets no answer either: the connection is taken, then closed.
  http::Client plain({.port = gateway.port()});
  const auto response = plain.get("/healthz");
  EXPECT_FALSE(response.delivered());
  EXPECT_TRUE(response.transportError.starts_with("exchange with ")) << response.transportError;
  // The control: the same gateway serves a certificate of its CA all along.
  EXPECT_EQ(gateway.submit("agent-a", "agent-a", "a-1").status, 200);
}

TEST(GatewayTlsProcess, PlainHttpOffLoopbackRefusesToStartUnlessInsecure) {
  fencing::testing::TempDir dir;
  zktest::ChildProcess refused(zktest::binaryPath("fencing-gateway").string(),
                               gatewayArgs(dir.path(), "0.0.0.0:0"));
  auto status = refused.wait(20s);
  EXPECT_EQ(status.code, 2) << refused.transcript();
  EXPECT_NE(refused.stderrText().find("tls.cert (--tls-cert)"), std::string::npos)
      << refused.transcript();

  auto args = gatewayArgs(dir.path(), "0.0.0.0:0");
  args.push_back("--insecure");
  zktest::ChildProcess insecure(zktest::binaryPath("fencing-gateway").string(), args);
  insecure.waitForLine("LISTENING ", 20s);
  EXPECT_TRUE(zktest::eventually(
      [&] { return insecure.stderrText().find("insecure: plain HTTP") != std::string::npos; }, 5s))
      << insecure.transcript();
}

// Subscribers over wss://: the gateway's certificate (DNS localhost, IP 127.0.0.1 and ::1), no
// client certificate, viewers proving who they are with tokens. The subscriber listener is on
// every address (TLS makes that allowed without insecure), so a client also reaches it under
// names the certificate does not hold: 127.0.0.2 and this machine's host name.
class WssGateway {
 public:
  explicit WssGateway(const std::filesystem::path& dir) {
    std::ofstream(dir / "operator.token") << kOperatorToken;
    std::ofstream(dir / "viewers.json")
        << json{{"presence",
                 {{"viewer_auth",
                   {{"keys",
                     {{{"kid", "v1"},
                       {"alg", "HS256"},
                       {"file", certFile("tokens/hs256.secret")}}}}}}}}}
               .dump();
    auto args = gatewayArgs(dir / "data", "127.0.0.1:0");
    for (std::string extra :
         {"--tls-cert", "gateway.pem", "--tls-key", "gateway.key", "--tls-client-ca", "ca.pem"}) {
      args.push_back(extra.starts_with("--") ? extra : certFile(extra));
    }
    args.insert(args.end(), {"--subscribe-listen", "0.0.0.0:0", "--debounce-ms", "0",
                             "--coalesce-ms", "10", "--config", (dir / "viewers.json").string(),
                             "--operator-token-file", (dir / "operator.token").string()});
    process_ = std::make_unique<zktest::ChildProcess>(
        zktest::binaryPath("fencing-gateway").string(), args);
    auto line = process_->waitForLine("LISTENING 127.0.0.1:", 20s);
    httpPort_ = static_cast<uint16_t>(std::stoi(line.substr(line.rfind(':') + 1)));
    line = process_->waitForLine("SUBSCRIBE-LISTENING 0.0.0.0:", 20s);
    subscribePort_ = static_cast<uint16_t>(std::stoi(line.substr(line.rfind(':') + 1)));
  }

  // agent-a's certificate (the HTTP listener wants one); `token` for operator actions.
  http::Client client(std::string token = {}) const {
    return http::Client({.port = httpPort_,
                         .requestTimeout = 3000ms,
                         .bearerToken = std::move(token),
                         .tls = http::ClientTls{.ca = certFile("ca.pem"),
                                                .cert = certFile("agent-a.pem"),
                                                .key = certFile("agent-a.key")}});
  }
  void letBobSee(const std::string& account) const {
    auto answer = client(kOperatorToken)
                      .request(http::Method::Put, "/v1/presence/privacy/" + account,
                               json{{"granularity", "exact"}, {"contacts", {"bob"}}}.dump());
    ASSERT_EQ(answer.status, 200) << answer.body << answer.transportError;
  }
  // A lease renewal from agent-a: `account` goes online.
  void renew(const std::string& account) const {
    const json batch{
        {"instanceId", "agent-a"},
        {"sessionId", 1},
        {"renew", {{{"account", account}, {"device", "phone"}, {"token", 1}, {"counter", 1}}}}};
    auto answer = client().post("/v1/presence/leases", batch.dump());
    ASSERT_EQ(answer.status, 200) << answer.body << answer.transportError;
  }

  // zk-presence-watch as bob (with a valid viewer token) on `scheme://host:port`; `ca` names the
  // file under the test certificates, none when empty.
  std::unique_ptr<zktest::ChildProcess> watch(const std::string& scheme, const std::string& host,
                                              const std::string& ca) const {
    zkagent::auth::TokenRequest request;
    request.subject = "bob";
    request.scope = "viewer";
    request.expiresAt = zkagent::auth::unixNow() + 600;
    const auto token = zkagent::auth::mint(
        {"v1", zkagent::auth::Algorithm::HS256, zktest::tokenKey("hs256.secret")}, request);
    std::vector<std::string> args{
        "--gateway", scheme + "://" + host + ":" + std::to_string(subscribePort_),
        "--viewer",  "bob",
        "--targets", "acct-0",
        "--token",   token};
    if (!ca.empty()) args.insert(args.end(), {"--ca", certFile(ca)});
    return std::make_unique<zktest::ChildProcess>(zktest::binaryPath("zk-presence-watch").string(),
                                                  args);
  }

  zktest::ChildProcess& process() { return *process_; }

 private:
  static constexpr const char* kOperatorToken = "wss-operator-token";
  std::unique_ptr<zktest::ChildProcess> process_;
  uint16_t httpPort_ = 0, subscribePort_ = 0;
};

// A client that must be refused: exits 1 having printed nothing on stdout, its reason on stderr.
void expectRefused(zktest::ChildProcess& watch, const std::string& what,
                   const std::string& reason) {
  std::optional<zktest::ExitStatus> status;
  if (!zktest::eventually([&] { return (status = watch.tryWait()).has_value(); }, 10s)) {
    ADD_FAILURE() << what << ": not refused\n" << watch.transcript();
    watch.kill();
    return;
  }
  watch.wait(5s);  // the rest of its output
  EXPECT_TRUE(status->exitedWith(1)) << what << ": " << status->describe() << "\n"
                                     << watch.transcript();
  EXPECT_TRUE(watch.stdoutLines().empty()) << what << ": " << watch.transcript();
  EXPECT_NE(watch.stderrText().find(reason), std::string::npos)
      << what << ": expected '" << reason << "' in\n"
      << watch.stderrText();
}

TEST(GatewayWssSubscribers, ASubscriberTrustingTheCaGetsItsSnapshotAndChangesOverWss) {
  fencing::testing::TempDir dir;
  WssGateway gateway(dir.path());
  EXPECT_TRUE(zktest::eventually(
      [&] {
        return gateway.process().stderrText().find("presence subscribers on wss://0.0.0.0:") !=
               std::string::npos;
      },
      5s))
      << gateway.process().transcript();
  gateway.letBobSee("acct-0");
  // By address and by DNS name, both in the certificate.
  auto byAddress = gateway.watch("wss", "127.0.0.1", "ca.pem");
  auto byName = gateway.watch("wss", "localhost", "ca.pem");
  for (auto* watch : {byAddress.get(), byName.get()}) {
    EXPECT_EQ(watch->waitForLine("SNAPSHOT ", 10s).rfind("SNAPSHOT acct-0 offline ", 0), 0u)
        << watch->transcript();
    watch->waitForLine("SNAPSHOT-END", 5s);
  }
  gateway.renew("acct-0");
  for (auto* watch : {byAddress.get(), byName.get()}) {
    EXPECT_EQ(watch->waitForLine("CHANGE ", 5s).rfind("CHANGE acct-0 online ", 0), 0u)
        << watch->transcript();
  }
  // The gateway stops: the close frame goes out over TLS, and the gateway exits.
  gateway.process().signal(SIGTERM);
  EXPECT_EQ(byAddress->waitForLine("CLOSED ", 5s).rfind("CLOSED 1001 ", 0), 0u)
      << byAddress->transcript();
  EXPECT_TRUE(gateway.process().wait(10s).exitedWith(0)) << gateway.process().transcript();
}

// The watch checks the gateway's certificate: signed by the CA it was given, naming the host it
// dialled. Each refused client really reaches the listener (the name checks happen after a chain
// that verifies; the control dials the same listener under a name the certificate holds).
TEST(GatewayWssSubscribers, ACertificateFromAnotherCaOrForAnotherNameIsRefusedByTheWatch) {
  fencing::testing::TempDir dir;
  WssGateway gateway(dir.path());
  gateway.letBobSee("acct-0");
  auto otherCa = gateway.watch("wss", "127.0.0.1", "other-ca.pem");
  expectRefused(*otherCa, "a CA that did not sign the gateway's certificate",
                "certificate verify failed");
  auto otherAddress = gateway.watch("wss", "127.0.0.2", "ca.pem");
  expectRefused(*otherAddress, "127.0.0.2, not in the certificate", "host name mismatch");

  // A DNS name that is not in the certificate: this machine's, when it resolves (to an address
  // of this machine, where the listener on 0.0.0.0 answers).
  const std::string hostName = boost::asio::ip::host_name();
  boost::asio::io_context io;
  boost::system::error_code unresolved;
  boost::asio::ip::tcp::resolver(io).resolve(hostName, "", unresolved);
  if (!unresolved && hostName != "localhost") {
    auto otherName = gateway.watch("wss", hostName, "ca.pem");
    expectRefused(*otherName, "host name " + hostName, "host name mismatch");
  } else {
    std::cerr << "[   NOTE   ] host name " << hostName << " does not resolve: not dialled\n";
  }

  auto control = gateway.watch("wss", "localhost", "ca.pem");
  EXPECT_EQ(control->waitForLine("SNAPSHOT ", 10s).rfind("SNAPSHOT acct-0 offline ", 0), 0u)
      << control->transcript();
}

TEST(GatewayWssSubscribers, APlainWebSocketClientGetsNothingFromTheWssListener) {
  fencing::testing::TempDir dir;
  WssGateway gateway(dir.path());
  gateway.letBobSee("acct-0");
  auto plain = gateway.watch("ws", "127.0.0.1", "");
  expectRefused(*plain, "ws:// to the wss:// listener", "no HTTP answer");
}

// Off loopback the subscriber listener needs TLS (the gateway's certificate) or an explicit
// insecure; viewer tokens are configured, so that is the only rule in the way.
TEST(GatewayWssSubscribers, PlainWebSocketOffLoopbackRefusesToStartUnlessInsecure) {
  fencing::testing::TempDir dir;
  std::ofstream(dir.path() / "viewers.json")
      << json{{"presence",
               {{"viewer_auth",
                 {{"keys", {{{"alg", "HS256"}, {"file", certFile("tokens/hs256.secret")}}}}}}}}}
             .dump();
  auto args = gatewayArgs(dir.path() / "data", "127.0.0.1:0");
  args.insert(args.end(), {"--subscribe-listen", "0.0.0.0:0", "--config",
                           (dir.path() / "viewers.json").string()});
  zktest::ChildProcess refused(zktest::binaryPath("fencing-gateway").string(), args);
  EXPECT_EQ(refused.wait(20s).code, 2) << refused.transcript();
  EXPECT_NE(refused.stderrText().find("presence.subscribe_listen (--subscribe-listen): is 0.0.0.0: "
                                      "without tls.cert (--tls-cert)"),
            std::string::npos)
      << refused.transcript();

  args.push_back("--insecure");
  zktest::ChildProcess insecure(zktest::binaryPath("fencing-gateway").string(), args);
  insecure.waitForLine("SUBSCRIBE-LISTENING 0.0.0.0:", 20s);
  EXPECT_TRUE(zktest::eventually(
      [&] {
        return insecure.stderrText().find("presence subscribers on ws://0.0.0.0:") !=
                   std::string::npos &&
               insecure.stderrText().find("insecure: subscribers on plain WebSocket") !=
                   std::string::npos;
      },
      5s))
      << insecure.transcript();
}

TEST(GatewayWssSubscribers, TheWatchNeedsAReadableCaForWssAndNoneForWs) {
  const std::vector<std::tuple<std::vector<std::string>, std::string>> cases = {
      {{"--gateway", "wss://127.0.0.1:9"}, "--ca: required with a wss:// gateway"},
      {{"--gateway", "wss://127.0.0.1:9", "--ca", "/nope/ca.pem"},
       "--ca: cannot read /nope/ca.pem"},
      {{"--gateway", "wss://127.0.0.1:9", "--ca", certFile("tokens/hs256.secret")}, "--ca: "},
      {{"--gateway", "ws://127.0.0.1:9", "--ca", certFile("ca.pem")},
       "--ca: only with a wss:// gateway"},
      {{"--gateway", "https://127.0.0.1:9"}, "--gateway: expected ws://HOST:PORT or wss://"},
  };
  for (auto [args, expected] : cases) {
    args.insert(args.end(), {"--viewer", "bob", "--targets", "acct-0"});
    zktest::ChildProcess watch(zktest::binaryPath("zk-presence-watch").string(), args);
    EXPECT_EQ(watch.wait(10s).code, 2) << watch.transcript();
    EXPECT_NE(watch.stderrText().find("zk-presence-watch: " + expected), std::string::npos)
        << watch.transcript();
  }
}

}  // namespace
