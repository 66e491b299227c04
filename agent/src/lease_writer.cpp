#include "lease_writer.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "agent_impl.hpp"

namespace zkagent::agent::detail {
namespace {
using nlohmann::json;

// Writes made within this window share one request: a burst of connects or closes costs one
// round trip, and a removal still leaves within a few milliseconds.
constexpr std::chrono::milliseconds kFlushDelay{2};
// After a failed batch: the gateway is down or overloaded, do not hammer it.
constexpr std::chrono::milliseconds kRetryDelay{200};

http::ClientOptions leaseClientOptions(const Config::Gateway& gateway) {
  http::ClientOptions options;
  options.host = gateway.address.host;
  options.port = gateway.address.port;
  options.connectTimeout = std::min(gateway.requestTimeout, std::chrono::milliseconds(2000));
  options.requestTimeout = gateway.requestTimeout;
  options.bearerToken = gateway.token;
  options.tls = gatewayClientTls(gateway);
  options.maxIdleConnections = 1;  // one request at a time: one kept-alive connection
  options.asyncThreads = 1;
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
                                       std::function<int64_t()> sessionId, FencedHandler onFenced)
    : executor_(executor),
      instanceId_(config.instanceId),
      maxEntries_(config.presence.maxBatchEntries),
      m_(metrics),
      gate_(std::move(gate)),
      sessionId_(std::move(sessionId)),
      onFenced_(std::move(onFenced)),
      client_(std::make_unique<http::Client>(leaseClientOptions(config.gateway))),
      timer_(executor) {}

void GatewayLeaseWriter::renew(std::string_view, std::span<const presence::LeaseEntry> entries) {
  if (stopped_) return;
  renewals_.insert(renewals_.end(), entries.begin(), entries.end());
  flushSoon(kFlushDelay);
}

void GatewayLeaseWriter::remove(const presence::DeviceKey& key, presence::Epoch epoch,
                                presence::LeaveReason reason) {
  if (stopped_) return;
  removals_.push_back(Removal{{key, epoch}, reason});
  flushSoon(kFlushDelay);
}

void GatewayLeaseWriter::stop() {
  stopped_ = true;
  renewals_.clear();
  removals_.clear();
  timer_.cancel();
}

void GatewayLeaseWriter::shutdown() {
  stop();
  client_.reset();  // joins its worker; an answer it posts meanwhile is dropped with the queue
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

// One batch of at most maxEntries_: renewals first, so a connection's renewal never travels after
// its own removal.
void GatewayLeaseWriter::flush() {
  if (stopped_ || !client_ || inFlight_ || (renewals_.empty() && removals_.empty())) return;
  std::unordered_map<std::string, int64_t> tokens;  // account -> our token now, -1: not leading
  auto leads = [&](const presence::LeaseEntry& entry) {
    auto [it, fresh] = tokens.try_emplace(entry.key.user, -1);
    if (fresh) {
      const auto decision = gate_(entry.key.user);
      if (decision.allowed()) it->second = decision.token;
    }
    return it->second >= 0 && static_cast<uint64_t>(it->second) == entry.epoch.leaderToken;
  };
  json renew = json::array(), remove = json::array();
  size_t taken = 0, renewDropped = 0, removeDropped = 0;
  size_t r = 0;
  for (; r < renewals_.size() && taken < maxEntries_; ++r) {
    if (!leads(renewals_[r])) {
      ++renewDropped;
      continue;
    }
    renew.push_back(entryJson(renewals_[r]));
    ++taken;
  }
  renewals_.erase(renewals_.begin(), renewals_.begin() + static_cast<std::ptrdiff_t>(r));
  std::vector<Removal> sent;
  size_t k = 0;
  for (; k < removals_.size() && taken < maxEntries_; ++k) {
    if (!leads(removals_[k].entry)) {
      ++removeDropped;
      continue;
    }
    auto item = entryJson(removals_[k].entry);
    item["reason"] = presence::toString(removals_[k].reason);
    remove.push_back(std::move(item));
    sent.push_back(std::move(removals_[k]));
    ++taken;
  }
  removals_.erase(removals_.begin(), removals_.begin() + static_cast<std::ptrdiff_t>(k));
  if (renewDropped)
    m_.leaseEntries.with({"renew", "dropped"}).inc(static_cast<double>(renewDropped));
  if (removeDropped)
    m_.leaseEntries.with({"remove", "dropped"}).inc(static_cast<double>(removeDropped));
  if (taken == 0) {
    if (!renewals_.empty() || !removals_.empty()) flushSoon(std::chrono::milliseconds(0));
    return;
  }
  const json body{{"instanceId", instanceId_},
                  {"sessionId", hexSession(sessionId_())},
                  {"renew", std::move(renew)},
                  {"remove", std::move(remove)}};
  const size_t renewed = taken - sent.size();
  inFlight_ = true;
  client_->asyncRequest(http::Method::Post, "/v1/presence/leases", body.dump(),
                        [weak = weak_from_this(), executor = executor_, sent = std::move(sent),
                         renewed](http::ClientResponse response) mutable {
                          // The client's worker thread: back onto the endpoint's. shutdown() joins
                          // this worker before the io_context goes, so the post never finds it
                          // gone.
                          boost::asio::post(executor, [weak, sent = std::move(sent), renewed,
                                                       response = std::move(response)]() mutable {
                            auto self = weak.lock();
                            if (!self) return;
                            self->inFlight_ = false;
                            self->answered(renewed, std::move(sent), std::move(response));
                          });
                        });
}

void GatewayLeaseWriter::answered(size_t renewed, std::vector<Removal> removals,
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
    // Renewals come again with the next tick (the table renews every connection); a removal is
    // tried once more, else its lease expires on the gateway.
    std::vector<Removal> again;
    for (auto& removal : removals) {
      if (!removal.retried) {
        removal.retried = true;
        again.push_back(std::move(removal));
      }
    }
    removals_.insert(removals_.begin(), std::make_move_iterator(again.begin()),
                     std::make_move_iterator(again.end()));
    if (!renewals_.empty() || !removals_.empty()) flushSoon(kRetryDelay);
    return;
  }
  const auto answer = json::parse(response.body, nullptr, false);
  if (answer.is_object()) {
    for (const auto& fenced : answer.value("fenced", json::array())) {
      if (!fenced.is_object() || !fenced.contains("account") || !fenced["account"].is_string())
        continue;
      const auto token = fenced.contains("token") && fenced["token"].is_number_unsigned()
                             ? fenced["token"].get<uint64_t>()
                             : UINT64_MAX;  // no token: whatever we hold
      m_.fencedAccounts.inc();
      if (onFenced_) onFenced_(fenced["account"].get<std::string>(), token);
    }
  }
  if (!renewals_.empty() || !removals_.empty()) flushSoon(std::chrono::milliseconds(0));
}

}  // namespace zkagent::agent::detail
