// Which agent a request comes from. With TLS client certificates on (Config::tls), an agent may
// act only as the instance its certificate names: the certificate's subject CN, one of its DNS
// names, or a URI name `zkagent:instance:ID` (what scripts/make-test-certs issues). Operations
// (POST /v1/ops) and lease writes (POST /v1/presence/leases) for another instance get 403.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zkagent/http.hpp"

namespace zkagent::gateway {

struct Config;

// Whether a certificate with these names (http::Request::peerIdentities) may act as `instanceId`.
bool certificateNames(const std::vector<std::string>& peerIdentities, std::string_view instanceId);

// Every top-level "instanceId" string of a JSON object body, in order (duplicate keys included, so
// that a second key cannot smuggle in another instance); empty when there is none or the body is
// not JSON (the body's own parser reports that).
std::vector<std::string> topLevelInstanceIds(std::string_view body);

// The 403 for a request acting as instances its certificate does not name; nullopt when allowed
// or when the gateway does not check client certificates.
std::optional<http::Response> refuseForeignInstance(const Config& config,
                                                    const http::Request& request,
                                                    const std::vector<std::string>& instanceIds);

}  // namespace zkagent::gateway
