#include "logging.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

namespace zkagent::agent {
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

}  // namespace

void setUpLogging(const Config::Log& log) {
  auto logger = spdlog::stderr_logger_mt("zk-agent");
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  if (log.format == LogFormat::Json) {
    formatter->add_flag<QuotedMessage>('j').set_pattern(
        R"({"ts":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","msg":%j})");
  } else {
    formatter->set_pattern("%Y-%m-%d %H:%M:%S.%e %l %v");
  }
  logger->set_formatter(std::move(formatter));
  logger->set_level(spdlog::level::from_str(log.level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

void flushLogs() { spdlog::default_logger()->flush(); }

}  // namespace zkagent::agent
