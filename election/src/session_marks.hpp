// SessionMarks: how a successor learns how the leader it takes over from left, without reading
// one handover record per account. Every session of a group announces itself with an ephemeral
// node {root}/@sessions/<session id> saying "running"; a stopping session sets it to "stopping"
// before it hands its accounts over. A candidate waiting right behind the leader follows the
// leader's mark with a watch. The server sends a session's changes in order, so the first thing
// that watch hears comes before anything else that session does next: a change means it is
// stopping (its handovers follow), the mark deleted without that means the session ended without
// stopping (expired or crashed). Either way one watch per peer session replaces a read per account:
// a thousand accounts taken over from one process cost no handover reads at all. ('@' is not
// allowed in account ids, so the node never collides with an account.)
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "keeper.hpp"

namespace zkagent::election::detail {

class SessionMarks : public std::enable_shared_from_this<SessionMarks> {
 public:
  enum class Departure {
    Stopped,  // it marked itself stopping: its handovers are clean
    Ended,    // its mark went while we followed it, without saying stopping: expired or crashed
    Unknown,  // not followed throughout, or still running (a resign): read the account's record
  };

  SessionMarks(boost::asio::io_context& io, std::shared_ptr<Keeper> keeper,
               const std::string& root);

  // Creates this session's mark (on every new session).
  void announce(int64_t session);
  // Marks this session as stopping. Sent before the handover operations, so the server applies it
  // first (it keeps a session's order). True when the mark was created on this session, so the
  // set will land and successors can learn the stop from it (no handover record needed).
  bool markStopping(int64_t session);
  // Follows `session`'s mark with a watch (once per session and link: a link loss drops it).
  void follow(int64_t session);
  // How `session` left; `done` runs on `ex`. Answers from what the watch heard, else after one read
  // of the mark (shared by every account asking meanwhile), which the server answers only after
  // any event of the watch that is due.
  void departure(int64_t session, const Executor& ex, std::function<void(Departure)> done);
  // Drops everything remembered and everyone waiting (the session is closed: their callbacks
  // hold the electors, which hold us).
  void forget();

 private:
  struct Peer {
    uint64_t link = 0;  // link epoch the watch was armed under: valid while it is unchanged
    bool armed = false;
    bool arming = false;
    std::optional<Departure> fate;  // Stopped or Ended, once known (final)
    bool reading = false;
    std::vector<std::pair<Executor, std::function<void(Departure)>>> waiting;
  };

  std::string pathOf(int64_t session) const;
  void onEvent(int64_t session, uint64_t link, WatchEvent event);
  // Sets the fate (when known) and answers everyone waiting; under mu_, answers posted after.
  void settle(int64_t session, std::optional<Departure> fate, Departure otherwise);

  boost::asio::io_context& io_;  // announce and markStopping answer here
  std::shared_ptr<Keeper> keeper_;
  // Watch events and read answers run here in the order the server sent them.
  boost::asio::strand<boost::asio::io_context::executor_type> strand_;
  const std::string dir_;
  std::mutex mu_;
  std::unordered_map<int64_t, Peer> peers_;
  int64_t announced_ = 0;  // the session whose mark the server confirmed creating
};

}  // namespace zkagent::election::detail
