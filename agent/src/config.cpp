// The one config validator: every field is read through the shared config::FieldReader
// (zkagent/config_reader.hpp), which knows the field's full name for the error message and
// rejects fields it was never asked about.
#include "zkagent/agent/config.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <utility>

#include "devices/device_query.hpp"
#include "devices/presence_config.hpp"
#include "zkagent/config_reader.hpp"
#include "zkagent/election.hpp"
#include "zkagent/naming.hpp"

namespace zkagent::agent {
namespace {

using nlohmann::json;

constexpr int64_t kMaxMillis = 24LL * 3600 * 1000;

using config::FieldReader;

// Milliseconds as a non-negative integer no larger than a day.
Millis millis(FieldReader& reader, std::string_view field, Millis fallback) {
  return Millis(reader.integer(field, 0, kMaxMillis).value_or(fallback.count()));
}

HostPort parseHostPort(const FieldReader& reader, std::string_view field, std::string_view text,
                       naming::PortZero zero) {
  naming::HostPort address;
  if (auto error = naming::hostPortError(text, address, zero)) reader.fail(field, *error);
  return HostPort{address.host, address.port};
}

void requirePath(const FieldReader& reader, std::string_view field, const std::string& path) {
  if (auto error = naming::rootPathError(path)) reader.fail(field, *error);
}

void addAccount(Config& config, std::set<std::string, std::less<>>& seen, const FieldReader& reader,
                const std::string& field, std::string account) {
  if (auto error = naming::accountIdError(account)) reader.fail(field, *error);
  if (!seen.insert(account).second) reader.fail(field, "account '" + account + "' is listed twice");
  config.accounts.push_back(std::move(account));
}

void readAccounts(Config& config, FieldReader& top, const std::filesystem::path& baseDir) {
  std::set<std::string, std::less<>> seen;
  if (const json* list = top.find("accounts")) {
    if (!list->is_array()) top.fail("accounts", "must be an array of account ids");
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string field = "accounts[" + std::to_string(i) + "]";
      if (!(*list)[i].is_string()) top.fail(field, "must be a string");
      addAccount(config, seen, top, field, (*list)[i].get<std::string>());
    }
  }
  const std::string file = top.string("accounts_file", "");
  if (!file.empty()) {
    std::filesystem::path path(file);
    if (path.is_relative()) path = baseDir / path;
    std::ifstream in(path);
    if (!in) top.fail("accounts_file", "cannot read '" + path.string() + "'");
    std::string line;
    for (int lineNo = 1; std::getline(in, line); ++lineNo) {
      const auto begin = line.find_first_not_of(" \t\r");
      if (begin == std::string::npos || line[begin] == '#') continue;
      const auto end = line.find_last_not_of(" \t\r");
      addAccount(config, seen, top, "accounts_file line " + std::to_string(lineNo),
                 line.substr(begin, end - begin + 1));
    }
  }
  if (config.accounts.empty())
    top.fail("accounts", "no accounts configured (set accounts or accounts_file)");
}

std::string readableFile(FieldReader& reader, std::string_view field,
                         const std::filesystem::path& baseDir) {
  std::filesystem::path path(reader.string(field, ""));
  if (path.empty()) return {};
  if (path.is_relative()) path = baseDir / path;
  if (!std::ifstream(path)) reader.fail(field, "cannot read '" + path.string() + "'");
  return path.string();
}

// "token" or "token_file" (the token alone, a trailing newline dropped), never both: a file keeps
// the secret out of a config that is shown, copied and checked in.
std::string secret(FieldReader& reader, const std::filesystem::path& baseDir) {
  std::string token = reader.string("token", "");
  const std::string file = readableFile(reader, "token_file", baseDir);
  if (file.empty()) return token;
  if (!token.empty()) reader.fail("token_file", "set token or token_file, not both");
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  token = text.str();
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.empty()) reader.fail("token_file", "'" + file + "' is empty");
  return token;
}

void readGatewayTls(Config::Gateway& gateway, FieldReader& gw, bool https,
                    const std::filesystem::path& baseDir) {
  const json* given = gw.find("tls");
  if (!https) {
    if (given) gw.fail("tls", "needs an https:// url");
    return;
  }
  if (!given) gw.fail("tls", "is required with an https:// url (ca, cert, key)");
  auto tls = gw.object("tls");
  Config::Gateway::Tls files;
  files.ca = readableFile(tls, "ca", baseDir);
  if (files.ca.empty()) tls.fail("ca", "is required: the CA the gateway's certificate chains to");
  files.cert = readableFile(tls, "cert", baseDir);
  files.key = readableFile(tls, "key", baseDir);
  if (files.cert.empty() != files.key.empty())
    tls.fail(files.cert.empty() ? "cert" : "key", "cert and key go together");
  tls.rejectUnknown();
  gateway.tls = std::move(files);
}

// The model's parameter names, as the config fields that set them.
constexpr std::pair<std::string_view, std::string_view> kPresenceFields[] = {
    {"heartbeatInterval", "heartbeat_ms"},
    {"pingTimeout", "ping_timeout_ms"},
    {"checkInterval", "check_interval_ms"},
    {"renewInterval", "renew_interval_ms"},
    {"leaseTtl", "lease_ttl_ms"}};

void readPresence(Config& config, FieldReader& top, const std::filesystem::path& baseDir) {
  auto presence = top.object("presence");
  auto& p = config.presence;
  const std::string listen = presence.string("listen", "127.0.0.1:8471");
  p.listen = parseHostPort(presence, "listen", listen, naming::PortZero::Allowed);
  if (presence.find("tls")) {
    auto tls = presence.object("tls");
    Config::Presence::Tls files;
    files.cert = readableFile(tls, "cert", baseDir);
    files.key = readableFile(tls, "key", baseDir);
    if (files.cert.empty() || files.key.empty())
      tls.fail(files.cert.empty() ? "cert" : "key", "is required: cert and key go together");
    tls.rejectUnknown();
    p.tls = std::move(files);
  }
  const std::string scheme = p.tls ? "wss://" : "ws://";
  p.advertise = presence.string("advertise", "");
  if (!p.advertise.empty() && !p.advertise.starts_with(scheme)) {
    presence.fail("advertise", "'" + p.advertise + "' must start with " + scheme +
                                   (p.tls ? " (presence.tls is set)" : " (no presence.tls)"));
  }
  // Other agents' 4001 closes name this endpoint, in a close reason of at most 123 bytes.
  const auto advertised =
      p.advertise.empty() ? scheme + naming::toString({p.listen.host, 65535}) : p.advertise;
  if (advertised.size() > detail::kMaxAdvertiseBytes) {
    presence.fail(p.advertise.empty() ? "listen" : "advertise",
                  "'" + advertised + "' is " + std::to_string(advertised.size()) +
                      " bytes as the advertised endpoint; at most " +
                      std::to_string(detail::kMaxAdvertiseBytes) +
                      ", so that a redirect's close reason (at most " +
                      std::to_string(detail::kMaxCloseReason) + " bytes) keeps room for the path");
  }
  p.insecure = presence.boolean("insecure", false);
  if (p.tls && p.insecure) {
    presence.fail("insecure", "contradicts presence.tls: drop one of them");
  }
  if (!p.tls && !p.insecure && !naming::isLoopbackHost(p.listen.host)) {
    presence.fail("listen", "'" + listen +
                                "': plain ws:// is served on loopback only; set presence.tls "
                                "(cert, key) for wss://, or presence.insecure to allow ws://");
  }
  if (presence.find("auth")) {
    auto auth = presence.object("auth");
    p.auth = auth::readSettings(auth, baseDir);
    auth.rejectUnknown();
  }
  p.insecureNoDeviceAuth = presence.boolean("insecure_no_device_auth", false);
  if (p.auth && p.insecureNoDeviceAuth) {
    presence.fail("insecure_no_device_auth", "contradicts presence.auth: drop one of them");
  }
  // Off loopback anyone who reaches the port could claim any device: tokens by default.
  if (!p.auth && !p.insecureNoDeviceAuth && !naming::isLoopbackHost(p.listen.host)) {
    presence.fail("auth", "is required when presence.listen ('" + listen +
                              "') is not a loopback address (device tokens, docs/auth.md), "
                              "unless presence.insecure_no_device_auth is true");
  }
  p.heartbeat = millis(presence, "heartbeat_ms", p.heartbeat);
  p.pingTimeout = millis(presence, "ping_timeout_ms", p.pingTimeout);
  p.checkInterval = millis(presence, "check_interval_ms", p.checkInterval);
  p.renewInterval = millis(presence, "renew_interval_ms", p.renewInterval);
  p.leaseTtl = millis(presence, "lease_ttl_ms", p.leaseTtl);
  p.renewJitter = presence.number("renew_jitter", 0, 1).value_or(p.renewJitter);
  if (auto entries = presence.integer("max_batch_entries", 1, 100000)) {
    p.maxBatchEntries = static_cast<size_t>(*entries);
  }
  presence.rejectUnknown();
  // The first problem the model finds, told with the config's field names.
  const auto errors = presence::validationErrors(presenceParams(p));
  if (errors.empty()) return;
  std::string message = errors.front().substr(0, errors.front().find("; set allowUnsafe"));
  std::string_view field = "heartbeat_ms";  // the message's first parameter is the culprit
  size_t first = std::string::npos;
  for (const auto& [param, name] : kPresenceFields) {
    if (const auto at = message.find(param); at < first) first = at, field = name;
  }
  for (const auto& [param, name] : kPresenceFields) {
    for (size_t at; (at = message.find(param)) != std::string::npos;)
      message.replace(at, param.size(), name);
  }
  presence.fail(field, message);
}

void readBalance(Config& config, FieldReader& top) {
  auto balance = top.object("balance");
  auto& b = config.balance;
  b.enabled = balance.boolean("enabled", b.enabled);
  b.settle = millis(balance, "settle_ms", b.settle);
  if (auto moves = balance.integer("max_moves_in_flight", 1, 1000)) {
    b.maxMovesInFlight = static_cast<size_t>(*moves);
  }
  b.tolerance = balance.number("tolerance", 0, 1).value_or(b.tolerance);
  if (const json* preferred = balance.find("preferred")) {
    if (!preferred->is_object())
      balance.fail("preferred", "must be an object of account id -> instance id");
    const std::set<std::string, std::less<>> configured(config.accounts.begin(),
                                                        config.accounts.end());
    for (const auto& [account, instance] : preferred->items()) {
      const std::string field = "preferred." + account;
      if (!configured.contains(account)) balance.fail(field, "is not a configured account");
      if (!instance.is_string() || instance.get<std::string>().empty())
        balance.fail(field, "must be a non-empty instance id");
      b.preferred.emplace(account, instance.get<std::string>());
    }
  }
  balance.rejectUnknown();
}

}  // namespace

presence::Params presenceParams(const Config::Presence& config) {
  presence::Params params;
  params.heartbeatInterval = config.heartbeat;
  params.pingTimeout = config.pingTimeout;
  params.checkInterval = config.checkInterval;
  params.renewInterval = config.renewInterval;
  params.renewJitter = config.renewJitter;
  params.leaseTtl = config.leaseTtl;
  return params;
}

namespace {

Config readConfig(std::string_view text, const std::filesystem::path& baseDir,
                  std::optional<std::string> environmentAdminToken) {
  const json root = config::parseObject(text);
  Config config;
  FieldReader top(root, "");

  config.instanceId = top.requiredString("instance_id");
  if (auto error = naming::instanceIdError(config.instanceId)) top.fail("instance_id", *error);

  {
    auto zk = top.object("zookeeper");
    config.zookeeper.hosts = zk.requiredString("hosts");
    std::stringstream hosts(config.zookeeper.hosts);
    for (std::string host; std::getline(hosts, host, ',');)
      parseHostPort(zk, "hosts", host, naming::PortZero::Refused);
    if (config.zookeeper.hosts.empty()) zk.fail("hosts", "is empty");
    config.zookeeper.sessionTimeout =
        millis(zk, "session_timeout_ms", config.zookeeper.sessionTimeout);
    if (config.zookeeper.sessionTimeout < Millis(400))
      zk.fail("session_timeout_ms", "must be at least 400");
    config.zookeeper.root = zk.string("root", config.zookeeper.root);
    requirePath(zk, "root", config.zookeeper.root);
    config.zookeeper.agentsPath = zk.string("agents_path", config.zookeeper.agentsPath);
    requirePath(zk, "agents_path", config.zookeeper.agentsPath);
    if (zk.find("auth")) {
      auto auth = zk.object("auth");
      const std::string file = readableFile(auth, "digest_file", baseDir);
      if (file.empty()) auth.fail("digest_file", "is required (a file holding user:password)");
      try {
        config.zookeeper.digest = election::readDigestFile(file);
      } catch (const std::invalid_argument& error) {
        auth.fail("digest_file", error.what());
      }
      auth.rejectUnknown();
    }
    zk.rejectUnknown();
  }

  readAccounts(config, top, baseDir);

  {
    auto gw = top.object("gateway");
    const std::string url = gw.requiredString("url");
    bool https = false;
    naming::HostPort address;
    if (auto error = naming::httpUrlError(url, address, https)) gw.fail("url", *error);
    config.gateway.address = HostPort{address.host, address.port};
    config.gateway.token = secret(gw, baseDir);
    readGatewayTls(config.gateway, gw, https, baseDir);
    config.gateway.heartbeatInterval =
        millis(gw, "heartbeat_interval_ms", config.gateway.heartbeatInterval);
    config.gateway.heartbeatTimeout =
        millis(gw, "heartbeat_timeout_ms", config.gateway.heartbeatTimeout);
    if (config.gateway.heartbeatInterval > Millis(0) &&
        config.gateway.heartbeatTimeout <= 2 * config.gateway.heartbeatInterval) {
      gw.fail("heartbeat_timeout_ms", "must be more than twice heartbeat_interval_ms (" +
                                          std::to_string(config.gateway.heartbeatInterval.count()) +
                                          ")");
    }
    config.gateway.requestTimeout = millis(gw, "request_timeout_ms", config.gateway.requestTimeout);
    if (config.gateway.requestTimeout == Millis(0))
      gw.fail("request_timeout_ms", "must be positive");
    gw.rejectUnknown();
  }

  {
    auto admin = top.object("admin");
    const std::string listen = admin.string("listen", "127.0.0.1:8470");
    config.admin.listen = parseHostPort(admin, "listen", listen, naming::PortZero::Allowed);
    config.admin.token = secret(admin, baseDir);
    if (environmentAdminToken && !environmentAdminToken->empty()) {
      if (!config.admin.token.empty()) {
        admin.fail("token", std::string("set it, token_file or ") + kAdminTokenVariable +
                                ", only one of them");
      }
      config.admin.token = *environmentAdminToken;
    }
    if (!naming::isLoopbackHost(config.admin.listen.host) && config.admin.token.empty()) {
      admin.fail("token", "is required when admin.listen is not a loopback address");
    }
    config.admin.openOperatorActions = admin.boolean("open_operator_actions", false);
    config.admin.advertise = admin.string("advertise", "");
    admin.rejectUnknown();
  }

  readPresence(config, top, baseDir);
  if (config.presence.listen.port != 0 && config.presence.listen.port == config.admin.listen.port &&
      config.presence.listen.host == config.admin.listen.host) {
    throw ConfigError("presence.listen", "must differ from admin.listen");
  }

  {
    auto health = top.object("health");
    config.health.interval = millis(health, "interval_ms", config.health.interval);
    config.health.ttl = millis(health, "ttl_ms", config.health.ttl);
    if (config.health.interval == Millis(0)) health.fail("interval_ms", "must be positive");
    if (config.health.ttl < config.health.interval) {
      health.fail("ttl_ms", "must be at least interval_ms (" +
                                std::to_string(config.health.interval.count()) + ")");
    }
    health.rejectUnknown();
  }

  readBalance(config, top);
  config.lockDelay = millis(top, "lock_delay_ms", config.lockDelay);
  config.gate = top.choice("gate", {"fast", "strict"}).value_or("fast") == "strict"
                    ? GateMode::Strict
                    : GateMode::Fast;
  config.shutdownTimeout = millis(top, "shutdown_timeout_ms", config.shutdownTimeout);
  if (config.shutdownTimeout == Millis(0)) top.fail("shutdown_timeout_ms", "must be positive");

  {
    auto log = top.object("log");
    config.log.format = log.choice("format", {"text", "json"}).value_or("text") == "json"
                            ? LogFormat::Json
                            : LogFormat::Text;
    config.log.level = log.logLevel("level").value_or(config.log.level);
    log.rejectUnknown();
  }

  top.rejectUnknown();
  return config;
}

}  // namespace

Config parseConfig(std::string_view text, const std::filesystem::path& baseDir,
                   std::optional<std::string> environmentAdminToken) {
  try {
    return readConfig(text, baseDir, std::move(environmentAdminToken));
  } catch (const config::FieldError& error) {
    throw ConfigError(error.field(), error.problem());
  }
}

Config loadConfig(const std::filesystem::path& path,
                  std::optional<std::string> environmentAdminToken) {
  std::ifstream in(path);
  if (!in) throw ConfigError("config", "cannot read '" + path.string() + "'");
  std::stringstream text;
  text << in.rdbuf();
  return parseConfig(text.str(), path.parent_path(), std::move(environmentAdminToken));
}

std::string describe(const Config& c) {
  auto hostPort = [](const HostPort& a) { return naming::toString({a.host, a.port}); };
  json out{
      {"instance_id", c.instanceId},
      {"zookeeper",
       {{"hosts", c.zookeeper.hosts},
        {"session_timeout_ms", c.zookeeper.sessionTimeout.count()},
        {"root", c.zookeeper.root},
        {"agents_path", c.zookeeper.agentsPath},
        {"auth", c.zookeeper.digest.empty() ? json(nullptr) : json("(set)")}}},
      {"accounts", c.accounts},
      {"gateway",
       {{"url", (c.gateway.tls ? "https://" : "http://") + hostPort(c.gateway.address)},
        {"token", c.gateway.token.empty() ? "" : "(set)"},
        {"tls", c.gateway.tls ? json{{"ca", c.gateway.tls->ca},
                                     {"cert", c.gateway.tls->cert},
                                     {"key", c.gateway.tls->key}}
                              : json(nullptr)},
        {"heartbeat_interval_ms", c.gateway.heartbeatInterval.count()},
        {"heartbeat_timeout_ms", c.gateway.heartbeatTimeout.count()},
        {"request_timeout_ms", c.gateway.requestTimeout.count()}}},
      {"admin",
       {{"listen", hostPort(c.admin.listen)},
        {"token", c.admin.token.empty() ? "" : "(set)"},
        {"open_operator_actions", c.admin.openOperatorActions},
        // The default printed as the agent will use it: the listen address (with the port it
        // binds when that is 0).
        {"advertise",
         c.admin.advertise.empty() ? "http://" + hostPort(c.admin.listen) : c.admin.advertise}}},
      {"presence",
       {{"listen", hostPort(c.presence.listen)},
        {"advertise", c.presence.advertise.empty()
                          ? (c.presence.tls ? "wss://" : "ws://") + hostPort(c.presence.listen)
                          : c.presence.advertise},
        {"tls", c.presence.tls ? json{{"cert", c.presence.tls->cert}, {"key", c.presence.tls->key}}
                               : json(nullptr)},
        {"insecure", c.presence.insecure},
        {"auth", c.presence.auth ? json("(set)") : json(nullptr)},
        {"insecure_no_device_auth", c.presence.insecureNoDeviceAuth},
        {"heartbeat_ms", c.presence.heartbeat.count()},
        {"ping_timeout_ms", c.presence.pingTimeout.count()},
        {"check_interval_ms", c.presence.checkInterval.count()},
        {"renew_interval_ms", c.presence.renewInterval.count()},
        {"renew_jitter", c.presence.renewJitter},
        {"lease_ttl_ms", c.presence.leaseTtl.count()},
        {"max_batch_entries", c.presence.maxBatchEntries}}},
      {"health", {{"interval_ms", c.health.interval.count()}, {"ttl_ms", c.health.ttl.count()}}},
      {"balance",
       {{"enabled", c.balance.enabled},
        {"settle_ms", c.balance.settle.count()},
        {"max_moves_in_flight", c.balance.maxMovesInFlight},
        {"tolerance", c.balance.tolerance},
        {"preferred", c.balance.preferred}}},
      {"lock_delay_ms", c.lockDelay.count()},
      {"gate", c.gate == GateMode::Strict ? "strict" : "fast"},
      {"shutdown_timeout_ms", c.shutdownTimeout.count()},
      {"log",
       {{"format", c.log.format == LogFormat::Json ? "json" : "text"}, {"level", c.log.level}}}};
  return out.dump(2);
}

}  // namespace zkagent::agent
