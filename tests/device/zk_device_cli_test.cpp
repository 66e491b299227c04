// The zk-device executable: argument errors, its event lines, SIGTERM and the simulation mode.
#include <gtest/gtest.h>

#include <csignal>

#include "fake_agent.hpp"
#include "zktest/child_process.hpp"
#include "zktest/deadline.hpp"

namespace zkagent::device::testing {
namespace {

using namespace std::chrono_literals;

zktest::ExitStatus runExpectingFailure(const std::vector<std::string>& args,
                                       std::string& stderrText) {
  zktest::ChildProcess process(zktest::binaryPath("zk-device").string(), args);
  const auto status = process.wait(10s);
  stderrText = process.stderrText();
  return status;
}

TEST(ZkDeviceCli, BadArgumentsExitTwoNamingTheArgument) {
  const std::string url = "ws://127.0.0.1:1";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--account", "a", "--device", "d"}, "--connect: missing"},
      {{"--connect", url, "--device", "d"}, "--account: missing"},
      {{"--connect", url, "--account", "a"}, "--device: missing"},
      {{"--connect", "http://x:1", "--account", "a", "--device", "d"}, "--connect: "},
      {{"--connect", url + ",", "--account", "a", "--device", "d"}, "--connect: "},
      {{"--connect", url, "--account", "a/b", "--device", "d"}, "--account: "},
      {{"--connect", url, "--account", "a", "--device", "d", "--heartbeat-ms", "abc"},
       "--heartbeat-ms: "},
      {{"--connect", url, "--account", "a", "--device", "d", "--heartbeat-ms", "100",
        "--timeout-ms", "150"},
       "--timeout-ms: "},
      {{"--connect", url, "--account", "a", "--device", "d", "--devices", "0"}, "--devices: "},
      {{"--connect", url, "--device", "d", "--devices", "3"}, "--accounts: missing"},
      {{"--connect", url, "--accounts", "a,b", "--device", "d"}, "--accounts: needs --devices"},
      {{"--connect", url, "--device", "d", "--devices", "2", "--accounts-file", "/nonexistent"},
       "--accounts-file: "},
      {{"--connect", url, "--device", "d", "--devices", "2", "--accounts", "a",
        "--source-addresses", "x"},
       "--source-addresses: "},
      {{"--connect", url, "--account", "a", "--device", "d", "--bogus", "1"},
       "--bogus: unknown option"},
      {{"--connect", url, "--account", "a", "--device", "d", "--timeout-ms"},
       "--timeout-ms: missing value"},
  };
  for (const auto& [args, expected] : cases) {
    std::string stderrText;
    const auto status = runExpectingFailure(args, stderrText);
    EXPECT_TRUE(status.exitedWith(2)) << expected << ": " << status.describe();
    EXPECT_NE(stderrText.find("zk-device: " + expected), std::string::npos)
        << "expected \"" << expected << "\" in: " << stderrText;
  }
}

TEST(ZkDeviceCli, HelpExitsZero) {
  zktest::ChildProcess process(zktest::binaryPath("zk-device").string(), {"--help"});
  EXPECT_EQ(process.readLine(10s).rfind("usage: zk-device", 0), 0u);
  EXPECT_TRUE(process.wait(10s).exitedWith(0));
}

TEST(ZkDeviceCli, PrintsEventLinesAndClosesNormallyOnSigterm) {
  FakeAgent follower("agent-a", 3);
  FakeAgent leader("agent-b", 7);
  const std::string location = leader.endpoint() + "/v1/devices?account=acme&device=phone-1";
  follower.redirect(location);
  zktest::ChildProcess process(zktest::binaryPath("zk-device").string(),
                               {"--connect", follower.endpoint(), "--account", "acme", "--device",
                                "phone-1", "--heartbeat-ms", "100"});
  const auto redirected = process.waitForLine("REDIRECTED ", 10s);
  EXPECT_EQ(redirected.rfind("REDIRECTED acme phone-1 " + location + " ", 0), 0u) << redirected;
  const auto connected = process.waitForLine("CONNECTED ", 10s);
  EXPECT_EQ(connected.rfind("CONNECTED acme phone-1 agent-b 7.1 ", 0), 0u) << connected;
  // The timestamp is unix nanoseconds: 19 digits for the next couple of centuries.
  EXPECT_EQ(connected.substr(connected.rfind(' ') + 1).size(), 19u) << connected;

  leader.closeAll(4002, "ping timeout");
  const auto disconnected = process.waitForLine("DISCONNECTED ", 10s);
  EXPECT_EQ(disconnected.rfind("DISCONNECTED acme phone-1 ping_timeout ", 0), 0u) << disconnected;
  process.waitForLine("CONNECTED ", 10s);

  process.signal(SIGTERM);
  EXPECT_TRUE(process.wait(10s).exitedWith(0));
  // Beast answers a close frame before it completes the read that records it: the device can have
  // exited before the fake agent's handler ran (here and below).
  EXPECT_TRUE(zktest::eventually([&] { return !leader.closeCodesFromDevices().empty(); }, 5s));
  EXPECT_EQ(leader.closeCodesFromDevices(), (std::vector<std::uint16_t>{1000}));
}

TEST(ZkDeviceCli, SimulatedDevicesSpreadOverAccountsAndReportStats) {
  FakeAgent agent;
  zktest::ChildProcess process(zktest::binaryPath("zk-device").string(),
                               {"--connect", agent.endpoint(), "--devices", "6", "--accounts",
                                "a,b,c", "--device", "sim", "--heartbeat-ms", "100", "--events"});
  for (int i = 0; i < 6; ++i) process.waitForLine("CONNECTED ", 10s);
  const auto stats = process.waitForLine(
      [](std::string_view line) {
        return line.rfind("STATS connected=6 ", 0) == 0 &&
               line.find("rtt_p50_ms=nan") == std::string_view::npos;
      },
      10s, "a STATS line with every device connected and RTT samples");
  EXPECT_NE(stats.find(" reconnects=0 "), std::string::npos) << stats;
  EXPECT_NE(stats.find(" rtt_p99_ms="), std::string::npos) << stats;
  auto targets = agent.targets();
  std::sort(targets.begin(), targets.end());
  EXPECT_EQ(targets,
            (std::vector<std::string>{
                "/v1/devices?account=a&device=sim-0", "/v1/devices?account=a&device=sim-3",
                "/v1/devices?account=b&device=sim-1", "/v1/devices?account=b&device=sim-4",
                "/v1/devices?account=c&device=sim-2", "/v1/devices?account=c&device=sim-5"}));
  process.signal(SIGTERM);
  EXPECT_TRUE(process.wait(10s).exitedWith(0));
  EXPECT_TRUE(zktest::eventually([&] { return agent.closeCodesFromDevices().size() >= 6; }, 5s));
  EXPECT_EQ(agent.closeCodesFromDevices(), std::vector<std::uint16_t>(6, 1000));
}

}  // namespace
}  // namespace zkagent::device::testing
