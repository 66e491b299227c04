// The device endpoint over wss:// under a storm of TLS connects: the handshakes are worked through
// a bounded number at a time, and a connection that waited too long in line is closed unworked
// (issue 24: 3000 devices connecting at once on a loaded machine interleaved every handshake, so
// each finished only after its device had given up, and none connected for tens of seconds).
#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/ssl.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <memory>
#include <string>
#include <vector>

#include "device_endpoint_fixture.hpp"
#include "zktest/child_process.hpp"
#include "zktest/deadline.hpp"
#include "zktest/test_certs.hpp"

namespace {

using namespace std::chrono_literals;
using zktest::eventually;
using zktest::metricSample;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// A TLS client's first flight, as bytes: what a device sends before the agent's first TLS work.
std::string clientHello() {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> context(SSL_CTX_new(TLS_client_method()),
                                                            &SSL_CTX_free);
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(context.get()), &SSL_free);
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl.get(), in, out);  // owned by ssl now
  SSL_connect(ssl.get());           // wants to read the server's answer: the hello is in `out`
  char* data = nullptr;
  const long size = BIO_get_mem_data(out, &data);
  return std::string(data, static_cast<size_t>(size));
}

class DeviceTlsTest : public zktest::DeviceEndpointTest {
 protected:
  json tlsConfig(const std::string& id, const std::vector<std::string>& accounts) const {
    auto c = config(id, accounts);
    const auto certs = zktest::testCertificates();
    c["presence"]["tls"] = {{"cert", (certs / "gateway.pem").string()},
                            {"key", (certs / "gateway.key").string()}};
    return c;
  }
  static double tlsBusy(const Agent& agent) {
    return metricSample(agent.metrics(),
                        R"(zkagent_presence_refused_upgrades_total{reason="tls_busy"})")
        .value_or(0);
  }
};

// 150 clients send a ClientHello and nothing more, so each handshake holds its place for the
// whole hold (1 s): 32 start at once, 32 more a second later, and so on; those still in line
// after 2.5 s are closed without a handshake. A device that completes its handshake still gets in.
TEST_F(DeviceTlsTest, TlsHandshakesWaitInLineAndThoseThatWaitedTooLongAreClosedUnworked) {
  auto& a = startAgent(tlsConfig("host-a", {"acct-0"}));
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s)) << a.status().dump();
  ASSERT_EQ(a.deviceUrl.rfind("wss://", 0), 0u) << a.deviceUrl;

  const std::string hello = clientHello();
  ASSERT_FALSE(hello.empty());
  asio::io_context io;
  std::vector<tcp::socket> stalled;
  for (int i = 0; i < 150; ++i) {
    stalled.emplace_back(io);
    stalled.back().connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), a.devicePort));
    asio::write(stalled.back(), asio::buffer(hello));
  }
  EXPECT_TRUE(eventually([&] { return tlsBusy(a) > 0; }, 20s)) << a.metrics();

  zktest::ChildProcess device(
      zktest::binaryPath("zk-device").string(),
      {"--connect", a.deviceUrl, "--ca", (zktest::testCertificates() / "ca.pem").string(),
       "--account", "acct-0", "--device", "phone", "--heartbeat-ms", "1000"});
  const auto connected = device.waitForLine("CONNECTED ", 20s);
  EXPECT_EQ(connected.rfind("CONNECTED acct-0 phone host-a ", 0), 0u) << connected;
}

}  // namespace
