// The device protocol's text as the client writes and reads it: ping frames, the fast path for
// pongs, the welcome frame's fields, and the one-line reason of a refused upgrade
// (docs/device-protocol.md).
#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>

#include "detail.hpp"

namespace zkagent::device {

void pingFrame(std::string& out, std::uint64_t seq) {
  constexpr std::string_view head = R"({"type":"ping","seq":)";
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof digits, seq).ptr;
  out.assign(head);
  out.append(digits, end);
  out.push_back('}');
}

std::optional<std::uint64_t> exactPong(std::string_view text) {
  constexpr std::string_view head = R"({"type":"pong","seq":)";
  if (text.size() < head.size() + 2 || !text.starts_with(head) || text.back() != '}')
    return std::nullopt;
  const auto digits = text.substr(head.size(), text.size() - head.size() - 1);
  if (digits.size() > 1 && digits.front() == '0') return std::nullopt;
  std::uint64_t seq = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), seq);
  if (error != std::errc{} || end != digits.data() + digits.size()) return std::nullopt;
  return seq;
}

std::optional<ConnectedInfo> parseWelcome(const nlohmann::json& frame) {
  const auto agent = frame.find("agent");
  const auto token = frame.find("token");
  const auto counter = frame.find("counter");
  if (agent == frame.end() || !agent->is_string() || token == frame.end() ||
      !token->is_number_unsigned() || counter == frame.end() || !counter->is_number_unsigned())
    return std::nullopt;
  ConnectedInfo info;
  info.agent = agent->get<std::string>();
  info.token = token->get<std::uint64_t>();
  info.counter = counter->get<std::uint64_t>();
  const auto millis = [&frame](const char* key) {
    const auto it = frame.find(key);
    return Millis{it != frame.end() && it->is_number_unsigned() ? it->get<Millis::rep>() : 0};
  };
  info.agentHeartbeat = millis("heartbeat_ms");
  info.agentTimeout = millis("timeout_ms");
  return info;
}

std::string refusalReason(const std::string& body) {
  const auto parsed = nlohmann::json::parse(body, nullptr, false);
  if (parsed.is_object()) {
    const auto error = parsed.find("error");
    if (error != parsed.end() && error->is_string()) return error->get<std::string>();
  }
  std::string line = body.substr(0, std::min<std::size_t>(body.find('\n'), 200));
  return line.empty() ? "no reason given" : line;
}

}  // namespace zkagent::device
