#include "subscriber_identity.hpp"

#include "gateway.hpp"
#include "zkagent/fencing.hpp"

namespace zkagent::gateway {
namespace {

http::Response unauthorized(std::string_view detail) {
  auto answer = http::Response::error(401, detail);
  answer.headers.emplace_back("WWW-Authenticate", R"(Bearer realm="zkagent-subscribers")");
  return answer;
}

}  // namespace

SubscriberIdentity::SubscriberIdentity(const Config& config) {
  if (config.viewerAuth) viewers_.emplace(*config.viewerAuth);
  if (config.serviceAuth) services_.emplace(*config.serviceAuth);
}

std::variant<SubscribeRequest, http::Response> SubscriberIdentity::identify(
    const http::Request& request, std::int64_t now) const {
  SubscribeRequest subscribe;
  try {
    subscribe = parseSubscribeQuery(request.query);
  } catch (const fencing::BadRequest& error) {
    return http::Response::error(400, error.what());
  }
  if (!tokensRequired()) {
    if (subscribe.token)
      return http::Response::error(400, "token: no subscriber tokens configured");
    if (subscribe.viewer.empty()) return http::Response::error(400, "viewer: missing");
    return subscribe;
  }
  std::string token;
  const auto header = request.header("authorization");
  if (header) {
    const auto bearer = auth::bearerToken(*header);
    if (!bearer) return unauthorized("token: the Authorization header must be 'Bearer <token>'");
    if (subscribe.token) return http::Response::error(400, "token: given in the header and query");
    token = std::string(*bearer);
  } else if (subscribe.token) {
    token = *subscribe.token;
  } else {
    return unauthorized("token: missing (Authorization: Bearer, or the token parameter)");
  }
  subscribe.token.reset();
  subscribe.credential = token;  // a relay presents it at the target's owner
  // A viewer's token first; a service's keys are tried only when it is not one.
  std::optional<auth::Refused> refused;
  if (viewers_) {
    auto verdict = viewers_->verify(token, "viewer", now);
    if (const auto* claims = std::get_if<auth::Claims>(&verdict)) {
      if (!subscribe.viewer.empty() && subscribe.viewer != claims->subject) {
        return http::Response::error(403, "viewer: the token is for another viewer");
      }
      subscribe.viewer = claims->subject;
      return subscribe;
    }
    refused = std::get<auth::Refused>(verdict);
  }
  if (services_) {
    auto verdict = services_->verify(token, "service", now);
    if (std::holds_alternative<auth::Claims>(verdict)) {
      if (subscribe.viewer.empty()) {
        return http::Response::error(400, "viewer: missing (a service subscribes for a viewer)");
      }
      return subscribe;
    }
    // The viewer keys' answer says more when those keys knew the token (an expired viewer).
    const auto& serviceRefusal = std::get<auth::Refused>(verdict);
    if (!refused || refused->failure == auth::Failure::unknown_key) refused = serviceRefusal;
  }
  return unauthorized(refused->detail);
}

}  // namespace zkagent::gateway
