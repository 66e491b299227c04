// zk-device: one device, or many simulated ones on one io_context, printing one line per event
// (see usage() and docs/device.md for the line formats).
#include <sys/resource.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "zkagent/auth.hpp"
#include "zkagent/device.hpp"
#include "zkagent/event_lines.hpp"

namespace {

namespace asio = boost::asio;
using zkagent::device::DeviceClient;
using zkagent::device::DeviceOptions;
using zkagent::device::Millis;

const char* const kUsage =
    R"(usage: zk-device --connect URL[,URL...] --account A --device D [options]
       zk-device --connect URL[,URL...] --devices N (--accounts A,B,... | --accounts-file F)
                 --device D [options]

Connects to the agent that leads the account (following redirects), heartbeats, reconnects with
jittered backoff, and prints one line per event on stdout:
  CONNECTED <account> <device> <agent-instance> <token>.<counter> <unix_ns>
  REDIRECTED <account> <device> <to-url> <unix_ns>
  DISCONNECTED <account> <device> <reason> <unix_ns>
SIGTERM or SIGINT sends a close frame and exits 0. Bad arguments exit 2.

options:
  --connect URL[,URL...]     agent device endpoints, ws://host:port or wss://host:port, tried in
                             order
  --ca F                     the CA (PEM) the agents' certificates chain to; required for wss://
  --redirect-in-band         ask for in-band redirects (redirect=close): a non-leader completes
                             the upgrade and closes with 4001 naming the leader, followed at once
  --account A                the account (single device)
  --device D                 the device id; simulated devices are D-0, D-1, ...
  --heartbeat-ms N           ping interval (default 30000; 0 sends no pings)
  --timeout-ms N             agent gone after N ms without a frame (default 2.5 x heartbeat;
                             0 when the heartbeat is 0)
  --backoff-initial-ms N     first reconnect window (default 200)
  --backoff-max-ms N         cap of the reconnect window (default 30000)
  --connect-timeout-ms N     connect + upgrade + welcome (default 5000)
  --seed N                   mixed into every device's jitter seed (default 0)
  --token-file F             the device's token (docs/auth.md), read again whenever the agent
                             refuses it or it expires, so another process may renew the file
  --sign-key F --sign-alg A  instead of a token file: sign a token per device (sub = its device
                             id, its account, scope device) with the secret (HS256) or PEM
                             private key (RS256, ES256) in F, for tests and load
  --sign-kid K               the signed tokens' kid
  --sign-aud AUD             the signed tokens' aud
  --sign-ttl-s N             the signed tokens' lifetime (default 3600); a fresh one each refresh
simulation:
  --devices N                run N devices, spread round-robin over the accounts; prints
                             STATS connected=.. reconnects=.. heartbeats_sent=..
                             heartbeats_answered=.. rtt_p50_ms=.. rtt_p99_ms=.. every second
                             (RTT over the last second, nan without samples)
  --accounts A,B,...         accounts of the simulated devices
  --accounts-file F          one account per line (blank lines and # comments skipped)
  --events                   also print the per-device event lines
  --ramp-ms N                start the devices evenly over N ms (default 0: all at once)
  --source-addresses IP,...  bind local addresses round-robin (each has ~28000 ports)
  --help                     this text
)";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Arguments {
  std::vector<std::string> connect;
  std::vector<std::string> accounts;
  std::string device;
  Millis heartbeat{30000};
  std::optional<Millis> timeout;
  Millis backoffInitial{200};
  Millis backoffMax{30000};
  Millis connectTimeout{5000};
  std::uint64_t seed = 0;
  std::optional<std::size_t> devices;
  bool events = false;
  bool redirectInBand = false;
  Millis ramp{0};
  std::vector<std::string> sourceAddresses;
  std::string tokenFile;
  std::string caFile;  // --ca
  std::optional<zkagent::auth::SigningKey> signingKey;
  std::string signAudience;
  std::int64_t signTtlSeconds = 3600;
};

std::vector<std::string> splitList(const std::string& flag, const std::string& text) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    if (comma == start) throw UsageError(flag + ": empty entry in \"" + text + "\"");
    items.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return items;
}

std::uint64_t number(const std::string& flag, const std::string& text) {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size()) {
    throw UsageError(flag + ": must be a non-negative integer, got \"" + text + "\"");
  }
  return value;
}

Millis millis(const std::string& flag, const std::string& text) {
  const std::uint64_t value = number(flag, text);
  if (value > 1'000'000'000ULL) throw UsageError(flag + ": too large, got \"" + text + "\"");
  return Millis{static_cast<Millis::rep>(value)};
}

std::vector<std::string> readAccounts(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("--accounts-file: cannot read \"" + path + "\"");
  std::vector<std::string> accounts;
  std::string line;
  while (std::getline(in, line)) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    const auto last = line.find_last_not_of(" \t\r");
    accounts.push_back(line.substr(first, last - first + 1));
  }
  if (accounts.empty()) throw UsageError("--accounts-file: no account in \"" + path + "\"");
  return accounts;
}

std::string readTokenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read token file " + path);
  std::string token((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.empty()) throw std::runtime_error("token file " + path + " is empty");
  return token;
}

// Returns nullopt for --help.
std::optional<Arguments> parse(int argc, char** argv) {
  Arguments args;
  std::optional<std::string> account, signKeyFile, signAlg, signKid;
  bool accountList = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") return std::nullopt;
    if (flag == "--events") {
      args.events = true;
      continue;
    }
    if (flag == "--redirect-in-band") {
      args.redirectInBand = true;
      continue;
    }
    if (flag.rfind("--", 0) != 0) throw UsageError(flag + ": unexpected argument");
    if (i + 1 >= argc) throw UsageError(flag + ": missing value");
    const std::string value = argv[++i];
    if (flag == "--connect") {
      args.connect = splitList(flag, value);
    } else if (flag == "--account") {
      account = value;
    } else if (flag == "--accounts") {
      args.accounts = splitList(flag, value);
      accountList = true;
    } else if (flag == "--accounts-file") {
      args.accounts = readAccounts(value);
      accountList = true;
    } else if (flag == "--device") {
      args.device = value;
    } else if (flag == "--heartbeat-ms") {
      args.heartbeat = millis(flag, value);
    } else if (flag == "--timeout-ms") {
      args.timeout = millis(flag, value);
    } else if (flag == "--backoff-initial-ms") {
      args.backoffInitial = millis(flag, value);
    } else if (flag == "--backoff-max-ms") {
      args.backoffMax = millis(flag, value);
    } else if (flag == "--connect-timeout-ms") {
      args.connectTimeout = millis(flag, value);
    } else if (flag == "--seed") {
      args.seed = number(flag, value);
    } else if (flag == "--devices") {
      args.devices = number(flag, value);
      if (*args.devices == 0) throw UsageError("--devices: must be at least 1");
    } else if (flag == "--ramp-ms") {
      args.ramp = millis(flag, value);
    } else if (flag == "--source-addresses") {
      args.sourceAddresses = splitList(flag, value);
    } else if (flag == "--ca") {
      if (!std::ifstream(value)) throw UsageError("--ca: cannot read \"" + value + "\"");
      args.caFile = value;
    } else if (flag == "--token-file") {
      try {  // refused now rather than at the first connect
        readTokenFile(value);
      } catch (const std::runtime_error& error) {
        throw UsageError(std::string("--token-file: ") + error.what());
      }
      args.tokenFile = value;
    } else if (flag == "--sign-key") {
      signKeyFile = value;
    } else if (flag == "--sign-alg") {
      signAlg = value;
    } else if (flag == "--sign-kid") {
      signKid = value;
    } else if (flag == "--sign-aud") {
      args.signAudience = value;
    } else if (flag == "--sign-ttl-s") {
      args.signTtlSeconds = static_cast<std::int64_t>(number(flag, value));
      if (args.signTtlSeconds == 0 || args.signTtlSeconds > 366 * 86400) {
        throw UsageError("--sign-ttl-s: must be 1 to 31622400");
      }
    } else {
      throw UsageError(flag + ": unknown option (see --help)");
    }
  }
  if (signKeyFile.has_value() != signAlg.has_value()) {
    throw UsageError(signKeyFile ? "--sign-alg: missing (HS256, RS256 or ES256)"
                                 : "--sign-key: missing");
  }
  if (signKeyFile) {
    if (!args.tokenFile.empty()) throw UsageError("--token-file: not together with --sign-key");
    const auto algorithm = zkagent::auth::algorithmNamed(*signAlg);
    if (!algorithm) throw UsageError("--sign-alg: must be HS256, RS256 or ES256");
    std::ifstream in(*signKeyFile, std::ios::binary);
    if (!in) throw UsageError("--sign-key: cannot read \"" + *signKeyFile + "\"");
    std::string material((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (*algorithm == zkagent::auth::Algorithm::HS256) {
      while (!material.empty() && (material.back() == '\n' || material.back() == '\r'))
        material.pop_back();
    }
    args.signingKey = zkagent::auth::SigningKey{signKid.value_or(""), *algorithm, material};
    try {  // a key libjwt cannot sign with is refused now, not at every connect
      zkagent::auth::mint(*args.signingKey,
                          {"probe", "", "device", "", zkagent::auth::unixNow() + 60, {}});
    } catch (const std::invalid_argument& error) {
      throw UsageError(std::string("--sign-key: ") + error.what());
    }
  } else if (signKid || !args.signAudience.empty()) {
    throw UsageError("--sign-kid/--sign-aud: need --sign-key");
  }
  if (!args.tokenFile.empty() && args.devices) {
    throw UsageError("--token-file: one token is one device; simulated devices use --sign-key");
  }
  if (args.connect.empty()) throw UsageError("--connect: missing");
  if (args.device.empty()) throw UsageError("--device: missing");
  if (args.devices) {
    if (account && accountList) throw UsageError("--account: use --accounts for simulated devices");
    if (account) args.accounts = {*account};
    if (args.accounts.empty()) throw UsageError("--accounts: missing (or --accounts-file)");
  } else {
    if (accountList) throw UsageError("--accounts: needs --devices");
    if (!account) throw UsageError("--account: missing");
    if (args.events || args.ramp.count() > 0) {
      throw UsageError(std::string(args.events ? "--events" : "--ramp-ms") + ": needs --devices");
    }
    args.accounts = {*account};
  }
  return args;
}

// The argument that sets a DeviceOptions field, for messages.
std::string flagOf(const std::string& problem) {
  static const std::pair<const char*, const char*> fields[] = {
      {"endpoints", "--connect"},
      {"account", "--account"},
      {"device", "--device"},
      {"heartbeat", "--heartbeat-ms"},
      {"timeout", "--timeout-ms"},
      {"backoffInitial", "--backoff-initial-ms"},
      {"backoffMax", "--backoff-max-ms"},
      {"connectTimeout", "--connect-timeout-ms"},
      {"localAddress", "--source-addresses"},
      {"caFile", "--ca"}};
  for (const auto& [field, flag] : fields) {
    const std::string prefix = field;
    if (problem.rfind(prefix, 0) == 0 &&
        (problem.size() == prefix.size() || problem[prefix.size()] == ':' ||
         problem[prefix.size()] == '[')) {
      const auto colon = problem.find(':');
      return flag + problem.substr(colon == std::string::npos ? problem.size() : colon);
    }
  }
  return problem;
}

using zkagent::logging::unixNanos;
void emit(const std::string& line) { zkagent::logging::emitEventLine(line); }

// A reason as one word: "connect_failed: Connection refused" ->
// "connect_failed:Connection_refused".
std::string oneWord(std::string_view reason) {
  std::string word;
  for (std::size_t i = 0; i < reason.size(); ++i) {
    const char c = reason[i];
    if (c == ' ' && i > 0 && reason[i - 1] == ':') continue;
    word.push_back(c == ' ' || c == '\t' || c == '\n' ? '_' : c);
  }
  return word.empty() ? "unknown" : word;
}

// Many fds for many devices: the soft limit up to the hard one.
void raiseFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

double percentileMillis(std::vector<std::uint32_t>& samples, double quantile) {
  const auto rank = static_cast<std::size_t>(quantile * static_cast<double>(samples.size() - 1));
  std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(rank),
                   samples.end());
  return static_cast<double>(samples[rank]) / 1000.0;
}

class Runner {
 public:
  Runner(asio::io_context& io, const Arguments& args)
      : statsTimer_(io), simulated_(args.devices.has_value()) {
    const std::size_t count = args.devices.value_or(1);
    devices_.reserve(count);
    for (std::size_t i = 0; i < count; ++i) {
      DeviceOptions options;
      options.endpoints = args.connect;
      options.caFile = args.caFile;
      options.redirectInBand = args.redirectInBand;
      options.account = args.accounts[i % args.accounts.size()];
      options.device = simulated_ ? args.device + "-" + std::to_string(i) : args.device;
      options.heartbeat = args.heartbeat;
      options.timeout = args.timeout.value_or(
          args.heartbeat.count() == 0 ? Millis{0} : Millis{args.heartbeat.count() * 5 / 2});
      options.backoffInitial = args.backoffInitial;
      options.backoffMax = args.backoffMax;
      options.connectTimeout = args.connectTimeout;
      options.seed = args.seed;
      if (!args.sourceAddresses.empty())
        options.localAddress = args.sourceAddresses[i % args.sourceAddresses.size()];
      if (!args.tokenFile.empty()) {
        options.tokenProvider = [file = args.tokenFile](bool) { return readTokenFile(file); };
      } else if (args.signingKey) {
        zkagent::auth::TokenRequest claims;
        claims.subject = options.device;
        claims.account = options.account;
        claims.scope = "device";
        claims.audience = args.signAudience;
        options.tokenProvider = [key = *args.signingKey, claims,
                                 ttl = args.signTtlSeconds](bool) mutable {
          claims.expiresAt = zkagent::auth::unixNow() + ttl;
          return zkagent::auth::mint(key, claims);
        };
      }
      if (auto problem = zkagent::device::validate(options); !problem.empty())
        throw UsageError(flagOf(problem));
      devices_.push_back(std::make_unique<DeviceClient>(io, std::move(options)));
      wire(*devices_.back(), simulated_ ? args.events : true);
    }
    for (std::size_t i = 0; i < count; ++i) {
      const auto delay =
          Millis{args.ramp.count() * static_cast<Millis::rep>(i) / static_cast<Millis::rep>(count)};
      devices_[i]->start(delay);
    }
    if (simulated_) armStats();
  }

  void stop(std::function<void()> done) {
    statsTimer_.cancel();
    auto left = std::make_shared<std::size_t>(devices_.size());
    auto finished = std::make_shared<std::function<void()>>(std::move(done));
    for (auto& device : devices_) {
      device->stop([left, finished] {
        if (--*left == 0) (*finished)();
      });
    }
  }

 private:
  void wire(DeviceClient& device, bool events) {
    const auto& o = device.options();
    const std::string who = o.account + " " + o.device;
    if (events) {
      device.onConnected([who](const zkagent::device::ConnectedInfo& info) {
        emit("CONNECTED " + who + " " + info.agent + " " + std::to_string(info.token) + "." +
             std::to_string(info.counter) + " " + std::to_string(unixNanos()));
      });
      device.onRedirected([who](std::string_view url) {
        emit("REDIRECTED " + who + " " + std::string(url) + " " + std::to_string(unixNanos()));
      });
      device.onDisconnected([who](std::string_view reason) {
        emit("DISCONNECTED " + who + " " + oneWord(reason) + " " + std::to_string(unixNanos()));
      });
    }
    if (simulated_) {
      device.onHeartbeatAnswered([this](zkagent::device::Micros rtt) {
        rtt_.push_back(static_cast<std::uint32_t>(std::min<std::int64_t>(rtt.count(), UINT32_MAX)));
      });
    }
  }

  void armStats() {
    statsTimer_.expires_after(std::chrono::seconds(1));
    statsTimer_.async_wait([this](boost::system::error_code error) {
      if (error) return;
      printStats();
      armStats();
    });
  }

  void printStats() {
    std::uint64_t connected = 0, reconnects = 0, sent = 0, answered = 0;
    for (const auto& device : devices_) {
      const auto& stats = device->stats();
      connected += device->connected() ? 1 : 0;
      reconnects += stats.connects > 1 ? stats.connects - 1 : 0;
      sent += stats.heartbeatsSent;
      answered += stats.heartbeatsAnswered;
    }
    std::string p50 = "nan", p99 = "nan";  // still a number to strtod
    if (!rtt_.empty()) {
      char buffer[32];
      std::snprintf(buffer, sizeof buffer, "%.3f", percentileMillis(rtt_, 0.5));
      p50 = buffer;
      std::snprintf(buffer, sizeof buffer, "%.3f", percentileMillis(rtt_, 0.99));
      p99 = buffer;
      rtt_.clear();
    }
    emit("STATS connected=" + std::to_string(connected) +
         " reconnects=" + std::to_string(reconnects) + " heartbeats_sent=" + std::to_string(sent) +
         " heartbeats_answered=" + std::to_string(answered) + " rtt_p50_ms=" + p50 +
         " rtt_p99_ms=" + p99);
  }

  asio::steady_timer statsTimer_;
  bool simulated_;
  std::vector<std::unique_ptr<DeviceClient>> devices_;
  std::vector<std::uint32_t> rtt_;  // microseconds, since the last STATS line
};

}  // namespace

int main(int argc, char** argv) {
  std::optional<Arguments> args;
  try {
    args = parse(argc, argv);
  } catch (const UsageError& error) {
    std::cerr << "zk-device: " << error.what() << "\n";
    return 2;
  }
  if (!args) {
    std::cout << kUsage;
    return 0;
  }
  raiseFileLimit();

  asio::io_context io(1);
  std::unique_ptr<Runner> runner;
  try {
    runner = std::make_unique<Runner>(io, *args);
  } catch (const UsageError& error) {
    std::cerr << "zk-device: " << error.what() << "\n";
    return 2;
  }
  asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](boost::system::error_code error, int) {
    if (error) return;
    runner->stop([&io] { io.stop(); });
  });
  io.run();
  return 0;
}
