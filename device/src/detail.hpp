// What the client's sources share: ws:// and wss:// URLs as the device protocol uses them (agent
// endpoints "ws://host:port", a "/" may end it; redirect targets
// "wss://host:port/v1/devices?account=A&..."), the small random generator behind every jitter, the
// protocol's text (wire.cpp) and the process's TLS contexts (tls_contexts.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zkagent/device.hpp"

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

// The order a device tries endpoints in (endpoint_round.cpp). A round is the preferred URL (a
// 4001's), when there is one, then every configured endpoint once, starting at the one after the
// endpoint of the last welcome: the agent a connection ended on is the least likely to lead now
// (it closed the device with 4001, or it is gone). A welcome from a redirect's target (no index)
// starts the next round at the first endpoint.
class EndpointRound {
 public:
  struct Attempt {
    WsUrl url;
    std::optional<std::size_t>
        endpoint;  // index among the configured endpoints; none when preferred
  };

  explicit EndpointRound(std::vector<WsUrl> endpoints);
  void begin();
  // The round's next attempt, or nullopt once every endpoint was tried.
  std::optional<Attempt> next();
  // Tried first in the next round (`begin`), once.
  void prefer(WsUrl url);
  // The current attempt left its endpoint for a redirect's target.
  void redirected();
  // The current attempt was welcomed: the next round starts after its endpoint.
  void welcomed();

 private:
  std::vector<WsUrl> endpoints_;
  std::optional<WsUrl> preferred_;
  std::size_t position_ = 0;
  std::size_t start_ = 0;
  std::optional<std::size_t> current_;
};

// Uniform in [0, 1) from splitmix64: 8 bytes of state per device, good enough for jitter.
double unitRandom(std::uint64_t& state);

// wire.cpp. `{"type":"ping","seq":N}` into `out`, reusing its capacity (a heartbeat allocates
// nothing once the buffer has grown).
void pingFrame(std::string& out, std::uint64_t seq);
// Exactly `{"type":"pong","seq":N}` (what the agent sends) -> N, without building a DOM; anything
// else -> nullopt for the full parser.
std::optional<std::uint64_t> exactPong(std::string_view text);
// A welcome frame's fields (`endpoint` left empty), or nullopt when agent, token or counter is
// missing or mistyped. heartbeat_ms and timeout_ms are 0 when absent.
std::optional<ConnectedInfo> parseWelcome(const nlohmann::json& frame);
// The one-line reason of an agent's refusal body {"error": "..."}: the text, or the body itself
// (cut to one line of at most 200 bytes) when it is not that JSON.
std::string refusalReason(const std::string& body);

// tls_contexts.cpp. One context per CA file for every client of the process (a simulator runs
// thousands): the CA is parsed once, and each connection's SSL object shares it. Throws
// std::invalid_argument naming the file when it cannot be loaded.
std::shared_ptr<boost::asio::ssl::context> sharedTlsContext(const std::string& caFile);

}  // namespace zkagent::device
