// Command line and JSON config of fencing-gateway. One validator: every field, from a flag or
// from the file, goes through the same setters, and errors name the field.
#include <charconv>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "gateway.hpp"
#include "zkagent/config_reader.hpp"
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
  --zk-session-timeout-ms N ZooKeeper session timeout (default 10000, 400 to 600000); a cut link
                            is noticed after two thirds of it
  --commit-mode MODE        group (default) or per_operation (one fsync per operation)
  --compact-after-mib N     fold the operation log into a snapshot once it reaches N MiB
                            (default 64; 0: never)
  --config FILE             JSON config file; flags given on the command line override it
  --lease-ttl-ms N          presence lease lifetime after its last renewal (default 150000)
  --lease-sweep-ms N        how often expired leases are swept (default 5000, at most the TTL)
  --lease-journal FILE      append every lease entry's fencing decision to FILE, one JSON line
                            each (for tests; default none)
  --debounce-ms N           a user's offline is published only after N ms with no device back
                            (default 20000; 0 publishes at once)
  --subscribe-listen HOST:PORT  the subscribers' WebSocket listener, wss:// with --tls-cert
                            (default: the --listen host and the next port, 8481; any free port
                            when --listen has port 0; printed as "SUBSCRIBE-LISTENING HOST:PORT")
  --coalesce-ms N           changes for one subscriber are sent at most once per N ms, merged
                            (default 100)
  --subscriber-queue N      unsent messages a subscriber may have before it is closed with 4008
                            (resubscribe) (default 64)
  --max-subscribers N       subscriber connections at once; more get 503 with Retry-After
                            (default 10000)
  --tls-cert FILE           serve HTTPS with this certificate (PEM); needs --tls-key and
                            --tls-client-ca; the subscriber listener serves wss:// with it
  --tls-key FILE            the certificate's private key (PEM)
  --tls-client-ca FILE      CA whose client certificates are accepted; an agent may act only as
                            the instance its certificate names (docs/gateway.md)
  --insecure                allow plain HTTP on a non-loopback --listen, plain ws:// on a
                            non-loopback --subscribe-listen (logged as a warning)
  --token-file FILE         the agents' bearer token, read from FILE (ZKAGENT_GATEWAY_TOKEN
                            overrides)
  --operator-token-file FILE  the operator token (HWM reset, privacy rules, drain), read from FILE
  --max-requests-per-second N  per connection on the HTTP listener, beyond it 429 (default
                            10000; 0: no limit)
  --cluster-shards N        cluster mode: the cluster's shard count (1 to 4096; fixed when the
                            cluster is created); needs --zk, --gateway-id and --advertise-url
  --gateway-id ID           cluster mode: this gateway's id in the shards' elections
  --advertise-url URL       cluster mode: http[s]://HOST:PORT agents reach this gateway on
  --log-level LEVEL         trace, debug, info (default), warn, error, critical, off
  --log-format FORMAT       text (default) or json
  --help, --version

Environment:
  ZKAGENT_GATEWAY_TOKEN     bearer token every agent request must carry (overrides "token" of
                            the config file); without one, no authentication
  ZKAGENT_GATEWAY_OPERATOR_TOKEN  the operator token (not together with operator_token,
                            operator_token_file or --operator-token-file); without one, operator
                            actions are refused
)";

using config::FieldReader;
using config::parseInteger;

[[noreturn]] void fail(std::string_view field, const std::string& problem) {
  config::fail(std::string(field), problem);
}

constexpr int64_t kMaxLeaseMs = 86400000;  // a day; longer means a lease outlives any incident
// The model wants TTL > 2 x the writer's renewal interval, and that interval is >= 1 ms.
constexpr int64_t kMinLeaseTtlMs = 3;
constexpr int64_t kMaxCoalesceMs = 60000;
constexpr int64_t kMaxSubscriberQueue = 65536;
constexpr int64_t kMaxSubscribers = 1000000;
constexpr int64_t kMaxRequestsPerSecond = 1000000;
constexpr int64_t kMaxCompactAfterMib = 1 << 20;  // 1 TiB: beyond it "never" is meant

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
      {"tls.client_ca (--tls-client-ca)", &config.tlsClientCa}};
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
  // The subscriber listener has the HTTP listener's certificate (wss://); without one it is plain
  // WebSocket, so loopback unless insecure. Off loopback a claimed viewer is never trusted.
  if (!any && !config.insecure && !naming::isLoopbackHost(config.subscribeAddress)) {
    fail("presence.subscribe_listen (--subscribe-listen)",
         "is " + config.subscribeAddress +
             ": without tls.cert (--tls-cert) the subscriber WebSocket is plain ws:// and is "
             "served on loopback only, unless insecure is set");
  }
  if (!config.viewerAuth && !naming::isLoopbackHost(config.subscribeAddress)) {
    fail("presence.viewer_auth",
         "is required when presence.subscribe_listen (" + config.subscribeAddress +
             ") is not a loopback address: subscribers prove their viewer with a token "
             "(docs/auth.md)");
  }
  if (!config.operatorToken.empty() && config.operatorToken == config.bearerToken) {
    fail("operator_token",
         "must differ from token: an agent's token must not allow operator actions");
  }
}

// Cluster mode: all three settings or none, on ZooKeeper, never deciding without it.
void validateCluster(const Config& config) {
  const bool any =
      config.clusterShards != 0 || !config.gatewayId.empty() || !config.advertiseUrl.empty();
  if (!any) return;
  const std::pair<std::string_view, bool> required[] = {
      {"cluster.shards (--cluster-shards)", config.clusterShards != 0},
      {"cluster.gateway_id (--gateway-id)", !config.gatewayId.empty()},
      {"cluster.advertise_url (--advertise-url)", !config.advertiseUrl.empty()},
      {"zookeeper.hosts (--zk)", !config.zkHosts.empty()}};
  for (const auto& [field, set] : required) {
    if (!set) fail(field, "required in cluster mode (with the other cluster settings)");
  }
  if (config.untrusted == UntrustedPolicy::HwmOnly) {
    fail("zookeeper.untrusted (--zk-untrusted)",
         "must be refuse in cluster mode: without ZooKeeper a gateway cannot tell who leads an "
         "account, and another gateway may hold a newer high-water mark");
  }
  const bool https = config.advertiseUrl.starts_with("https://");
  if (https != !config.tlsCert.empty()) {
    fail("cluster.advertise_url (--advertise-url)",
         https ? "is https:// but the gateway serves plain HTTP (no tls.cert)"
               : "is http:// but the gateway serves HTTPS (tls.cert is set)");
  }
}

// Checks between fields, on the final config (after the file and the flags): each field alone was
// checked where it was set.
void validateConfig(const Config& config) {
  validateTransport(config);
  validateCluster(config);
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
  config.untrusted = config::choose(field, value, {"hwm_only", "refuse"}) == "refuse"
                         ? UntrustedPolicy::Refuse
                         : UntrustedPolicy::HwmOnly;
  config.untrustedSet = true;
}

void setGatewayId(Config& config, std::string_view field, std::string_view value) {
  if (auto error = naming::instanceIdError(value)) fail(field, *error);
  config.gatewayId = std::string(value);
}

// What agents dial and a 421 names.
void setAdvertiseUrl(Config& config, std::string_view field, std::string_view value) {
  naming::HostPort address;
  bool https = false;
  if (auto error = naming::httpUrlError(value, address, https)) fail(field, *error);
  config.advertiseUrl = std::string(value);
}

void setCommitMode(Config& config, std::string_view field, std::string_view value) {
  config.commitMode = config::choose(field, value, {"group", "per_operation"}) == "per_operation"
                          ? fencing::CommitMode::per_operation
                          : fencing::CommitMode::group;
}

void setRoot(Config& config, std::string_view field, std::string_view value) {
  if (auto error = naming::rootPathError(value)) fail(field, *error);
  config.zkRoot = std::string(value);
}

void setLogFormat(Config& config, std::string_view field, std::string_view value) {
  config.jsonLogs = config::choose(field, value, {"text", "json"}) == "json";
}

}  // namespace

Config parseConfigJson(std::string_view text, Config config, const std::filesystem::path& baseDir) {
  const nlohmann::json root = config::parseObject(text);
  FieldReader top(root);
  // Keys are snake_case like the agent's; the camelCase names of earlier releases are still read
  // (renamed) with a warning.
  auto& warnings = config.warnings;
  auto key = [&warnings](FieldReader& reader, std::string_view field, std::string_view before) {
    return reader.renamed(field, before, warnings);
  };
  if (auto listen = top.string("listen")) setListen(config, "listen", *listen);
  if (auto dataDir = top.string(key(top, "data_dir", "dataDir"))) config.dataDir = *dataDir;
  if (auto token = top.string("token")) config.bearerToken = *token;
  const auto tokenFileKey = key(top, "token_file", "tokenFile");
  if (auto file = top.string(tokenFileKey)) config.bearerToken = readTokenFile(tokenFileKey, *file);
  const auto operatorTokenKey = key(top, "operator_token", "operatorToken");
  const auto operatorToken = top.string(operatorTokenKey);
  if (operatorToken) config.operatorToken = *operatorToken;
  const auto operatorFileKey = key(top, "operator_token_file", "operatorTokenFile");
  if (auto file = top.string(operatorFileKey)) {
    if (operatorToken) {
      fail(operatorFileKey, "set " + operatorTokenKey + " or " + operatorFileKey + ", not both");
    }
    config.operatorToken = readTokenFile(operatorFileKey, *file);
  }
  if (auto rate = top.integer(key(top, "max_requests_per_second", "maxRequestsPerSecond"), 0,
                              kMaxRequestsPerSecond)) {
    config.maxRequestsPerSecond = static_cast<unsigned>(*rate);
  }
  config.insecure = top.boolean("insecure", config.insecure);
  if (top.find("tls")) {
    auto tls = top.object("tls");
    config.tlsCert = tls.string("cert", config.tlsCert);
    config.tlsKey = tls.string("key", config.tlsKey);
    config.tlsClientCa = tls.string(key(tls, "client_ca", "clientCa"), config.tlsClientCa);
    tls.rejectUnknown();
  }
  const auto commitKey = key(top, "commit_mode", "commitMode");
  if (auto mode = top.string(commitKey)) setCommitMode(config, commitKey, *mode);
  if (auto mib = top.integer("compact_after_mib", 0, kMaxCompactAfterMib)) {
    config.compactAfterMib = static_cast<std::uint64_t>(*mib);
  }
  if (auto timeout = top.integer(key(top, "agent_timeout_ms", "agentTimeoutMs"), 100, 3600000)) {
    config.agentTimeoutMs = static_cast<int>(*timeout);
  }
  if (auto threads = top.integer(key(top, "handler_threads", "handlerThreads"), 1, 1024)) {
    config.handlerThreads = static_cast<size_t>(*threads);
  }
  if (auto threads = top.integer(key(top, "io_threads", "ioThreads"), 1, 64))
    config.ioThreads = static_cast<size_t>(*threads);
  if (const auto* accounts = top.find("accounts")) {
    if (!accounts->is_array()) fail("accounts", "must be an array of account ids");
    config.accounts.clear();
    for (size_t i = 0; i < accounts->size(); ++i) {
      const auto& account = (*accounts)[i];
      if (!account.is_string() || naming::accountIdError(account.get<std::string>())) {
        fail("accounts[" + std::to_string(i) + "]", std::string(naming::kIdRule));
      }
      config.accounts.push_back(account.get<std::string>());
    }
  }
  if (top.find("zookeeper")) {
    auto zk = top.object("zookeeper");
    config.zkHosts = zk.string("hosts", config.zkHosts);
    if (auto path = zk.string("root")) setRoot(config, "zookeeper.root", *path);
    if (auto timeout = zk.integer(key(zk, "session_timeout_ms", "sessionTimeoutMs"), 400, 600000)) {
      config.zkSessionTimeoutMs = static_cast<int>(*timeout);
    }
    if (auto untrusted = zk.string("untrusted")) {
      setUntrusted(config, "zookeeper.untrusted", *untrusted);
    }
    zk.rejectUnknown();
  }
  if (top.find("cluster")) {
    auto cluster = top.object("cluster");
    if (auto shards = cluster.integer("shards", 1, naming::kMaxShards)) {
      config.clusterShards = static_cast<std::uint32_t>(*shards);
    }
    if (auto id = cluster.string("gateway_id")) setGatewayId(config, "cluster.gateway_id", *id);
    if (auto url = cluster.string("advertise_url")) {
      setAdvertiseUrl(config, "cluster.advertise_url", *url);
    }
    cluster.rejectUnknown();
  }
  if (top.find("presence")) {
    auto presence = top.object("presence");
    auto integer = [&presence](std::string_view field, int64_t low, int64_t high, int& value) {
      if (auto read = presence.integer(field, low, high)) value = static_cast<int>(*read);
    };
    integer("debounce_ms", 0, kMaxLeaseMs, config.debounceMs);
    if (auto listen = presence.string("subscribe_listen")) {
      setSubscribeListen(config, "presence.subscribe_listen", *listen);
    }
    integer("coalesce_ms", 0, kMaxCoalesceMs, config.coalesceMs);
    integer("subscriber_queue", 1, kMaxSubscriberQueue, config.subscriberQueue);
    integer("max_subscribers", 1, kMaxSubscribers, config.maxSubscribers);
    integer("lease_ttl_ms", kMinLeaseTtlMs, kMaxLeaseMs, config.leaseTtlMs);
    integer("sweep_ms", 1, kMaxLeaseMs, config.leaseSweepMs);
    if (auto path = presence.string("lease_journal")) config.leaseJournal = *path;
    for (auto [field, settings] : {std::pair{"viewer_auth", &config.viewerAuth},
                                   std::pair{"service_auth", &config.serviceAuth}}) {
      if (!presence.find(field)) continue;
      auto keys = presence.object(field);
      *settings = auth::readSettings(keys, baseDir);
      keys.rejectUnknown();
    }
    presence.rejectUnknown();
  }
  if (top.find("log")) {
    auto log = top.object("log");
    config.logLevel = log.logLevel("level").value_or(config.logLevel);
    if (auto format = log.string("format")) setLogFormat(config, "log.format", *format);
    log.rejectUnknown();
  }
  top.rejectUnknown();
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
        config =
            parseConfigJson(text.str(), config, std::filesystem::path(args[i + 1]).parent_path());
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
      } else if (flag == "--zk-session-timeout-ms") {
        config.zkSessionTimeoutMs = static_cast<int>(parseInteger(flag, value, 400, 600000));
      } else if (flag == "--commit-mode") {
        setCommitMode(config, flag, value);
      } else if (flag == "--compact-after-mib") {
        config.compactAfterMib =
            static_cast<std::uint64_t>(parseInteger(flag, value, 0, kMaxCompactAfterMib));
      } else if (flag == "--lease-ttl-ms") {
        config.leaseTtlMs =
            static_cast<int>(parseInteger(flag, value, kMinLeaseTtlMs, kMaxLeaseMs));
      } else if (flag == "--lease-sweep-ms") {
        config.leaseSweepMs = static_cast<int>(parseInteger(flag, value, 1, kMaxLeaseMs));
      } else if (flag == "--lease-journal") {
        config.leaseJournal = value;
      } else if (flag == "--debounce-ms") {
        config.debounceMs = static_cast<int>(parseInteger(flag, value, 0, kMaxLeaseMs));
      } else if (flag == "--subscribe-listen") {
        setSubscribeListen(config, flag, value);
      } else if (flag == "--coalesce-ms") {
        config.coalesceMs = static_cast<int>(parseInteger(flag, value, 0, kMaxCoalesceMs));
      } else if (flag == "--subscriber-queue") {
        config.subscriberQueue =
            static_cast<int>(parseInteger(flag, value, 1, kMaxSubscriberQueue));
      } else if (flag == "--max-subscribers") {
        config.maxSubscribers = static_cast<int>(parseInteger(flag, value, 1, kMaxSubscribers));
      } else if (flag == "--log-level") {
        config.logLevel = config::logLevel(flag, value);
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
      } else if (flag == "--cluster-shards") {
        config.clusterShards =
            static_cast<std::uint32_t>(parseInteger(flag, value, 1, naming::kMaxShards));
      } else if (flag == "--gateway-id") {
        setGatewayId(config, flag, value);
      } else if (flag == "--advertise-url") {
        setAdvertiseUrl(config, flag, value);
      } else if (flag == "--log-format") {
        setLogFormat(config, flag, value);
      } else {
        fail(flag, "unknown option (see --help)");
      }
    }
    if (environmentToken && !environmentToken->empty()) config.bearerToken = *environmentToken;
    if (environmentOperatorToken && !environmentOperatorToken->empty()) {
      if (!config.operatorToken.empty()) {
        fail("ZKAGENT_GATEWAY_OPERATOR_TOKEN",
             "set either it or operator_token, operator_token_file or --operator-token-file, not "
             "both");
      }
      config.operatorToken = *environmentOperatorToken;
    }
    if (config.dataDir.empty()) fail("--data-dir", "required: the HWM must survive restarts");
    if (!config.subscribeListenSet) {
      // Off loopback only where subscribers prove who they are.
      config.subscribeAddress = config.viewerAuth || naming::isLoopbackHost(config.listenAddress)
                                    ? config.listenAddress
                                    : "127.0.0.1";
      config.subscribePort = config.listenPort == 0 || config.listenPort == 65535
                                 ? uint16_t{0}
                                 : static_cast<uint16_t>(config.listenPort + 1);
    }
    // Cluster mode never decides without ZooKeeper: refuse unless told otherwise (then an error).
    if (config.clusterShards != 0 && !config.untrustedSet) {
      config.untrusted = UntrustedPolicy::Refuse;
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
