#include "zkagent/config_reader.hpp"

#include <charconv>

#include "zkagent/logging.hpp"

namespace zkagent::config {
namespace {

using nlohmann::json;

std::string integerRule(int64_t low, int64_t high) {
  return "must be an integer from " + std::to_string(low) + " to " + std::to_string(high);
}

// 0 as "0", 0.5 as "0.5".
std::string shortest(double value) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text, value).ptr;
  return std::string(text, end);
}

// "a, b or c".
std::string alternatives(auto begin, auto end) {
  std::string text;
  for (auto it = begin; it != end; ++it) {
    if (it != begin) text += std::next(it) == end ? " or " : ", ";
    text += *it;
  }
  return text;
}

}  // namespace

json parseObject(std::string_view text) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& error) {
    // Not only parse_error: a number beyond a double (1e999) is out_of_range.
    fail("config", std::string("not valid JSON: ") + error.what());
  }
  if (!root.is_object()) fail("config", "must be a JSON object");
  return root;
}

int64_t parseInteger(std::string_view field, std::string_view text, int64_t low, int64_t high) {
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < low || value > high) {
    fail(std::string(field), integerRule(low, high) + ", got '" + std::string(text) + "'");
  }
  return value;
}

std::string choose(std::string_view field, std::string_view value,
                   std::initializer_list<std::string_view> allowed) {
  for (const auto option : allowed) {
    if (value == option) return std::string(value);
  }
  fail(std::string(field), "must be " + alternatives(allowed.begin(), allowed.end()) + ", got '" +
                               std::string(value) + "'");
}

std::string logLevel(std::string_view field, std::string_view value) {
  for (const auto level : logging::kLevelNames) {
    if (value == level) return std::string(value);
  }
  fail(std::string(field),
       "must be " + alternatives(std::begin(logging::kLevelNames), std::end(logging::kLevelNames)) +
           ", got '" + std::string(value) + "'");
}

FieldReader::FieldReader(const json& object, std::string prefix)
    : object_(object), prefix_(std::move(prefix)) {}

const json* FieldReader::find(std::string_view field) {
  known_.insert(std::string(field));
  auto it = object_.find(field);
  return it == object_.end() ? nullptr : &*it;
}

std::string FieldReader::renamed(std::string_view field, std::string_view before,
                                 std::vector<std::string>& warnings) {
  known_.insert(std::string(before));
  if (!object_.contains(before)) return std::string(field);
  if (object_.contains(field)) {
    fail(before, "is the old name of " + name(field) + ": give only " + name(field));
  }
  warnings.push_back(name(before) + " is deprecated: it is now " + name(field) +
                     " (the old name is read until the next release)");
  return std::string(before);
}

std::optional<std::string> FieldReader::string(std::string_view field) {
  const json* value = find(field);
  if (!value) return std::nullopt;
  if (!value->is_string()) fail(field, "must be a string");
  return value->get<std::string>();
}

std::string FieldReader::requiredString(std::string_view field) {
  auto value = string(field);
  if (!value) fail(field, "is required");
  return std::move(*value);
}

std::optional<bool> FieldReader::boolean(std::string_view field) {
  const json* value = find(field);
  if (!value) return std::nullopt;
  if (!value->is_boolean()) fail(field, "must be true or false");
  return value->get<bool>();
}

std::optional<int64_t> FieldReader::integer(std::string_view field, int64_t low, int64_t high) {
  const json* value = find(field);
  if (!value) return std::nullopt;
  // An unsigned beyond int64 is out of every range; get<int64_t> would wrap it.
  if (!value->is_number_integer() ||
      (value->is_number_unsigned() && value->get<uint64_t>() > static_cast<uint64_t>(high)) ||
      value->get<int64_t>() < low || value->get<int64_t>() > high) {
    fail(field, integerRule(low, high));
  }
  return value->get<int64_t>();
}

std::optional<double> FieldReader::number(std::string_view field, double low, double high) {
  const json* value = find(field);
  if (!value) return std::nullopt;
  if (!value->is_number() || !(value->get<double>() >= low && value->get<double>() < high)) {
    fail(field, "must be a number in [" + shortest(low) + ", " + shortest(high) + ")");
  }
  return value->get<double>();
}

std::optional<std::string> FieldReader::choice(std::string_view field,
                                               std::initializer_list<std::string_view> allowed) {
  auto value = string(field);
  if (!value) return std::nullopt;
  return choose(name(field), *value, allowed);
}

std::optional<std::string> FieldReader::logLevel(std::string_view field) {
  auto value = string(field);
  if (!value) return std::nullopt;
  return config::logLevel(name(field), *value);
}

FieldReader FieldReader::object(std::string_view field) {
  static const json empty = json::object();
  const json* value = find(field);
  if (!value) return FieldReader(empty, name(field) + ".");
  if (!value->is_object()) fail(field, "must be a JSON object");
  return FieldReader(*value, name(field) + ".");
}

void FieldReader::rejectUnknown() const {
  for (const auto& [key, value] : object_.items()) {
    if (!known_.contains(key)) fail(key, "unknown field");
  }
}

}  // namespace zkagent::config
