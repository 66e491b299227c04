// ZkSession: the watch table: watches armed per path and owner, fired once, dropped on a link loss.
#include <zookeeper/zookeeper.h>

#include <boost/asio/post.hpp>

#include "zk_session.hpp"

namespace zkagent::election::detail {
namespace asio = boost::asio;

void ZkSession::onWatcherEvent(uint64_t generation, int type, int state, const char* path) {
  if (type == ZOO_SESSION_EVENT) {
    // The gate must close the instant the link drops, before anything is posted: a leader that
    // cannot hear ZooKeeper must not act. Only the current handle's link counts: a retired handle
    // (an expired session's, closed on another thread) reports its own end, which says nothing
    // of the session that replaced it and would otherwise close its gate for good.
    if (state != ZOO_CONNECTED_STATE && generation == generation_.load()) {
      connected_.store(false);
      linkEpoch_.fetch_add(1);
    }
    asio::post(strand_, [weak = weak_from_this(), generation, state] {
      if (auto self = weak.lock()) self->handleSessionState(generation, state);
    });
    return;
  }
  const std::string nodePath = path != nullptr ? path : "";
  const bool data =
      type == ZOO_CREATED_EVENT || type == ZOO_DELETED_EVENT || type == ZOO_CHANGED_EVENT;
  const bool child = type == ZOO_CHILD_EVENT || type == ZOO_DELETED_EVENT;
  const WatchEvent event = type == ZOO_CREATED_EVENT   ? WatchEvent::Created
                           : type == ZOO_DELETED_EVENT ? WatchEvent::Deleted
                           : type == ZOO_CHANGED_EVENT ? WatchEvent::Changed
                                                       : WatchEvent::Children;
  fireWatches(generation, event, data, child, nodePath);
}

void ZkSession::addWatch(uint64_t generation, bool childWatch, const std::string& path,
                         const void* owner, const Executor& ex, TypedWatch watch) {
  std::lock_guard lock(mu_);
  if (generation != generation_) return;  // the handle that armed it is gone
  auto& entries = (childWatch ? childWatches_ : dataWatches_)[path];
  for (auto& e : entries) {
    if (owner != nullptr && e.owner == owner) {
      e.watch = std::move(watch);
      e.executor = ex;
      return;
    }
  }
  entries.push_back({owner, ex, std::move(watch)});
}

void ZkSession::fireWatches(uint64_t generation, WatchEvent event, bool data, bool child,
                            const std::string& path) {
  std::vector<WatchEntry> fired;
  {
    std::lock_guard lock(mu_);
    if (generation != generation_) return;
    for (auto* table : {data ? &dataWatches_ : nullptr, child ? &childWatches_ : nullptr}) {
      if (table == nullptr) continue;
      if (auto it = table->find(path); it != table->end()) {
        for (auto& e : it->second) fired.push_back(std::move(e));
        table->erase(it);
      }
    }
  }
  for (auto& e : fired) {
    asio::post(e.executor, [watch = std::move(e.watch), event] { watch(event); });
  }
}
// ZooKeeper 3.8's C client re-sends every watch in one SetWatches packet on reconnect; past
// jute.maxbuffer (1 MiB, ~29000 watches: ZOOKEEPER-706) the server drops the connection and the
// session can never resume. So on every disconnect we forget all watches locally (no network
// involved) and the owners re-arm them by re-reading after the reconnect, as they must anyway to
// learn what changed while we were away.
void ZkSession::dropWatchesLocally() {
  std::lock_guard lock(mu_);
  if (zh_ != nullptr) {
    for (auto* table : {&dataWatches_, &childWatches_}) {
      for (auto& [path, entries] : *table) {
        // Local removal only edits the client's table; the call returns without a round trip.
        zoo_remove_all_watches(zh_, path.c_str(), ZWATCHTYPE_ANY, 1);
      }
    }
  }
  dataWatches_.clear();
  childWatches_.clear();
}
}  // namespace zkagent::election::detail
