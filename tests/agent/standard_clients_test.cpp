// Clients nobody here wrote, against a real agent pair (ZooKeeper, a fencing-gateway, two zk-agent
// processes with device tokens): Python's `websockets` as a device pointed at the agent that does
// not lead, following the 307 as any HTTP client does; and device/js/zkdevice.js in a real
// headless Chromium on the browser's own WebSocket, pointed at the same agent with the in-band
// redirect (a browser cannot follow a 307 on a WebSocket). Each must end up heartbeating with the
// leader with its lease at the gateway, then follow the leader when it is stopped.
#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <vector>

#include "device_auth_fixture.hpp"
#include "zktest/child_process.hpp"
#include "zktest/deadline.hpp"

namespace {

using namespace std::chrono_literals;
using zktest::ChildProcess;
using zktest::eventually;

class StandardClientsTest : public zktest::DeviceAuthTest {
 protected:
  // Starts `script` as a device of acct-0 aimed at the agent that does not lead, checks it ends
  // up with the leader, stops the leader and checks it follows the successor.
  void followTheLeader(const std::string& script, std::chrono::milliseconds startup) {
    auto& a = addAgent(config("host-a", {"acct-0"}));
    ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s));
    auto& b = addAgent(config("host-b", {"acct-0"}));
    ASSERT_FALSE(b.leads("acct-0"));

    ChildProcess device("/usr/bin/python3",
                        {std::string(ZKAGENT_TEST_SOURCE_DIR) + "/standard_clients/" + script,
                         b.deviceUrl, "acct-0", "phone", zktest::mint({})});
    const auto first = device.waitForLine("CONNECTED ", startup);
    EXPECT_EQ(first.rfind("CONNECTED host-a ", 0), 0u) << first << device.transcript();
    device.waitForLine("HEARTBEAT host-a", 10s);
    EXPECT_TRUE(eventually([&] { return leaseHolder() == "host-a"; }, 10s))
        << lease("phone");

    a.process->signal(SIGTERM);
    const auto second = device.waitForLine("CONNECTED ", 20s);
    EXPECT_EQ(second.rfind("CONNECTED host-b ", 0), 0u) << second << device.transcript();
    device.waitForLine("HEARTBEAT host-b", 10s);
    EXPECT_TRUE(eventually([&] { return leaseHolder() == "host-b"; }, 10s))
        << lease("phone");
    lines_ = device.stdoutLines();
    device.signal(SIGTERM);
    EXPECT_TRUE(device.wait(15s).exitedWith(0)) << device.transcript();
  }

  // The agent that holds phone's lease at the gateway; empty when it has none.
  std::string leaseHolder() const {
    const auto held = lease("phone");
    return held.is_null() ? std::string() : held["agent"].get<std::string>();
  }

  std::vector<std::string> lines_;
};

TEST_F(StandardClientsTest, PythonWebsocketsFollowsThe307ToTheLeaderAndThenItsSuccessor) {
  followTheLeader("ws_device.py", 20s);
}

TEST_F(StandardClientsTest, ChromiumRunsTheJavaScriptClientThroughTheInBandRedirect) {
  followTheLeader("browser_device.py", 60s);
  bool redirected = false;
  for (const auto& line : lines_) redirected = redirected || line.rfind("REDIRECTED ", 0) == 0;
  EXPECT_TRUE(redirected) << "the browser reached the leader without the in-band redirect";
}

}  // namespace
