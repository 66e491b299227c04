// election-floor-probe: the floor of election-bench. A raw ZooKeeper C client (no election
// library) that does only the work the znode layout of docs/election.md cannot do without, for N
// accounts on one session, and speaks zk-elect's line protocol so the benchmark starts, stops,
// kills and times it exactly as it does zk-elect and the peers:
//   SESSION <unix_ns> <negotiated_timeout_ms> | READY | LEADER <account> <token> <unix_ns>
//
//   election-floor-probe --zk HOST:PORT[,...] --root PATH --instance-id ID --accounts-file F
//                        [--session-timeout-ms N] [--multi-bytes N]
//
// Set-up (not what the benchmark times): the account's persistent levels, one member node per
// account (ephemeral-sequential, in multis), one listing per account; the head of a queue takes
// `active` as below, every other member exists-watches its predecessor (no herd).
//
// What is timed, per handed-over or expired account:
// - the deletes: SIGTERM closes the session, the one request that deletes every node of the
//   session (the member and `active` of every account) in one transaction, as an expiry does and
//   as the kazoo and Curator peers stop. No session mark, no handover record, no watch of the
//   leader's own nodes (zkagent's drift detection): those are zkagent's, beyond the floor;
// - one notification: the successor's exists-watch on its predecessor's member node;
// - one guarded create: `active` (the same record fields as zkagent's) created with a Check of the
//   successor's own member node, many accounts per multi, in the fewest multis the server takes:
//   a multi is one request, and the server refuses a request above jute.maxbuffer (0xfffff bytes
//   by default; followers refuse a proposal above it plus 1 KiB). Creates wait until every
//   account that can still arrive has (every account of this process is leading, in flight or
//   waiting to be sent) or until a multi is full (then it goes at once). This waits for the last
//   notification, knowing how many will come, which no real elector can know: it is the least
//   server work, not a design to copy.
// LEADER lines carry the moment the multi that created the account's `active` was answered.
//
// Not robust on purpose: an expired session or a refused guarded create ends the process (exit 1)
// with a message on stderr; the benchmark reports the round as failed.
#include <pthread.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr int kResolveEveryMs = 10000;  // as ZkSession: no getaddrinfo per request
// jute.maxbuffer's default, less a margin for the request and transaction headers: the most a
// takeover multi may carry (--multi-bytes may ask for less). The server answers nothing else on
// the session while it works on a multi, pings included, so a multi it needs longer for than 2/3
// of the session timeout loses the connection: ~4700 guarded creates did at 2 s on a loaded
// 2-core machine (docs/benchmarks.md).
constexpr size_t kServerMultiBytes = 0xfffff - 16 * 1024;
// The set-up's member creates (not timed) go in smaller multis: the server answers nothing else on
// the session while it works on one, and a 1 MiB multi of ephemeral-sequential creates took longer
// than the client's 2/3 of a 2 s session timeout without a reply on a loaded 2-core machine.
constexpr size_t kSetUpMultiBytes = 64 * 1024;
// Set-up operations in flight at most, for the same reason: the session's pings wait behind them.
constexpr size_t kSetUpWindowOps = 512;
constexpr size_t kMultiHeaderBytes = 9;  // type, done, err of each op
// world:anyone ALL, as one serialized ACL vector: count, perms, scheme "world", id "anyone".
constexpr size_t kAclBytes = 4 + 4 + (4 + 5) + (4 + 6);
constexpr std::chrono::milliseconds kQuietFlush{50};  // safety net, see Probe::flushIfQuiet

int64_t unixNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "election-floor-probe: %s\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

struct Args {
  std::string zk, root, instanceId, accountsFile;
  int sessionTimeoutMs = 10000;
  size_t multiBytes = kServerMultiBytes;  // ops per takeover multi, serialized
};

Args parseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--zk") {
      a.zk = value;
    } else if (flag == "--root") {
      a.root = value;
    } else if (flag == "--instance-id") {
      a.instanceId = value;
    } else if (flag == "--accounts-file") {
      a.accountsFile = value;
    } else if (flag == "--session-timeout-ms") {
      a.sessionTimeoutMs = std::atoi(value.c_str());
    } else if (flag == "--multi-bytes") {
      a.multiBytes = std::min<size_t>(std::strtoul(value.c_str(), nullptr, 10), kServerMultiBytes);
      if (a.multiBytes == 0) fail("--multi-bytes must be a positive number of bytes");
    } else {
      fail("unknown argument " + flag);
    }
  }
  if (argc % 2 == 0 || a.zk.empty() || a.root.empty() || a.instanceId.empty() ||
      a.accountsFile.empty() || a.sessionTimeoutMs <= 0) {
    fail(
        "usage: --zk HOST:PORT --root PATH --instance-id ID --accounts-file F "
        "[--session-timeout-ms N] [--multi-bytes N]");
  }
  return a;
}

int64_t sequenceOf(const std::string& node) {
  return node.size() < 10 ? -1 : std::atoll(node.c_str() + node.size() - 10);
}

struct Account {
  std::string name, path, members, active;
  std::string member;  // our member node's full path
  std::string record;  // what our `active` would hold
  int64_t seq = -1;
  bool headBehind = false;  // the predecessor we watch was the head of the queue
  bool settled = false;     // counted towards READY: leading, or watching its predecessor
  enum class State { Registering, Listing, Waiting, Pending, Creating, Leading } state{};
};

// One multi in flight: the ops point into this object and into the accounts, which outlive it.
struct Multi {
  class Probe* probe = nullptr;
  std::vector<size_t> accounts;
  std::vector<zoo_op_t> ops;
  std::vector<zoo_op_result_t> results;
  std::vector<std::array<char, 512>> paths;  // created paths (members: the sequence)
};

class Probe {
 public:
  explicit Probe(Args args) : args_(std::move(args)) {
    std::ifstream in(args_.accountsFile);
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] == '#') continue;
      Account a;
      a.name = line;
      a.path = args_.root + "/" + line;
      a.members = a.path + "/members";
      a.active = a.path + "/active";
      accounts_.push_back(std::move(a));
    }
    if (accounts_.empty()) fail("no accounts in " + args_.accountsFile);
  }

  void connect() {
    zoo_set_debug_level(ZOO_LOG_LEVEL_WARN);
    zh_ =
        zookeeper_init(args_.zk.c_str(), &Probe::watcher, args_.sessionTimeoutMs, nullptr, this, 0);
    if (zh_ == nullptr) fail(std::string("zookeeper_init: ") + std::strerror(errno));
    zoo_set_servers_resolution_delay(zh_, kResolveEveryMs);
    std::unique_lock lock(mu_);
    if (!changed_.wait_for(lock, std::chrono::seconds(30), [this] { return connected_; }))
      fail("no session within 30 s");
    sessionId_ = zoo_client_id(zh_)->client_id;
    std::printf("SESSION %lld %d\n", static_cast<long long>(unixNanos()), zoo_recv_timeout(zh_));
    std::fflush(stdout);
  }

  // The persistent levels (NodeExists is fine: another contender made them), then the member nodes,
  // then one listing per account. READY once every account leads or watches its predecessor.
  void setUp() {
    std::vector<std::string> levels{args_.root};
    for (const auto& a : accounts_) {
      levels.push_back(a.path);
      levels.push_back(a.members);
    }
    for (const auto& path : levels) createLevel(path);  // in order: parents first, pipelined
    awaitOutstanding();
    registerMembers();
    awaitOutstanding();
    std::unique_lock lock(mu_);
    for (size_t i = 0; i < accounts_.size(); ++i) {
      admit(lock, 1);
      list(i, true);
    }
    changed_.wait(lock, [this] { return settled_ == accounts_.size(); });
    std::printf("READY\n");
    std::fflush(stdout);
  }

  // Until SIGTERM/SIGINT: then closeSession (the floor's stop) and exit 0.
  void serve(const sigset_t& stopSignals) {
    const timespec poll{0, 10'000'000};
    for (;;) {
      const int sig = sigtimedwait(&stopSignals, nullptr, &poll);
      if (sig == SIGTERM || sig == SIGINT) break;
      std::lock_guard lock(mu_);
      flushIfQuiet();
    }
    zookeeper_close(zh_);
    std::_Exit(0);
  }

 private:
  static void watcher(zhandle_t*, int type, int state, const char* path, void* context) {
    static_cast<Probe*>(context)->onWatch(type, state, path);
  }

  void onWatch(int type, int state, const char* path) {
    std::lock_guard lock(mu_);
    if (type == ZOO_SESSION_EVENT) {
      if (state == ZOO_CONNECTED_STATE) connected_ = true;
      if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE)
        fail("session lost (state " + std::to_string(state) + ")");
      changed_.notify_all();
      return;
    }
    if (type != ZOO_DELETED_EVENT) return;
    auto it = watched_.find(path);
    if (it == watched_.end()) return;
    const size_t i = it->second;
    watched_.erase(it);
    predecessorGone(i);
  }

  // Under mu_: waits until `ops` more set-up operations fit in the window, and counts them.
  void admit(std::unique_lock<std::mutex>& lock, size_t ops) {
    changed_.wait(
        lock, [this, ops] { return outstanding_ == 0 || outstanding_ + ops <= kSetUpWindowOps; });
    outstanding_ += ops;
  }

  void createLevel(const std::string& path) {
    std::unique_lock lock(mu_);
    admit(lock, 1);
    const int sent = zoo_acreate(
        zh_, path.c_str(), "", 0, &ZOO_OPEN_ACL_UNSAFE, 0,
        [](int rc, const char*, const void* data) {
          auto* self = static_cast<Probe*>(const_cast<void*>(data));
          if (rc != ZOK && rc != ZNODEEXISTS) fail(std::string("create of a level: ") + zerror(rc));
          self->answered();
        },
        this);
    if (sent != ZOK) fail(std::string("zoo_acreate: ") + zerror(sent));
  }

  void answered() {
    std::lock_guard lock(mu_);
    --outstanding_;
    changed_.notify_all();
  }

  void awaitOutstanding() {
    std::unique_lock lock(mu_);
    changed_.wait(lock, [this] { return outstanding_ == 0; });
  }

  // One ephemeral-sequential member per account, as many accounts per multi as fit.
  void registerMembers() {
    char data[256];
    std::snprintf(data, sizeof data,
                  R"({"instanceId":"%s","pid":%d,"startTime":%lld,"endpoint":""})",
                  args_.instanceId.c_str(), static_cast<int>(::getpid()),
                  static_cast<long long>(unixNanos() / 1'000'000));
    memberRecord_ = data;
    std::vector<size_t> batch;
    size_t bytes = 0;
    for (size_t i = 0; i < accounts_.size(); ++i) {
      const size_t cost = kMultiHeaderBytes + 4 + accounts_[i].members.size() + 3 + 4 +
                          memberRecord_.size() + kAclBytes + 4;
      if (!batch.empty() && bytes + cost > kSetUpMultiBytes) {
        sendMembers(std::move(batch));
        batch.clear();
        bytes = 0;
      }
      batch.push_back(i);
      bytes += cost;
    }
    sendMembers(std::move(batch));
  }

  void sendMembers(std::vector<size_t> batch) {
    auto* m = new Multi{this, std::move(batch), {}, {}, {}};
    m->ops.resize(m->accounts.size());
    m->results.resize(m->accounts.size());
    m->paths.resize(m->accounts.size());
    for (size_t k = 0; k < m->accounts.size(); ++k) {
      auto& a = accounts_[m->accounts[k]];
      a.member = a.members + "/m-";
      zoo_create_op_init(&m->ops[k], a.member.c_str(), memberRecord_.data(),
                         static_cast<int>(memberRecord_.size()), &ZOO_OPEN_ACL_UNSAFE,
                         ZOO_EPHEMERAL | ZOO_SEQUENCE, m->paths[k].data(),
                         static_cast<int>(m->paths[k].size()));
    }
    std::unique_lock lock(mu_);
    admit(lock, m->ops.size());
    const int sent = zoo_amulti(
        zh_, static_cast<int>(m->ops.size()), m->ops.data(), m->results.data(),
        [](int rc, const void* data) {
          std::unique_ptr<Multi> done(static_cast<Multi*>(const_cast<void*>(data)));
          if (rc != ZOK) fail(std::string("member creates: ") + zerror(rc));
          done->probe->membersCreated(*done);
        },
        m);
    if (sent != ZOK) fail(std::string("zoo_amulti: ") + zerror(sent));
  }

  void membersCreated(const Multi& m) {
    std::lock_guard lock(mu_);
    for (size_t k = 0; k < m.accounts.size(); ++k) {
      auto& a = accounts_[m.accounts[k]];
      a.member = m.paths[k].data();
      a.seq = sequenceOf(a.member);
      char record[512];
      std::snprintf(record, sizeof record,
                    R"({"seq":%lld,"instanceId":"%s","sessionId":%lld,"activeSince":%lld,)"
                    R"("endpoint":""})",
                    static_cast<long long>(a.seq), args_.instanceId.c_str(),
                    static_cast<long long>(sessionId_),
                    static_cast<long long>(unixNanos() / 1'000'000));
      a.record = record;
      a.state = Account::State::Listing;
    }
    outstanding_ -= m.accounts.size();
    changed_.notify_all();
  }

  struct ListCall {
    Probe* probe;
    size_t account;
    bool setUp;  // counted in outstanding_
  };

  // Under mu_.
  void list(size_t i, bool setUp = false) {
    accounts_[i].state = Account::State::Listing;
    auto* call = new ListCall{this, i, setUp};
    const int sent = zoo_aget_children(
        zh_, accounts_[i].members.c_str(), 0,
        [](int rc, const String_vector* children, const void* data) {
          std::unique_ptr<ListCall> done(static_cast<ListCall*>(const_cast<void*>(data)));
          if (rc != ZOK) fail(std::string("listing: ") + zerror(rc));
          std::vector<std::string> names(children->data, children->data + children->count);
          done->probe->listed(done->account, std::move(names), done->setUp);
        },
        call);
    if (sent != ZOK) fail(std::string("zoo_aget_children: ") + zerror(sent));
  }

  void listed(size_t i, std::vector<std::string> children, bool setUp) {
    std::lock_guard lock(mu_);
    if (setUp) {
      --outstanding_;
      changed_.notify_all();
    }
    auto& a = accounts_[i];
    std::sort(children.begin(), children.end(), [](const std::string& l, const std::string& r) {
      return sequenceOf(l) < sequenceOf(r);
    });
    auto own = std::find_if(children.begin(), children.end(),
                            [&a](const std::string& c) { return sequenceOf(c) == a.seq; });
    if (own == children.end()) fail("own member of " + a.name + " is gone");
    if (own == children.begin()) {
      pend(i);
      return;
    }
    // Sequence numbers only grow: a predecessor that was the head leaves us the head.
    const bool predecessorIsHead = own - 1 == children.begin();
    watch(i, a.members + "/" + *(own - 1), predecessorIsHead);
  }

  struct WatchCall {
    Probe* probe;
    size_t account;
  };

  // Under mu_: exists-watch on the predecessor.
  void watch(size_t i, const std::string& predecessor, bool predecessorIsHead) {
    accounts_[i].state = Account::State::Waiting;
    accounts_[i].headBehind = predecessorIsHead;
    watched_[predecessor] = i;
    auto* call = new WatchCall{this, i};
    const int sent = zoo_awexists(
        zh_, predecessor.c_str(), &Probe::watcher, this,
        [](int rc, const Stat*, const void* data) {
          std::unique_ptr<WatchCall> done(static_cast<WatchCall*>(const_cast<void*>(data)));
          done->probe->watchArmed(done->account, rc);
        },
        call);
    if (sent != ZOK) fail(std::string("zoo_awexists: ") + zerror(sent));
  }

  void watchArmed(size_t i, int rc) {
    std::lock_guard lock(mu_);
    if (rc == ZNONODE) {  // gone before we watched: the watch stays armed for a node that is gone
      for (auto it = watched_.begin(); it != watched_.end(); ++it) {
        if (it->second == i) {
          watched_.erase(it);
          break;
        }
      }
      predecessorGone(i);
      return;
    }
    if (rc != ZOK) fail(std::string("exists watch: ") + zerror(rc));
    settle(i);
  }

  // Under mu_.
  void predecessorGone(size_t i) {
    if (accounts_[i].state != Account::State::Waiting) return;
    if (accounts_[i].headBehind) {
      pend(i);
    } else {
      list(i);
    }
  }

  // Under mu_.
  void settle(size_t i) {
    if (accounts_[i].settled) return;
    accounts_[i].settled = true;
    if (++settled_ == accounts_.size()) changed_.notify_all();
  }

  // Under mu_: queue the guarded create of account i's `active`.
  void pend(size_t i) {
    auto& a = accounts_[i];
    a.state = Account::State::Pending;
    const size_t cost = 2 * kMultiHeaderBytes + (4 + a.member.size() + 4) +
                        (4 + a.active.size() + 4 + a.record.size() + kAclBytes + 4);
    if (!pending_.empty() && pendingBytes_ + cost > args_.multiBytes) sendPending();
    pending_.push_back(i);
    pendingBytes_ += cost;
    lastPendAt_ = std::chrono::steady_clock::now();
    ++pendingOrInFlight_;
    // Every account that is not leading is pending or in flight: nothing else can arrive.
    if (pendingOrInFlight_ + leading_ == accounts_.size()) sendPending();
  }

  // Under mu_: the safety net for accounts that never fail over (a third contender ahead of us):
  // pending creates go after kQuietFlush without another arrival.
  void flushIfQuiet() {
    if (!pending_.empty() && std::chrono::steady_clock::now() - lastPendAt_ > kQuietFlush)
      sendPending();
  }

  // Under mu_: one multi of Check(own member) + Create(active) per pending account.
  void sendPending() {
    if (pending_.empty()) return;
    auto* m = new Multi{this, std::move(pending_), {}, {}, {}};
    pending_.clear();
    pendingBytes_ = 0;
    m->ops.resize(2 * m->accounts.size());
    m->results.resize(m->ops.size());
    m->paths.resize(m->accounts.size());
    for (size_t k = 0; k < m->accounts.size(); ++k) {
      auto& a = accounts_[m->accounts[k]];
      a.state = Account::State::Creating;
      zoo_check_op_init(&m->ops[2 * k], a.member.c_str(), -1);
      zoo_create_op_init(&m->ops[2 * k + 1], a.active.c_str(), a.record.data(),
                         static_cast<int>(a.record.size()), &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL,
                         m->paths[k].data(), static_cast<int>(m->paths[k].size()));
    }
    const int sent = zoo_amulti(
        zh_, static_cast<int>(m->ops.size()), m->ops.data(), m->results.data(),
        [](int rc, const void* data) {
          const int64_t at = unixNanos();
          std::unique_ptr<Multi> done(static_cast<Multi*>(const_cast<void*>(data)));
          done->probe->created(*done, rc, at);
        },
        m);
    if (sent != ZOK) fail(std::string("zoo_amulti: ") + zerror(sent));
  }

  void created(const Multi& m, int rc, int64_t at) {
    std::lock_guard lock(mu_);
    if (rc != ZOK) {
      for (size_t k = 0; k < m.results.size(); ++k) {
        if (m.results[k].err != ZOK && m.results[k].err != ZRUNTIMEINCONSISTENCY) {
          fail("guarded create of " + accounts_[m.accounts[k / 2]].name + ": " +
               zerror(m.results[k].err));
        }
      }
      fail(std::string("guarded creates: ") + zerror(rc));
    }
    std::string lines;
    lines.reserve(m.accounts.size() * 48);
    for (size_t i : m.accounts) {
      auto& a = accounts_[i];
      a.state = Account::State::Leading;
      lines += "LEADER " + a.name + " " + std::to_string(a.seq) + " " + std::to_string(at) + "\n";
      settle(i);
    }
    leading_ += m.accounts.size();
    pendingOrInFlight_ -= m.accounts.size();
    std::fwrite(lines.data(), 1, lines.size(), stdout);
    std::fflush(stdout);
  }

  Args args_;
  zhandle_t* zh_ = nullptr;
  int64_t sessionId_ = 0;
  std::string memberRecord_;
  std::vector<Account> accounts_;
  std::mutex mu_;
  std::condition_variable changed_;
  bool connected_ = false;
  size_t outstanding_ = 0;
  size_t settled_ = 0;                               // accounts leading or watching, until READY
  std::unordered_map<std::string, size_t> watched_;  // predecessor path -> account
  std::vector<size_t> pending_;
  size_t pendingBytes_ = 0;
  size_t pendingOrInFlight_ = 0, leading_ = 0;
  std::chrono::steady_clock::time_point lastPendAt_{};
};

}  // namespace

int main(int argc, char** argv) {
  Args args = parseArgs(argc, argv);
  // Blocked before the C client starts its threads, so they inherit the mask and only serve()
  // takes the stop signals.
  sigset_t stopSignals;
  sigemptyset(&stopSignals);
  sigaddset(&stopSignals, SIGTERM);
  sigaddset(&stopSignals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stopSignals, nullptr);
  Probe probe(std::move(args));
  probe.connect();
  probe.setUp();
  probe.serve(stopSignals);
}
