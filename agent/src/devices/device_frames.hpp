// The device WebSocket's text frames as the agent reads them, without sockets (so that they can
// be unit-tested and fuzzed). A device sends one kind of frame: `{"type":"ping","seq":N}`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace zkagent::agent::detail {

// Exactly `{"type":"ping","seq":N}` (what every device sends), N a JSON unsigned integer that
// fits 64 bits -> N; anything else, valid or not, -> nullopt for the full parser to judge. A
// heartbeat costs no allocation or DOM this way.
std::optional<uint64_t> exactPing(std::string_view text);

// `{"type":"ping","seq":N}` -> N; anything else -> why it is a bad frame.
std::variant<uint64_t, std::string> parsePing(std::string_view text);

}  // namespace zkagent::agent::detail
