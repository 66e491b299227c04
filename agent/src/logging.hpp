// Logging set-up for zk-agent: spdlog to stderr, text or JSON lines (one object per line).
#pragma once

#include "zkagent/agent/config.hpp"

namespace zkagent::agent {

void setUpLogging(const Config::Log& log);
void flushLogs();

}  // namespace zkagent::agent
