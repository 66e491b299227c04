#include "presence_privacy.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "zkagent/fencing.hpp"
#include "zkagent/naming.hpp"

namespace zkagent::gateway {
namespace {

using nlohmann::json;

std::vector<std::string> idList(const json& body, const char* key) {
  std::vector<std::string> ids;
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return ids;
  if (!it->is_array()) fencing::failField(key, "must be an array of account ids");
  if (it->size() > kMaxPrivacyList) {
    fencing::failField(key, "more than " + std::to_string(kMaxPrivacyList) + " entries");
  }
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& id = (*it)[i];
    if (!id.is_string() || naming::accountIdError(id.get<std::string>())) {
      fencing::failField(std::string(key) + "[" + std::to_string(i) + "]", naming::kIdRule);
    }
    ids.push_back(id.get<std::string>());
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::string_view levelName(presence::PrivacyLevel level) {
  switch (level) {
    case presence::PrivacyLevel::Exact:
      return "exact";
    case presence::PrivacyLevel::Coarse:
      return "coarse";
    case presence::PrivacyLevel::Hidden:
      return "hidden";
  }
  return "exact";
}

}  // namespace

presence::TargetPrivacy parsePrivacyBody(std::string_view text) {
  json body = json::parse(text.begin(), text.end(), nullptr, false);
  if (body.is_discarded()) fencing::failField("body", "not valid JSON");
  if (!body.is_object()) fencing::failField("body", "must be a JSON object");
  for (const auto& [key, value] : body.items()) {
    if (key != "granularity" && key != "contacts" && key != "blocked") {
      fencing::failField(key.substr(0, 64), "unknown field (granularity, contacts, blocked)");
    }
  }
  presence::TargetPrivacy rules;
  auto granularity = body.find("granularity");
  if (granularity == body.end()) fencing::failField("granularity", "missing");
  if (*granularity == "exact") {
    rules.level = presence::PrivacyLevel::Exact;
  } else if (*granularity == "coarse") {
    rules.level = presence::PrivacyLevel::Coarse;
  } else if (*granularity == "hidden") {
    rules.level = presence::PrivacyLevel::Hidden;
  } else {
    fencing::failField("granularity", "must be \"exact\", \"coarse\" or \"hidden\"");
  }
  rules.contacts = idList(body, "contacts");
  rules.blocked = idList(body, "blocked");
  return rules;
}

std::string privacyJson(const presence::TargetPrivacy& rules, std::string_view account) {
  nlohmann::ordered_json out;
  if (!account.empty()) out["account"] = account;
  out["granularity"] = levelName(rules.level);
  out["contacts"] = rules.contacts;
  out["blocked"] = rules.blocked;
  return out.dump();
}

}  // namespace zkagent::gateway
