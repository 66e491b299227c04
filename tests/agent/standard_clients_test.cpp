// Clients nobody here wrote, against a real agent pair (ZooKeeper, a fencing-gateway, two zk-agent
// processes with device tokens): Python's `websockets` as a device pointed at the agent that does
// not lead, following the 307 as any HTTP client does; and device/js/zkdevice.js in a real
// headless Chromium on the browser's own WebSocket, pointed at the same agent with the in-band
// redirect (a browser cannot follow a 307 on a WebSocket). Each must end up heartbeating with the
// leader with its lease at the gateway, then follow the leader when it is stopped; over ws:// and
// over wss:// (the agents' certificate names localhost; Python checks it against the test CA).
#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <vector>

#include "device_auth_fixture.hpp"
#include "zktest/child_process.hpp"
#include "zktest/deadline.hpp"
#include "zktest/test_certs.hpp"

namespace {

using namespace std::chrono_literals;
using zktest::ChildProcess;
using zktest::eventually;

class StandardClientsTest : public zktest::DeviceAuthTest {
 protected:
  // The agents' device endpoints on wss://localhost:PORT, with a certificate for localhost alone.
  static nlohmann::json overTls(nlohmann::json config) {
    const auto certs = zktest::testCertificates();
    config["presence"]["listen"] = "localhost:0";
    config["presence"]["tls"] = {{"cert", (certs / "localhost-only.pem").string()},
                                 {"key", (certs / "localhost-only.key").string()}};
    return config;
  }
  static std::string certificate(const std::string& name) {
    return (zktest::testCertificates() / name).string();
  }
  static std::string script(const std::string& name) {
    return std::string(ZKAGENT_TEST_SOURCE_DIR) + "/standard_clients/" + name;
  }

  // Starts `scriptName` (with `flags` first) as a device of acct-0 aimed at the agent that does
  // not lead, checks it ends up with the leader, stops the leader and checks it follows the
  // successor.
  void followTheLeader(const std::string& scriptName, std::chrono::milliseconds startup,
                       bool tls = false, std::vector<std::string> flags = {}) {
    auto agentConfig = [&](const std::string& id) {
      auto c = config(id, {"acct-0"});
      return tls ? overTls(std::move(c)) : c;
    };
    auto& a = addAgent(agentConfig("host-a"));
    ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s));
    auto& b = addAgent(agentConfig("host-b"));
    ASSERT_FALSE(b.leads("acct-0"));
    ASSERT_EQ(b.deviceUrl.rfind(tls ? "wss://localhost:" : "ws://", 0), 0u) << b.deviceUrl;

    flags.insert(flags.begin(), script(scriptName));
    flags.insert(flags.end(), {b.deviceUrl, "acct-0", "phone", zktest::mint({})});
    ChildProcess device("/usr/bin/python3", flags);
    const auto first = device.waitForLine("CONNECTED ", startup);
    EXPECT_EQ(first.rfind("CONNECTED host-a ", 0), 0u) << first << device.transcript();
    device.waitForLine("HEARTBEAT host-a", 10s);
    EXPECT_TRUE(eventually([&] { return leaseHolder() == "host-a"; }, 10s)) << lease("phone");

    a.process->signal(SIGTERM);
    const auto second = device.waitForLine("CONNECTED ", 20s);
    EXPECT_EQ(second.rfind("CONNECTED host-b ", 0), 0u) << second << device.transcript();
    device.waitForLine("HEARTBEAT host-b", 10s);
    EXPECT_TRUE(eventually([&] { return leaseHolder() == "host-b"; }, 10s)) << lease("phone");
    lines_ = device.stdoutLines();
    device.signal(SIGTERM);
    EXPECT_TRUE(device.wait(15s).exitedWith(0)) << device.transcript();
  }

  // The agent that holds phone's lease at the gateway; empty when it has none.
  std::string leaseHolder() const {
    const auto held = lease("phone");
    return held.is_null() ? std::string() : held["agent"].get<std::string>();
  }

  bool redirected() const {
    for (const auto& line : lines_) {
      if (line.rfind("REDIRECTED ", 0) == 0) return true;
    }
    return false;
  }

  std::vector<std::string> lines_;
};

TEST_F(StandardClientsTest, PythonWebsocketsFollowsThe307ToTheLeaderAndThenItsSuccessor) {
  followTheLeader("ws_device.py", 20s);
  // The library offered permessage-deflate at both agents; neither accepted an extension
  // (docs/device-protocol.md).
  std::vector<std::string> extensions;
  for (const auto& line : lines_) {
    if (line.rfind("EXTENSIONS ", 0) == 0) extensions.push_back(line);
  }
  EXPECT_EQ(extensions, (std::vector<std::string>(2, "EXTENSIONS permessage-deflate -")));
}

TEST_F(StandardClientsTest, ChromiumRunsTheJavaScriptClientThroughTheInBandRedirect) {
  followTheLeader("browser_device.py", 60s);
  EXPECT_TRUE(redirected()) << "the browser reached the leader without the in-band redirect";
}

TEST_F(StandardClientsTest, PythonWebsocketsOverWssChecksTheCertificateAndFollowsTheLeader) {
  followTheLeader("ws_device.py", 20s, true, {"--ca", certificate("ca.pem")});
}

// The same device with a CA the agents' certificate does not chain to: refused by the client, and
// nothing reaches the gateway.
TEST_F(StandardClientsTest, PythonWebsocketsOverWssRefusesACertificateOfAnotherCa) {
  auto& a = addAgent(overTls(config("host-a", {"acct-0"})));
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s));
  ChildProcess device("/usr/bin/python3",
                      {script("ws_device.py"), "--ca", certificate("other-ca.pem"), a.deviceUrl,
                       "acct-0", "phone", zktest::mint({})});
  const auto failed = device.waitForLine("FAILED ", 20s);
  EXPECT_EQ(failed, "FAILED SSLCertVerificationError unable_to_get_local_issuer_certificate")
      << device.transcript();
  EXPECT_TRUE(lease("phone").is_null());
  device.signal(SIGTERM);
  EXPECT_TRUE(device.wait(15s).exitedWith(0)) << device.transcript();
}

TEST_F(StandardClientsTest, ChromiumOverWssRunsTheJavaScriptClientThroughTheInBandRedirect) {
  followTheLeader("browser_device.py", 60s, true, {"--trust", certificate("localhost-only.pem")});
  EXPECT_TRUE(redirected()) << "the browser reached the leader without the in-band redirect";
}

}  // namespace
