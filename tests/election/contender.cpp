#include "contender.hpp"

#include <boost/asio/post.hpp>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>

namespace zktest {

Contender::Contender(std::string hosts, std::string root, std::string instanceId,
                     std::chrono::milliseconds sessionTimeout, std::string digest)
    : instanceId_(instanceId), work_(io_.get_executor()) {
  el::ElectionOptions options;
  options.session = {std::move(hosts), sessionTimeout, std::move(digest)};
  options.root = std::move(root);
  options.instanceId = std::move(instanceId);
  options.endpoint = "inproc://" + instanceId_;
  group_ = std::make_unique<el::ElectionGroup>(io_, options);
  group_->onLeadership([this](const el::LeadershipEvent& ev) {
    std::lock_guard lock(mu_);
    events_.push_back(ev);
  });
  group_->start();
  thread_ = std::thread([this] { io_.run(); });
}

Contender::~Contender() {
  stop();
  work_.reset();
  io_.stop();
  thread_.join();
  group_.reset();
}

void Contender::abandon() {
  stopped_ = true;
  group_.reset();
}

std::function<void()> Contender::holdIo() {
  auto entered = std::make_shared<std::promise<void>>();
  auto release = std::make_shared<std::promise<void>>();
  boost::asio::post(io_, [entered, held = release->get_future().share()] {
    entered->set_value();
    held.wait_for(10s);
  });
  if (entered->get_future().wait_for(10s) != std::future_status::ready) {
    throw std::runtime_error("the io thread did not come free within 10 s");
  }
  return [release, once = std::make_shared<std::once_flag>()] {
    std::call_once(*once, [&] { release->set_value(); });
  };
}

void Contender::stop() {
  if (stopped_) return;
  stopped_ = true;
  auto done = std::make_shared<std::promise<void>>();
  group_->stop([done] { done->set_value(); });
  done->get_future().wait_for(10s);
}

template <typename T>
T Contender::await(std::function<void(std::function<void(T)>)> start) {
  auto promise = std::make_shared<std::promise<T>>();
  auto future = promise->get_future();
  start([promise](T value) { promise->set_value(std::move(value)); });
  if (future.wait_for(10s) != std::future_status::ready) {
    throw std::runtime_error("ZooKeeper call did not answer within 10 s");
  }
  return future.get();
}

el::GateDecision Contender::checkStrict(const std::string& account) {
  return await<el::GateDecision>([&](auto done) { group_->checkStrict(account, std::move(done)); });
}

std::vector<el::LeadershipEvent> Contender::events() const {
  std::lock_guard lock(mu_);
  return events_;
}

int Contender::leadingCount() const {
  int n = 0;
  for (auto& s : group_->status()) n += s.role == el::Role::Leader;
  return n;
}

size_t Contender::acquisitions(const std::string& account) const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (auto& e : events_)
    n += e.account == account && e.kind == el::LeadershipEvent::Kind::Acquired;
  return n;
}

std::optional<el::LossReason> Contender::lastLoss(const std::string& account) const {
  std::lock_guard lock(mu_);
  for (auto it = events_.rbegin(); it != events_.rend(); ++it) {
    if (it->account == account && it->kind == el::LeadershipEvent::Kind::Lost) return it->reason;
  }
  return std::nullopt;
}

el::ZkError Contender::set(const std::string& path, const std::string& data) {
  return await<el::ZkError>([&](auto done) {
    group_->session().set(path, data, -1, [done](el::ZkError e, el::NodeStat) { done(e); });
  });
}

el::ZkError Contender::remove(const std::string& path) {
  return await<el::ZkError>([&](auto done) { group_->session().remove(path, -1, done); });
}

el::ZkError Contender::createEphemeral(const std::string& path, const std::string& data) {
  return await<el::ZkError>([&](auto done) {
    group_->session().create(path, data, el::NodeKind::Ephemeral,
                             [done](el::ZkError e, std::string) { done(e); });
  });
}

std::optional<std::string> Contender::get(const std::string& path) {
  return await<std::optional<std::string>>([&](auto done) {
    group_->session().get(path, nullptr, [done](el::ZkError e, std::string data, el::NodeStat) {
      done(e == el::ZkError::Ok ? std::optional<std::string>(std::move(data)) : std::nullopt);
    });
  });
}

std::vector<std::string> Contender::children(const std::string& path) {
  return await<std::vector<std::string>>([&](auto done) {
    group_->session().children(
        path, nullptr, [done](el::ZkError, std::vector<std::string> names) { done(names); });
  });
}

bool Contender::removeTree(const std::string& path) {
  for (auto& child : children(path)) removeTree(path + "/" + child);
  return remove(path) == el::ZkError::Ok;
}

}  // namespace zktest
