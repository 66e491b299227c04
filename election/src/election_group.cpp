// ElectionGroup: many accounts on one session (the agent's side of the election).
#include <boost/asio/post.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <utility>

#include "elector.hpp"
#include "stop_handover.hpp"
#include "zk_session.hpp"
#include "zkagent/naming.hpp"

namespace zkagent::election {
namespace asio = boost::asio;
using detail::Elector;
using detail::ElectorContext;
using detail::ZkSession;

namespace {
void requireValidAccount(std::string_view account) {
  if (auto error = accountIdError(account)) throw std::invalid_argument("account id: " + *error);
}

// The hand-over on stop is a courtesy; closing the session is what frees the nodes. Do not wait
// for an unreachable ZooKeeper longer than this.
constexpr std::chrono::seconds kStopDeadline{2};
}  // namespace

struct ElectionGroup::Impl {
  explicit Impl(asio::io_context& ioc) : io(ioc) {}
  asio::io_context& io;
  std::shared_ptr<ZkSession> session;
  std::shared_ptr<ElectorContext> ctx;
  SessionHandler onSession;
  mutable std::shared_mutex mu;
  std::map<std::string, std::shared_ptr<Elector>, std::less<>> electors;

  std::shared_ptr<Elector> find(std::string_view account) const {
    std::shared_lock lock(mu);
    auto it = electors.find(account);
    return it == electors.end() ? nullptr : it->second;
  }

  std::shared_ptr<Elector> findOrCreate(std::string_view account) {
    std::unique_lock lock(mu);
    auto it = electors.find(account);
    if (it != electors.end()) return it->second;
    auto elector = std::make_shared<Elector>(io, ctx, std::string(account));
    electors.emplace(std::string(account), elector);
    return elector;
  }

  std::vector<std::shared_ptr<Elector>> all() const {
    std::shared_lock lock(mu);
    std::vector<std::shared_ptr<Elector>> out;
    out.reserve(electors.size());
    for (auto& [_, e] : electors) out.push_back(e);
    return out;
  }
};

ElectionGroup::ElectionGroup(asio::io_context& io, ElectionOptions options)
    : impl_(std::make_shared<Impl>(io)) {
  if (options.instanceId.empty()) throw std::invalid_argument("instance id is empty");
  if (options.root.empty() || options.root.front() != '/' || options.root.back() == '/') {
    throw std::invalid_argument("root '" + options.root +
                                "' must start with '/' and not end with '/'");
  }
  impl_->session = std::make_shared<ZkSession>(io, options.session);
  auto marks = std::make_shared<detail::SessionMarks>(io, impl_->session, options.root);
  impl_->ctx = std::make_shared<ElectorContext>(
      ElectorContext{impl_->session, std::move(options), {}, std::move(marks)});
}

// Electors and their in-flight callbacks may hold the session beyond this: close it here, so the
// server drops our nodes now rather than at expiry, and no ZooKeeper callback arrives after the
// embedder moves on (and destroys the io_context).
ElectionGroup::~ElectionGroup() {
  impl_->ctx->marks->forget();
  impl_->session->closeNow();
}

void ElectionGroup::onLeadership(LeadershipHandler handler) {
  impl_->ctx->onLeadership = std::move(handler);
}
void ElectionGroup::onSession(SessionHandler handler) { impl_->onSession = std::move(handler); }

void ElectionGroup::start() {
  std::weak_ptr<Impl> weak = impl_;
  impl_->session->start([weak](const SessionEvent& event) {
    auto impl = weak.lock();
    if (!impl) return;
    if (event.state == SessionState::Connected && event.newSession) {
      impl->ctx->marks->announce(impl->session->sessionId());
    }
    for (auto& e : impl->all()) e->sessionChanged(event);
    if (impl->onSession) impl->onSession(event);
  });
}

void ElectionGroup::join(std::string_view account) {
  requireValidAccount(account);
  impl_->findOrCreate(account)->join();
}

void ElectionGroup::withdraw(std::string_view account) {
  requireValidAccount(account);
  if (auto e = impl_->find(account)) e->withdraw();
}

void ElectionGroup::resign(std::string_view account, LossReason reason) {
  requireValidAccount(account);
  if (auto e = impl_->find(account)) e->resign(reason);
}

void ElectionGroup::jumpQueue(std::string_view account, int64_t receiverSeq,
                              std::vector<int64_t> aheadSeqs, std::function<void(ZkError)> done) {
  requireValidAccount(account);
  auto e = impl_->find(account);
  if (!e) return done(ZkError::NoNode);
  e->jumpQueue(receiverSeq, aheadSeqs, std::move(done));
}

// Stop: the session's mark says "stopping" (successors then need not read each account's handover
// record); every elector closes its gate and hands back the operations that hand its account over,
// which StopHandover sends batched into multis; then the session is closed, which removes the rest
// of our nodes in one more request.
void ElectionGroup::stop(std::function<void()> done, std::function<void()> handedOver) {
  auto electors = impl_->all();
  // With our mark saying "stopping", a successor learns the stop from it: no handover record per
  // account (a write each, about a tenth of the release). A successor that did not follow the mark
  // reads it once per session while it lasts, else finds no record and takes the lock-delay.
  const bool marked =
      impl_->session->usable() && impl_->ctx->marks->markStopping(impl_->session->sessionId());
  auto impl = impl_;
  auto handover = detail::StopHandover::start(
      impl_->io, impl_->session, electors.size(), kStopDeadline,
      [impl, done = std::move(done), handedOver = std::move(handedOver)]() mutable {
        if (handedOver) asio::post(impl->io, std::move(handedOver));
        impl->session->close([impl, done = std::move(done)] {
          impl->ctx->marks->forget();
          if (done) done();
        });
      });
  for (auto& e : electors) {
    e->stop(!marked,
            [handover](std::vector<detail::MultiOp> ops) { handover->collect(std::move(ops)); });
  }
}

GateDecision ElectionGroup::check(std::string_view account) const {
  auto e = impl_->find(account);
  if (!e) return GateDecision{GateDecision::Verdict::UnknownAccount, -1, sessionId(), std::nullopt};
  return e->check();
}

void ElectionGroup::checkStrict(std::string_view account, std::function<void(GateDecision)> done) {
  auto e = impl_->find(account);
  if (!e) {
    asio::post(impl_->io, [done = std::move(done), id = sessionId()] {
      done(GateDecision{GateDecision::Verdict::UnknownAccount, -1, id, std::nullopt});
    });
    return;
  }
  e->checkStrict(std::move(done));
}

void ElectionGroup::members(std::string_view account,
                            std::function<void(ZkError, std::vector<MemberInfo>)> done) {
  requireValidAccount(account);
  impl_->findOrCreate(account)->members(std::move(done));
}

std::vector<AccountStatus> ElectionGroup::status() const {
  std::vector<AccountStatus> out;
  for (auto& e : impl_->all()) out.push_back(e->status());
  return out;
}

SessionState ElectionGroup::sessionState() const { return impl_->session->state(); }
int64_t ElectionGroup::sessionId() const { return impl_->session->sessionId(); }
Millis ElectionGroup::negotiatedTimeout() const { return impl_->session->negotiatedTimeout(); }
Session& ElectionGroup::session() { return *impl_->session; }

}  // namespace zkagent::election
