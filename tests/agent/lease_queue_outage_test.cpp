// The agent's lease queue through a gateway outage, on real processes: a TcpProxy between the
// agent and the fencing-gateway blackholes the gateway while devices come and go; the queue stays
// bounded, and once the gateway answers again removals reach it before renewals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "device_endpoint_fixture.hpp"
#include "device_socket.hpp"
#include "zktest/deadline.hpp"
#include "zktest/metrics.hpp"
#include "zktest/tcp_proxy.hpp"

namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using std::chrono::milliseconds;
using zktest::Device;
using zktest::DeviceEndpointTest;
using zktest::devicePath;
using zktest::eventually;

// How long the lease-queue test blackholes the gateway (ZKAGENT_TEST_BLACKHOLE_MS; issue 21 asks
// for a minute, which a soak run can set).
milliseconds blackholeTime() {
  const char* text = std::getenv("ZKAGENT_TEST_BLACKHOLE_MS");
  return milliseconds(text ? std::stoi(text) : 3000);
}

// The POST /v1/presence/leases requests a TcpProxy passed to the gateway since record(), in the
// order they reached it: the renewals and removals each carried.
struct LeaseBatchSeen {
  size_t renew = 0, remove = 0;
};
std::vector<LeaseBatchSeen> leaseBatchesThrough(const zktest::TcpProxy& proxy) {
  std::vector<LeaseBatchSeen> batches;
  std::map<size_t, std::string> pending;  // per connection, bytes of a request not yet complete
  for (const auto& chunk : proxy.forwarded()) {
    auto& buffer = pending[chunk.connection];
    buffer += chunk.bytes;
    for (;;) {
      const auto headerEnd = buffer.find("\r\n\r\n");
      if (headerEnd == std::string::npos) break;
      std::string head = buffer.substr(0, headerEnd);
      std::transform(head.begin(), head.end(), head.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      size_t length = 0;
      if (auto at = head.find("\r\ncontent-length:"); at != std::string::npos) {
        length = std::stoul(head.substr(at + 17));
      }
      if (buffer.size() < headerEnd + 4 + length) break;
      if (head.starts_with("post /v1/presence/leases ")) {
        const auto body = json::parse(buffer.substr(headerEnd + 4, length));
        batches.push_back({body.value("renew", json::array()).size(),
                           body.value("remove", json::array()).size()});
      }
      buffer.erase(0, headerEnd + 4 + length);
    }
  }
  return batches;
}

// The gateway's lease TTL (6 s) outlives the first outage below, so a device that left during it
// leaves the gateway by its removal, not by expiry.
class LeaseQueueOutageTest : public DeviceEndpointTest {
 protected:
  LeaseQueueOutageTest()
      : DeviceEndpointTest({"--lease-ttl-ms", "6000", "--lease-sweep-ms", "100"}) {}
};

TEST_F(LeaseQueueOutageTest, AGatewayBlackholeLeavesTheLeaseQueueBoundedAndRemovalsGoFirstAfterIt) {
  zktest::TcpProxy proxy(gateway_->port());
  auto cfg = config("host-a", {"acct-0"});
  cfg["gateway"]["url"] = "http://" + proxy.connectString();
  cfg["gateway"]["request_timeout_ms"] = 300;
  cfg["presence"]["lease_ttl_ms"] = 6000;
  cfg["presence"]["max_batch_entries"] = 2;  // so the queue holds 100 x 2 entries
  constexpr double kQueueBound = 200;
  auto& a = startAgent(cfg);
  ASSERT_TRUE(eventually([&] { return a.leads("acct-0"); }, 15s));
  auto agentSample = [&](const std::string& series) {
    return zktest::metricSample(a.metrics(), series).value_or(-1);
  };
  auto gatewaySample = [&](const std::string& series) {
    return zktest::metricSample(gatewayClient_->get("/metrics").body, series).value_or(0);
  };
  auto connected = [&](const std::string& device) {
    auto d = std::make_unique<Device>();
    EXPECT_FALSE(d->connect(a.devicePort, devicePath("acct-0", device))) << device;
    EXPECT_TRUE(d->read()) << device << ": no welcome";
    return d;
  };

  // Ten devices stay connected throughout; forty leave during the first outage.
  std::vector<std::unique_ptr<Device>> staying, leaving;
  for (int i = 0; i < 10; ++i) staying.push_back(connected("stay-" + std::to_string(i)));
  for (int i = 0; i < 40; ++i) leaving.push_back(connected("leave-" + std::to_string(i)));
  ASSERT_TRUE(eventually([&] { return leases("acct-0").size() == 50; }, 5s))
      << leases("acct-0").size();

  // 1. After an outage the removals leave first, though renewals wait beside them.
  proxy.setMode(zktest::TcpProxy::Mode::blackhole);
  for (auto& device : leaving) device->close();
  ASSERT_TRUE(eventually(
      [&] {
        // 40 removals and the renewals of the ten that stay (a tick every 400 ms), less the
        // batch in flight; and one batch has failed already.
        return agentSample("zkagent_presence_lease_queued_entries") >= 48 &&
               agentSample("zkagent_presence_lease_batches_total{result=\"failed\"}") >= 1;
      },
      5s))
      << a.metrics();
  proxy.record();
  proxy.setMode(zktest::TcpProxy::Mode::pass);
  const std::string accepted =
      "zkagent_gateway_presence_lease_entries_total{op=\"remove\","
      "result=\"accepted\"}";
  ASSERT_TRUE(eventually([&] { return gatewaySample(accepted) == 40; }, 5s))
      << "the removals did not reach the gateway: " << gatewaySample(accepted);
  EXPECT_TRUE(eventually([&] { return leases("acct-0").size() == 10; }, 2s));
  const auto batches = leaseBatchesThrough(proxy);
  size_t removals = 0, firstRenewal = batches.size(), lastRemoval = 0;
  for (size_t i = 0; i < batches.size(); ++i) {
    removals += batches[i].remove;
    if (batches[i].renew > 0) firstRenewal = std::min(firstRenewal, i);
    if (batches[i].remove > 0) lastRemoval = i;
  }
  EXPECT_GE(removals, 40u);
  EXPECT_LT(firstRenewal, batches.size()) << "no renewal went out after the outage";
  EXPECT_LE(lastRemoval, firstRenewal)
      << "a renewal left before the removals: batch " << firstRenewal << " renewed, batch "
      << lastRemoval << " still removed (of " << batches.size() << ")";

  // 2. Devices coming and going through a longer outage: each leaves a removal (its own renewal
  // replaced), more than the queue holds. The queue stays at its bound, dropping renewals, then
  // removals, and counts them.
  const auto outage = blackholeTime();
  proxy.setMode(zktest::TcpProxy::Mode::blackhole);
  const auto outageEnds = std::chrono::steady_clock::now() + outage;
  for (int i = 0; i < 260; ++i) connected("brief-" + std::to_string(i))->close();
  double peak = 0;
  do {  // the outage lasts its time whatever the test does meanwhile
    peak = std::max(peak, agentSample("zkagent_presence_lease_queued_entries"));
    std::this_thread::sleep_for(100ms);
  } while (std::chrono::steady_clock::now() < outageEnds);
  EXPECT_LE(peak, kQueueBound);
  EXPECT_GE(peak, kQueueBound - 2) << "the queue never filled: the test proves nothing";
  // Awaited, not read once: a slow agent (a sanitizer build) can miss one /metrics request, which
  // reads as -1 here, though the counters only grow.
  EXPECT_TRUE(eventually(
      [&] {
        return agentSample("zkagent_presence_lease_dropped_total{kind=\"renew\"}") > 0 &&
               agentSample("zkagent_presence_lease_dropped_total{kind=\"remove\"}") > 0;
      },
      5s))
      << a.metrics();
  proxy.setMode(zktest::TcpProxy::Mode::pass);
  // Healed: the queue drains and the devices that stayed are renewed again.
  EXPECT_TRUE(
      eventually([&] { return agentSample("zkagent_presence_lease_queued_entries") <= 10; }, 10s))
      << a.metrics();
  EXPECT_TRUE(eventually(
      [&] {
        const auto l = leases("acct-0");
        for (int i = 0; i < 10; ++i) {
          if (!l.contains("stay-" + std::to_string(i))) return false;
        }
        return l.size() == 10;
      },
      5s))
      << leases("acct-0").dump();
}

}  // namespace
