#include "session_marks.hpp"

#include <boost/asio/post.hpp>
#include <cstdio>
#include <string_view>

#include "zkagent/naming.hpp"

namespace zkagent::election::detail {
namespace {
constexpr std::string_view kRunning = "running";
constexpr std::string_view kStopping = "stopping";
// Peers remembered; past this many the settled ones are forgotten (each is one peer session that
// went away, so only a very long-lived process gets there).
constexpr size_t kMaxPeers = 256;
}  // namespace

SessionMarks::SessionMarks(boost::asio::io_context& io, std::shared_ptr<Keeper> keeper,
                           const std::string& root)
    : io_(io),
      keeper_(std::move(keeper)),
      strand_(boost::asio::make_strand(io)),
      dir_(naming::sessionMarksPath(root)) {}

std::string SessionMarks::pathOf(int64_t session) const {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(session));
  return dir_ + "/" + hex;
}

void SessionMarks::announce(int64_t session) {
  // The create goes out right behind the parent's: the server handles them in that order.
  keeper_->ensurePathOn(io_.get_executor(), dir_, [](ZkError) {});
  // NodeExists: a reply lost across a reconnect (the path names this session, so it is ours).
  keeper_->createOn(io_.get_executor(), pathOf(session), std::string(kRunning), NodeKind::Ephemeral,
                    [weak = weak_from_this(), session](ZkError err, std::string) {
                      auto self = weak.lock();
                      if (!self || (err != ZkError::Ok && err != ZkError::NodeExists)) return;
                      std::lock_guard lock(self->mu_);
                      self->announced_ = session;
                    });
}

bool SessionMarks::markStopping(int64_t session) {
  keeper_->setOn(io_.get_executor(), pathOf(session), std::string(kStopping), -1,
                 [](ZkError, NodeStat) {});
  std::lock_guard lock(mu_);
  return announced_ == session && session != 0;
}

void SessionMarks::follow(int64_t session) {
  const uint64_t link = keeper_->linkEpoch();
  {
    std::lock_guard lock(mu_);
    if (peers_.size() > kMaxPeers) {
      std::erase_if(peers_,
                    [](const auto& p) { return p.second.fate && p.second.waiting.empty(); });
    }
    Peer& peer = peers_[session];
    if (peer.fate || peer.arming || (peer.armed && peer.link == link)) return;
    peer.arming = true;
    peer.armed = false;
  }
  auto self = shared_from_this();
  // The watch stays in the session's table until it fires: a strong reference there would keep
  // this, and so the session and its nodes, alive after the group is gone.
  keeper_->getWatchingOn(
      strand_, pathOf(session), this,
      [weak = weak_from_this(), session, link](WatchEvent event) {
        if (auto marks = weak.lock()) marks->onEvent(session, link, event);
      },
      [self, session, link](ZkError err, std::string data, NodeStat) {
        std::lock_guard lock(self->mu_);
        Peer& peer = self->peers_[session];
        peer.arming = false;
        if (err != ZkError::Ok) return;  // gone already, or never announced: not followed
        if (std::string_view(data) == kStopping) {
          if (!peer.fate) peer.fate = Departure::Stopped;
        } else if (link == self->keeper_->linkEpoch()) {
          peer.armed = true;
          peer.link = link;
        }
      });
}

void SessionMarks::onEvent(int64_t session, uint64_t link, WatchEvent event) {
  std::lock_guard lock(mu_);
  auto it = peers_.find(session);
  if (it == peers_.end() || it->second.fate) return;
  Peer& peer = it->second;
  peer.armed = false;
  if (link != keeper_->linkEpoch() || peer.link != link)
    return;  // heard across a link loss: unsure
  // The first change after "running" can only be the session marking itself stopping.
  settle(session, event == WatchEvent::Changed ? Departure::Stopped : Departure::Ended,
         Departure::Unknown);
}

void SessionMarks::settle(int64_t session, std::optional<Departure> fate, Departure otherwise) {
  Peer& peer = peers_[session];
  if (fate && !peer.fate) peer.fate = fate;
  const Departure answer = peer.fate.value_or(otherwise);
  for (auto& [ex, done] : peer.waiting) {
    boost::asio::post(ex, [done = std::move(done), answer] { done(answer); });
  }
  peer.waiting.clear();
}

void SessionMarks::departure(int64_t session, const Executor& ex,
                             std::function<void(Departure)> done) {
  {
    std::lock_guard lock(mu_);
    Peer& peer = peers_[session];
    if (peer.fate) {
      return boost::asio::post(ex, [done = std::move(done), fate = *peer.fate] { done(fate); });
    }
    peer.waiting.emplace_back(ex, std::move(done));
    if (peer.reading) return;
    peer.reading = true;
  }
  keeper_->getOn(strand_, pathOf(session), nullptr, nullptr,
                 [self = shared_from_this(), session](ZkError err, std::string data, NodeStat) {
                   std::lock_guard lock(self->mu_);
                   self->peers_[session].reading = false;
                   // A watch event that was due arrived before this answer; "stopping" read here is
                   // as good as heard. Anything else: the account's own record decides.
                   const bool stopping = err == ZkError::Ok && std::string_view(data) == kStopping;
                   self->settle(session,
                                stopping ? std::optional(Departure::Stopped) : std::nullopt,
                                Departure::Unknown);
                 });
}

void SessionMarks::forget() {
  std::lock_guard lock(mu_);
  peers_.clear();
}

}  // namespace zkagent::election::detail
