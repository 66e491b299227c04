// The device upgrade's query string and the URL an in-band redirect names, without sockets (so
// that they can be unit-tested, and config.cpp can share the limits without Beast). The wire
// rules are docs/device-protocol.md's.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "zkagent/http/query.hpp"

namespace zkagent::agent::detail {

using http::forEachParameter;
using http::percentDecode;

// A close frame's payload is at most 125 bytes (RFC 6455 5.5), 2 of them the code.
inline constexpr std::size_t kMaxCloseReason = 123;
// presence.advertise (or its default ws://{listen host}:{port}) is at most this long, so that a
// 4001 reason keeps kMaxCloseReason - kMaxAdvertiseBytes = 63 bytes for the path and query.
inline constexpr std::size_t kMaxAdvertiseBytes = 60;
// The query parameter (and its one value) by which a device asks for the in-band redirect.
inline constexpr std::string_view kRedirectParameter = "redirect";
inline constexpr std::string_view kRedirectInBand = "close";
// The credential a browser sends in the query (it cannot set headers). The in-band 4001 reason
// drops it (a close reason is short and ends up in client logs); a 307 Location keeps the whole
// query, so that a client that follows it keeps its credential.
inline constexpr std::string_view kTokenParameter = "token";

// The reason of the 4001 close that redirects a device in band: `leader` (ws://host:port) with
// the request's path and query minus `token`, so the device keeps its parameters and no
// credential is echoed; `leader` alone when that is over kMaxCloseReason (the device then adds
// its own path and query, as after a leader-moved close). nullopt when `leader` itself does not
// fit (an agent whose advertise was not checked at config time).
std::optional<std::string> inBandRedirectReason(std::string_view leader, std::string_view target);

}  // namespace zkagent::agent::detail
