// zk-agent configuration: one JSON file, validated in one place (docs/configuration.md).
//
//   auto config = zkagent::agent::loadConfig("agent.json");   // throws ConfigError
//
// Every problem is reported as a ConfigError naming the field ("health.ttl_ms") and what is
// wrong with it; nothing is applied from a config that fails validation. Unknown fields are
// errors too, so a typo never silently falls back to a default.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "zkagent/auth.hpp"

namespace zkagent::agent {

using Millis = std::chrono::milliseconds;

enum class LogFormat { Text, Json };
enum class GateMode { Fast, Strict };

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

struct Config {
  std::string instanceId;  // unique per host; names the health node and appears in `active`

  struct ZooKeeper {
    std::string hosts;  // "h1:2181,h2:2181"
    Millis sessionTimeout{10000};
    std::string root = "/wx-accounts";
    std::string agentsPath = "/zkagent/agents";  // health reports: {agentsPath}/{instanceId}
    // "user:password" from zookeeper.auth.digest_file: authenticate and create the election tree
    // with ACLs (world read only). Empty: open ACLs.
    std::string digest;
  } zookeeper;

  std::vector<std::string> accounts;  // from "accounts" and/or "accounts_file", no duplicates

  struct Gateway {
    HostPort address;   // from "url": http://host:port or https://host:port
    std::string token;  // bearer token for the gateway, empty: none
    // With an https url: the CA the gateway's certificate must chain to, and the agent's own
    // certificate and key, which name this instance (the gateway refuses any other instance).
    struct Tls {
      std::string ca;
      std::string cert;
      std::string key;
    };
    std::optional<Tls> tls;
    Millis heartbeatInterval{1000};  // 0 disables the heartbeat (the link is then assumed up)
    Millis heartbeatTimeout{3000};   // no answer for this long: link down
    Millis requestTimeout{2000};     // one forwarded operation
  } gateway;

  struct Admin {
    HostPort listen{"127.0.0.1", 8470};
    std::string token;  // bearer token for /v1/*, required off loopback
    // Without a token, drain and resign are refused (403) unless this is set (loopback only).
    bool openOperatorActions = false;
    std::string advertise;  // endpoint written into member/active nodes; default http://listen
  } admin;

  // The device endpoint and the presence runtime (docs/presence-runtime.md).
  struct Presence {
    HostPort listen{"127.0.0.1", 8471};  // the WebSocket listener for devices
    // deviceEndpoint in member/active; default ws://listen, or wss://listen with tls
    std::string advertise;
    // presence.tls: the listener's certificate chain and key (PEM); devices connect with wss://.
    struct Tls {
      std::string cert;
      std::string key;
    };
    std::optional<Tls> tls;
    bool insecure = false;  // allow plain ws:// off loopback (without tls)
    // Device tokens (presence.auth, docs/auth.md): when set, every upgrade needs a token whose
    // sub/account are the request's device/account. Required off loopback unless
    // insecureNoDeviceAuth (presence.insecure_no_device_auth) says otherwise.
    std::optional<auth::VerifierSettings> auth;
    bool insecureNoDeviceAuth = false;
    Millis heartbeat{30000};    // the devices' heartbeat, told them in the welcome frame
    Millis pingTimeout{75000};  // close a device silent this long; 0 disables the check
    Millis checkInterval{5000};
    Millis renewInterval{60000};    // one lease batch per tick for every connection
    double renewJitter = 0.1;       // each tick x U[1 - j, 1 + j]; 0: exact ticks, no spread
    Millis leaseTtl{150000};        // the gateway's lease TTL (must match it)
    size_t maxBatchEntries = 2000;  // entries per POST /v1/presence/leases
  } presence;

  struct Health {
    Millis interval{5000};
    Millis ttl{30000};
  } health;

  // Leadership spread across the schedulable agents standing for the same accounts
  // (docs/agent.md, "Balance").
  struct Balance {
    bool enabled = true;           // false: the queue order alone decides who leads
    Millis settle{15000};          // schedulable membership unchanged this long before moving
    size_t maxMovesInFlight = 16;  // handovers this agent has started and not yet seen land
    double tolerance = 0.1;        // band around K/M (at least one account) that needs no move
    std::map<std::string, std::string> preferred;  // account -> instance that leads it if it can
  } balance;

  Millis lockDelay{0};  // wait after taking over from an expired session
  GateMode gate = GateMode::Fast;
  Millis shutdownTimeout{5000};  // SIGTERM: exit within this even if ZooKeeper hangs

  struct Log {
    LogFormat format = LogFormat::Text;
    std::string level = "info";
  } log;
};

class ConfigError : public std::invalid_argument {
 public:
  ConfigError(std::string field, const std::string& problem)
      : std::invalid_argument(field + ": " + problem), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// The admin token's environment variable; set together with admin.token or admin.token_file it
// is an error.
inline constexpr const char* kAdminTokenVariable = "ZKAGENT_ADMIN_TOKEN";

// Parses and validates JSON text; a relative accounts_file is resolved against `baseDir`.
// `environmentAdminToken` is ZKAGENT_ADMIN_TOKEN's value, if set.
Config parseConfig(std::string_view json, const std::filesystem::path& baseDir = {},
                   std::optional<std::string> environmentAdminToken = std::nullopt);
// Reads the file and parses it (ConfigError with field "config" when unreadable).
Config loadConfig(const std::filesystem::path& path,
                  std::optional<std::string> environmentAdminToken = std::nullopt);
// The config in its JSON form (defaults filled in), for --check-config.
std::string describe(const Config& config);

}  // namespace zkagent::agent
