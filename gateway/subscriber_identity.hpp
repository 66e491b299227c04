// Who a subscriber is, decided before its upgrade (docs/auth.md, docs/presence-runtime.md):
// privacy is applied for that identity, never for a claimed one.
//
// - presence.viewer_auth set: a token (Authorization: Bearer, or the `token` parameter for
//   browsers) with scope "viewer" makes its `sub` the viewer; a `viewer` parameter, if given, must
//   be the same (403 otherwise).
// - presence.service_auth set (its own keys, so that no viewer's token is ever a service's): a
//   token with scope "service" is a backend that subscribes for the viewer it names in `viewer`
//   (required).
// - Neither set: the viewer is the `viewer` parameter (required), as the agents' bearer token the
//   router checked allows; config keeps such a listener on loopback.
// A missing, malformed, forged, expired or wrong-scope token is a 401.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "presence_subscribers.hpp"
#include "zkagent/auth.hpp"
#include "zkagent/http.hpp"

namespace zkagent::gateway {

struct Config;

class SubscriberIdentity {
 public:
  explicit SubscriberIdentity(const Config& config);

  // Whether the subscriber's token decides (then the router must not ask for the agents' token).
  bool tokensRequired() const { return viewers_.has_value() || services_.has_value(); }

  // The subscription `request` may open, its viewer decided; or the refusal (400, 401, 403).
  std::variant<SubscribeRequest, http::Response> identify(const http::Request& request,
                                                          std::int64_t now) const;

 private:
  std::optional<auth::Verifier> viewers_;
  std::optional<auth::Verifier> services_;
};

}  // namespace zkagent::gateway
