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

class TlsServer {
 public:
  explicit TlsServer(ServerTls tls) : server_(io_, {.tls = std::move(tls)}, whoamiRouter()) {
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
  // 127.0.0.2 reaches the same listener but is not in the certificate.
  TlsServer wide({.cert = cert("gateway.pem"), .key = cert("gateway.key")});
  auto response = wide.get(ClientTls{.ca = cert("ca.pem")}, "127.0.0.2");
  EXPECT_FALSE(response.delivered());
}

TEST(HttpTls, AClientWithoutACertificateIsRefusedWhenOneIsRequired) {
  TlsServer server(gatewayTls());
  auto response = server.get(ClientTls{.ca = cert("ca.pem")});
  EXPECT_FALSE(response.delivered());
  EXPECT_EQ(response.status, 0);
}

TEST(HttpTls, ACertificateFromAnotherCaIsRefused) {
  TlsServer server(gatewayTls());
  auto response = server.get(agentTls("stranger"));
  EXPECT_FALSE(response.delivered()) << response.body;
}

TEST(HttpTls, AnExpiredCertificateIsRefused) {
  TlsServer server(gatewayTls());
  auto response = server.get(agentTls("expired"));
  EXPECT_FALSE(response.delivered()) << response.body;
}

TEST(HttpTls, APlainHttpClientGetsNoAnswerFromATlsListener) {
  TlsServer server(gatewayTls());
  auto response = server.get(std::nullopt);
  EXPECT_FALSE(response.delivered());
}

TEST(HttpTls, AClientThatDoesNotTrustTheServersCaRefusesIt) {
  TlsServer server(gatewayTls());
  auto response = server.get(ClientTls{
      .ca = cert("other-ca.pem"), .cert = cert("agent-a.pem"), .key = cert("agent-a.key")});
  EXPECT_FALSE(response.delivered());
  EXPECT_NE(response.transportError.find("TLS handshake"), std::string::npos)
      << response.transportError;
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
