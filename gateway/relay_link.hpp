// One gateway-to-gateway WebSocket: a relay's subscription at another gateway's subscriber
// listener (docs/gateway-cluster.md "Relayed subscriptions"), ws:// or wss:// (the owner's
// certificate checked against the cluster's CA and the host dialled, as every client of the
// project checks it: zkagent/http/tls.hpp). The frames are the subscriber protocol's
// (docs/presence-runtime.md "Subscribers"); this file only carries them: what they mean is
// presence_relay.cpp's.
//
// Every handler runs on the executor given (the presence model's strand); send() and close() are
// called there too.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace boost::asio::ssl {
class context;
}

namespace zkagent::gateway {

// An owner's subscriber listener as its shard node names it.
struct RelayEndpoint {
  std::string host;
  std::uint16_t port = 0;
  bool tls = false;  // wss://
};

// "ws://HOST:PORT" or "wss://HOST:PORT" (at most a trailing '/'); nullopt for anything else.
std::optional<RelayEndpoint> parseRelayUrl(std::string_view url);

class RelayLink {
 public:
  // Why a link ended. `status`: the owner's HTTP answer when it refused the upgrade (400, 401,
  // 403, 503, ...), 0 when there was none (unreachable, TLS, the stream closed or failed).
  struct End {
    int status = 0;
    std::string why;
  };
  struct Handlers {
    std::function<void(std::string_view text)> message;  // each text frame from the owner
    std::function<void(const End&)> ended;               // once; never after close()
  };
  struct Request {
    std::string target;         // path and query of the upgrade
    std::string authorization;  // the Authorization header's value; empty: none sent
  };

  // Resolves, connects, (TLS), upgrades, then reads until the owner closes. `tls` must outlive
  // the link; required for a wss:// endpoint (else the link ends at once, saying so).
  static std::shared_ptr<RelayLink> open(boost::asio::any_io_executor executor,
                                         const RelayEndpoint& endpoint,
                                         boost::asio::ssl::context* tls, Request request,
                                         Handlers handlers);

  virtual ~RelayLink() = default;
  // Queued until the upgrade is answered, then written in order.
  virtual void send(std::string text) = 0;
  // A close frame when the stream is open and idle, else the socket is cut; no handler runs after.
  virtual void close() = 0;
};

}  // namespace zkagent::gateway
