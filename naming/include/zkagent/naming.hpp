// The one home of the naming rules the election, fencing, the gateway, the agent and the tools
// share: account and instance ids, the election root, the znode paths under it, and host:port.
// Every rule returns why a value is refused (nullopt when it is fine), always with the same text,
// so that callers only add the field's name ("accounts[2]: must match ..."). Header-only and free
// of ZooKeeper: the fencing library links it without the election.
//
// Layout under the root (default /wx-accounts):
//   {root}/{account}/members/m-0000000007   the candidates' queue
//   {root}/{account}/active                 the leader's record
//   {root}/{account}/handover               a hand-over in progress
//   {root}/@sessions/{session, 16 hex}      session marks ('@' is never in an account id)
//   {root}/@gateway-cluster                 a gateway cluster's shard count
//   {root}/@gateway-cluster/epoch           the cluster's version epoch (decimal), one per take
//   {root}/@gateway-cluster/privacy/{id}    an account's presence privacy rules (cluster mode)
//   {root}/@gateway-shards/shard-0000/...   the shards' elections (members, active: the owner)
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace zkagent::naming {

inline constexpr std::size_t kMaxIdLength = 128;
// The refusal of an id that is not one path segment. No echo of the id: it may hold any bytes,
// and the text goes into JSON answers and log lines.
inline constexpr std::string_view kIdRule = "must match [A-Za-z0-9_.-]{1,128}, not . or ..";

// One znode path segment of [A-Za-z0-9_.-]{1,128}, not "." or "..".
constexpr bool isPathSegmentId(std::string_view id) {
  if (id.empty() || id.size() > kMaxIdLength || id == "." || id == "..") return false;
  for (const char c : id) {
    const bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                         (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!allowed) return false;
  }
  return true;
}

// Account ids name {root}/{account}.
inline std::optional<std::string> accountIdError(std::string_view id) {
  if (isPathSegmentId(id)) return std::nullopt;
  return std::string(kIdRule);
}

// Instance ids name the agent's health node {agents_path}/{instance}: the same rule.
inline std::optional<std::string> instanceIdError(std::string_view id) {
  return accountIdError(id);
}

// Ids the gateway keeps and logs but never puts into a path (an operation's opId, the instance a
// token, a lease batch or a heartbeat names): printable ASCII without spaces keeps log lines and
// the binary log clean. Looser than instanceIdError: the gateway also serves electors that are
// not agents (zk-elect takes any --instance-id).
inline constexpr std::string_view kPrintableIdRule =
    "must be 1 to 128 printable ASCII characters without spaces";
inline std::optional<std::string> printableIdError(std::string_view id) {
  bool printable = !id.empty() && id.size() <= kMaxIdLength;
  for (const char c : id) printable = printable && c > ' ' && c <= '~';
  if (printable) return std::nullopt;
  return std::string(kPrintableIdRule);
}

// The election root (and the agents' health root): absolute, not "/" itself, no empty segment.
inline std::optional<std::string> rootPathError(std::string_view path) {
  if (path.size() >= 2 && path.front() == '/' && path.back() != '/' &&
      path.find("//") == std::string_view::npos) {
    return std::nullopt;
  }
  return "must be an absolute znode path like /wx-accounts (no trailing or double '/')";
}

// ---------------------------------------------------------------------------------------------
// Paths under the root.

inline std::string accountPath(std::string_view root, std::string_view account) {
  return std::string(root) + "/" + std::string(account);
}
inline std::string membersPath(std::string_view root, std::string_view account) {
  return accountPath(root, account) + "/members";
}
inline std::string memberPath(std::string_view root, std::string_view account,
                              std::string_view memberName) {
  return membersPath(root, account) + "/" + std::string(memberName);
}
inline std::string activePath(std::string_view root, std::string_view account) {
  return accountPath(root, account) + "/active";
}
// The account whose `active` node `path` is, or nullopt when it is no such node.
inline std::optional<std::string> accountOfActivePath(std::string_view root,
                                                      std::string_view path) {
  constexpr std::string_view kActive = "/active";
  if (path.size() <= root.size() + 1 + kActive.size() || !path.starts_with(root) ||
      path[root.size()] != '/' || !path.ends_with(kActive)) {
    return std::nullopt;
  }
  const auto account = path.substr(root.size() + 1, path.size() - root.size() - 1 - kActive.size());
  if (!isPathSegmentId(account)) return std::nullopt;
  return std::string(account);
}
inline std::string handoverPath(std::string_view root, std::string_view account) {
  return accountPath(root, account) + "/handover";
}
inline std::string sessionMarksPath(std::string_view root) {
  return std::string(root) + "/@sessions";
}
// ---------------------------------------------------------------------------------------------
// A cluster of gateways (docs/gateway-cluster.md): the shard count, written once, and one election
// per shard under its own root, whose `active` node names the shard's owner.
inline std::string gatewayClusterPath(std::string_view root) {
  return std::string(root) + "/@gateway-cluster";
}
// The presence version epoch: bumped by compare-and-set at every take of a shard.
inline std::string gatewayEpochPath(std::string_view root) {
  return gatewayClusterPath(root) + "/epoch";
}
// The presence privacy rules of the cluster's accounts, one node per account.
inline std::string gatewayPrivacyRoot(std::string_view root) {
  return gatewayClusterPath(root) + "/privacy";
}
inline std::string gatewayPrivacyPath(std::string_view root, std::string_view account) {
  return gatewayPrivacyRoot(root) + "/" + std::string(account);
}
inline std::string gatewayShardsRoot(std::string_view root) {
  return std::string(root) + "/@gateway-shards";
}
inline constexpr std::uint32_t kMaxShards = 4096;
// "shard-0007": the account id the shard's election uses.
inline std::string shardId(std::uint32_t index) {
  std::string digits = std::to_string(index);
  return "shard-" + std::string(digits.size() < 4 ? 4 - digits.size() : 0, '0') + digits;
}
// The index shardId(index) names: "shard-0007" -> 7; nullopt for any other text.
inline std::optional<std::uint32_t> shardIndex(std::string_view id) {
  constexpr std::string_view kPrefix = "shard-";
  if (!id.starts_with(kPrefix) || id.size() < kPrefix.size() + 4) return std::nullopt;
  std::uint32_t index = 0;
  for (const char c : id.substr(kPrefix.size())) {
    if (c < '0' || c > '9' || index > kMaxShards) return std::nullopt;
    index = index * 10 + static_cast<std::uint32_t>(c - '0');
  }
  if (index >= kMaxShards || shardId(index) != id) return std::nullopt;
  return index;
}
// An account's shard: FNV-1a 64 of the id's bytes modulo the shard count (> 0). Stable across
// releases and languages: a client anywhere computes the same map.
constexpr std::uint32_t shardOf(std::string_view account, std::uint32_t shards) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char c : account) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return static_cast<std::uint32_t>(hash % shards);
}
// The agent's health node.
inline std::string healthPath(std::string_view agentsPath, std::string_view instanceId) {
  return std::string(agentsPath) + "/" + std::string(instanceId);
}

// ---------------------------------------------------------------------------------------------
// host:port

struct HostPort {
  std::string host;  // an IPv6 address without its brackets
  std::uint16_t port = 0;
  bool operator==(const HostPort&) const = default;
};

enum class PortZero { Allowed, Refused };  // 0: "any free port", for listeners only

// Parses "host:port" or "[v6 address]:port" into `out`; returns why it is refused, or nullopt.
inline std::optional<std::string> hostPortError(std::string_view text, HostPort& out,
                                                PortZero zero = PortZero::Allowed) {
  std::string_view host;
  std::string_view port;
  if (text.starts_with('[')) {
    const auto close = text.find(']');
    if (close == std::string_view::npos || text.substr(close + 1, 1) != ":") {
      return "expected HOST:PORT ([ADDRESS]:PORT for IPv6), got '" + std::string(text) + "'";
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos ||
        text.substr(0, colon).find(':') != std::string_view::npos) {
      return "expected HOST:PORT ([ADDRESS]:PORT for IPv6), got '" + std::string(text) + "'";
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (host.empty()) return "expected HOST:PORT, got '" + std::string(text) + "' (no host)";
  const unsigned lowest = zero == PortZero::Allowed ? 0 : 1;
  unsigned value = 0;
  const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || error != std::errc() || end != port.data() + port.size() || value < lowest ||
      value > 65535) {
    return "port must be a number from " + std::to_string(lowest) + " to 65535, got '" +
           std::string(port) + "'";
  }
  out = HostPort{std::string(host), static_cast<std::uint16_t>(value)};
  return std::nullopt;
}

// A gateway's URL: http://HOST:PORT or https://HOST:PORT (port 1 to 65535), at most a trailing
// '/' after it. Into `out` and `https`; returns why it is refused, or nullopt.
inline std::optional<std::string> httpUrlError(std::string_view url, HostPort& out, bool& https) {
  https = url.starts_with("https://");
  // Appended, not '"'" + std::string(url)': GCC 12 warns (-Wrestrict) on that at -O3.
  auto quoted = [url](std::string_view problem) {
    std::string text(1, '\'');
    text.append(url).append("' ").append(problem);
    return text;
  };
  if (!https && !url.starts_with("http://")) return quoted("must start with http:// or https://");
  std::string_view rest = url.substr(https ? 8 : 7);
  if (rest.ends_with("/")) rest.remove_suffix(1);
  if (rest.find('/') != std::string_view::npos) return quoted("must not have a path");
  return hostPortError(rest, out, PortZero::Refused);
}

// Hosts a plain (no TLS) listener may use without an explicit "insecure".
inline bool isLoopbackHost(std::string_view host) {
  return host == "localhost" || host == "::1" || host.starts_with("127.");
}

// host:port again, an IPv6 address in brackets.
inline std::string toString(const HostPort& address) {
  const bool v6 = address.host.find(':') != std::string::npos;
  return (v6 ? "[" + address.host + "]" : address.host) + ":" + std::to_string(address.port);
}

// The port of a "LISTENING 127.0.0.1:PORT"-style line a process prints (its last ':'), or nullopt.
inline std::optional<std::uint16_t> trailingPort(std::string_view line) {
  const auto colon = line.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const std::string_view port = line.substr(colon + 1);
  unsigned value = 0;
  const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (error != std::errc() || value > 65535) return std::nullopt;
  return static_cast<std::uint16_t>(value);
}

}  // namespace zkagent::naming
