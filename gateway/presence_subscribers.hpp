// The subscribers' side of presence at the gateway: a WebSocket listener of its own
// (presence.subscribe_listen) where a viewer subscribes to targets and gets a snapshot of those it
// may see, then their changes, trimmed by the targets' privacy rules. The wire protocol is in
// docs/presence-runtime.md ("Subscribers"). With the gateway's certificate (tls.cert, tls.key)
// the listener is wss://: TLS first, no client certificate asked for (a subscriber proves who it
// is with a token, subscriber_identity.hpp).
//
// Every session runs on the presence model's strand (PresenceStore::executor()), so the model's
// event sink writes into a session directly. Per session, changes are merged by target and sent
// at most once per coalesce interval; a session with more than subscriberQueue messages not yet
// written is closed with kResubscribeCode, so a slow reader costs the others nothing.
//
// In cluster mode a session shows a target only while this gateway owns its shard; the targets
// another gateway owns reach it through the session's relay (presence_relay.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zkagent/metrics.hpp"

namespace boost::asio {
class io_context;
}

namespace zkagent::gateway {

struct Config;
class PresenceStore;

// Close codes the gateway sends to subscribers.
inline constexpr std::uint16_t kResubscribeCode = 4008;  // too slow: subscribe again for a snapshot
inline constexpr std::uint16_t kGoingAwayCode = 1001;    // the gateway stops
// Targets one subscription may watch at once.
inline constexpr std::size_t kMaxSubscribeTargets = 10000;
// One message from a subscriber.
inline constexpr std::size_t kMaxSubscriberFrameBytes = 1024 * 1024;

struct SubscribeRequest {
  std::string viewer;  // the `viewer` parameter; empty when not given
  std::vector<std::string> targets;
  std::optional<std::string> token;  // the `token` parameter (browsers), never echoed
  // The `via` parameter: the gateway that relays this subscription (presence_relay.hpp); this
  // one then serves the targets it owns and relays nothing. Empty: a subscriber of its own.
  std::string via;
  // The token the subscriber proved itself with (header or parameter), set by
  // SubscriberIdentity: what a relay presents for it at another gateway. Never echoed or logged.
  std::string credential;
};

// The query of GET /v1/presence/subscribe: [viewer=V&]targets=a,b,c[&token=T][&via=G] (targets
// may be empty, added later). Whether the viewer may be left out is subscriber_identity.hpp's rule.
// Throws fencing::BadRequest naming the parameter (`targets: missing`,
// `targets[2]: must match ...`).
SubscribeRequest parseSubscribeQuery(std::string_view query);

// A subscriber's message: {"type": "add" | "remove", "targets": [ids]}.
struct SubscriberCommand {
  bool add = true;
  std::vector<std::string> targets;
};
// Throws fencing::BadRequest naming the field.
SubscriberCommand parseSubscriberCommand(std::string_view text);

class SubscriberEndpoint {
 public:
  // Binds and listens at once (so port() is known); throws std::system_error when it cannot, and
  // std::invalid_argument when the certificate or key cannot be loaded.
  SubscriberEndpoint(boost::asio::io_context& io, const Config& config, PresenceStore& store,
                     metrics::Registry& registry);
  ~SubscriberEndpoint();
  SubscriberEndpoint(const SubscriberEndpoint&) = delete;
  SubscriberEndpoint& operator=(const SubscriberEndpoint&) = delete;

  void start();
  // Stops accepting and closes every session (1001); io.run() can return afterwards.
  void stop();
  bool secure() const;  // wss://
  std::uint16_t port() const;
  std::string address() const;

  struct Core;  // the implementation's, shared with its sessions

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace zkagent::gateway
