#include "zkagent/config_reader.hpp"

#include <gtest/gtest.h>

#include <functional>

namespace zkagent::config {
namespace {

using nlohmann::json;

// What reading `document` with `read` refused ("field: problem"), or "" when it was accepted.
std::string refusal(const json& document, const std::function<void(FieldReader&)>& read) {
  try {
    FieldReader reader(document);
    read(reader);
    reader.rejectUnknown();
  } catch (const FieldError& error) {
    EXPECT_EQ(std::string(error.what()), error.field() + ": " + error.problem());
    return error.what();
  }
  return "";
}

TEST(ConfigReader, ErrorsNameTheFieldInFullAndWhatIsWrong) {
  const json document = {{"presence", {{"lease_ttl_ms", "5s"}}}};
  EXPECT_EQ(refusal(document,
                    [](FieldReader& top) {
                      auto presence = top.object("presence");
                      presence.integer("lease_ttl_ms", 3, 86400000);
                    }),
            "presence.lease_ttl_ms: must be an integer from 3 to 86400000");
}

TEST(ConfigReader, KeysAreExactCaseAndAFieldNeverAskedForIsRefused) {
  const json document = {{"logLevel", "info"}, {"LogLevel", "debug"}};
  EXPECT_EQ(refusal(document, [](FieldReader& top) { top.string("logLevel"); }),
            "LogLevel: unknown field");
  EXPECT_EQ(refusal({{"log", {{"levle", "info"}}}},
                    [](FieldReader& top) {
                      auto log = top.object("log");
                      log.logLevel("level");
                      log.rejectUnknown();
                    }),
            "log.levle: unknown field");
}

TEST(ConfigReader, TheSameKindOfValueIsRefusedWithTheSameWords) {
  auto one = [](const json& value, const std::function<void(FieldReader&)>& read) {
    return refusal({{"f", value}}, read);
  };
  EXPECT_EQ(one(7, [](FieldReader& r) { r.string("f"); }), "f: must be a string");
  EXPECT_EQ(one("yes", [](FieldReader& r) { r.boolean("f"); }), "f: must be true or false");
  EXPECT_EQ(one(-1, [](FieldReader& r) { r.integer("f", 0, 10); }),
            "f: must be an integer from 0 to 10");
  EXPECT_EQ(one(18446744073709551615ull, [](FieldReader& r) { r.integer("f", 0, 10); }),
            "f: must be an integer from 0 to 10");
  EXPECT_EQ(one(1.5, [](FieldReader& r) { r.integer("f", 0, 10); }),
            "f: must be an integer from 0 to 10");
  EXPECT_EQ(one(1, [](FieldReader& r) { r.number("f", 0, 1); }), "f: must be a number in [0, 1)");
  EXPECT_EQ(one("fastest",
                [](FieldReader& r) {
                  r.choice("f", {"fast", "strict"});
                }),
            "f: must be fast or strict, got 'fastest'");
  EXPECT_EQ(one(3, [](FieldReader& r) { r.object("f"); }), "f: must be a JSON object");
  EXPECT_EQ(refusal(json::object(), [](FieldReader& r) { r.requiredString("f"); }),
            "f: is required");
  // A flag's text value: the same words, and what was given.
  EXPECT_THROW(parseInteger("--n", "12x", 0, 99), FieldError);
  try {
    parseInteger("--n", "100", 0, 99);
  } catch (const FieldError& error) {
    EXPECT_EQ(std::string(error.what()), "--n: must be an integer from 0 to 99, got '100'");
  }
  EXPECT_EQ(parseInteger("--n", "42", 0, 99), 42);
}

TEST(ConfigReader, LogLevelsAreTheLoggersNames) {
  for (const char* level : {"trace", "debug", "info", "warn", "error", "critical", "off"}) {
    EXPECT_EQ(logLevel("log.level", level), level);
  }
  try {
    logLevel("--log-level", "loud");
    ADD_FAILURE() << "loud was accepted";
  } catch (const FieldError& error) {
    EXPECT_EQ(std::string(error.what()),
              "--log-level: must be trace, debug, info, warn, error, critical or off, got 'loud'");
  }
}

TEST(ConfigReader, AbsentFieldsGiveTheirFallback) {
  const json document = json::object();
  FieldReader top(document);
  EXPECT_EQ(top.string("s", "dflt"), "dflt");
  EXPECT_EQ(top.boolean("b", true), true);
  EXPECT_EQ(top.integer("i", 0, 1), std::nullopt);
  auto nested = top.object("o");
  EXPECT_EQ(nested.name("x"), "o.x");
  nested.rejectUnknown();
  top.rejectUnknown();
}

TEST(ConfigReader, TheDocumentMustBeAJsonObject) {
  for (std::string_view bad : {"{", "[1]", "1e999"}) {
    try {
      parseObject(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const FieldError& error) {
      EXPECT_EQ(error.field(), "config") << error.what();
    }
  }
  EXPECT_EQ(parseObject(R"({"a":1})")["a"], 1);
}

}  // namespace
}  // namespace zkagent::config
