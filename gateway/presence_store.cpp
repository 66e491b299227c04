// The presence lease store of the gateway: parsing and fencing happen on the handler's thread,
// the model is touched only on its strand.
#include "presence_store.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <cstdio>
#include <future>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "gateway.hpp"
#include "presence_disk.hpp"
#include "presence_privacy.hpp"
#include "zkagent/presence/asio_clock.hpp"

namespace zkagent::gateway {
namespace {

using fencing::BadRequest;
using nlohmann::json;

// How long a handler waits for the strand; past it the batch may still be applied, and the agent's
// next renewal (renew is idempotent) or a repeated removal (then stale) settles it.
constexpr std::chrono::seconds kStrandTimeout{5};

http::Response unavailable(std::string_view why) {
  auto response = http::Response::error(503, why);
  response.headers.emplace_back("Retry-After", "1");
  return response;
}

std::int64_t millisSinceEpoch(auto now) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
}

}  // namespace

// Named, not anonymous: PresenceStore::Impl holds one, and a type with linkage may not hold a
// type without it (GCC's -Wsubobject-linkage when a library is one unity unit).
namespace lease_journal {

// Config::leaseJournal: each lease entry's fencing decision, one JSON line, appended and flushed
// per batch (so a kill -9 loses at most the batch being written, never a line in the middle).
// from_ms..to_ms (steady clock, the system's monotonic one) brackets the decision; unix_ms is
// for people.
class LeaseJournal {
 public:
  explicit LeaseJournal(const std::string& path) : file_(std::fopen(path.c_str(), "a")) {
    if (file_ == nullptr)
      throw std::runtime_error("--lease-journal: cannot open " + path + " for appending");
  }
  ~LeaseJournal() { std::fclose(file_); }
  LeaseJournal(const LeaseJournal&) = delete;
  LeaseJournal& operator=(const LeaseJournal&) = delete;

  struct Entry {
    const presence::LeaseEntry& entry;
    const char* list;
    std::string_view result;  // "accepted", or why refused
  };
  void write(const LeaseBatch& batch, std::int64_t fromMs, const std::vector<Entry>& entries) {
    const auto toMs = millisSinceEpoch(std::chrono::steady_clock::now());
    const auto unixMs = millisSinceEpoch(std::chrono::system_clock::now());
    std::string lines;
    for (const auto& e : entries) {
      lines += json{{"from_ms", fromMs},
                    {"to_ms", toMs},
                    {"unix_ms", unixMs},
                    {"list", e.list},
                    {"account", e.entry.key.user},
                    {"device", e.entry.key.device},
                    {"token", e.entry.epoch.leaderToken},
                    {"counter", e.entry.epoch.connection},
                    {"instance", batch.instanceId},
                    {"session", batch.sessionId},
                    {"result", e.result}}
                   .dump();
      lines += '\n';
    }
    std::lock_guard lock(mu_);
    std::fwrite(lines.data(), 1, lines.size(), file_);
    std::fflush(file_);
  }

 private:
  std::mutex mu_;
  std::FILE* file_;
};

}  // namespace lease_journal

using lease_journal::LeaseJournal;

struct PresenceStore::Impl {
  Impl(boost::asio::io_context& io, const Config& config, metrics::Registry& registry,
       ShardOwnership* clusterOwnership)
      : strand(boost::asio::make_strand(io)),
        cluster(clusterOwnership),
        gatewayConfig(config),
        params(paramsFrom(config)),
        clock(strand),
        service(std::make_unique<presence::PresenceService>(clock, params)),
        started(clock.now()),
        disk(config.dataDir),
        generation(disk.nextGeneration()),
        journal(config.leaseJournal.empty() ? nullptr
                                            : std::make_unique<LeaseJournal>(config.leaseJournal)),
        leases(registry
                   .gauge("zkagent_gateway_presence_leases",
                          "Device leases held now (soft state, rebuilt from renewals after a "
                          "restart).")
                   .with({})),
        requests(registry.counter("zkagent_gateway_presence_lease_requests_total",
                                  "Lease batches (POST /v1/presence/leases) by result: ok, "
                                  "bad_request (nothing applied) or refused (503).",
                                  {"result"})),
        entries(registry.counter("zkagent_gateway_presence_lease_entries_total",
                                 "Lease entries by op (renew, remove) and result: accepted, stale "
                                 "(epoch below the lease's, or not equal for a removal), fenced "
                                 "(refused by the fencing rule: not the account's leader) or "
                                 "unknown_account (not served by this gateway).",
                                 {"op", "result"})),
        expirations(registry
                        .counter("zkagent_gateway_presence_lease_expirations_total",
                                 "Leases that ran out their TTL without a renewal or a removal.")
                        .with({})),
        flaps(registry
                  .counter("zkagent_gateway_presence_device_flaps_total",
                           "Device-level appearances and disappearances in the lease store, "
                           "counted apart from user-level changes.")
                  .with({})),
        published(registry
                      .counter("zkagent_gateway_presence_published_changes_total",
                               "User-level changes the view published to subscribers (online at "
                               "once, offline after the debounce), against the device flaps.")
                      .with({})),
        privacyInvalid(registry
                           .counter("zkagent_gateway_presence_privacy_invalid_total",
                                    "Cluster mode: privacy rule nodes read from ZooKeeper that do "
                                    "not parse; each hides its account until it is fixed.")
                           .with({})) {
    // Before the strand runs: nothing else touches the model yet. Cluster mode: the rules come
    // from ZooKeeper (watchCluster), never from this gateway's disk.
    if (config.clusterShards == 0) {
      for (const auto& [account, rules] : disk.loadPrivacy()) {
        service->privacy().replace(account, rules);
      }
    }
    for (const char* result : {"ok", "bad_request", "refused"}) requests.with({result});
    for (const char* op : {"renew", "remove"}) {
      for (const char* result : {"accepted", "stale", "fenced", "unknown_account"}) {
        entries.with({op, result});
      }
    }
  }

  static presence::Params paramsFrom(const Config& config) {
    presence::Params params;
    params.leaseTtl = presence::Millis{config.leaseTtlMs};
    params.sweepInterval = presence::Millis{config.leaseSweepMs};
    // The writers' renewal interval is theirs; the model only checks TTL > 2 x it.
    params.renewInterval = std::max(presence::Millis{1}, params.leaseTtl / 3);
    params.offlineDebounce = presence::Millis{config.debounceMs};
    return params;
  }

  // Runs `work` on the strand and waits for it. The promise is shared with the posted task, so a
  // wait that times out leaves nothing dangling; nullopt then, or once stopped.
  template <typename Work>
  auto onStrand(Work work) -> std::optional<decltype(work())> {
    using Result = decltype(work());
    auto promise = std::make_shared<std::promise<std::optional<Result>>>();
    auto future = promise->get_future();
    boost::asio::post(strand, [this, promise, work = std::move(work)]() mutable {
      if (stopped) {
        promise->set_value(std::nullopt);
        return;
      }
      try {
        promise->set_value(work());
      } catch (...) {
        promise->set_exception(std::current_exception());
      }
    });
    if (future.wait_for(kStrandTimeout) != std::future_status::ready) return std::nullopt;
    return future.get();
  }

  // On the strand: the metrics that follow the model's own counters.
  void syncMetrics() {
    auto& store = service->leases();
    leases.set(static_cast<double>(store.size()));
    const auto expired = store.counters().leaseExpirations;
    expirations.inc(static_cast<double>(expired - seenExpirations));
    seenExpirations = expired;
    const auto flapped = service->view().counters().deviceFlaps;
    flaps.inc(static_cast<double>(flapped - seenFlaps));
    seenFlaps = flapped;
    const auto publishedNow = service->view().counters().publishedChanges;
    published.inc(static_cast<double>(publishedNow - seenPublished));
    seenPublished = publishedNow;
  }

  // Cluster mode, on the elections' thread: an account's rule node as read (nullopt: deleted),
  // applied on the strand as a PUT applies its rules. A node that does not parse hides the
  // account (fail closed) until it is fixed.
  void onClusterPrivacy(const std::string& account, const std::optional<std::string>& data) {
    presence::TargetPrivacy rules;  // deleted: as if never set (nobody may see the account)
    std::optional<std::string> invalid;
    if (data) {
      try {
        rules = parsePrivacyBody(*data);
      } catch (const BadRequest& error) {
        invalid = error.what();
        rules = presence::TargetPrivacy{};
        rules.level = presence::PrivacyLevel::Hidden;
        privacyInvalid.inc();
        spdlog::error(
            "presence privacy of {} in ZooKeeper does not parse ({}): the account is hidden from "
            "every viewer until its rules are set again",
            account, *invalid);
      }
    }
    boost::asio::post(strand, [this, account, rules, invalid] {
      if (!stopped) applyPrivacy(account, rules, invalid);
    });
  }

  // On the strand: `rules` now hold for the account's live subscriptions; `invalid` says why the
  // account's stored rules could not be read (they are then the fail-closed ones).
  void applyPrivacy(const std::string& account, const presence::TargetPrivacy& rules,
                    const std::optional<std::string>& invalid = std::nullopt) {
    if (invalid) {
      invalidPrivacy[account] = *invalid;
    } else {
      invalidPrivacy.erase(account);
    }
    service->privacy().replace(account, rules);
    service->subscriptions().onPrivacyChange(account);
  }

  boost::asio::strand<boost::asio::io_context::executor_type> strand;
  ShardOwnership* cluster;     // null in single mode; set before the strand runs (attachCluster)
  const Config gatewayConfig;  // a copy, for which accounts it serves (Config::serves)
  presence::Params params;
  presence::AsioClock clock;
  // Everything below up to the metrics is touched only on the strand.
  std::unique_ptr<presence::PresenceService> service;
  presence::TimePoint started;
  PresenceDisk disk;
  const std::uint64_t generation;
  const std::unique_ptr<LeaseJournal> journal;  // null: none configured
  std::mutex privacyWrites;  // one PUT at a time: the file and the model follow the same order
  // Cluster mode: accounts whose rule node does not parse, and why (strand only).
  std::map<std::string, std::string, std::less<>> invalidPrivacy;
  bool stopped = false;
  std::uint64_t seenPublished = 0;
  std::uint64_t seenExpirations = 0;
  std::uint64_t seenFlaps = 0;

  metrics::Gauge& leases;
  metrics::CounterFamily& requests;
  metrics::CounterFamily& entries;
  metrics::Counter& expirations;
  metrics::Counter& flaps;
  metrics::Counter& published;
  metrics::Counter& privacyInvalid;
};

PresenceStore::PresenceStore(boost::asio::io_context& io, const Config& config,
                             metrics::Registry& registry, ShardOwnership* cluster)
    : impl_(std::make_unique<Impl>(io, config, registry, nullptr)) {
  if (cluster != nullptr) attachCluster(*cluster);
}

void PresenceStore::attachCluster(ShardOwnership& cluster) {
  impl_->cluster = &cluster;
  cluster.watchPrivacy(
      [impl = impl_.get()](const std::string& account, const std::optional<std::string>& data) {
        impl->onClusterPrivacy(account, data);
      });
}

ShardOwnership* PresenceStore::cluster() const { return impl_->cluster; }

PresenceStore::~PresenceStore() {
  if (impl_->cluster != nullptr) impl_->cluster->watchPrivacy({});
}

void PresenceStore::post(std::function<void(presence::PresenceService& service)> work) {
  boost::asio::post(impl_->strand, [impl = impl_.get(), work = std::move(work)] {
    if (!impl->stopped) work(*impl->service);
  });
}

void PresenceStore::stop() {
  boost::asio::post(impl_->strand, [impl = impl_.get()] {
    impl->stopped = true;
    impl->clock.cancelAll();
  });
}

http::Response PresenceStore::refuseLeases(std::string_view why) {
  impl_->requests.with({"refused"}).inc();
  return unavailable(why);
}

http::Response PresenceStore::postLeases(std::string_view body, const LeaseFence& fence) {
  Impl& impl = *impl_;
  if (body.size() > kMaxLeaseBatchBytes) {
    impl.requests.with({"bad_request"}).inc();
    return http::Response::error(413, "body: larger than " + std::to_string(kMaxLeaseBatchBytes) +
                                          " bytes; split the batch");
  }
  LeaseBatch batch;
  try {
    batch = parseLeaseBatch(body);
  } catch (const BadRequest& error) {
    impl.requests.with({"bad_request"}).inc();
    return http::Response::error(400, error.what());
  }

  // One write to decide per account and token of the batch, in order of first appearance, and
  // each entry's write (kNotServed: an account this gateway does not serve).
  constexpr size_t kNotServed = SIZE_MAX;
  std::map<std::pair<std::string_view, std::uint64_t>, size_t> writeOf;
  std::vector<fencing::FencingToken> writes;
  auto writeFor = [&](const presence::LeaseEntry& entry) {
    if (!impl.gatewayConfig.serves(entry.key.user)) return kNotServed;
    auto [it, fresh] =
        writeOf.try_emplace({entry.key.user, entry.epoch.leaderToken}, writes.size());
    if (fresh) {
      writes.push_back(
          {entry.key.user, entry.epoch.leaderToken, batch.instanceId, batch.sessionId});
    }
    return it->second;
  };
  std::vector<size_t> renewWrites, removeWrites;
  renewWrites.reserve(batch.renew.size());
  removeWrites.reserve(batch.remove.size());
  for (const auto& entry : batch.renew) renewWrites.push_back(writeFor(entry));
  for (const auto& removal : batch.remove) removeWrites.push_back(writeFor(removal.entry));
  std::vector<fencing::Decision> decisions;
  const auto decidedFrom = millisSinceEpoch(std::chrono::steady_clock::now());
  if (!writes.empty()) {
    auto decided = fence(writes);
    if (auto* why = std::get_if<std::string>(&decided)) {
      if (impl.journal) {
        std::vector<LeaseJournal::Entry> all;
        for (const auto& entry : batch.renew) all.push_back({entry, "renew", "unavailable"});
        for (const auto& removal : batch.remove)
          all.push_back({removal.entry, "remove", "unavailable"});
        impl.journal->write(batch, decidedFrom, all);
      }
      return refuseLeases(*why);
    }
    decisions = std::get<std::vector<fencing::Decision>>(std::move(decided));
  }
  if (impl.journal) {
    std::vector<LeaseJournal::Entry> all;
    auto result = [&](size_t write) -> std::string_view {
      return write == kNotServed ? "unknown_account"
                                 : fencing::reasonCode(decisions[write].verdict);  // or "accepted"
    };
    for (size_t i = 0; i < batch.renew.size(); ++i)
      all.push_back({batch.renew[i], "renew", result(renewWrites[i])});
    for (size_t i = 0; i < batch.remove.size(); ++i)
      all.push_back({batch.remove[i].entry, "remove", result(removeWrites[i])});
    impl.journal->write(batch, decidedFrom, all);
  }

  // Each entry the fence refuses, or whose account is not served, is refused alone.
  using ordered = nlohmann::ordered_json;
  auto refused = ordered::array();
  std::set<size_t> fencedWrites;
  std::map<std::pair<std::string, std::string>, std::uint64_t> refusedCounts;  // (op, result)
  auto keep = [&](const presence::LeaseEntry& entry, size_t write, const char* list, size_t index) {
    std::string reason = "unknown_account", result = "unknown_account";
    if (write != kNotServed) {
      if (decisions[write].accepted()) return true;
      reason = std::string(fencing::reasonCode(decisions[write].verdict));
      result = "fenced";
      fencedWrites.insert(write);
    }
    ++refusedCounts[{list, result}];
    refused.push_back(
        {{"index", index}, {"list", list}, {"account", entry.key.user}, {"reason", reason}});
    return false;
  };
  size_t index = 0;
  std::erase_if(batch.renew, [&](const auto& entry) {
    const size_t at = index++;
    return !keep(entry, renewWrites[at], "renew", at);
  });
  index = 0;
  std::erase_if(batch.remove, [&](const auto& removal) {
    const size_t at = index++;
    return !keep(removal.entry, removeWrites[at], "remove", at);
  });

  struct Applied {
    std::uint64_t renewed, staleRenewals, removed, staleRemovals;
  };
  auto applied = impl.onStrand([&impl, batch = std::move(batch)] {
    auto& store = impl.service->leases();
    const auto before = store.counters();
    store.renew(batch.instanceId, batch.renew);
    for (const auto& removal : batch.remove) {
      store.remove(removal.entry.key, removal.entry.epoch, removal.reason);
    }
    const auto after = store.counters();
    impl.syncMetrics();
    return Applied{after.renewalsAccepted - before.renewalsAccepted,
                   after.staleRenewalsRejected - before.staleRenewalsRejected,
                   after.removals - before.removals, after.rejectedStale - before.rejectedStale};
  });
  if (!applied) {
    return refuseLeases("presence store stopped or did not answer in time; retry the batch");
  }

  auto count = [&](const std::string& op, const std::string& result, std::uint64_t n) {
    if (n > 0) impl.entries.with({op, result}).inc(static_cast<double>(n));
  };
  count("renew", "accepted", applied->renewed);
  count("renew", "stale", applied->staleRenewals);
  count("remove", "accepted", applied->removed);
  count("remove", "stale", applied->staleRemovals);
  for (const auto& [opAndResult, n] : refusedCounts) {
    count(opAndResult.first, opAndResult.second, n);
  }
  impl.requests.with({"ok"}).inc();

  auto fenced = ordered::array();
  for (const size_t write : fencedWrites) {
    const fencing::FencingToken& refusedWrite = writes[write];
    spdlog::info("presence lease writes fenced account={} token={} instance={} reason={} detail={}",
                 refusedWrite.account, refusedWrite.token, refusedWrite.instanceId,
                 fencing::reasonCode(decisions[write].verdict), decisions[write].detail);
    fenced.push_back({{"account", refusedWrite.account},
                      {"token", refusedWrite.token},
                      {"superseded", decisions[write].superseded}});
  }
  return http::Response::json(200,
                              ordered{{"renewed", applied->renewed},
                                      {"removed", applied->removed},
                                      {"stale", applied->staleRenewals + applied->staleRemovals},
                                      {"fenced", std::move(fenced)},
                                      {"refused", std::move(refused)},
                                      {"leaseTtlMs", impl.params.leaseTtl.count()}}
                                  .dump());
}

http::Response PresenceStore::accountPresence(const std::string& account) {
  Impl& impl = *impl_;
  auto answer = impl.onStrand([&impl, account] {
    const auto now = impl.clock.now();
    using ordered = nlohmann::ordered_json;
    auto devices = ordered::array();
    std::vector<std::pair<std::string, ordered>> sorted;
    impl.service->leases().forEachLeaseOf(
        account, [&](const presence::DeviceKey& key, const presence::Lease& lease) {
          // A lease's deadline is its last renewal + TTL, so the age follows from it.
          const auto age = std::clamp(impl.params.leaseTtl - (lease.expires - now),
                                      presence::Millis{0}, impl.params.leaseTtl);
          sorted.emplace_back(
              key.device,
              ordered{{"device", key.device},
                      {"agent", lease.holder},
                      {"epoch",
                       {{"token", lease.epoch.leaderToken}, {"counter", lease.epoch.connection}}},
                      {"age_ms", age.count()}});
        });
    std::sort(sorted.begin(), sorted.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [device, entry] : sorted) devices.push_back(std::move(entry));
    ordered body = {{"account", account}, {"online", !devices.empty()}, {"devices", devices}};
    // Soft state: a device whose agent has not renewed since the start is missing from a
    // freshly started store, so "offline" means nothing until one TTL has passed.
    if (now < impl.started + impl.params.leaseTtl) body["warming_up"] = true;
    return body.dump();
  });
  if (!answer) return unavailable("presence store stopped or did not answer in time");
  return http::Response::json(200, std::move(*answer));
}

std::uint64_t PresenceStore::versionBase(std::string_view target) const {
  if (impl_->cluster != nullptr) return impl_->cluster->epochOf(target) << 32;
  return impl_->generation << 32;
}

std::uint64_t PresenceStore::generation() const { return impl_->generation; }

boost::asio::any_io_executor PresenceStore::executor() const { return impl_->strand; }

bool PresenceStore::warmingUp() const {
  return impl_->clock.now() < impl_->started + impl_->params.leaseTtl;
}

http::Response PresenceStore::putPrivacy(const std::string& account, std::string_view body) {
  Impl& impl = *impl_;
  presence::TargetPrivacy rules;
  try {
    rules = parsePrivacyBody(body);
  } catch (const BadRequest& error) {
    return http::Response::error(400, error.what());
  }
  std::lock_guard lock(impl.privacyWrites);
  if (impl.cluster != nullptr) {
    // The cluster's copy is the only one: every gateway applies it from its watch.
    if (auto failed = impl.cluster->writePrivacy(account, privacyJson(rules), kStrandTimeout)) {
      spdlog::warn("presence privacy of {} not written to ZooKeeper: {}", account, *failed);
      return unavailable("privacy rules not written: " + *failed);
    }
  } else {
    try {
      impl.disk.savePrivacy(account, rules);
    } catch (const std::exception& error) {
      spdlog::error("presence privacy of {} not saved: {}", account, error.what());
      return http::Response::error(500, "privacy rules not saved; the previous rules still apply");
    }
  }
  auto applied = impl.onStrand([&impl, account, rules] {
    impl.applyPrivacy(account, rules);
    return true;
  });
  // Saved but not applied in time: the strand applies it soon, a restart certainly.
  if (!applied) return unavailable("privacy rules saved; applying them did not finish in time");
  spdlog::info("presence privacy of {} set: {}", account, privacyJson(rules));
  return http::Response::json(200, privacyJson(rules, account));
}

http::Response PresenceStore::getPrivacy(const std::string& account) {
  Impl& impl = *impl_;
  using Rules = std::variant<presence::TargetPrivacy, std::string>;  // or why they are unreadable
  auto rules = impl.onStrand([&impl, account]() -> Rules {
    if (auto invalid = impl.invalidPrivacy.find(account); invalid != impl.invalidPrivacy.end()) {
      return invalid->second;
    }
    return impl.service->privacy().rulesOf(account).value_or(presence::TargetPrivacy{});
  });
  if (!rules) return unavailable("presence store stopped or did not answer in time");
  if (const auto* invalid = std::get_if<std::string>(&*rules)) {
    return http::Response::error(500, "privacy rules of " + account +
                                          " in ZooKeeper do not parse (" + *invalid +
                                          "): the account is hidden until they are set again");
  }
  return http::Response::json(200, privacyJson(std::get<presence::TargetPrivacy>(*rules), account));
}

void PresenceStore::refreshMetrics() {
  impl_->onStrand([impl = impl_.get()] {
    impl->syncMetrics();
    return true;
  });
}

}  // namespace zkagent::gateway
