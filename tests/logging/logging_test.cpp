#include "zkagent/logging.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <vector>

namespace zkagent::logging {
namespace {

using nlohmann::json;

// The lines the default logger wrote after setUp(settings).
class Captured {
 public:
  explicit Captured(Settings settings) {
    setUp(settings, std::make_shared<spdlog::sinks::ostream_sink_mt>(out_));
  }
  ~Captured() { spdlog::set_default_logger(spdlog::stderr_color_mt("logging_test_after")); }
  std::vector<std::string> lines() {
    flush();
    std::vector<std::string> all;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) all.push_back(line);
    return all;
  }

 private:
  std::ostringstream out_;
};

TEST(Logging, AJsonLineHasTheSameFieldsInEveryProcess) {
  for (const std::string component : {"zk-agent", "fencing-gateway"}) {
    Captured captured({component, Format::Json, "info"});
    spdlog::warn("account {} lost: \"drift\"\n\tnext", "acct-1");
    const auto lines = captured.lines();
    ASSERT_EQ(lines.size(), 1u);
    const json line = json::parse(lines[0]);
    std::vector<std::string> keys;
    for (const auto& [key, value] : line.items()) keys.push_back(key);
    EXPECT_EQ(keys, (std::vector<std::string>{"component", "level", "msg", "ts"})) << lines[0];
    EXPECT_EQ(line["component"], component);
    EXPECT_EQ(line["level"], "warning");
    EXPECT_EQ(line["msg"], "account acct-1 lost: \"drift\"\n\tnext");
    EXPECT_TRUE(
        std::regex_match(line["ts"].get<std::string>(),
                         std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d)")))
        << line["ts"];
  }
}

TEST(Logging, AMessageThatIsNotUtf8StillMakesAJsonLine) {
  Captured captured({"zk-agent", Format::Json, "info"});
  spdlog::info("device caf\xc3 and 100%");
  const auto lines = captured.lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(json::parse(lines[0])["msg"], "device caf\xef\xbf\xbd and 100%");
}

TEST(Logging, TheLevelFiltersAndTextLinesCarryLevelAndMessage) {
  Captured captured({"fencing-gateway", Format::Text, "warn"});
  spdlog::info("not shown");
  spdlog::error("shown");
  const auto lines = captured.lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(std::regex_match(lines[0],
                               std::regex(R"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} error shown)")))
      << lines[0];
}

TEST(Logging, OnlyTheNamedLevelsAreAccepted) {
  for (std::string_view level : kLevelNames) {
    Captured captured({"zk-agent", Format::Text, std::string(level)});
  }
  std::ostringstream out;
  EXPECT_THROW(setUp({"zk-agent", Format::Text, "loud"},
                     std::make_shared<spdlog::sinks::ostream_sink_mt>(out)),
               std::invalid_argument);
}

}  // namespace
}  // namespace zkagent::logging
