#include "cluster_privacy.hpp"

#include <boost/asio/post.hpp>
#include <vector>

#include "zkagent/naming.hpp"

namespace zkagent::gateway {

namespace {
// Writes of a rule node raced by another gateway's create or delete: tried again this many times.
constexpr int kWriteAttempts = 3;
}  // namespace

ClusterPrivacyRules::ClusterPrivacyRules(boost::asio::io_context& io,
                                         election::ElectionGroup& group, std::string root)
    : io_(io), group_(group), root_(std::move(root)) {}

void ClusterPrivacyRules::start() {
  started_ = true;
  readAll();
}

void ClusterPrivacyRules::reconnected() { readAll(); }

std::optional<std::string> ClusterPrivacyRules::write(const std::string& account,
                                                      const std::string& rules,
                                                      std::chrono::milliseconds timeout) {
  auto done = std::make_shared<std::promise<std::optional<std::string>>>();
  auto answer = done->get_future();
  boost::asio::post(io_, [this, account, rules, done] {
    if (!started_ || group_.session().state() != election::SessionState::Connected) {
      done->set_value("ZooKeeper is not connected; nothing changed");
      return;
    }
    setNode(naming::gatewayPrivacyPath(root_, account), rules, kWriteAttempts, done);
  });
  if (answer.wait_for(timeout) != std::future_status::ready) {
    return "no answer from ZooKeeper within " + std::to_string(timeout.count()) +
           " ms; the rules may or may not be written: read them back before retrying";
  }
  return answer.get();
}

void ClusterPrivacyRules::watch(Handler apply) {
  const bool start = static_cast<bool>(apply);
  {
    std::lock_guard lock(handlerMutex_);
    handler_ = std::move(apply);
  }
  if (start) boost::asio::post(io_, [this] { readAll(); });
}

// Reads every rule node (on start, on a new connection, or once the handler is set).
void ClusterPrivacyRules::readAll() {
  if (!started_) return;
  {
    std::lock_guard lock(handlerMutex_);
    if (!handler_) return;
  }
  known_.clear();
  const auto round = ++round_;
  group_.session().ensurePath(naming::gatewayPrivacyRoot(root_),
                              [this, round](election::ZkError ensured) {
                                if (ensured == election::ZkError::Ok) readChildren(round);
                              });
}

// `round`: the readAll() this read belongs to. A watch armed by an earlier round (on the same
// session) is left to fire unheeded, so that each node keeps one live watch.
void ClusterPrivacyRules::readChildren(std::uint64_t round) {
  if (round != round_) return;
  group_.session().children(
      naming::gatewayPrivacyRoot(root_), [this, round] { readChildren(round); },
      [this, round](election::ZkError read, std::vector<std::string> children) {
        // Failed: the next connect reads them all again.
        if (read != election::ZkError::Ok || round != round_) return;
        const std::set<std::string> now(children.begin(), children.end());
        for (auto known = known_.begin(); known != known_.end();) {
          if (now.contains(*known)) {
            ++known;
            continue;
          }
          deliver(*known, std::nullopt);
          known = known_.erase(known);
        }
        for (const auto& account : now) {
          if (naming::accountIdError(account)) continue;  // not an account's node
          if (known_.insert(account).second) readNode(account, round);
        }
      });
}

void ClusterPrivacyRules::readNode(const std::string& account, std::uint64_t round) {
  if (round != round_ || !known_.contains(account)) return;
  group_.session().get(
      naming::gatewayPrivacyPath(root_, account),
      [this, account, round] { readNode(account, round); },
      [this, account, round](election::ZkError read, std::string data, election::NodeStat) {
        if (round != round_) return;
        if (read == election::ZkError::Ok) return deliver(account, data);
        if (read == election::ZkError::NoNode && known_.erase(account) > 0) {
          deliver(account, std::nullopt);
        }
      });
}

void ClusterPrivacyRules::deliver(const std::string& account,
                                  const std::optional<std::string>& data) {
  std::lock_guard lock(handlerMutex_);
  if (handler_) handler_(account, data);
}

void ClusterPrivacyRules::failed(const Written& done, election::ZkError error) {
  done->set_value(error == election::ZkError::ConnectionLoss
                      ? std::string("the ZooKeeper link was lost before the write was "
                                    "acknowledged; the rules may or may not be written: read "
                                    "them back before retrying")
                      : "ZooKeeper refused the write: " + std::string(toString(error)));
}

// Sets the rule node (any version), or creates it when missing; `attempts` bounds the races with
// another gateway creating or deleting it meanwhile.
void ClusterPrivacyRules::setNode(const std::string& path, const std::string& data, int attempts,
                                  const Written& done) {
  group_.session().set(
      path, data, -1,
      [this, path, data, attempts, done](election::ZkError set, election::NodeStat) {
        if (set == election::ZkError::Ok) return done->set_value(std::nullopt);
        if (set != election::ZkError::NoNode || attempts <= 1) return failed(done, set);
        group_.session().ensurePath(naming::gatewayPrivacyRoot(root_),
                                    [this, path, data, attempts, done](election::ZkError ensured) {
                                      if (ensured != election::ZkError::Ok) {
                                        return failed(done, ensured);
                                      }
                                      createNode(path, data, attempts, done);
                                    });
      });
}

void ClusterPrivacyRules::createNode(const std::string& path, const std::string& data, int attempts,
                                     const Written& done) {
  group_.session().create(
      path, data, election::NodeKind::Persistent,
      [this, path, data, attempts, done](election::ZkError created, const std::string&) {
        if (created == election::ZkError::Ok) return done->set_value(std::nullopt);
        if (created == election::ZkError::NodeExists) {
          return setNode(path, data, attempts - 1, done);
        }
        failed(done, created);
      });
}

}  // namespace zkagent::gateway
