// The agent's presence settings as the presence model's Params, so the model's validator is the
// one home of the timing rules (config.cpp renames its parameters to the config fields).
#pragma once

#include "zkagent/agent/config.hpp"
#include "zkagent/presence/params.hpp"

namespace zkagent::agent {

presence::Params presenceParams(const Config::Presence& config);

}  // namespace zkagent::agent
