// fencing-gateway's config file and command line: errors are std::invalid_argument naming the
// field, nothing else escapes parseConfigJson, and parseCommandLine never throws.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gateway.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace zkagent::gateway;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    static_cast<void>(parseConfigJson(text));
  } catch (const std::invalid_argument& error) {
    if (std::string_view(error.what()).find(": ") == std::string_view::npos) __builtin_trap();
  }
  // The same bytes as arguments, one a line (no --config: that would read files).
  std::vector<std::string> args;
  size_t start = 0;
  while (start <= text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string arg(text.substr(start, end - start));
    if (arg == "--config" || arg == "--token-file") arg = "--unknown";
    args.push_back(std::move(arg));
    start = end + 1;
  }
  auto result = parseCommandLine(args, std::nullopt);
  if (!result.config && result.exitCode == 2 && result.message.empty()) __builtin_trap();
  return 0;
}
