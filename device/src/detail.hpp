// What the client's sources share: ws:// and wss:// URLs as the device protocol uses them (agent
// endpoints "ws://host:port", a "/" may end it; redirect targets
// "wss://host:port/v1/devices?account=A&..."), and the small random generator behind every jitter.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace zkagent::device {

struct WsUrl {
  std::string host;  // a name, an IPv4 address, or an IPv6 address without brackets
  std::uint16_t port = 0;
  std::string target;  // path and query; empty for an endpoint
  bool tls = false;    // wss://

  // "ws://host:port" or "wss://host:port", IPv6 hosts in brackets.
  std::string endpoint() const;
  // The Host header value: host:port, IPv6 hosts in brackets.
  std::string hostHeader() const;
  bool sameEndpoint(const WsUrl& other) const {
    return host == other.host && port == other.port && tls == other.tls;
  }
};

// An endpoint when `allowTarget` is false (a lone "/" is dropped), else a URL whose target, when
// present, starts with '/'. nullopt when it is not ws://host:port[...] or wss://host:port[...].
std::optional<WsUrl> parseWsUrl(std::string_view url, bool allowTarget);

// Uniform in [0, 1) from splitmix64: 8 bytes of state per device, good enough for jitter.
double unitRandom(std::uint64_t& state);

}  // namespace zkagent::device
