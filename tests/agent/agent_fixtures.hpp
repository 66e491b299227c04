// Account names shared by the agent's process tests and its benchmarks.
#pragma once

#include <string>
#include <vector>

namespace zkagent_test {

// acct-0 ... acct-(n-1)
inline std::vector<std::string> accountNames(size_t n, const std::string& prefix = "acct-") {
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

}  // namespace zkagent_test
