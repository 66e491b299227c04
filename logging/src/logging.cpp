#include "zkagent/logging.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "batched_fd_sink.hpp"

namespace zkagent::logging {
namespace {

// `%j`: the message as a quoted JSON string, so any message yields a valid JSON line.
class QuotedMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& out) override {
    const std::string quoted = nlohmann::json(std::string(msg.payload.data(), msg.payload.size()))
                                   .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    out.append(quoted.data(), quoted.data() + quoted.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<QuotedMessage>();
  }
};

// The component as a JSON string inside a spdlog pattern ('%' doubled, as the pattern wants).
std::string patternQuoted(const std::string& text) {
  std::string pattern;
  for (const char c :
       nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)) {
    pattern += c;
    if (c == '%') pattern += '%';
  }
  return pattern;
}

}  // namespace

void setUp(const Settings& settings, std::shared_ptr<spdlog::sinks::sink> sink) {
  if (std::find(std::begin(kLevelNames), std::end(kLevelNames), settings.level) ==
      std::end(kLevelNames)) {
    throw std::invalid_argument("unknown log level '" + settings.level + "'");
  }
  // A terminal gets coloured levels a line at a time; a pipe or a file (journald, docker, a test
  // harness) gets the lines in batches from a writer thread.
  if (!sink && ::isatty(STDERR_FILENO))
    sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  if (!sink) sink = std::make_shared<detail::BatchedFdSink>(STDERR_FILENO);
  auto logger = std::make_shared<spdlog::logger>(settings.component, std::move(sink));
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  if (settings.format == Format::Json) {
    formatter->add_flag<QuotedMessage>('j').set_pattern(
        R"({"ts":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","component":)" +
        patternQuoted(settings.component) + R"(,"msg":%j})");
  } else {
    formatter->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  }
  logger->set_formatter(std::move(formatter));
  logger->set_level(spdlog::level::from_str(settings.level));
  // Error lines are out before the call returns (what follows may be the end of the process);
  // the rest leaves with the next batch.
  logger->flush_on(spdlog::level::err);
  spdlog::set_default_logger(std::move(logger));
}

void flush() { spdlog::default_logger()->flush(); }

}  // namespace zkagent::logging
