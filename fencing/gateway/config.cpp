// Command line and JSON config of fencing-gateway. One validator: every field, from a flag or
// from the file, goes through the same setters, and errors name the field.
#include <charconv>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "gateway.hpp"
#include "zkagent/naming.hpp"

namespace zkagent::gateway {
namespace {

constexpr std::string_view kUsage = R"(Usage: fencing-gateway --data-dir DIR [options]

Accepts an IM account's operations only with a valid fencing token (see docs/gateway.md).

Options:
  --listen HOST:PORT        address to serve HTTP on (default 127.0.0.1:8480; port 0 picks a
                            free port; the bound address is printed as "LISTENING HOST:PORT")
  --data-dir DIR            durable HWM and operation log (required)
  --zk HOST:PORT[,...]      ZooKeeper ensemble: also require token == seq of the active node
  --root PATH               election root in ZooKeeper (default /wx-accounts)
  --zk-untrusted POLICY     while ZooKeeper is unreachable: hwm_only (default) or refuse
  --commit-mode MODE        group (default) or per_operation (one fsync per operation)
  --config FILE             JSON config file; flags given on the command line override it
  --lease-ttl-ms N          presence lease lifetime after its last renewal (default 150000)
  --lease-sweep-ms N        how often expired leases are swept (default 5000, at most the TTL)
  --debounce-ms N           a user's offline is published only after N ms with no device back
                            (default 20000; 0 publishes at once)
  --subscribe-listen HOST:PORT  the subscribers' WebSocket listener (default: the --listen host
                            and the next port, 8481; any free port when --listen has port 0;
                            printed as "SUBSCRIBE-LISTENING HOST:PORT")
  --coalesce-ms N           changes for one subscriber are sent at most once per N ms, merged
                            (default 100)
  --subscriber-queue N      unsent messages a subscriber may have before it is closed with 4008
                            (resubscribe) (default 64)
  --tls-cert FILE           serve HTTPS with this certificate (PEM); needs --tls-key and
                            --tls-client-ca
  --tls-key FILE            the certificate's private key (PEM)
  --tls-client-ca FILE      CA whose client certificates are accepted; an agent may act only as
                            the instance its certificate names (docs/gateway.md)
  --insecure                allow plain HTTP on a non-loopback --listen (logged as a warning)
  --token-file FILE         the agents' bearer token, read from FILE (ZKAGENT_GATEWAY_TOKEN
                            overrides)
  --operator-token-file FILE  the operator token (HWM reset, privacy rules), read from FILE
  --max-requests-per-second N  per connection on the HTTP listener, beyond it 429 (default
                            1000; 0: no limit)
  --log-level LEVEL         trace, debug, info (default), warn, error
  --log-format FORMAT       text (default) or json
  --help, --version

Environment:
  ZKAGENT_GATEWAY_TOKEN     bearer token every agent request must carry (overrides "token" of
                            the config file); without one, no authentication
  ZKAGENT_GATEWAY_OPERATOR_TOKEN  the operator token (not together with operatorToken,
                            operatorTokenFile or --operator-token-file); without one, operator
                            actions are refused
)";

[[noreturn]] void fail(std::string_view field, std::string_view problem) {
  throw std::invalid_argument(std::string(field) + ": " + std::string(problem));
}

constexpr int64_t kMaxLeaseMs = 86400000;  // a day; longer means a lease outlives any incident
// The model wants TTL > 2 x the writer's renewal interval, and that interval is >= 1 ms.
constexpr int64_t kMinLeaseTtlMs = 3;
constexpr int64_t kMaxCoalesceMs = 60000;
constexpr int64_t kMaxSubscriberQueue = 65536;
constexpr int64_t kMaxRequestsPerSecond = 1000000;

int64_t parseInteger(std::string_view field, std::string_view text, int64_t low, int64_t high) {
  int64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < low || value > high) {
    fail(field, "must be an integer from " + std::to_string(low) + " to " + std::to_string(high) +
                    ", got '" + std::string(text) + "'");
  }
  return value;
}

// A token file holds the token alone; one trailing newline (as editors write it) is not part of it.
std::string readTokenFile(std::string_view field, const std::string& path) {
  std::ifstream file(path);
  if (!file) fail(field, "cannot read " + path);
  std::stringstream text;
  text << file.rdbuf();
  std::string token = text.str();
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.empty()) fail(field, path + " is empty");
  return token;
}

// TLS all or nothing, its files readable; plain HTTP only on loopback unless insecure is set.
void validateTransport(const Config& config) {
  const bool any = !config.tlsCert.empty() || !config.tlsKey.empty() || !config.tlsClientCa.empty();
  const std::pair<std::string_view, const std::string*> files[] = {
      {"tls.cert (--tls-cert)", &config.tlsCert},
      {"tls.key (--tls-key)", &config.tlsKey},
      {"tls.clientCa (--tls-client-ca)", &config.tlsClientCa}};
  for (const auto& [field, path] : files) {
    if (!any) break;
    if (path->empty()) fail(field, "required with the other TLS settings");
    if (!std::ifstream(*path)) fail(field, "cannot read " + *path);
  }
  if (!any && !config.insecure && !naming::isLoopbackHost(config.listenAddress)) {
    fail("tls.cert (--tls-cert)",
         "required to listen on " + config.listenAddress +
             ": plain HTTP is served on loopback only, unless insecure is set");
  }
  // The subscriber listener has no TLS yet: plain WebSocket, so loopback unless insecure.
  if (!config.insecure && !naming::isLoopbackHost(config.subscribeAddress)) {
    fail("presence.subscribe_listen (--subscribe-listen)",
         "is " + config.subscribeAddress +
             ": the subscriber WebSocket has no TLS and is served on loopback only, unless "
             "insecure is set");
  }
  if (!config.operatorToken.empty() && config.operatorToken == config.bearerToken) {
    fail("operatorToken",
         "must differ from token: an agent's token must not allow operator actions");
  }
}

// Checks between fields, on the final config (after the file and the flags): each field alone was
// checked where it was set.
void validateConfig(const Config& config) {
  validateTransport(config);
  if (config.leaseSweepMs > config.leaseTtlMs) {
    fail("presence.sweep_ms (--lease-sweep-ms)",
         "must not exceed presence.lease_ttl_ms (" + std::to_string(config.leaseSweepMs) + " > " +
             std::to_string(config.leaseTtlMs) +
             "): a lease would outlive its TTL by more than the TTL");
  }
}

void setListen(Config& config, std::string_view field, std::string_view value) {
  naming::HostPort address;
  if (auto error = naming::hostPortError(value, address)) fail(field, *error);
  config.listenAddress = address.host;
  config.listenPort = address.port;
}

void setSubscribeListen(Config& config, std::string_view field, std::string_view value) {
  naming::HostPort address;
  if (auto error = naming::hostPortError(value, address)) fail(field, *error);
  config.subscribeAddress = address.host;
  config.subscribePort = address.port;
  config.subscribeListenSet = true;
}

void setUntrusted(Config& config, std::string_view field, std::string_view value) {
  if (value == "hwm_only") {
    config.untrusted = UntrustedPolicy::HwmOnly;
  } else if (value == "refuse") {
    config.untrusted = UntrustedPolicy::Refuse;
  } else {
    fail(field, "expected hwm_only or refuse, got '" + std::string(value) + "'");
  }
}

void setCommitMode(Config& config, std::string_view field, std::string_view value) {
  if (value == "group") {
    config.commitMode = fencing::CommitMode::group;
  } else if (value == "per_operation") {
    config.commitMode = fencing::CommitMode::per_operation;
  } else {
    fail(field, "expected group or per_operation, got '" + std::string(value) + "'");
  }
}

void setRoot(Config& config, std::string_view field, std::string_view value) {
  if (auto error = naming::rootPathError(value)) fail(field, *error);
  config.zkRoot = std::string(value);
}

void setLogLevel(Config& config, std::string_view field, std::string_view value) {
  for (auto level : {"trace", "debug", "info", "warn", "error"}) {
    if (value == level) {
      config.logLevel = std::string(value);
      return;
    }
  }
  fail(field, "expected trace, debug, info, warn or error");
}

void setLogFormat(Config& config, std::string_view field, std::string_view value) {
  if (value != "text" && value != "json") fail(field, "expected text or json");
  config.jsonLogs = value == "json";
}

std::string stringField(const nlohmann::json& object, const char* key, std::string_view field) {
  const auto& value = object.at(key);
  if (!value.is_string()) fail(field, "must be a string");
  return value.get<std::string>();
}

int64_t integerField(const nlohmann::json& object, const char* key, std::string_view field,
                     int64_t low, int64_t high) {
  const auto& value = object.at(key);
  if (!value.is_number_integer() || value.get<int64_t>() < low || value.get<int64_t>() > high) {
    fail(field, "must be an integer from " + std::to_string(low) + " to " + std::to_string(high));
  }
  return value.get<int64_t>();
}

void requireKnownKeys(const nlohmann::json& object, std::string_view where,
                      std::initializer_list<std::string_view> known) {
  if (!object.is_object()) fail(where.empty() ? "config" : where, "must be a JSON object");
  for (const auto& [key, value] : object.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      fail(std::string(where) + (where.empty() ? "" : ".") + key, "unknown field");
    }
  }
}

}  // namespace

Config parseConfigJson(std::string_view text, Config config) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& error) {
    // Not only parse_error: a number beyond a double (1e999) is out_of_range.
    fail("config", std::string("not valid JSON: ") + error.what());
  }
  requireKnownKeys(
      root, "",
      {"listen", "dataDir", "zookeeper", "token", "tokenFile", "operatorToken", "operatorTokenFile",
       "tls", "insecure", "accounts", "commitMode", "handlerThreads", "ioThreads", "agentTimeoutMs",
       "maxRequestsPerSecond", "presence", "log"});
  if (root.contains("listen")) setListen(config, "listen", stringField(root, "listen", "listen"));
  if (root.contains("dataDir")) config.dataDir = stringField(root, "dataDir", "dataDir");
  if (root.contains("token")) config.bearerToken = stringField(root, "token", "token");
  if (root.contains("tokenFile")) {
    config.bearerToken = readTokenFile("tokenFile", stringField(root, "tokenFile", "tokenFile"));
  }
  if (root.contains("operatorToken")) {
    config.operatorToken = stringField(root, "operatorToken", "operatorToken");
  }
  if (root.contains("operatorTokenFile")) {
    if (root.contains("operatorToken")) {
      fail("operatorTokenFile", "set operatorToken or operatorTokenFile, not both");
    }
    config.operatorToken = readTokenFile(
        "operatorTokenFile", stringField(root, "operatorTokenFile", "operatorTokenFile"));
  }
  if (root.contains("maxRequestsPerSecond")) {
    config.maxRequestsPerSecond = static_cast<unsigned>(integerField(
        root, "maxRequestsPerSecond", "maxRequestsPerSecond", 0, kMaxRequestsPerSecond));
  }
  if (root.contains("insecure")) {
    if (!root["insecure"].is_boolean()) fail("insecure", "must be true or false");
    config.insecure = root["insecure"].get<bool>();
  }
  if (root.contains("tls")) {
    const auto& tls = root["tls"];
    requireKnownKeys(tls, "tls", {"cert", "key", "clientCa"});
    if (tls.contains("cert")) config.tlsCert = stringField(tls, "cert", "tls.cert");
    if (tls.contains("key")) config.tlsKey = stringField(tls, "key", "tls.key");
    if (tls.contains("clientCa")) config.tlsClientCa = stringField(tls, "clientCa", "tls.clientCa");
  }
  if (root.contains("commitMode")) {
    setCommitMode(config, "commitMode", stringField(root, "commitMode", "commitMode"));
  }
  if (root.contains("agentTimeoutMs")) {
    config.agentTimeoutMs =
        static_cast<int>(integerField(root, "agentTimeoutMs", "agentTimeoutMs", 100, 3600000));
  }
  if (root.contains("handlerThreads")) {
    config.handlerThreads =
        static_cast<size_t>(integerField(root, "handlerThreads", "handlerThreads", 1, 1024));
  }
  if (root.contains("ioThreads")) {
    config.ioThreads = static_cast<size_t>(integerField(root, "ioThreads", "ioThreads", 1, 64));
  }
  if (root.contains("accounts")) {
    const auto& accounts = root["accounts"];
    if (!accounts.is_array()) fail("accounts", "must be an array of account ids");
    config.accounts.clear();
    for (size_t i = 0; i < accounts.size(); ++i) {
      std::string field = "accounts[" + std::to_string(i) + "]";
      if (!accounts[i].is_string() || naming::accountIdError(accounts[i].get<std::string>())) {
        fail(field, naming::kIdRule);
      }
      config.accounts.push_back(accounts[i].get<std::string>());
    }
  }
  if (root.contains("zookeeper")) {
    const auto& zk = root["zookeeper"];
    requireKnownKeys(zk, "zookeeper", {"hosts", "root", "sessionTimeoutMs", "untrusted"});
    if (zk.contains("hosts")) config.zkHosts = stringField(zk, "hosts", "zookeeper.hosts");
    if (zk.contains("root"))
      setRoot(config, "zookeeper.root", stringField(zk, "root", "zookeeper.root"));
    if (zk.contains("sessionTimeoutMs")) {
      config.zkSessionTimeoutMs = static_cast<int>(
          integerField(zk, "sessionTimeoutMs", "zookeeper.sessionTimeoutMs", 400, 600000));
    }
    if (zk.contains("untrusted")) {
      setUntrusted(config, "zookeeper.untrusted",
                   stringField(zk, "untrusted", "zookeeper.untrusted"));
    }
  }
  if (root.contains("presence")) {
    const auto& presence = root["presence"];
    requireKnownKeys(presence, "presence",
                     {"lease_ttl_ms", "sweep_ms", "debounce_ms", "subscribe_listen", "coalesce_ms",
                      "subscriber_queue"});
    if (presence.contains("debounce_ms")) {
      config.debounceMs = static_cast<int>(
          integerField(presence, "debounce_ms", "presence.debounce_ms", 0, kMaxLeaseMs));
    }
    if (presence.contains("subscribe_listen")) {
      setSubscribeListen(config, "presence.subscribe_listen",
                         stringField(presence, "subscribe_listen", "presence.subscribe_listen"));
    }
    if (presence.contains("coalesce_ms")) {
      config.coalesceMs = static_cast<int>(
          integerField(presence, "coalesce_ms", "presence.coalesce_ms", 0, kMaxCoalesceMs));
    }
    if (presence.contains("subscriber_queue")) {
      config.subscriberQueue = static_cast<int>(integerField(
          presence, "subscriber_queue", "presence.subscriber_queue", 1, kMaxSubscriberQueue));
    }
    if (presence.contains("lease_ttl_ms")) {
      config.leaseTtlMs = static_cast<int>(integerField(
          presence, "lease_ttl_ms", "presence.lease_ttl_ms", kMinLeaseTtlMs, kMaxLeaseMs));
    }
    if (presence.contains("sweep_ms")) {
      config.leaseSweepMs =
          static_cast<int>(integerField(presence, "sweep_ms", "presence.sweep_ms", 1, kMaxLeaseMs));
    }
  }
  if (root.contains("log")) {
    const auto& log = root["log"];
    requireKnownKeys(log, "log", {"level", "format"});
    if (log.contains("level"))
      setLogLevel(config, "log.level", stringField(log, "level", "log.level"));
    if (log.contains("format")) {
      setLogFormat(config, "log.format", stringField(log, "format", "log.format"));
    }
  }
  return config;
}

CommandLine parseCommandLine(const std::vector<std::string>& args,
                             std::optional<std::string> environmentToken,
                             std::optional<std::string> environmentOperatorToken) {
  CommandLine result;
  try {
    Config config;
    // The config file first, so that flags override it wherever they stand.
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "--help") return {std::nullopt, std::string(kUsage), 0};
      if (args[i] == "--version") {
        return {std::nullopt, std::string("fencing-gateway ") + ZKAGENT_VERSION + "\n", 0};
      }
      if (args[i] == "--config") {
        if (i + 1 >= args.size()) fail("--config", "needs a file name");
        std::ifstream file(args[i + 1]);
        if (!file) fail("--config", "cannot read " + args[i + 1]);
        std::stringstream text;
        text << file.rdbuf();
        config = parseConfigJson(text.str(), config);
      }
    }
    for (size_t i = 0; i < args.size(); i += 2) {
      const std::string& flag = args[i];
      if (flag == "--insecure") {
        config.insecure = true;
        --i;  // a flag without a value
        continue;
      }
      if (i + 1 >= args.size())
        fail(flag, flag.starts_with("--") ? "needs a value" : "unexpected argument");
      const std::string& value = args[i + 1];
      if (flag == "--config") {
        continue;
      } else if (flag == "--listen") {
        setListen(config, flag, value);
      } else if (flag == "--data-dir") {
        config.dataDir = value;
      } else if (flag == "--zk") {
        config.zkHosts = value;
      } else if (flag == "--root") {
        setRoot(config, flag, value);
      } else if (flag == "--zk-untrusted") {
        setUntrusted(config, flag, value);
      } else if (flag == "--commit-mode") {
        setCommitMode(config, flag, value);
      } else if (flag == "--lease-ttl-ms") {
        config.leaseTtlMs =
            static_cast<int>(parseInteger(flag, value, kMinLeaseTtlMs, kMaxLeaseMs));
      } else if (flag == "--lease-sweep-ms") {
        config.leaseSweepMs = static_cast<int>(parseInteger(flag, value, 1, kMaxLeaseMs));
      } else if (flag == "--debounce-ms") {
        config.debounceMs = static_cast<int>(parseInteger(flag, value, 0, kMaxLeaseMs));
      } else if (flag == "--subscribe-listen") {
        setSubscribeListen(config, flag, value);
      } else if (flag == "--coalesce-ms") {
        config.coalesceMs = static_cast<int>(parseInteger(flag, value, 0, kMaxCoalesceMs));
      } else if (flag == "--subscriber-queue") {
        config.subscriberQueue =
            static_cast<int>(parseInteger(flag, value, 1, kMaxSubscriberQueue));
      } else if (flag == "--log-level") {
        setLogLevel(config, flag, value);
      } else if (flag == "--tls-cert") {
        config.tlsCert = value;
      } else if (flag == "--tls-key") {
        config.tlsKey = value;
      } else if (flag == "--tls-client-ca") {
        config.tlsClientCa = value;
      } else if (flag == "--token-file") {
        config.bearerToken = readTokenFile(flag, value);
      } else if (flag == "--operator-token-file") {
        config.operatorToken = readTokenFile(flag, value);
      } else if (flag == "--max-requests-per-second") {
        config.maxRequestsPerSecond =
            static_cast<unsigned>(parseInteger(flag, value, 0, kMaxRequestsPerSecond));
      } else if (flag == "--log-format") {
        setLogFormat(config, flag, value);
      } else {
        fail(flag, "unknown option (see --help)");
      }
    }
    if (environmentToken && !environmentToken->empty()) config.bearerToken = *environmentToken;
    if (environmentOperatorToken && !environmentOperatorToken->empty()) {
      if (!config.operatorToken.empty()) {
        fail(
            "ZKAGENT_GATEWAY_OPERATOR_TOKEN",
            "set either it or operatorToken, operatorTokenFile or --operator-token-file, not both");
      }
      config.operatorToken = *environmentOperatorToken;
    }
    if (config.dataDir.empty()) fail("--data-dir", "required: the HWM must survive restarts");
    if (!config.subscribeListenSet) {
      config.subscribeAddress = config.listenAddress;
      config.subscribePort = config.listenPort == 0 || config.listenPort == 65535
                                 ? uint16_t{0}
                                 : static_cast<uint16_t>(config.listenPort + 1);
    }
    validateConfig(config);
    result.config = std::move(config);
  } catch (const std::invalid_argument& error) {
    result.message = std::string("fencing-gateway: ") + error.what() + "\n";
    result.exitCode = 2;
  }
  return result;
}

}  // namespace zkagent::gateway
