// The fencing-gateway process over TLS with client certificates from scripts/make-test-certs:
// who may connect, as which instance, and when plain HTTP is allowed at all.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "temp_dir.hpp"
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

TEST(GatewayTlsProcess, NoForeignOrExpiredCertificateIsServed) {
  fencing::testing::TempDir dir;
  TlsGateway gateway(dir.path());
  for (std::string certificate : {"", "stranger", "expired"}) {
    auto response = gateway.submit(certificate, "agent-a", "op-" + certificate);
    EXPECT_FALSE(response.delivered())
        << "certificate '" << certificate << "' got " << response.status;
  }
  // Plain HTTP to the TLS port gets no answer either.
  http::Client plain({.port = gateway.port()});
  EXPECT_FALSE(plain.get("/healthz").delivered());
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

}  // namespace
