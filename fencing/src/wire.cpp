// JSON wire form of tokens, operations and decisions. Self-contained (nlohmann_json and the
// header-only naming rules) so the libFuzzer target in tests/fencing/fuzz can compile it on its own
// with clang.
#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <zkagent/fencing.hpp>
#include <zkagent/naming.hpp>

namespace zkagent::fencing {
namespace {

using nlohmann::json;

// Deeper payloads are refused: nlohmann's dump() recurses, so depth must be bounded.
constexpr int kMaxJsonDepth = 32;

// nlohmann's messages quote raw input bytes; error texts must stay ASCII to be sent as JSON.
std::string asciiOnly(std::string_view text) {
  std::string ascii(text);
  for (char& c : ascii) {
    if (c < ' ' || c > '~') c = '?';
  }
  return ascii;
}

json parseObject(std::string_view text) {
  if (text.size() > kMaxOperationBytes) {
    throw BadRequest("request too large: " + std::to_string(text.size()) + " bytes, limit " +
                     std::to_string(kMaxOperationBytes));
  }
  json parsed;
  try {
    parsed = json::parse(text.begin(), text.end(), [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth) {
        throw BadRequest("JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
      }
      return true;
    });
  } catch (const json::exception& error) {  // parse_error, and out_of_range for huge numbers
    throw BadRequest("malformed JSON: " + asciiOnly(error.what()));
  }
  if (!parsed.is_object()) throw BadRequest("request must be a JSON object");
  return parsed;
}

const json& requireField(const json& object, const char* name) {
  const auto it = object.find(name);
  if (it == object.end()) throw BadRequest(std::string("missing field '") + name + "'");
  return *it;
}

std::string requireString(const json& object, const char* name) {
  const json& value = requireField(object, name);
  if (!value.is_string()) throw BadRequest(std::string("field '") + name + "' must be a string");
  return value.get<std::string>();
}

void requireId(std::string_view id, const char* name) {
  if (auto error = naming::printableIdError(id)) {
    throw BadRequest(std::string("field '") + name + "' " + *error);
  }
}

FencingToken tokenFrom(const json& object) {
  FencingToken token;
  token.account = requireString(object, "account");
  const json& seq = requireField(object, "token");
  if (!seq.is_number_unsigned()) {
    throw BadRequest("field 'token' must be a non-negative integer (the leader's seq)");
  }
  token.token = seq.get<std::uint64_t>();
  token.instanceId = requireString(object, "instanceId");
  const auto session = sessionIdFrom(requireField(object, "sessionId"));
  if (!session) throw BadRequest(std::string("field 'sessionId' ") + kSessionIdRule);
  token.sessionId = *session;
  validateFencingToken(token);
  return token;
}

}  // namespace

std::optional<std::int64_t> sessionIdFrom(const json& value) {
  const bool fitsInt64 = value.is_number_integer() &&
                         (!value.is_number_unsigned() ||
                          value.get<std::uint64_t>() <= std::numeric_limits<std::int64_t>::max());
  if (!fitsInt64) return std::nullopt;
  return value.get<std::int64_t>();
}

void validateFencingToken(const FencingToken& token) {
  requireValidAccountId(token.account);
  requireId(token.instanceId, "instanceId");
}

void failField(std::string_view field, std::string_view problem) {
  throw BadRequest(std::string(field) + ": " + std::string(problem));
}

void requireValidAccountId(std::string_view account) {
  if (auto error = naming::accountIdError(account)) throw BadRequest("field 'account': " + *error);
}

FencingToken parseFencingToken(std::string_view text) { return tokenFrom(parseObject(text)); }

Operation parseOperation(std::string_view text) {
  const json object = parseObject(text);
  Operation operation;
  operation.fencing = tokenFrom(object);
  operation.opId = requireString(object, "opId");
  requireId(operation.opId, "opId");
  if (const auto payload = object.find("payload"); payload != object.end()) {
    operation.payload = payload->dump();
  }
  return operation;
}

void validateOperation(const Operation& operation) {
  validateFencingToken(operation.fencing);
  requireId(operation.opId, "opId");
  if (operation.payload.size() > kMaxOperationBytes) {
    throw BadRequest("field 'payload' is larger than " + std::to_string(kMaxOperationBytes) +
                     " bytes");
  }
}

json toJson(const FencingToken& token) {
  return {{"account", token.account},
          {"token", token.token},
          {"instanceId", token.instanceId},
          {"sessionId", token.sessionId}};
}

json toJson(const Operation& operation) {
  json object = toJson(operation.fencing);
  object["opId"] = operation.opId;
  object["payload"] = json::parse(operation.payload);
  return object;
}

std::string_view reasonCode(Verdict verdict) {
  switch (verdict) {
    case Verdict::accepted:
      return "accepted";
    case Verdict::stale_token:
      return "stale_token";
    case Verdict::not_current_leader:
      return "not_current_leader";
    case Verdict::account_fenced:
      return "account_fenced";
  }
  return "unknown";
}

json toJson(const Decision& decision) {
  json object = {{"accepted", decision.accepted()}, {"hwm", decision.hwm}};
  if (!decision.accepted()) {
    object["reason"] = reasonCode(decision.verdict);
    object["detail"] = decision.detail;
  }
  if (decision.replayed) object["replayed"] = true;
  return object;
}

}  // namespace zkagent::fencing
