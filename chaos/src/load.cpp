// The client load (operations through every agent, each recorded) and the agents' status polls,
// from which the run tells when every account is led again.
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>

#include "run.hpp"
#include "zkagent/naming.hpp"

namespace zkagent::chaos {
using namespace std::chrono_literals;

namespace {

// `key` of an answer from another process, or `fallback` when the answer is not an object, lacks
// the key or holds another type there: the caller tells bad data by the fallback, and a bad answer
// never crashes the run (operator[] on a const json that lacks the key is undefined behaviour;
// value() throws on a type mismatch).
template <class T>
T fieldOr(const json& object, std::string_view key, T fallback) {
  if (!object.is_object()) return fallback;
  const auto it = object.find(key);
  if (it == object.end()) return fallback;
  if constexpr (std::is_same_v<T, json>) {
    return *it;
  } else if constexpr (std::is_same_v<T, std::string>) {
    return it->is_string() ? it->template get<std::string>() : fallback;
  } else {
    return it->is_number_integer() ? it->template get<T>() : fallback;
  }
}

}  // namespace

OpRecord Run::sendOp(int agent, zkagent::http::Client& client, const std::string& account,
                     const std::string& opId, bool probe) {
  OpRecord r;
  r.agent = agent;
  r.account = account;
  r.opId = opId;
  r.probe = probe;
  r.invoked = now();
  const auto answer = client.post("/v1/accounts/" + account + "/ops",
                                  json{{"opId", opId}, {"payload", {{"chaos", 1}}}}.dump());
  r.completed = now();
  r.status = answer.status;
  if (!answer.delivered()) {
    // A request that never connected cannot have reached the gateway; anything later can.
    r.outcome = answer.transportError.starts_with("connect") ? "connect_failed" : "timeout";
  } else {
    const auto body = json::parse(answer.body, nullptr, false);
    const auto text = [&](const char* key) {
      return body.is_object() && body.contains(key) && body[key].is_string()
                 ? body[key].get<std::string>()
                 : std::string();
    };
    if (answer.status == 200) {
      r.outcome = "ok";
      if (body.is_object() && body.contains("hwm")) r.token = body["hwm"].get<std::int64_t>();
    } else if (answer.status == 409 || answer.status == 503) {
      r.outcome = !text("reason").empty() ? text("reason") : text("error");
      if (r.outcome.empty()) r.outcome = "http_" + std::to_string(answer.status);
      const std::string detail = text("detail");
      if (detail.starts_with("token ")) r.token = std::atoll(detail.c_str() + 6);
    } else if (answer.status == 502) {
      r.outcome = "gateway_unreachable";
    } else if (answer.status == 404) {
      // The agent's own answer for an account its election group does not hold (yet): refused
      // before anything was forwarded.
      r.outcome = "unknown_account";
    } else {
      r.outcome = "http_" + std::to_string(answer.status);
    }
  }
  std::lock_guard lock(opsMu_);
  ops_.push_back(r);
  return r;
}

void Run::worker(int agent, int index) {
  zkagent::http::ClientOptions options;
  options.port = agentPorts_[agent];
  options.connectTimeout = 500ms;
  options.requestTimeout = 2000ms;
  options.maxIdleConnections = 2;
  zkagent::http::Client client(options);
  std::mt19937_64 rng(o_.seed * 1000003 + static_cast<std::uint64_t>(agent * 64 + index));
  const std::string opPrefix = "c" + std::to_string(agent) + "." + std::to_string(index) + ".";
  for (std::uint64_t n = 0; !stopLoad_; ++n) {
    // Mostly accounts this agent leads (so operations reach the gateway), sometimes any.
    std::string account;
    const auto leading = leadingOf(agent, -1);
    if (!leading.empty() && rng() % 10 < 8) {
      auto it = leading.begin();
      std::advance(it, static_cast<long>(rng() % leading.size()));
      account = it->first;
    } else {
      account = accounts_[rng() % accounts_.size()];
    }
    std::string opId = opPrefix;
    opId += std::to_string(n);
    const auto r = sendOp(agent, client, account, opId, false);
    std::this_thread::sleep_for(milliseconds(r.status == 0 ? 100 : o_.thinkMs));
  }
}

void Run::pollStatus(int agent) {
  zkagent::http::ClientOptions options;
  options.port = agentPorts_[agent];
  options.connectTimeout = 300ms;
  options.requestTimeout = 700ms;
  zkagent::http::Client client(options);
  while (!stopPolling_) {
    const auto asked = now();
    const auto answer = client.get("/v1/status");
    if (answer.delivered() && answer.status == 200) {
      const auto body = json::parse(answer.body, nullptr, false);
      AgentStatus s;
      s.fetchedMs = asked;
      if (body.is_object()) {
        for (const auto& a : fieldOr(body, "accounts", json::array())) {
          const auto token = fieldOr(a, "token", std::int64_t{-1});
          const auto account = fieldOr(a, "account", std::string());
          if (fieldOr(a, "role", std::string()) == "LEADER" && token >= 0 && !account.empty())
            s.leading[account] = token;
        }
      }
      std::lock_guard lock(statusMu_);
      statuses_[agent] = std::move(s);
    }
    std::this_thread::sleep_for(150ms);
  }
}

std::map<std::string, std::int64_t> Run::leadingOf(int agent, std::int64_t freshAfter) {
  std::lock_guard lock(statusMu_);
  if (statuses_[agent].fetchedMs <= freshAfter) return {};
  return statuses_[agent].leading;
}

// Every account is led by exactly one agent, by that agent's own status read after
// `freshAfter`, and its token is the seq of the newest active node the observer saw; in a
// cluster, every shard has an owner.
bool Run::settled(std::int64_t freshAfter) {
  std::vector<std::map<std::string, std::int64_t>> leading;
  for (int i = 0; i < o_.agents; ++i) {
    if (!agentAlive(i)) return false;
    leading.push_back(leadingOf(i, freshAfter));
    std::lock_guard lock(statusMu_);
    if (statuses_[i].fetchedMs <= freshAfter) return false;
  }
  for (const auto& account : accounts_) {
    const auto active = observer_->latest(account);
    if (!active || !active->present) return false;
    int leaders = 0;
    for (int i = 0; i < o_.agents; ++i) {
      const auto it = leading[i].find(account);
      if (it == leading[i].end()) continue;
      ++leaders;
      if (it->second != active->seq || agentIds_[i] != active->instance) return false;
    }
    if (leaders != 1) return false;
  }
  // In a cluster, every shard owned again too (read last: one ZooKeeper session per call).
  return everyShardOwned();
}

// For an event that did not settle: each account not led as settled() wants it, with the active
// node the observer saw last and the agents that claim to lead it.
json Run::unsettledAccounts(std::int64_t freshAfter) {
  json out = json::array();
  std::vector<std::map<std::string, std::int64_t>> leading;
  for (int i = 0; i < o_.agents; ++i) leading.push_back(leadingOf(i, freshAfter));
  for (const auto& account : accounts_) {
    const auto active = observer_->latest(account);
    json claims = json::array();
    bool ok = active && active->present;
    int leaders = 0;
    for (int i = 0; i < o_.agents; ++i) {
      const auto it = leading[i].find(account);
      if (it == leading[i].end()) continue;
      ++leaders;
      claims.push_back({{"agent", agentIds_[i]}, {"token", it->second}});
      if (!active || it->second != active->seq || agentIds_[i] != active->instance) ok = false;
    }
    if (ok && leaders == 1) continue;
    out.push_back({{"account", account},
                   {"active", active && active->present
                                  ? json{{"instance", active->instance}, {"seq", active->seq}}
                                  : json(nullptr)},
                   {"leader_claims", claims}});
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> Run::deviceKeys() const {
  std::vector<std::pair<std::string, std::string>> keys;
  const int count = o_.devicesPerAccount * o_.accounts;
  for (int i = 0; i < count; ++i)
    keys.emplace_back(accounts_[static_cast<std::size_t>(i) % accounts_.size()],
                      "dev-" + std::to_string(i));
  return keys;
}

// Straight to the gateway (not through an agent's held link): what it holds for every account,
// one account per request, a round every 200 ms. In a cluster, to the owner of the account's
// shard as ZooKeeper names it at the round's start (a gateway answers this from its own store,
// owner or not); an account whose shard has no owner is skipped that round.
void Run::pollLeases() {
  zkagent::http::ClientOptions options;
  options.connectTimeout = 300ms;
  options.requestTimeout = 700ms;
  while (!stopPolling_) {
    std::vector<std::unique_ptr<zkagent::http::Client>> clients;
    for (const auto& gateway : gateways_) {
      options.port = gateway.port;  // the same port after every restart
      clients.push_back(std::make_unique<zkagent::http::Client>(options));
    }
    const auto owners = shardOwners();  // empty: the one gateway
    for (const auto& account : accounts_) {
      if (stopPolling_) return;
      const int g = owners.empty() ? 0 : owners[zkagent::naming::shardOf(account, kClusterShards)];
      if (g < 0) continue;
      const auto answer = clients[static_cast<std::size_t>(g)]->get("/v1/presence/" + account);
      if (!answer.delivered() || answer.status != 200) continue;
      const auto body = json::parse(answer.body, nullptr, false);
      const json devices = fieldOr(body, "devices", json());
      std::lock_guard lock(leasesMu_);
      // A malformed answer is recorded (the checker fails the run on it), not taken as a lease.
      const auto bad = [&](const std::string& what) {
        if (badAnswers_.size() < kBadAnswersKept)
          badAnswers_.push_back("GET /v1/presence/" + account + ": " + what);
        ++badAnswerCount_;
      };
      if (!devices.is_array()) {
        bad("no \"devices\" array");
        continue;
      }
      std::map<std::string, std::int64_t> held;
      for (const auto& d : devices) {
        const json epoch = fieldOr(d, "epoch", json());
        const auto device = fieldOr(d, "device", std::string());
        const auto token = fieldOr(epoch, "token", std::int64_t{-1});
        if (device.empty() || fieldOr(d, "agent", std::string()).empty() || token < 0 ||
            fieldOr(epoch, "counter", std::int64_t{-1}) < 0 ||
            fieldOr(d, "age_ms", std::int64_t{-1}) < 0) {
          bad("entry " + d.dump() + " lacks device, agent, epoch.token, epoch.counter or age_ms");
          continue;
        }
        held[device] = token;
        ++leaseSamples_;
      }
      latestLeases_[account] = std::move(held);
    }
    std::this_thread::sleep_for(200ms);
  }
}

std::optional<std::int64_t> Run::leaseUnderLeader(const std::string& account,
                                                  const std::string& device) {
  const auto active = observer_->latest(account);
  std::lock_guard lock(leasesMu_);
  const auto& held = latestLeases_[account];
  const auto lease = held.find(device);
  if (active && active->present && lease != held.end() && lease->second == active->seq)
    return lease->second;
  return std::nullopt;
}

bool Run::everyDeviceLeased() {
  for (const auto& [account, device] : deviceKeys())
    if (!leaseUnderLeader(account, device)) return false;
  return true;
}

void Run::awaitDevicesLeased(std::int64_t lastHeal) {
  const auto keys = deviceKeys();
  if (keys.empty()) return;
  const auto deadline = SteadyClock::now() + milliseconds(o_.sessionTimeoutMs + 15000);
  json perDevice = json::object();
  std::set<std::pair<std::string, std::string>> pending(keys.begin(), keys.end());
  while (!pending.empty() && SteadyClock::now() < deadline) {
    for (auto it = pending.begin(); it != pending.end();) {
      if (const auto token = leaseUnderLeader(it->first, it->second)) {
        perDevice[it->first + "/" + it->second] = {{"leased_ms", now() - lastHeal},
                                                   {"token", *token}};
        it = pending.erase(it);
      } else {
        ++it;
      }
    }
    if (!pending.empty()) std::this_thread::sleep_for(100ms);
  }
  json missing = json::array();
  for (const auto& [account, device] : pending) missing.push_back(account + "/" + device);
  final_["devices"] = perDevice;
  final_["devices_not_leased"] = missing;
  note(pending.empty() ? "every device leased under its account's leader after the last heal"
                       : std::to_string(pending.size()) +
                             " devices not leased under their leader after the last heal");
}

}  // namespace zkagent::chaos
