#include "session_marks.hpp"

#include <boost/asio/post.hpp>
#include <cstdio>
#include <string_view>

namespace zkagent::election::detail {
namespace {
constexpr std::string_view kRunning = "running";
constexpr std::string_view kStopping = "stopping";
// Remembered answers; past this many sessions the memory starts afresh (each entry is one peer
// session that stopped, so this is only reached by a very long-lived process).
constexpr size_t kMaxRemembered = 256;
}  // namespace

SessionMarks::SessionMarks(std::shared_ptr<ZkSession> zk, const std::string& root)
    : zk_(std::move(zk)), dir_(root + "/@sessions") {}

std::string SessionMarks::pathOf(int64_t session) const {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(session));
  return dir_ + "/" + hex;
}

void SessionMarks::announce(int64_t session) {
  // The create goes out right behind the parent's: the server handles them in that order.
  zk_->ensurePath(dir_, [](ZkError) {});
  zk_->create(pathOf(session), std::string(kRunning), NodeKind::Ephemeral,
              [](ZkError, std::string) {});
}

void SessionMarks::markStopping(int64_t session) {
  zk_->set(pathOf(session), std::string(kStopping), -1, [](ZkError, NodeStat) {});
}

void SessionMarks::isStopping(int64_t session, const Executor& ex, std::function<void(bool)> done) {
  {
    std::lock_guard lock(mu_);
    auto [it, fresh] = lookups_.try_emplace(session);
    if (!fresh && it->second.stopping) {
      return boost::asio::post(ex, [done = std::move(done)] { done(true); });
    }
    it->second.waiting.emplace_back(ex, std::move(done));
    if (!fresh) return;  // a read is on its way
    if (lookups_.size() > kMaxRemembered) {
      std::erase_if(lookups_, [](const auto& entry) { return entry.second.stopping.has_value(); });
    }
  }
  zk_->get(pathOf(session), nullptr,
           [self = shared_from_this(), session](ZkError err, std::string data, NodeStat) {
             const bool stopping = err == ZkError::Ok && std::string_view(data) == kStopping;
             std::vector<std::pair<Executor, std::function<void(bool)>>> waiting;
             {
               std::lock_guard lock(self->mu_);
               auto it = self->lookups_.find(session);
               if (it == self->lookups_.end()) return;
               waiting = std::move(it->second.waiting);
               // Only "stopping" is final; anything else is asked again next time.
               if (stopping) {
                 it->second.stopping = true;
               } else {
                 self->lookups_.erase(it);
               }
             }
             for (auto& [executor, cb] : waiting) {
               boost::asio::post(executor, [cb = std::move(cb), stopping] { cb(stopping); });
             }
           });
}

}  // namespace zkagent::election::detail
