// What a ZooKeeper cache, and a read after a sync, would say, set by the test; counts the look-ups.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include "gateway.hpp"

namespace zkagent::gateway::testing {

class FakeLeaders final : public LeaderSource {
 public:
  bool trusted() const override { return reachable_; }
  // The cached view: what ZooKeeper said, or what setCached made it.
  fencing::ActiveView active(std::string_view account) override {
    ++lookups_;
    auto view = lookUp(cached_, account);
    view.cached = true;
    return view;
  }
  // What ZooKeeper says after a sync.
  fencing::ActiveView confirmedActive(std::string_view account) override {
    ++confirmedLookups_;
    if (confirmedUnavailable_) return fencing::ActiveView::unknown();
    return lookUp(current_, account);
  }
  void setActive(const std::string& account, uint64_t seq) {
    set(account, fencing::ActiveView::present(seq));
  }
  void setHeldBy(const std::string& account, uint64_t seq, const std::string& instance,
                 int64_t session) {
    set(account, fencing::ActiveView::heldBy(seq, instance, session));
  }
  // The cache answers for this account, but cannot tell (a read that timed out).
  void setUnknown(const std::string& account) { set(account, fencing::ActiveView::unknown()); }
  // Only the cache shows `seq`: ZooKeeper's leader holds what it held (a server behind it).
  void setCached(const std::string& account, uint64_t seq) {
    std::lock_guard lock(mutex_);
    cached_[account] = fencing::ActiveView::present(seq);
  }
  void setReachable(bool reachable) { reachable_ = reachable; }
  // Reads after a sync fail (they time out) while the cache still answers.
  void setConfirmedUnavailable(bool unavailable) { confirmedUnavailable_ = unavailable; }
  int lookups() const { return lookups_; }
  int confirmedLookups() const { return confirmedLookups_; }

 private:
  fencing::ActiveView lookUp(const std::map<std::string, fencing::ActiveView>& views,
                             std::string_view account) {
    if (!reachable_) return fencing::ActiveView::unknown();
    std::lock_guard lock(mutex_);
    auto it = views.find(std::string(account));
    return it == views.end() ? fencing::ActiveView::absent() : it->second;
  }
  void set(const std::string& account, const fencing::ActiveView& view) {
    std::lock_guard lock(mutex_);
    cached_[account] = view;
    current_[account] = view;
  }

  std::atomic<bool> reachable_{true};
  std::atomic<bool> confirmedUnavailable_{false};
  std::atomic<int> lookups_{0};
  std::atomic<int> confirmedLookups_{0};
  std::mutex mutex_;
  std::map<std::string, fencing::ActiveView> cached_;
  std::map<std::string, fencing::ActiveView> current_;
};

}  // namespace zkagent::gateway::testing
