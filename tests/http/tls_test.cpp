// TLS between our server and client, with client certificates from scripts/make-test-certs.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <thread>

#include "zkagent/http.hpp"
#include "zktest/test_certs.hpp"

using namespace zkagent::http;

namespace {

std::filesystem::path cert(const std::string& name) { return zktest::testCertificates() / name; }

ServerTls gatewayTls() {
  return {.cert = cert("gateway.pem"), .key = cert("gateway.key"), .clientCa = cert("ca.pem")};
}

ClientTls agentTls(const std::string& name) {
  return {.ca = cert("ca.pem"), .cert = cert(name + ".pem"), .key = cert(name + ".key")};
}

// Answers GET /whoami with the peer's names, one a line.
Router whoamiRouter() {
  Router router;
  router.add(Method::Get, "/whoami", [](const Request& request) {
    std::string names;
    for (const auto& name : request.peerIdentities) names += name + "\n";
    return Response::text(200, names);
  });
  return router;
}

// Refused by TLS for `reason` (OpenSSL's words for the alert the server sent or the verify error
// the client found): not merely "some transport error", so a listener that is down ("cannot
// connect") or one that answers in plain HTTP does not pass for a refusal.
::testing::AssertionResult refusedByTls(const ClientResponse& response, const std::string& reason) {
  if (response.delivered()) {
    return ::testing::AssertionFailure() << "answered " << response.status << ": " << response.body;
  }
  if (response.transportError.find(reason) == std::string::npos) {
    return ::testing::AssertionFailure()
           << "expected a TLS refusal naming '" << reason << "', got: " << response.transportError;
  }
  return ::testing::AssertionSuccess() << response.transportError;
}

class TlsServer {
 public:
  explicit TlsServer(ServerTls tls, std::string address = "127.0.0.1")
      : server_(io_, {.address = std::move(address), .tls = std::move(tls)}, whoamiRouter()) {
    server_.start();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~TlsServer() {
    server_.stop();
    thread_.join();
  }
  ClientResponse get(std::optional<ClientTls> tls, std::string host = "127.0.0.1") {
    Client client({.host = std::move(host), .port = server_.port(), .tls = std::move(tls)});
    return client.get("/whoami");
  }

 private:
  boost::asio::io_context io_;
  Server server_;
  std::thread thread_;
};

TEST(HttpTls, HandlersSeeTheVerifiedClientCertificatesNames) {
  TlsServer server(gatewayTls());
  auto response = server.get(agentTls("agent-a"));
  ASSERT_TRUE(response.delivered()) << response.transportError;
  EXPECT_EQ(response.body, "agent-a\nzkagent:instance:agent-a\n");
}

TEST(HttpTls, TheClientChecksTheServersNameAsDnsNameOrAddress) {
  TlsServer server(gatewayTls());
  EXPECT_TRUE(server.get(agentTls("agent-a"), "localhost").delivered());
  // 127.0.0.2 reaches the same listener (on every address: on 127.0.0.1 alone, the old version
  // of this test was refused a connection and passed for it) but is not in the certificate.
  TlsServer wide({.cert = cert("gateway.pem"), .key = cert("gateway.key")}, "0.0.0.0");
  const auto control = wide.get(ClientTls{.ca = cert("ca.pem")}, "127.0.0.1");
  ASSERT_TRUE(control.delivered()) << control.transportError;
  auto response = wide.get(ClientTls{.ca = cert("ca.pem")}, "127.0.0.2");
  EXPECT_TRUE(refusedByTls(response, "TLS handshake with 127.0.0.2:"));
  EXPECT_TRUE(refusedByTls(response, "certificate verify failed"));
}

TEST(HttpTls, AClientWithoutACertificateIsRefusedWhenOneIsRequired) {
  TlsServer server(gatewayTls());
  auto response = server.get(ClientTls{.ca = cert("ca.pem")});
  EXPECT_TRUE(refusedByTls(response, "alert certificate required"));
  EXPECT_EQ(response.status, 0);
}

TEST(HttpTls, ACertificateFromAnotherCaIsRefused) {
  TlsServer server(gatewayTls());
  auto response = server.get(agentTls("stranger"));
  EXPECT_TRUE(refusedByTls(response, "alert unknown ca"));
}

TEST(HttpTls, AnExpiredCertificateIsRefused) {
  TlsServer server(gatewayTls());
  auto response = server.get(agentTls("expired"));
  EXPECT_TRUE(refusedByTls(response, "alert certificate expired"));
}

TEST(HttpTls, APlainHttpClientGetsNoAnswerFromATlsListener) {
  TlsServer server(gatewayTls());
  auto response = server.get(std::nullopt);
  EXPECT_FALSE(response.delivered());
  // Connected, then closed without an answer ("end of stream", or a reset): not "cannot connect".
  EXPECT_TRUE(response.transportError.starts_with("exchange with 127.0.0.1:"))
      << response.transportError;
}

TEST(HttpTls, AClientThatDoesNotTrustTheServersCaRefusesIt) {
  TlsServer server(gatewayTls());
  auto response = server.get(ClientTls{
      .ca = cert("other-ca.pem"), .cert = cert("agent-a.pem"), .key = cert("agent-a.key")});
  EXPECT_TRUE(refusedByTls(response, "TLS handshake with 127.0.0.1:"));
  EXPECT_TRUE(refusedByTls(response, "certificate verify failed"));
}

TEST(HttpTls, OptionalClientCertificatesLeaveAnonymousClientsWithoutIdentity) {
  auto tls = gatewayTls();
  tls.requireClientCert = false;
  TlsServer server(tls);
  auto anonymous = server.get(ClientTls{.ca = cert("ca.pem")});
  ASSERT_TRUE(anonymous.delivered()) << anonymous.transportError;
  EXPECT_EQ(anonymous.body, "");
  EXPECT_EQ(server.get(agentTls("agent-b")).body, "agent-b\nzkagent:instance:agent-b\n");
}

TEST(HttpTls, UnreadableFilesAreNamedInTheError) {
  boost::asio::io_context io;
  ServerTls tls = gatewayTls();
  tls.key = "/nonexistent/gateway.key";
  try {
    Server server(io, {.tls = tls}, Router());
    FAIL() << "no error";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent/gateway.key"), std::string::npos);
  }
  EXPECT_THROW(Client({.tls = ClientTls{.ca = "/nonexistent/ca.pem"}}), std::invalid_argument);
}

}  // namespace
