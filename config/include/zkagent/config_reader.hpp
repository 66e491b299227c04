// The one reader of config fields, used by the agent's config and the gateway's (file and flags),
// so both follow the same conventions:
// - keys are matched exactly as written (no case folding): each program documents its names;
// - every problem is a FieldError whose text is "field: problem", the field named in full
//   ("presence.lease_ttl_ms", "accounts[2]", "--listen");
// - a field the program never asked for is an error ("tokn: unknown field"), so a typo never
//   silently falls back to a default;
// - the same kind of value is refused with the same words (integers, booleans, choices, log
//   levels);
// - keys are snake_case; a key renamed to it is still read under its old name for one release,
//   with a warning naming the new one (FieldReader::renamed).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace zkagent::config {

class FieldError : public std::invalid_argument {
 public:
  FieldError(std::string field, const std::string& problem)
      : std::invalid_argument(field + ": " + problem),
        field_(std::move(field)),
        problem_(problem) {}
  const std::string& field() const { return field_; }
  const std::string& problem() const { return problem_; }

 private:
  std::string field_;
  std::string problem_;
};

[[noreturn]] inline void fail(std::string field, const std::string& problem) {
  throw FieldError(std::move(field), problem);
}

// `text` as a JSON object (FieldError on field "config" when it is not one).
nlohmann::json parseObject(std::string_view text);

// A flag's or a file's text value, checked with the reader's words.
int64_t parseInteger(std::string_view field, std::string_view text, int64_t low, int64_t high);
// `value` when it is one of `allowed`; else "must be a, b or c, got 'x'".
std::string choose(std::string_view field, std::string_view value,
                   std::initializer_list<std::string_view> allowed);
// A log level name (zkagent/logging.hpp), same words.
std::string logLevel(std::string_view field, std::string_view value);

// Reads the fields of one JSON object. `prefix` names the object in errors ("presence.").
class FieldReader {
 public:
  explicit FieldReader(const nlohmann::json& object, std::string prefix = "");

  std::string name(std::string_view field) const { return prefix_ + std::string(field); }
  [[noreturn]] void fail(std::string_view field, const std::string& problem) const {
    config::fail(name(field), problem);
  }

  // The field's value or nullptr; either way the field is known from now on.
  const nlohmann::json* find(std::string_view field);

  // The key to read `field` under: `field`, or `before` (its name until this release) when only
  // that one is given, which appends to `warnings` a line naming both. Both given: FieldError.
  //   top.string(top.renamed("data_dir", "dataDir", warnings))
  std::string renamed(std::string_view field, std::string_view before,
                      std::vector<std::string>& warnings);

  std::optional<std::string> string(std::string_view field);
  std::string string(std::string_view field, std::string fallback) {
    return string(field).value_or(std::move(fallback));
  }
  std::string requiredString(std::string_view field);
  std::optional<bool> boolean(std::string_view field);
  bool boolean(std::string_view field, bool fallback) { return boolean(field).value_or(fallback); }
  std::optional<int64_t> integer(std::string_view field, int64_t low, int64_t high);
  // A number in [low, high).
  std::optional<double> number(std::string_view field, double low, double high);
  std::optional<std::string> choice(std::string_view field,
                                    std::initializer_list<std::string_view> allowed);
  std::optional<std::string> logLevel(std::string_view field);
  // The object under `field` (an empty one when absent); must be read and checked in turn.
  FieldReader object(std::string_view field);

  // Call once every field was read.
  void rejectUnknown() const;

 private:
  const nlohmann::json& object_;
  std::string prefix_;
  std::set<std::string, std::less<>> known_;
};

}  // namespace zkagent::config
