// What a ZooKeeper cache would say, set by the test; counts the look-ups it answered.
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
  fencing::ActiveView active(std::string_view account) override {
    ++lookups_;
    if (!reachable_) return fencing::ActiveView::unknown();
    std::lock_guard lock(mutex_);
    auto it = active_.find(std::string(account));
    return it == active_.end() ? fencing::ActiveView::absent() : it->second;
  }
  void setActive(const std::string& account, uint64_t seq) {
    std::lock_guard lock(mutex_);
    active_[account] = fencing::ActiveView::present(seq);
  }
  void setHeldBy(const std::string& account, uint64_t seq, const std::string& instance,
                 int64_t session) {
    std::lock_guard lock(mutex_);
    active_[account] = fencing::ActiveView::heldBy(seq, instance, session);
  }
  // The cache answers for this account, but cannot tell (a read that timed out).
  void setUnknown(const std::string& account) {
    std::lock_guard lock(mutex_);
    active_[account] = fencing::ActiveView::unknown();
  }
  void setReachable(bool reachable) { reachable_ = reachable; }
  int lookups() const { return lookups_; }

 private:
  std::atomic<bool> reachable_{true};
  std::atomic<int> lookups_{0};
  std::mutex mutex_;
  std::map<std::string, fencing::ActiveView> active_;
};

}  // namespace zkagent::gateway::testing
