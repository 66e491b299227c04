#include "lease_writer.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "agent_impl.hpp"
#include "presence_config.hpp"

namespace zkagent::agent::detail {
namespace {
using nlohmann::json;

// Writes made within this window share one request: a burst of connects or closes costs one
// round trip, and a removal still leaves within a few milliseconds.
constexpr std::chrono::milliseconds kFlushDelay{2};
// After a failed batch: the gateway is down or overloaded, do not hammer it.
constexpr std::chrono::milliseconds kRetryDelay{200};

http::ClientOptions leaseClientOptions(const Config::Gateway& gateway, const std::string& owner) {
  http::ClientOptions options;
  options.host = gateway.address.host;
  options.port = gateway.address.port;
  options.connectTimeout = std::min(gateway.requestTimeout, std::chrono::milliseconds(2000));
  options.requestTimeout = gateway.requestTimeout;
  options.bearerToken = gateway.token;
  options.tls = gatewayClientTls(gateway);
  options.maxIdleConnections = 1;  // one request at a time: one kept-alive connection
  options.asyncThreads = 1;
  if (!owner.empty()) aimAt(options, owner);
  return options;
}

json entryJson(const presence::LeaseEntry& entry) {
  return {{"account", entry.key.user},
          {"device", entry.key.device},
          {"token", entry.epoch.leaderToken},
          {"counter", entry.epoch.connection}};
}
}  // namespace

GatewayLeaseWriter::GatewayLeaseWriter(PresenceExecutor executor, const Config& config,
                                       PresenceMetrics& metrics, GateCheck gate,
                                       std::function<int64_t()> sessionId, FencedHandler onFenced,
                                       std::shared_ptr<ShardRoutes> routes)
    : executor_(executor),
      instanceId_(config.instanceId),
      maxEntries_(config.presence.maxBatchEntries),
      m_(metrics),
      gate_(std::move(gate)),
      sessionId_(std::move(sessionId)),
      onFenced_(std::move(onFenced)),
      params_(presenceParams(config.presence)),
      gateway_(config.gateway),
      routes_(std::move(routes)),
      timer_(executor),
      queue_(kQueuedBatches * config.presence.maxBatchEntries) {
  for (const char* kind : {"renew", "remove"}) m_.leaseDropped.with({kind});  // shown from 0
}

void GatewayLeaseWriter::renew(std::string_view, std::span<const presence::LeaseEntry> entries) {
  if (stopped_) return;
  LeaseDrops drops;
  for (const auto& entry : entries) drops += queue_.renew(entry);
  queueChanged(drops);
  flushSoon(kFlushDelay);
}

void GatewayLeaseWriter::remove(const presence::DeviceKey& key, presence::Epoch epoch,
                                presence::LeaveReason reason) {
  if (stopped_) return;
  queueChanged(queue_.remove(QueuedRemoval{{key, epoch}, reason}));
  flushSoon(kFlushDelay);
}

void GatewayLeaseWriter::queueChanged(const LeaseDrops& drops) {
  if (drops.renewals) m_.leaseDropped.with({"renew"}).inc(static_cast<double>(drops.renewals));
  if (drops.removals) m_.leaseDropped.with({"remove"}).inc(static_cast<double>(drops.removals));
  m_.leaseQueued.set(static_cast<double>(queue_.size()));
}

void GatewayLeaseWriter::stop() {
  stopped_ = true;
  queue_.clear();
  m_.leaseQueued.set(0);
  timer_.cancel();
}

void GatewayLeaseWriter::shutdown() {
  stop();
  clients_.clear();  // joins their workers; an answer they post meanwhile is dropped with the queue
}

void GatewayLeaseWriter::flushSoon(std::chrono::milliseconds delay) {
  if (scheduled_ || inFlight_ || stopped_) return;
  scheduled_ = true;
  timer_.expires_after(delay);
  timer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
    auto self = weak.lock();
    if (!self) return;
    self->scheduled_ = false;
    if (!ec) self->flush();
  });
}

// One batch of at most maxEntries_, removals first (lease_queue.hpp), split by shard owner.
void GatewayLeaseWriter::flush() {
  if (stopped_ || inFlight_ != 0 || queue_.empty()) return;
  std::unordered_map<std::string, int64_t> tokens;  // account -> our token now, -1: not leading
  auto leads = [&](const presence::LeaseEntry& entry) {
    auto [it, fresh] = tokens.try_emplace(entry.key.user, -1);
    if (fresh) {
      const auto decision = gate_(entry.key.user);
      if (decision.allowed()) it->second = decision.token;
    }
    return it->second >= 0 && static_cast<uint64_t>(it->second) == entry.epoch.leaderToken;
  };
  LeaseDrops notLed;
  LeaseBatch batch = queue_.take(maxEntries_, leads, notLed);
  queueChanged();
  if (notLed.renewals)
    m_.leaseEntries.with({"renew", "dropped"}).inc(static_cast<double>(notLed.renewals));
  if (notLed.removals)
    m_.leaseEntries.with({"remove", "dropped"}).inc(static_cast<double>(notLed.removals));
  if (batch.size() == 0) {
    if (!queue_.empty()) flushSoon(std::chrono::milliseconds(0));
    return;
  }
  std::map<std::string, LeaseBatch, std::less<>> parts;  // owner URL ("": configured) -> part
  // Parts whose owner's heartbeat says down, by owner: failed here, not sent (the configured
  // gateway would refuse a part holding them whole, its own accounts' entries with them).
  std::map<std::string, LeaseBatch, std::less<>> unreachable;
  std::unordered_map<std::string, LeaseBatch*> partOfAccount;  // one route look-up per account
  auto partOf = [&](const presence::LeaseEntry& entry) -> LeaseBatch& {
    auto [it, fresh] = partOfAccount.try_emplace(entry.key.user, nullptr);
    if (fresh) {
      const auto route = routes_->routeOf(entry.key.user);
      it->second =
          route.passedOver ? &unreachable[*route.passedOver] : &parts[route.owner.value_or("")];
    }
    return *it->second;
  };
  for (auto& entry : batch.renew) partOf(entry).renew.push_back(std::move(entry));
  for (auto& removal : batch.remove) partOf(removal.entry).remove.push_back(std::move(removal));
  inFlight_ = parts.size() + unreachable.size();
  failed_ = false;
  for (auto& [owner, part] : parts) send(owner, std::move(part));
  for (auto& [owner, part] : unreachable) {
    http::ClientResponse down;
    down.transportError = "shard owner " + owner + " is down by its heartbeat: not sent";
    settle(executor_, weak_from_this(), part.renew.size(), std::move(part.remove), std::move(down));
  }
}

http::Client& GatewayLeaseWriter::clientFor(const std::string& owner) {
  auto& client = clients_[owner];
  if (!client) client = std::make_unique<http::Client>(leaseClientOptions(gateway_, owner));
  return *client;
}

void GatewayLeaseWriter::send(const std::string& owner, LeaseBatch part) {
  json renew = json::array(), remove = json::array();
  for (const auto& entry : part.renew) renew.push_back(entryJson(entry));
  for (const auto& removal : part.remove) {
    auto item = entryJson(removal.entry);
    item["reason"] = presence::toString(removal.reason);
    remove.push_back(std::move(item));
  }
  const json body{{"instanceId", instanceId_},
                  {"sessionId", sessionId_()},  // as operations carry it: the fence compares it
                  {"renew", std::move(renew)},
                  {"remove", std::move(remove)}};
  const size_t renewed = part.renew.size();
  clientFor(owner).asyncRequest(
      http::Method::Post, "/v1/presence/leases", body.dump(),
      [weak = weak_from_this(), executor = executor_, sent = std::move(part.remove),
       renewed](http::ClientResponse response) mutable {
        settle(executor, weak, renewed, std::move(sent), std::move(response));
      });
}

void GatewayLeaseWriter::settle(PresenceExecutor executor, std::weak_ptr<GatewayLeaseWriter> weak,
                                size_t renewed, std::vector<QueuedRemoval> removals,
                                http::ClientResponse response) {
  // The client's worker thread (or flush): back onto the endpoint's, where alone the writer is
  // locked (never its last reference dropped on a worker it joins). shutdown() joins the
  // clients' workers before the io_context goes, so the post never finds it gone.
  boost::asio::post(executor, [weak = std::move(weak), sent = std::move(removals), renewed,
                               response = std::move(response)]() mutable {
    auto self = weak.lock();
    if (!self) return;
    --self->inFlight_;
    self->answered(renewed, std::move(sent), std::move(response));
  });
}

void GatewayLeaseWriter::answered(size_t renewed, std::vector<QueuedRemoval> removals,
                                  http::ClientResponse response) {
  if (stopped_) return;
  const bool ok = response.delivered() && response.status == 200;
  const char* result = ok ? "sent" : "failed";
  m_.leaseBatches.with({result}).inc();
  m_.leaseEntries.with({"renew", result}).inc(static_cast<double>(renewed));
  m_.leaseEntries.with({"remove", result}).inc(static_cast<double>(removals.size()));
  if (!ok) {
    spdlog::warn("presence lease batch failed instance={} status={} error={} body={}", instanceId_,
                 response.status, response.transportError, response.body.substr(0, 200));
    // Renewals come again with the next tick (the table renews every connection). Removals go
    // back ahead of the queue while the gateway is away or overloaded (no answer, 429, 5xx), so
    // they are the first to leave once it is back; only the queue's bound drops them. So do
    // they when a shard moved under the batch (421, or a 503 while it has no owner): the next
    // batch goes to the new owner. A batch the gateway refused as such (another 4xx) would be
    // refused again: its removals go.
    const bool retry = !response.delivered() || response.status == 421 || response.status == 429 ||
                       response.status >= 500;
    std::vector<QueuedRemoval> again;
    if (retry) again = std::move(removals);
    queueChanged(queue_.requeue(std::move(again)));
    failed_ = true;
  } else {
    fencedBy(response);
  }
  if (inFlight_ == 0 && !queue_.empty()) {
    flushSoon(failed_ ? kRetryDelay : std::chrono::milliseconds(0));
  }
}

void GatewayLeaseWriter::fencedBy(const http::ClientResponse& response) {
  const auto answer = json::parse(response.body, nullptr, false);
  if (answer.is_object()) {
    if (const auto ttl = answer.find("leaseTtlMs");
        ttl != answer.end() && ttl->is_number_integer() && ttl->get<int64_t>() > 0) {
      checkGatewayTtl(ttl->get<int64_t>());
    }
    for (const auto& fenced : answer.value("fenced", json::array())) {
      if (!fenced.is_object() || !fenced.contains("account") || !fenced["account"].is_string())
        continue;
      const auto token = fenced.contains("token") && fenced["token"].is_number_unsigned()
                             ? fenced["token"].get<uint64_t>()
                             : UINT64_MAX;  // no token: whatever we hold
      // A refusal the gateway may only have made because its view of ZooKeeper lags (the new
      // leader's node not seen yet) is no newer leader: the next renewal tries again. A gateway
      // that does not say is taken at its word.
      if (fenced.is_object() && fenced.value("superseded", true) == false) continue;
      m_.fencedAccounts.inc();
      if (onFenced_) onFenced_(fenced["account"].get<std::string>(), token);
    }
  }
}

void GatewayLeaseWriter::checkGatewayTtl(int64_t gatewayTtlMs) {
  if (gatewayTtlMs == gatewayTtlMs_) return;
  gatewayTtlMs_ = gatewayTtlMs;
  m_.gatewayLeaseTtl.set(static_cast<double>(gatewayTtlMs) / 1000);
  if (gatewayTtlMs == params_.leaseTtl.count()) return;
  // The presence model's own rule (a lease outlives two renewal intervals) judges this agent's
  // renewals against the TTL the gateway actually applies.
  presence::Params atGateway = params_;
  atGateway.leaseTtl = presence::Millis{gatewayTtlMs};
  const auto errors = presence::validationErrors(atGateway);
  if (errors.empty()) {
    spdlog::warn(
        "presence lease ttl differs: the gateway's is {} ms, presence.lease_ttl_ms is {} "
        "ms; renewals every {} ms still keep leases alive",
        gatewayTtlMs, params_.leaseTtl.count(), params_.renewInterval.count());
  } else {
    spdlog::error(
        "presence lease ttl too short: the gateway's is {} ms (presence.lease_ttl_ms "
        "says {} ms), and renewals every {} ms let leases lapse between them: set "
        "presence.lease_ttl_ms and renew_interval_ms to match the gateway ({})",
        gatewayTtlMs, params_.leaseTtl.count(), params_.renewInterval.count(), errors.front());
  }
}

}  // namespace zkagent::agent::detail
