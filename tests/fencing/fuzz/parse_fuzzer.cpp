// libFuzzer target for the request parser: no input may crash it, every error message must be
// sendable as JSON, and whatever it accepts must survive a round trip through toJson.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>
#include <zkagent/fencing.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace zkagent::fencing;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  try {
    const Operation operation = parseOperation(input);
    validateOperation(operation);
    if (parseOperation(toJson(operation).dump()) != operation) __builtin_trap();
  } catch (const BadRequest& error) {
    static_cast<void>(nlohmann::json(error.what()).dump());  // throws on invalid UTF-8
  }
  try {
    const FencingToken token = parseFencingToken(input);
    if (parseFencingToken(toJson(token).dump()) != token) __builtin_trap();
  } catch (const BadRequest&) {
  }
  return 0;
}
