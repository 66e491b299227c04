// LeaderObserver: a watched cache of every account's `active` node (the fencing gateway's view),
// and how fresh it is: what a decision taken on it may have missed.
#include <atomic>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "zk_session.hpp"
#include "zkagent/naming.hpp"

namespace zkagent::election {
namespace asio = boost::asio;
using detail::ZkSession;
using SteadyClock = std::chrono::steady_clock;

struct LeaderObserver::Impl : std::enable_shared_from_this<LeaderObserver::Impl> {
  struct Entry {
    View view;
    std::vector<std::function<void(View)>> waiters;
    bool reading = false;
  };
  struct FreshnessWaiter {
    SteadyClock::time_point oldestUsable;  // a probe sent at or after this answers it
    std::function<void(bool)> done;
  };

  Impl(asio::io_context& ioc, SessionOptions options, std::string rootPath)
      : io(ioc),
        strand(asio::make_strand(ioc)),
        session(std::make_shared<ZkSession>(ioc, std::move(options))),
        root(std::move(rootPath)) {}

  asio::io_context& io;
  asio::strand<asio::io_context::executor_type> strand;
  std::shared_ptr<ZkSession> session;
  std::string root;
  mutable std::mutex mu;
  std::map<std::string, Entry, std::less<>> entries;

  // Freshness. ZooKeeper answers a session's requests in order and delivers the watch events of
  // the changes it applied before a request ahead of that request's answer; both reach the strand
  // in that order, and a fired watch marks its entry unknown there at once. So once a probe sent
  // at time T is answered, no change ZooKeeper had applied at T is missing from the cache.
  std::atomic<SteadyClock::rep> confirmedSentAt{0};  // the latest answered probe's send time
  std::vector<FreshnessWaiter> freshnessWaiters;     // strand
  SteadyClock::time_point probeSentAt{};             // strand: the latest probe sent
  bool probing = false;                              // strand

  bool confirmedSince(SteadyClock::time_point since) const {
    return SteadyClock::time_point(SteadyClock::duration(confirmedSentAt.load())) >= since;
  }

  // Strand.
  void confirm(SteadyClock::time_point oldestUsable, std::function<void(bool)> done) {
    if (confirmedSince(oldestUsable)) return done(true);
    freshnessWaiters.push_back({oldestUsable, std::move(done)});
    if (probing && probeSentAt >= oldestUsable) return;  // the probe in flight will do
    probe();
  }

  // Strand: one cheap read; its answer settles every waiter it is recent enough for.
  void probe() {
    probing = true;
    const auto sent = SteadyClock::now();
    probeSentAt = sent;
    session->existsOn(strand, root, nullptr, nullptr,
                      [self = shared_from_this(), sent](ZkError err, std::optional<NodeStat>) {
                        const bool ok = err == ZkError::Ok;
                        if (ok && !self->confirmedSince(sent)) {
                          self->confirmedSentAt.store(sent.time_since_epoch().count());
                        }
                        if (self->probeSentAt == sent) self->probing = false;
                        std::vector<FreshnessWaiter> settled, waiting;
                        for (auto& w : self->freshnessWaiters) {
                          // A failed probe fails those it was sent for; later ones wait for a later
                          // probe.
                          (sent >= w.oldestUsable ? settled : waiting).push_back(std::move(w));
                        }
                        self->freshnessWaiters = std::move(waiting);
                        for (auto& w : settled) w.done(ok);
                        if (!self->freshnessWaiters.empty() && !self->probing) self->probe();
                      });
  }

  // Strand: sync, then a plain read (no watch: the cached entry keeps its own). ZooKeeper answers
  // a session's requests in order, so the read sees at least what the sync caught up to.
  void readConfirmed(const std::string& account, std::function<void(View)> done) {
    const std::string path = naming::activePath(root, account);
    auto answer = [self = shared_from_this(), done = std::move(done)](View view) {
      asio::post(self->io, [done, view = std::move(view)] { done(view); });
    };
    session->syncOn(strand, path, [self = shared_from_this(), account, path, answer](ZkError err) {
      if (err != ZkError::Ok) return answer(View{});
      self->session->getOn(
          self->strand, path, nullptr, nullptr,
          [self, account, answer](ZkError e2, std::string data, NodeStat) {
            View view;
            if (e2 == ZkError::Ok) {
              if (auto active = parseActive(data)) view = View{View::State::Leader, *active};
            } else if (e2 == ZkError::NoNode) {
              view.state = View::State::NoLeader;
            }
            if (view.state != View::State::Unknown && self->cachedDiffers(account, view)) {
              self->changed(account);  // read again with a watch: this session is caught up now
            }
            answer(std::move(view));
          });
    });
  }

  bool cachedDiffers(const std::string& account, const View& view) {
    std::lock_guard lock(mu);
    auto it = entries.find(account);
    if (it == entries.end()) return false;
    const View& cached = it->second.view;
    return cached.state != view.state || cached.active.seq != view.active.seq ||
           cached.active.sessionId != view.active.sessionId;
  }

  // Strand: a watch fired, so `active` changed: the cached view is unknown until read again.
  void changed(const std::string& account) {
    {
      std::lock_guard lock(mu);
      entries[account].view = View{};
    }
    read(account);
  }

  // Strand: reads `active` and re-arms its watch; every path of the answer re-arms (one place).
  void read(const std::string& account) {
    {
      std::lock_guard lock(mu);
      auto& entry = entries[account];
      if (entry.reading) return;
      entry.reading = true;
    }
    const std::string path = naming::activePath(root, account);
    auto rearm = [weak = weak_from_this(), account] {
      if (auto self = weak.lock()) self->changed(account);  // called on the strand
    };
    session->getOn(
        strand, path, this, rearm,
        [self = shared_from_this(), account, path, rearm](ZkError err, std::string data, NodeStat) {
          View view;
          if (err == ZkError::Ok) {
            if (auto active = parseActive(data)) view = View{View::State::Leader, *active};
          } else if (err == ZkError::NoNode) {
            view.state = View::State::NoLeader;
            // get() leaves no watch on a missing node: exists() does, and fires on its creation. If
            // the node was created between the two calls, no event will come: read it now.
            self->session->existsOn(self->strand, path, self.get(), rearm,
                                    [rearm](ZkError e2, std::optional<NodeStat> stat) {
                                      if (e2 == ZkError::Ok && stat) rearm();
                                    });
          }
          self->settle(account, view);
        });
  }

  void settle(const std::string& account, View view) {
    std::vector<std::function<void(View)>> waiters;
    {
      std::lock_guard lock(mu);
      auto& entry = entries[account];
      entry.reading = false;
      entry.view = view;
      waiters.swap(entry.waiters);
    }
    for (auto& w : waiters) w(view);
  }
};

LeaderObserver::LeaderObserver(asio::io_context& io, SessionOptions session, std::string root)
    : impl_(std::make_shared<Impl>(io, std::move(session), std::move(root))) {}

LeaderObserver::~LeaderObserver() = default;

void LeaderObserver::start() {
  std::weak_ptr<Impl> weak = impl_;
  impl_->session->start([weak](const SessionEvent& event) {
    auto impl = weak.lock();
    if (!impl) return;
    if (event.state != SessionState::Connected) {
      // The link's watches went with it: nothing cached may be served until read again. (Published
      // before the session can count as connected again, so no decision sees the old views.)
      std::lock_guard lock(impl->mu);
      for (auto& [account, entry] : impl->entries) entry.view = View{};
      return;
    }
    // After any reconnect, refresh every cached account: what we missed while away is unknown.
    std::vector<std::string> accounts;
    {
      std::lock_guard lock(impl->mu);
      for (auto& [account, entry] : impl->entries) accounts.push_back(account);
    }
    for (auto& a : accounts) asio::post(impl->strand, [impl, a] { impl->read(a); });
  });
}

void LeaderObserver::stop() { impl_->session->close({}); }

bool LeaderObserver::trusted() const { return impl_->session->usable(); }

void LeaderObserver::confirmFresh(Millis maxAge, std::function<void(bool)> done) {
  const auto oldestUsable = SteadyClock::now() - maxAge;
  if (impl_->confirmedSince(oldestUsable)) return done(true);
  asio::post(impl_->strand, [impl = impl_, oldestUsable, done = std::move(done)]() mutable {
    impl->confirm(oldestUsable, std::move(done));
  });
}

void LeaderObserver::readConfirmed(std::string_view account, std::function<void(View)> done) {
  if (accountIdError(account)) {
    asio::post(impl_->io, [done = std::move(done)] { done(View{}); });
    return;
  }
  asio::post(impl_->strand, [impl = impl_, a = std::string(account), done = std::move(done)] {
    impl->readConfirmed(a, done);
  });
}

LeaderObserver::View LeaderObserver::current(std::string_view account) const {
  if (accountIdError(account)) return View{};
  bool known = false;
  View view;
  {
    std::lock_guard lock(impl_->mu);
    if (auto it = impl_->entries.find(account); it != impl_->entries.end()) {
      known = true;
      view = it->second.view;
    }
  }
  if (!known) {
    asio::post(impl_->strand, [impl = impl_, a = std::string(account)] { impl->read(a); });
  }
  return trusted() ? view : View{};
}

void LeaderObserver::lookup(std::string_view account, std::function<void(View)> done) {
  if (accountIdError(account)) {
    asio::post(impl_->io, [done = std::move(done)] { done(View{}); });
    return;
  }
  {
    std::lock_guard lock(impl_->mu);
    auto& entry = impl_->entries[std::string(account)];
    if (trusted() && entry.view.state != View::State::Unknown && !entry.reading) {
      asio::post(impl_->io, [done = std::move(done), view = entry.view] { done(view); });
      return;
    }
    entry.waiters.push_back(std::move(done));
  }
  asio::post(impl_->strand, [impl = impl_, a = std::string(account)] { impl->read(a); });
}

}  // namespace zkagent::election
