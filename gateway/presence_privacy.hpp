// A privacy rule set's wire form: the body of PUT /v1/presence/privacy/{account} and the JSON
// the gateway answers and stores (presence_disk.hpp keeps it on disk).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "zkagent/presence/privacy.hpp"

namespace zkagent::gateway {

// Most contacts or blocked viewers one account may list (a PUT body stays well under 1 MiB).
inline constexpr std::size_t kMaxPrivacyList = 10000;

// Parses a PUT /v1/presence/privacy/{account} body:
// {"granularity": "exact|coarse|hidden", "contacts": [ids], "blocked": [ids]}; contacts and
// blocked may be left out (empty). Throws fencing::BadRequest whose message starts with the field.
presence::TargetPrivacy parsePrivacyBody(std::string_view body);
// The same JSON, lists sorted; `account` included when not empty.
std::string privacyJson(const presence::TargetPrivacy& rules, std::string_view account = {});

}  // namespace zkagent::gateway
