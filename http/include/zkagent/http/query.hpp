// The query string of a request target, as every listener reads it (the agent's device upgrade,
// the gateway's subscriber upgrade): '&'-separated parameters, %XX escapes and '+' for a space
// (application/x-www-form-urlencoded, which browsers' URLSearchParams writes). A malformed escape
// stays as it is; what a value may hold is the reader's rule, not this file's.
#pragma once

#include <string>
#include <string_view>

namespace zkagent::http {

// %XX and '+' decoded; a malformed escape stays as it is.
std::string percentDecode(std::string_view in);

// Calls visit(decodedKey, part) for every non-empty '&'-separated parameter of `query` in order,
// `part` being the parameter exactly as sent ("key=value" or "key").
template <class Visit>
void forEachParameter(std::string_view query, Visit&& visit) {
  while (!query.empty()) {
    const auto amp = query.find('&');
    const auto part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (part.empty()) continue;
    visit(percentDecode(part.substr(0, part.find('='))), part);
  }
}

// The decoded value of a parameter `part` ("key=value" -> "value", "key" -> "").
inline std::string parameterValue(std::string_view part) {
  const auto eq = part.find('=');
  return eq == std::string_view::npos ? std::string() : percentDecode(part.substr(eq + 1));
}

}  // namespace zkagent::http
