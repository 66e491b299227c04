// Option validation, the reconnect backoff policy and ws:// URL parsing: no I/O here.
#include <boost/asio/ip/address.hpp>
#include <charconv>
#include <cmath>
#include <limits>

#include "detail.hpp"
#include "zkagent/device.hpp"
#include "zkagent/naming.hpp"
#include "zkagent/presence/stable_random.hpp"

namespace zkagent::device {
namespace {

// The account-id rule, for both ids (the agent refuses any other at the upgrade).
std::string idProblem(std::string_view id) {
  if (id.empty()) return "missing";
  return naming::accountIdError(id).value_or("");
}

// Letters, digits, '_', '.', '-' and ':' (an IPv6 address).
bool hostCharacter(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-' || c == ':';
}

}  // namespace

double unitRandom(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  // 53 random bits give every double in [0, 1) an equal step.
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

std::string WsUrl::endpoint() const { return (tls ? "wss://" : "ws://") + hostHeader(); }

std::string WsUrl::hostHeader() const { return naming::toString({host, port}); }

std::optional<WsUrl> parseWsUrl(std::string_view url, bool allowTarget) {
  constexpr std::string_view plain = "ws://", secure = "wss://";
  const bool tls = url.starts_with(secure);
  if (!tls && !url.starts_with(plain)) return std::nullopt;
  std::string_view rest = url.substr(tls ? secure.size() : plain.size());
  const std::size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view target =
      slash == std::string_view::npos ? std::string_view{} : rest.substr(slash);
  if (!allowTarget && !target.empty() && target != "/") return std::nullopt;
  if (!allowTarget) target = {};

  naming::HostPort address;
  if (naming::hostPortError(authority, address, naming::PortZero::Refused)) return std::nullopt;
  for (char c : address.host) {
    if (!hostCharacter(c)) return std::nullopt;
  }
  return WsUrl{std::move(address.host), address.port, std::string(target), tls};
}

std::string validate(const DeviceOptions& options) {
  if (options.endpoints.empty()) return "endpoints: at least one ws://host:port is needed";
  for (std::size_t i = 0; i < options.endpoints.size(); ++i) {
    const auto url = parseWsUrl(options.endpoints[i], false);
    if (!url) {
      return "endpoints[" + std::to_string(i) +
             "]: must be ws://host:port or wss://host:port, got \"" + options.endpoints[i] + "\"";
    }
    if (url->tls && options.caFile.empty()) {
      return "caFile: is required for the wss:// endpoint \"" + options.endpoints[i] +
             "\" (the CA the agents' certificates chain to)";
    }
  }
  if (auto problem = idProblem(options.account); !problem.empty()) return "account: " + problem;
  if (auto problem = idProblem(options.device); !problem.empty()) return "device: " + problem;
  if (options.heartbeat.count() < 0) return "heartbeat: must be >= 0 (0 disables)";
  if (!(options.heartbeatJitter >= 0.0 && options.heartbeatJitter < 1.0)) {
    return "heartbeatJitter: must be in [0, 1)";
  }
  if (options.timeout.count() < 0) return "timeout: must be >= 0 (0 disables)";
  if (options.heartbeat.count() > 0 && options.timeout.count() > 0 &&
      options.timeout <= 2 * options.heartbeat) {
    return "timeout: must be more than 2 x heartbeat (" + std::to_string(options.timeout.count()) +
           " <= 2 x " + std::to_string(options.heartbeat.count()) + " ms)";
  }
  if (options.heartbeat.count() == 0 && options.timeout.count() > 0) {
    return "timeout: must be 0 when heartbeat is 0 (the agent only sends frames in answer to "
           "pings)";
  }
  if (options.backoffInitial.count() <= 0) return "backoffInitial: must be > 0";
  if (options.backoffMax < options.backoffInitial) return "backoffMax: must be >= backoffInitial";
  if (options.connectTimeout.count() <= 0) return "connectTimeout: must be > 0";
  if (!options.localAddress.empty()) {
    boost::system::error_code error;
    boost::asio::ip::make_address(options.localAddress, error);
    if (error) return "localAddress: must be an IP address, got \"" + options.localAddress + "\"";
  }
  return {};
}

ReconnectBackoff::ReconnectBackoff(Millis initial, Millis max, std::uint64_t seed)
    : initial_(initial), max_(max), state_(seed) {}

Millis ReconnectBackoff::window(unsigned attempt) const {
  // Doubling stops once the cap is reached, so large attempts cannot overflow.
  Millis window = initial_;
  for (unsigned i = 0; i < attempt && window < max_; ++i) window *= 2;
  return std::min(window, max_);
}

Millis ReconnectBackoff::next() {
  const Millis upper = window(attempt_);
  if (attempt_ < std::numeric_limits<unsigned>::max()) ++attempt_;
  // Every millisecond in [0, upper] is equally likely.
  const double unit = unitRandom(state_);
  return Millis{
      static_cast<Millis::rep>(std::floor(unit * static_cast<double>(upper.count() + 1)))};
}

std::uint64_t jitterSeed(std::string_view account, std::string_view device, std::uint64_t seed) {
  std::string name;
  name.reserve(account.size() + device.size() + 1);
  name.append(account).append("/").append(device);
  return (std::uint64_t{presence::crc32(name)} << 32) ^ seed;
}

}  // namespace zkagent::device
