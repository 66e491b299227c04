#include "device_frames.hpp"

#include <charconv>
#include <nlohmann/json.hpp>

namespace zkagent::agent::detail {

using nlohmann::json;

std::optional<uint64_t> exactPing(std::string_view text) {
  constexpr std::string_view head = R"({"type":"ping","seq":)";
  if (text.size() < head.size() + 2 || !text.starts_with(head) || text.back() != '}')
    return std::nullopt;
  const auto digits = text.substr(head.size(), text.size() - head.size() - 1);
  if (digits.size() > 1 && digits.front() == '0') return std::nullopt;  // not JSON: full parser
  uint64_t seq = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), seq);
  if (error != std::errc{} || end != digits.data() + digits.size()) return std::nullopt;
  return seq;
}

std::variant<uint64_t, std::string> parsePing(std::string_view text) {
  if (auto seq = exactPing(text)) return *seq;
  const auto frame = json::parse(text, nullptr, false);
  if (frame.is_discarded()) return std::string("not JSON");
  if (!frame.is_object()) return std::string("not a JSON object");
  const auto type = frame.find("type");
  if (type == frame.end() || !type->is_string()) return std::string("type: missing");
  if (*type != "ping") return "unknown type '" + type->get<std::string>().substr(0, 32) + "'";
  const auto seq = frame.find("seq");
  if (seq == frame.end() || !seq->is_number_unsigned()) return std::string("seq: not a number");
  return seq->get<uint64_t>();
}

}  // namespace zkagent::agent::detail
