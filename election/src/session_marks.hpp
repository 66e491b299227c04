// SessionMarks: how a successor learns that a whole process stopped cleanly without reading one
// handover record per account. Every session of a group announces itself with an ephemeral node
// {root}/@sessions/<session id> ("running"); a stopping session marks it "stopping" before it hands
// its accounts over. A successor taking an account over from the leader that was first in its
// queue reads that leader's mark once for all the accounts it takes from it: a thousand accounts
// handed over by one stopping process cost one read instead of a thousand. ('@' is not allowed in
// account ids, so the node never collides with an account.)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "zk_session.hpp"

namespace zkagent::election::detail {

class SessionMarks : public std::enable_shared_from_this<SessionMarks> {
 public:
  SessionMarks(std::shared_ptr<ZkSession> zk, const std::string& root);

  // Creates this session's mark (on every new session).
  void announce(int64_t session);
  // Marks this session as stopping. Sent before the handover operations, so the server applies it
  // first (it keeps a session's order).
  void markStopping(int64_t session);
  // Whether `session` marked itself stopping; `done` runs on `ex`. One read per session however
  // many accounts ask at once; a "stopping" answer is remembered (a session never un-stops).
  void isStopping(int64_t session, const Executor& ex, std::function<void(bool)> done);

 private:
  std::string pathOf(int64_t session) const;

  struct Lookup {
    std::optional<bool> stopping;  // nullopt while the read is on its way
    std::vector<std::pair<Executor, std::function<void(bool)>>> waiting;
  };

  std::shared_ptr<ZkSession> zk_;
  const std::string dir_;
  std::mutex mu_;
  std::unordered_map<int64_t, Lookup> lookups_;
};

}  // namespace zkagent::election::detail
