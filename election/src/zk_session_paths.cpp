// ZkSession: the path cache: ensurePathOn creates each level once per session.
#include <atomic>
#include <boost/asio/post.hpp>
#include <memory>

#include "zk_session.hpp"

namespace zkagent::election::detail {
namespace asio = boost::asio;

// All missing ancestors are created in one pipelined burst: ZooKeeper applies a session's
// requests in order, so each create finds its parent already made.
void ZkSession::ensurePathOn(Executor ex, std::string path, std::function<void(ZkError)> done) {
  std::vector<std::string> prefixes;
  for (size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    prefixes.push_back(path.substr(0, pos));
  }
  prefixes.push_back(path);
  // Prefixes this session created or saw exist (or has a create on the way for) are skipped: the
  // server handles a session's requests in order, so a create sent after another one's finds its
  // parent. Ten thousand accounts thus create the shared root once, not ten thousand times.
  std::vector<std::string> missing;
  {
    std::lock_guard lock(mu_);
    for (auto& p : prefixes) {
      if (knownPaths_.insert(p).second) missing.push_back(p);
    }
  }
  if (missing.empty()) return asio::post(ex, [done = std::move(done)] { done(ZkError::Ok); });
  // The answers may run on different threads at once (`ex` need not be a strand).
  struct Join {
    std::atomic<size_t> pending;
    std::atomic<ZkError> result{ZkError::Ok};
    std::function<void(ZkError)> done;
  };
  auto join = std::make_shared<Join>();
  join->pending = missing.size();
  join->done = std::move(done);
  for (auto& p : missing) {
    createOn(ex, p, "", NodeKind::Persistent,
             [self = shared_from_this(), join, prefixes](ZkError err, std::string) {
               if (err != ZkError::Ok && err != ZkError::NodeExists) {
                 // Not there after all (the tree was deleted under us, CURATOR-724): forget the
                 // whole path so the next attempt creates every level again.
                 std::lock_guard lock(self->mu_);
                 for (auto& p2 : prefixes) self->knownPaths_.erase(p2);
                 ZkError first = ZkError::Ok;
                 join->result.compare_exchange_strong(first, err);
               }
               if (join->pending.fetch_sub(1) == 1) join->done(join->result.load());
             });
  }
}

void ZkSession::forgetPath(const std::string& path) {
  std::lock_guard lock(mu_);
  for (size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    knownPaths_.erase(path.substr(0, pos));
  }
  knownPaths_.erase(path);
}

}  // namespace zkagent::election::detail
