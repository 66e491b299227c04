// POST /v1/presence/leases bodies: parsed and checked whole before anything is applied, each
// error naming its field. Whether an entry's account is served is the store's per-entry decision,
// not a malformed body. Apart from the store so that it can be fuzzed without sockets.
#include <nlohmann/json.hpp>

#include "presence_store.hpp"
#include "zkagent/naming.hpp"

namespace zkagent::gateway {
namespace {

using fencing::BadRequest;
using nlohmann::json;

constexpr int kMaxJsonDepth = 8;

const json& member(const json& object, const std::string& where, const char* key) {
  auto it = object.find(key);
  if (it == object.end()) fencing::failField(where + key, "missing");
  return *it;
}

std::string idField(const json& object, const std::string& where, const char* key) {
  const json& value = member(object, where, key);
  if (!value.is_string() || naming::accountIdError(value.get<std::string>())) {
    fencing::failField(where + key, naming::kIdRule);
  }
  return value.get<std::string>();
}

std::uint64_t unsignedField(const json& object, const std::string& where, const char* key) {
  const json& value = member(object, where, key);
  if (!value.is_number_unsigned())
    fencing::failField(where + key, "must be a non-negative integer");
  return value.get<std::uint64_t>();
}

presence::LeaseEntry entryFrom(const json& object, const std::string& where) {
  if (!object.is_object())
    fencing::failField(where.substr(0, where.size() - 1), "must be a JSON object");
  presence::LeaseEntry entry;
  entry.key.user = idField(object, where, "account");
  entry.key.device = idField(object, where, "device");
  entry.epoch.leaderToken = unsignedField(object, where, "token");
  entry.epoch.connection = unsignedField(object, where, "counter");
  return entry;
}

const json* optionalArray(const json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  if (!it->is_array()) fencing::failField(key, "must be an array");
  return &*it;
}

}  // namespace

LeaseBatch parseLeaseBatch(std::string_view text) {
  json body;
  try {
    body = json::parse(text.begin(), text.end(), [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth) {
        fencing::failField("body",
                           "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
      }
      return true;
    });
  } catch (const json::exception&) {  // the parser's message quotes raw bytes: not echoed
    fencing::failField("body", "not valid JSON");
  }
  if (!body.is_object()) fencing::failField("body", "must be a JSON object");
  LeaseBatch batch;
  const json& instance = member(body, "", "instanceId");
  if (!instance.is_string() || naming::printableIdError(instance.get<std::string>())) {
    fencing::failField("instanceId", naming::kPrintableIdRule);
  }
  batch.instanceId = instance.get<std::string>();
  const auto session = fencing::sessionIdFrom(member(body, "", "sessionId"));
  if (!session) fencing::failField("sessionId", fencing::kSessionIdRule);
  batch.sessionId = *session;
  if (const json* renew = optionalArray(body, "renew")) {
    batch.renew.reserve(renew->size());
    for (size_t i = 0; i < renew->size(); ++i) {
      batch.renew.push_back(entryFrom((*renew)[i], "renew[" + std::to_string(i) + "]."));
    }
  }
  if (const json* remove = optionalArray(body, "remove")) {
    batch.remove.reserve(remove->size());
    for (size_t i = 0; i < remove->size(); ++i) {
      const std::string where = "remove[" + std::to_string(i) + "].";
      LeaseRemoval removal{entryFrom((*remove)[i], where)};
      const json& reason = member((*remove)[i], where, "reason");
      if (reason == "close") {
        removal.reason = presence::LeaveReason::Close;
      } else if (reason == "ping_timeout") {
        removal.reason = presence::LeaveReason::PingTimeout;
      } else {
        fencing::failField(where + "reason", "must be \"close\" or \"ping_timeout\"");
      }
      batch.remove.push_back(std::move(removal));
    }
  }
  return batch;
}

}  // namespace zkagent::gateway
