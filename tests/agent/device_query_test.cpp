// The URL a non-leader names when it redirects a device in band (redirect=close), without sockets.
#include "devices/device_query.hpp"

#include <gtest/gtest.h>

#include <string>

namespace {

using zkagent::agent::detail::inBandRedirectReason;
using zkagent::agent::detail::kMaxCloseReason;

TEST(InBandRedirectReason, TheLeadersEndpointWithThePathAndQueryTheDeviceSent) {
  EXPECT_EQ(
      inBandRedirectReason("ws://10.0.0.2:8471", "/v1/devices?account=a&device=d&redirect=close"),
      "ws://10.0.0.2:8471/v1/devices?account=a&device=d&redirect=close");
  // Parameters stay as sent (escapes, order, ones the agent does not read).
  EXPECT_EQ(
      inBandRedirectReason("ws://h:1", "/v1/devices?device=d%2Dx&app=7&account=a&redirect=close"),
      "ws://h:1/v1/devices?device=d%2Dx&app=7&account=a&redirect=close");
}

TEST(InBandRedirectReason, TheTokenIsNeverEchoedWhateverItsSpelling) {
  EXPECT_EQ(inBandRedirectReason("ws://h:1", "/v1/devices?token=eyJ.x.y&account=a&device=d"),
            "ws://h:1/v1/devices?account=a&device=d");
  EXPECT_EQ(inBandRedirectReason("ws://h:1", "/v1/devices?account=a&t%6Fken=s&device=d&token"),
            "ws://h:1/v1/devices?account=a&device=d");
  EXPECT_EQ(inBandRedirectReason("ws://h:1", "/v1/devices?token=s"), "ws://h:1/v1/devices");
}

TEST(InBandRedirectReason, OverACloseReasonTheEndpointAloneAndNothingWhenEvenThatDoesNotFit) {
  const std::string leader = "ws://" + std::string(50, 'h') + ":8471";  // 60 bytes
  const std::string path = "/v1/devices?account=a&device=";
  const std::string fits(kMaxCloseReason - leader.size() - path.size(), 'd');
  EXPECT_EQ(inBandRedirectReason(leader, path + fits), leader + path + fits);
  EXPECT_EQ(inBandRedirectReason(leader, path + fits + "d"), leader);
  const std::string longest = "ws://" + std::string(kMaxCloseReason - 10, 'h') + ":8471";
  ASSERT_EQ(longest.size(), kMaxCloseReason);
  EXPECT_EQ(inBandRedirectReason(longest, "/v1/devices?account=a&device=d"), longest);
  EXPECT_FALSE(inBandRedirectReason(longest + "1", "/v1/devices?account=a&device=d"));
}

}  // namespace
