#include "fake_keeper.hpp"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <cstdio>
#include <memory>
#include <utility>

namespace zkagent::election::fake {
namespace asio = boost::asio;

namespace {

std::string parentOf(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string sequential(const std::string& path, int32_t counter) {
  char digits[16];
  std::snprintf(digits, sizeof digits, "%010d", counter);
  return path + digits;
}

std::vector<std::string> childNames(const std::map<std::string, FakeZooKeeper::Node>& nodes,
                                    const std::string& path) {
  const std::string prefix = path == "/" ? "/" : path + "/";
  std::vector<std::string> names;
  for (auto it = nodes.lower_bound(prefix); it != nodes.end(); ++it) {
    if (!it->first.starts_with(prefix)) break;
    const std::string rest = it->first.substr(prefix.size());
    if (!rest.empty() && rest.find('/') == std::string::npos) names.push_back(rest);
  }
  return names;
}

NodeStat statOf(const FakeZooKeeper::Node& node) {
  return NodeStat{node.ephemeralOwner, node.version, 0};
}

// By FakeKeeper::Op.
constexpr std::string_view kOpNames[] = {"create", "get", "exists", "children",
                                         "remove", "set", "multi"};

std::string_view nameOf(WatchEvent event) {
  switch (event) {
    case WatchEvent::Created:
      return "created";
    case WatchEvent::Deleted:
      return "deleted";
    case WatchEvent::Changed:
      return "changed";
    case WatchEvent::Children:
      return "children";
  }
  return "?";
}

}  // namespace

// ---- the tree --------------------------------------------------------------------------------

const FakeZooKeeper::Node* FakeZooKeeper::find(const std::string& path) const {
  auto it = nodes_.find(path);
  return it == nodes_.end() ? nullptr : &it->second;
}

std::vector<std::string> FakeZooKeeper::children(const std::string& path) const {
  return childNames(nodes_, path);
}

ZkError FakeZooKeeper::applyOne(std::map<std::string, Node>& nodes, int64_t session,
                                const MultiOp& op, std::string& created,
                                std::vector<Change>& changes) const {
  auto it = nodes.find(op.path);
  const bool versionOk =
      op.version == -1 || (it != nodes.end() && it->second.version == op.version);
  switch (op.kind) {
    case MultiOp::Kind::Create: {
      auto parent = nodes.find(parentOf(op.path));
      if (parent == nodes.end()) return ZkError::NoNode;
      const bool seq = op.nodeKind == NodeKind::EphemeralSequential;
      const std::string path = seq ? sequential(op.path, parent->second.cversion) : op.path;
      if (nodes.contains(path)) return ZkError::NodeExists;
      ++parent->second.cversion;
      nodes[path] = Node{op.data, 0, op.nodeKind == NodeKind::Persistent ? 0 : session, 0};
      created = path;
      changes.push_back({path, WatchEvent::Created});
      return ZkError::Ok;
    }
    case MultiOp::Kind::Remove:
      if (it == nodes.end()) return ZkError::NoNode;
      if (!versionOk) return ZkError::BadVersion;
      if (!childNames(nodes, op.path).empty()) return ZkError::NotEmpty;
      nodes.erase(it);
      ++nodes[parentOf(op.path)].cversion;
      changes.push_back({op.path, WatchEvent::Deleted});
      return ZkError::Ok;
    case MultiOp::Kind::Set:
      if (it == nodes.end()) return ZkError::NoNode;
      if (!versionOk) return ZkError::BadVersion;
      it->second.data = op.data;
      ++it->second.version;
      changes.push_back({op.path, WatchEvent::Changed});
      return ZkError::Ok;
    case MultiOp::Kind::Check:
      if (it == nodes.end()) return ZkError::NoNode;
      return versionOk ? ZkError::Ok : ZkError::BadVersion;
  }
  return ZkError::Other;
}

ZkError FakeZooKeeper::apply(int64_t session, const std::vector<MultiOp>& ops,
                             std::vector<MultiResult>& results, std::vector<Change>& changes) {
  auto nodes = nodes_;  // all or nothing: applied to a copy, kept only when every op succeeded
  results.assign(ops.size(), MultiResult{});
  for (size_t i = 0; i < ops.size(); ++i) {
    const ZkError err = applyOne(nodes, session, ops[i], results[i].path, changes);
    if (err != ZkError::Ok) {
      for (auto& r : results) r.path.clear();
      results[i].failure = err;
      changes.clear();
      return err;
    }
  }
  nodes_ = std::move(nodes);
  return ZkError::Ok;
}

// Watch events go out before the reply of the change that fired them (as ZooKeeper sends them).
void FakeZooKeeper::notify(const std::vector<Change>& changes) {
  for (FakeKeeper* client : clients_) {
    for (const auto& change : changes) {
      client->fire(client->dataWatches_, change.path, change.event);
      if (change.event == WatchEvent::Deleted) {
        client->fire(client->childWatches_, change.path, WatchEvent::Deleted);
      }
      if (change.event != WatchEvent::Changed) {
        client->fire(client->childWatches_, parentOf(change.path), WatchEvent::Children);
      }
    }
  }
}

ZkError FakeZooKeeper::change(const MultiOp& op) {
  std::vector<MultiResult> results;
  std::vector<Change> changes;
  const ZkError err = apply(0, {op}, results, changes);
  notify(changes);
  return err;
}

ZkError FakeZooKeeper::create(const std::string& path, const std::string& data) {
  return change({MultiOp::Kind::Create, path, data, -1});
}

ZkError FakeZooKeeper::set(const std::string& path, const std::string& data) {
  return change({MultiOp::Kind::Set, path, data, -1});
}

ZkError FakeZooKeeper::remove(const std::string& path) {
  return change({MultiOp::Kind::Remove, path, "", -1});
}

void FakeZooKeeper::endSession(int64_t session) {
  std::vector<MultiOp> ops;
  for (auto& [path, node] : nodes_) {
    if (node.ephemeralOwner == session) ops.push_back({MultiOp::Kind::Remove, path, "", -1});
  }
  std::vector<MultiResult> results;
  std::vector<Change> changes;
  apply(0, ops, results, changes);
  notify(changes);
}

// ---- one client ------------------------------------------------------------------------------

FakeKeeper::FakeKeeper(FakeZooKeeper& zk, asio::io_context& io) : zk_(zk), io_(io) {
  zk_.clients_.push_back(this);
}

FakeKeeper::~FakeKeeper() { std::erase(zk_.clients_, this); }

void FakeKeeper::publish(SessionState state, bool newSession) {
  if (onEvent) onEvent(SessionEvent{state, session_, Millis(10000), newSession});
}

void FakeKeeper::connect() {
  session_ = zk_.nextSession_++;
  connected_ = true;
  publish(SessionState::Connected, true);
}

void FakeKeeper::loseLink() {
  connected_ = false;
  ++linkEpoch_;
  dataWatches_.clear();
  childWatches_.clear();
  publish(SessionState::Suspended, false);
}

void FakeKeeper::reconnect() {
  connected_ = true;
  publish(SessionState::Connected, false);
}

void FakeKeeper::expire() {
  dataWatches_.clear();
  childWatches_.clear();
  zk_.endSession(session_);
  connected_ = false;
  ++linkEpoch_;
  session_ = 0;
  publish(SessionState::Expired, false);
}

void FakeKeeper::dropNextReply(Op kind, std::string pathPrefix) {
  drops_.emplace_back(kind, std::move(pathPrefix));
}

bool FakeKeeper::dropping(Op kind, const std::string& path) {
  auto it = std::find_if(drops_.begin(), drops_.end(), [&](const auto& d) {
    return d.first == kind && path.starts_with(d.second);
  });
  if (it == drops_.end()) return false;
  drops_.erase(it);
  return true;
}

void FakeKeeper::hold() { holding_ = true; }

std::vector<std::string> FakeKeeper::held() const {
  std::vector<std::string> out;
  for (const auto& d : held_) out.push_back(d.what);
  return out;
}

void FakeKeeper::release(size_t index) {
  Delivery d = std::move(held_.at(index));
  held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(index));
  asio::post(d.executor, std::move(d.run));
}

void FakeKeeper::releaseAll() {
  holding_ = false;
  for (auto& d : std::exchange(held_, {})) asio::post(d.executor, std::move(d.run));
}

void FakeKeeper::deliver(Executor ex, std::function<void()> run, std::string what) {
  if (holding_) {
    held_.push_back({std::move(ex), std::move(run), std::move(what)});
  } else {
    asio::post(ex, std::move(run));
  }
}

std::optional<ZkError> FakeKeeper::refusal() const {
  if (session_ == 0) return ZkError::SessionExpired;
  if (!connected_) return ZkError::ConnectionLoss;
  return std::nullopt;
}

void FakeKeeper::arm(WatchTable& table, const std::string& path, const void* owner, Executor ex,
                     TypedWatch watch) {
  if (!watch) return;
  auto& entries = table[path];
  for (auto& e : entries) {
    if (owner != nullptr && e.owner == owner) {
      e.executor = std::move(ex);
      e.watch = std::move(watch);
      return;
    }
  }
  entries.push_back({owner, std::move(ex), std::move(watch)});
}

void FakeKeeper::fire(WatchTable& table, const std::string& path, WatchEvent event) {
  auto it = table.find(path);
  if (it == table.end()) return;
  auto entries = std::move(it->second);
  table.erase(it);
  for (auto& e : entries) {
    deliver(
        e.executor, [watch = std::move(e.watch), event] { watch(event); },
        "watch " + std::string(nameOf(event)) + " " + path);
  }
}

size_t FakeKeeper::watchCount() const {
  size_t n = 0;
  for (auto* table : {&dataWatches_, &childWatches_}) {
    for (const auto& [path, entries] : *table) n += entries.size();
  }
  return n;
}

void FakeKeeper::submit(Executor ex, std::vector<MultiOp> ops, Op kind, const std::string& path,
                        MultiDone done) {
  std::vector<MultiResult> results(ops.size());
  ZkError err = refusal().value_or(ZkError::Ok);
  if (err == ZkError::Ok) {
    std::vector<FakeZooKeeper::Change> changes;
    err = zk_.apply(session_, ops, results, changes);
    zk_.notify(changes);
    if (dropping(kind, path)) {
      err = ZkError::ConnectionLoss;
      results.assign(ops.size(), MultiResult{});
    }
  }
  deliver(
      std::move(ex),
      [done = std::move(done), err, results = std::move(results)]() mutable {
        done(err, std::move(results));
      },
      "reply " + std::string(kOpNames[static_cast<size_t>(kind)]) + " " + path);
}

void FakeKeeper::multiOn(Executor ex, std::vector<MultiOp> ops, MultiDone done) {
  const std::string path = ops.empty() ? std::string() : ops.front().path;
  submit(std::move(ex), std::move(ops), Op::Multi, path, std::move(done));
}

void FakeKeeper::createOn(Executor ex, std::string path, std::string data, NodeKind kind,
                          std::function<void(ZkError, std::string)> done) {
  submit(std::move(ex), {{MultiOp::Kind::Create, path, std::move(data), -1, kind}}, Op::Create,
         path, [done = std::move(done)](ZkError err, std::vector<MultiResult> results) {
           done(err, results.front().path);
         });
}

void FakeKeeper::setOn(Executor ex, std::string path, std::string data, int32_t version,
                       std::function<void(ZkError, NodeStat)> done) {
  auto stat = std::make_shared<NodeStat>();  // as the set left the node (it is applied now)
  submit(
      std::move(ex), {{MultiOp::Kind::Set, path, std::move(data), version}}, Op::Set, path,
      [done = std::move(done), stat](ZkError err, std::vector<MultiResult>) { done(err, *stat); });
  if (const auto* node = zk_.find(path)) *stat = statOf(*node);
}

void FakeKeeper::removeOn(Executor ex, std::string path, int32_t version,
                          std::function<void(ZkError)> done) {
  submit(std::move(ex), {{MultiOp::Kind::Remove, path, "", version}}, Op::Remove, path,
         [done = std::move(done)](ZkError err, std::vector<MultiResult>) { done(err); });
}

void FakeKeeper::getWatchingOn(Executor ex, std::string path, const void* owner, TypedWatch watch,
                               std::function<void(ZkError, std::string, NodeStat)> done) {
  ZkError err = refusal().value_or(ZkError::NoNode);
  std::string data;
  NodeStat stat;
  if (const auto* node = zk_.find(path); node && !refusal()) {
    err = ZkError::Ok;
    data = node->data;
    stat = statOf(*node);
    arm(dataWatches_, path, owner, ex, std::move(watch));
  }
  if (!refusal() && dropping(Op::Get, path)) err = ZkError::ConnectionLoss;
  deliver(
      std::move(ex), [done = std::move(done), err, data, stat] { done(err, data, stat); },
      "reply get " + path);
}

void FakeKeeper::existsOn(Executor ex, std::string path, const void* owner, Watch watch,
                          std::function<void(ZkError, std::optional<NodeStat>)> done) {
  ZkError err = refusal().value_or(ZkError::Ok);
  std::optional<NodeStat> stat;
  if (err == ZkError::Ok) {
    if (const auto* node = zk_.find(path)) stat = statOf(*node);
    arm(dataWatches_, path, owner, ex, detail::typed(std::move(watch)));
    if (dropping(Op::Exists, path)) err = ZkError::ConnectionLoss;
  }
  deliver(
      std::move(ex), [done = std::move(done), err, stat] { done(err, stat); },
      "reply exists " + path);
}

void FakeKeeper::childrenOn(Executor ex, std::string path, const void* owner, Watch watch,
                            std::function<void(ZkError, std::vector<std::string>)> done) {
  ZkError err = refusal().value_or(ZkError::NoNode);
  std::vector<std::string> names;
  if (!refusal() && zk_.find(path)) {
    err = ZkError::Ok;
    names = zk_.children(path);
    arm(childWatches_, path, owner, ex, detail::typed(std::move(watch)));
  }
  if (!refusal() && dropping(Op::Children, path)) err = ZkError::ConnectionLoss;
  deliver(
      std::move(ex), [done = std::move(done), err, names = std::move(names)] { done(err, names); },
      "reply children " + path);
}

void FakeKeeper::ensurePathOn(Executor ex, std::string path, std::function<void(ZkError)> done) {
  ZkError err = refusal().value_or(ZkError::Ok);
  for (size_t pos = path.find('/', 1); err == ZkError::Ok; pos = path.find('/', pos + 1)) {
    const std::string level = pos == std::string::npos ? path : path.substr(0, pos);
    const ZkError made = zk_.change({MultiOp::Kind::Create, level, "", -1});
    if (made != ZkError::Ok && made != ZkError::NodeExists) err = made;
    if (pos == std::string::npos) break;
  }
  deliver(
      std::move(ex), [done = std::move(done), err] { done(err); }, "reply ensurePath " + path);
}

void FakeKeeper::syncOn(Executor ex, std::string path, std::function<void(ZkError)> done) {
  const ZkError err = refusal().value_or(ZkError::Ok);
  deliver(
      std::move(ex), [done = std::move(done), err] { done(err); }, "reply sync " + path);
}

// Not batched (there is nothing to save here), but answered as ZkSession answers a batched create:
// the guard's failure first, and the idle hook released once the reply has run.
void FakeKeeper::createBatchedOn(Executor ex, std::string path, std::string data, NodeKind kind,
                                 std::function<void(ZkError, std::string)> done,
                                 std::string guard) {
  ++createsUnanswered_;
  auto answered = [this, done = std::move(done)](ZkError err, std::string created) {
    done(err, std::move(created));
    if (--createsUnanswered_ > 0) return;
    for (auto& [idleEx, fn] : std::exchange(afterCreates_, {})) asio::post(idleEx, std::move(fn));
  };
  if (guard.empty()) return createOn(std::move(ex), path, std::move(data), kind, answered);
  submit(std::move(ex),
         {{MultiOp::Kind::Check, std::move(guard), "", -1},
          {MultiOp::Kind::Create, path, std::move(data), -1, kind}},
         Op::Create, path, [answered](ZkError err, std::vector<MultiResult> results) mutable {
           answered(results[0].failure.value_or(err), results[1].path);
         });
}

void FakeKeeper::whenCreatesIdle(Executor ex, std::function<void()> fn) {
  if (createsUnanswered_ == 0) return asio::post(ex, std::move(fn));
  afterCreates_.emplace_back(std::move(ex), std::move(fn));
}

}  // namespace zkagent::election::fake
