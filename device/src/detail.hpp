// What the client's sources share: ws:// and wss:// URLs as the device protocol uses them (agent
// endpoints "ws://host:port", a "/" may end it; redirect targets
// "wss://host:port/v1/devices?account=A&..."), the small random generator behind every jitter, the
// protocol's text (wire.cpp) and the process's TLS contexts (tls_contexts.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace boost::asio::ssl {
class context;
}

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

// wire.cpp. `{"type":"ping","seq":N}` into `out`, reusing its capacity (a heartbeat allocates
// nothing once the buffer has grown).
void pingFrame(std::string& out, std::uint64_t seq);
// Exactly `{"type":"pong","seq":N}` (what the agent sends) -> N, without building a DOM; anything
// else -> nullopt for the full parser.
std::optional<std::uint64_t> exactPong(std::string_view text);
// The one-line reason of an agent's refusal body {"error": "..."}: the text, or the body itself
// (cut to one line of at most 200 bytes) when it is not that JSON.
std::string refusalReason(const std::string& body);

// tls_contexts.cpp. One context per CA file for every client of the process (a simulator runs
// thousands): the CA is parsed once, and each connection's SSL object shares it. Throws
// std::invalid_argument naming the file when it cannot be loaded.
std::shared_ptr<boost::asio::ssl::context> sharedTlsContext(const std::string& caFile);

}  // namespace zkagent::device
