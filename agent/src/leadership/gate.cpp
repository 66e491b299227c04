// The gate: may an operation for an account go out now, and under which token. Asynchronous, so
// the agent's own forwarding holds no thread while the lock delay runs out or the strict check is
// answered; execute() is the blocking form for embedders.
#include <boost/asio/steady_timer.hpp>
#include <future>

#include "agent_impl.hpp"

namespace zkagent::agent {
namespace {

Gate::Result resultOf(GateDecision::Verdict verdict) {
  using Verdict = GateDecision::Verdict;
  switch (verdict) {
    case Verdict::Allowed:
      return Gate::Result::Executed;
    case Verdict::NotLeader:
      return Gate::Result::NotLeader;
    case Verdict::Suspended:
      return Gate::Result::Suspended;
    case Verdict::Drifted:
      return Gate::Result::Drifted;
    case Verdict::UnknownAccount:
      break;
  }
  return Gate::Result::UnknownAccount;
}

}  // namespace

void Agent::Impl::decideGate(const std::string& account, std::function<void(GateDecision)> done) {
  if (config.gate == GateMode::Fast) return done(group->check(account));
  // Strict: no answer within the session timeout means we cannot tell.
  group->checkStrict(account,
                     detail::answerWithin(io, config.zookeeper.sessionTimeout,
                                          GateDecision{GateDecision::Verdict::Suspended, -1,
                                                       group->sessionId(), std::nullopt},
                                          std::move(done)));
}

void Agent::Impl::gateDecision(std::string account, std::function<void(GateDecision)> done) {
  Clock::time_point notBefore;
  {
    std::lock_guard lock(mu);
    auto it = accounts.find(account);
    if (it == accounts.end()) {
      return done({GateDecision::Verdict::UnknownAccount, -1, 0, std::nullopt});
    }
    notBefore = it->second.lockDelayUntil;
  }
  auto decide = [self = shared_from_this(), account, done = std::move(done)]() mutable {
    self->decideGate(account, std::move(done));
  };
  // Lock-delay (Chubby): the expired leader may still have operations in flight; let them land
  // (and be fenced) before ours.
  if (Clock::now() >= notBefore) return decide();
  auto timer = std::make_shared<asio::steady_timer>(io, notBefore);
  timer->async_wait(
      [timer, decide = std::move(decide)](boost::system::error_code) mutable { decide(); });
}

void Agent::Impl::admit(std::string account, Admitted decided) {
  auto finish = [this, decided = std::move(decided)](
                    Outcome outcome, std::optional<fencing::FencingToken> token = std::nullopt) {
    (outcome.executed() ? m.gateExecuted : m.gateDecisions.with({outcome.reason()})).inc();
    decided(std::move(outcome), std::move(token));
  };
  if (stopping) return finish(Outcome{.result = Result::Stopping, .leader = std::nullopt});
  gateDecision(account, [self = shared_from_this(), account,
                         finish = std::move(finish)](GateDecision d) mutable {
    Outcome outcome{.result = self->stopping ? Result::Stopping : resultOf(d.verdict),
                    .leader = d.leader};
    if (!outcome.executed()) return finish(std::move(outcome));
    finish(std::move(outcome), fencing::FencingToken{account, static_cast<uint64_t>(d.token),
                                                     self->config.instanceId, d.sessionId});
  });
}

Gate::Outcome Agent::Impl::execute(
    std::string_view account, const std::function<void(const fencing::FencingToken&)>& operation) {
  // The answer may come after we stopped waiting for it (an io_context stopped under us): the
  // callback owns the promise.
  using Decision = std::pair<Outcome, std::optional<fencing::FencingToken>>;
  auto answer = std::make_shared<std::promise<Decision>>();
  auto decided = answer->get_future();
  admit(std::string(account), [answer](Outcome outcome, std::optional<fencing::FencingToken> t) {
    answer->set_value({std::move(outcome), std::move(t)});
  });
  const auto bound = config.lockDelay + config.zookeeper.sessionTimeout + milliseconds(1000);
  if (decided.wait_for(bound) != std::future_status::ready)
    return Outcome{.result = Result::Suspended, .leader = std::nullopt};
  auto [outcome, token] = decided.get();
  if (token) operation(*token);
  return outcome;
}

}  // namespace zkagent::agent
