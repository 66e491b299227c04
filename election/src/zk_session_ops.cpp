// ZkSession: the operations, each issued to the C client under the handle lock.
#include <zookeeper/zookeeper.h>

#include <memory>

#include "zk_session.hpp"
#include "zk_session_calls.hpp"

namespace zkagent::election::detail {
namespace asio = boost::asio;

namespace {

int createMode(NodeKind kind) {
  switch (kind) {
    case NodeKind::Persistent:
      return ZOO_PERSISTENT;
    case NodeKind::Ephemeral:
      return ZOO_EPHEMERAL;
    case NodeKind::EphemeralSequential:
      return ZOO_EPHEMERAL_SEQUENTIAL;
  }
  return ZOO_PERSISTENT;
}

// With a digest: all rights for the creator's authenticated identities ("auth" scheme, as
// ZOO_CREATOR_ALL_ACL), read for anyone. The C client wants mutable strings.
char kAuthScheme[] = "auth";
char kNoId[] = "";
char kWorldScheme[] = "world";
char kAnyone[] = "anyone";
ACL kAuthenticatedAcls[] = {{ZOO_PERM_ALL, {kAuthScheme, kNoId}},
                            {ZOO_PERM_READ, {kWorldScheme, kAnyone}}};
ACL_vector kAuthenticatedAcl{2, kAuthenticatedAcls};

}  // namespace

// ---- operations -----------------------------------------------------------------------------

// Listed before the C client holds it: its completion may run (and unlist it) before this returns.
template <typename Issue>
int ZkSession::issueListed(InFlightCall* call, Issue issue) {
  if (zh_ == nullptr) return ZINVALIDSTATE;
  call->generation = generation_;
  inFlight_.add(call);
  const int rc = issue(zh_);
  if (rc != ZOK) inFlight_.remove(call);
  return rc;
}

// Every call goes through here: the handle lock is held while the C client queues the request, so
// a handle is never closed under a call; a request it refuses at once is answered on `ex`.
template <typename Done, typename Issue>
void ZkSession::submit(Executor ex, Done done, const void* owner, TypedWatch watch,
                       std::string path, Issue issue) {
  auto* call = new Call<Done>(this, std::move(ex), std::move(done), owner, std::move(watch),
                              std::move(path));
  std::unique_lock lock(mu_);  // held while submitting: a handle is never closed under a call
  const int rc = issueListed(call, [&](zhandle_t* zh) { return issue(zh, call); });
  lock.unlock();
  if (rc != ZOK) {
    refuse(std::move(call->executor), std::move(call->done), fromRc(rc));
    delete call;
  }
}

void ZkSession::create(std::string path, std::string data, NodeKind kind,
                       std::function<void(ZkError, std::string)> done) {
  createOn(io_.get_executor(), std::move(path), std::move(data), kind, std::move(done));
}
void ZkSession::set(std::string path, std::string data, int32_t version,
                    std::function<void(ZkError, NodeStat)> done) {
  setOn(io_.get_executor(), std::move(path), std::move(data), version, std::move(done));
}
void ZkSession::setOn(Executor ex, std::string path, std::string data, int32_t version,
                      std::function<void(ZkError, NodeStat)> done) {
  using Done = std::function<void(ZkError, NodeStat)>;
  submit(std::move(ex), Done(std::move(done)), nullptr, nullptr, std::move(path),
         [&](zhandle_t* zh, Call<Done>* call) {
           return zoo_aset(
               zh, call->path.c_str(), data.data(), static_cast<int>(data.size()), version,
               [](int rc, const Stat* stat, const void* p) {
                 deliver(static_cast<Call<Done>*>(const_cast<void*>(p)), fromRc(rc),
                         toNodeStat(stat));
               },
               call);
         });
}
void ZkSession::get(std::string path, Watch watch,
                    std::function<void(ZkError, std::string, NodeStat)> done) {
  getOn(io_.get_executor(), std::move(path), nullptr, std::move(watch), std::move(done));
}
void ZkSession::exists(std::string path, Watch watch,
                       std::function<void(ZkError, std::optional<NodeStat>)> done) {
  existsOn(io_.get_executor(), std::move(path), nullptr, std::move(watch), std::move(done));
}
void ZkSession::children(std::string path, Watch watch,
                         std::function<void(ZkError, std::vector<std::string>)> done) {
  childrenOn(io_.get_executor(), std::move(path), nullptr, std::move(watch), std::move(done));
}
void ZkSession::remove(std::string path, int32_t version, std::function<void(ZkError)> done) {
  removeOn(io_.get_executor(), std::move(path), version, std::move(done));
}
void ZkSession::ensurePath(std::string path, std::function<void(ZkError)> done) {
  ensurePathOn(io_.get_executor(), std::move(path), std::move(done));
}

void ZkSession::createOn(Executor ex, std::string path, std::string data, NodeKind kind,
                         std::function<void(ZkError, std::string)> done) {
  using Done = std::function<void(ZkError, std::string)>;
  submit(std::move(ex), std::move(done), nullptr, nullptr, std::move(path),
         [&](zhandle_t* zh, Call<Done>* call) {
           return zoo_acreate(
               zh, call->path.c_str(), data.data(), static_cast<int>(data.size()),
               options_.digest.empty() ? &ZOO_OPEN_ACL_UNSAFE : &kAuthenticatedAcl,
               createMode(kind),
               [](int rc, const char* value, const void* p) {
                 deliver(static_cast<Call<Done>*>(const_cast<void*>(p)), fromRc(rc),
                         std::string(value != nullptr ? value : ""));
               },
               call);
         });
}
// Watches are recorded on the completion thread, before any event for them can be processed.
void ZkSession::getWatchingOn(Executor ex, std::string path, const void* owner, TypedWatch watch,
                              std::function<void(ZkError, std::string, NodeStat)> done) {
  using Done = std::function<void(ZkError, std::string, NodeStat)>;
  submit(std::move(ex), std::move(done), owner, std::move(watch), std::move(path),
         [](zhandle_t* zh, Call<Done>* call) {
           return zoo_aget(
               zh, call->path.c_str(), call->watch ? 1 : 0,
               [](int rc, const char* value, int len, const Stat* stat, const void* p) {
                 auto* c = static_cast<Call<Done>*>(const_cast<void*>(p));
                 if (rc == ZOK && c->watch)
                   c->session->addWatch(c->generation, false, c->path, c->owner, c->executor,
                                        std::move(c->watch));
                 deliver(c, fromRc(rc),
                         value != nullptr && len > 0 ? std::string(value, len) : std::string(),
                         toNodeStat(stat));
               },
               call);
         });
}

void ZkSession::existsOn(Executor ex, std::string path, const void* owner, Watch watch,
                         std::function<void(ZkError, std::optional<NodeStat>)> done) {
  using Done = std::function<void(ZkError, std::optional<NodeStat>)>;
  submit(std::move(ex), std::move(done), owner, typed(std::move(watch)), std::move(path),
         [](zhandle_t* zh, Call<Done>* call) {
           return zoo_aexists(
               zh, call->path.c_str(), call->watch ? 1 : 0,
               [](int rc, const Stat* stat, const void* p) {
                 auto* c = static_cast<Call<Done>*>(const_cast<void*>(p));
                 // exists() leaves a watch both when the node is there and when it is not.
                 if ((rc == ZOK || rc == ZNONODE) && c->watch)
                   c->session->addWatch(c->generation, false, c->path, c->owner, c->executor,
                                        std::move(c->watch));
                 std::optional<NodeStat> st;
                 if (rc == ZOK) st = toNodeStat(stat);
                 deliver(c, rc == ZNONODE ? ZkError::Ok : fromRc(rc), st);
               },
               call);
         });
}

void ZkSession::childrenOn(Executor ex, std::string path, const void* owner, Watch watch,
                           std::function<void(ZkError, std::vector<std::string>)> done) {
  using Done = std::function<void(ZkError, std::vector<std::string>)>;
  submit(std::move(ex), std::move(done), owner, typed(std::move(watch)), std::move(path),
         [](zhandle_t* zh, Call<Done>* call) {
           return zoo_aget_children(
               zh, call->path.c_str(), call->watch ? 1 : 0,
               [](int rc, const String_vector* strings, const void* p) {
                 auto* c = static_cast<Call<Done>*>(const_cast<void*>(p));
                 if (rc == ZOK && c->watch)
                   c->session->addWatch(c->generation, true, c->path, c->owner, c->executor,
                                        std::move(c->watch));
                 std::vector<std::string> names;
                 if (rc == ZOK && strings != nullptr) {
                   names.reserve(static_cast<size_t>(strings->count));
                   for (int i = 0; i < strings->count; ++i) names.emplace_back(strings->data[i]);
                 }
                 deliver(c, fromRc(rc), std::move(names));
               },
               call);
         });
}

void ZkSession::removeOn(Executor ex, std::string path, int32_t version,
                         std::function<void(ZkError)> done) {
  using Done = std::function<void(ZkError)>;
  submit(std::move(ex), std::move(done), nullptr, nullptr, std::move(path),
         [version](zhandle_t* zh, Call<Done>* call) {
           return zoo_adelete(
               zh, call->path.c_str(), version,
               [](int rc, const void* p) {
                 deliver(static_cast<Call<Done>*>(const_cast<void*>(p)), fromRc(rc));
               },
               call);
         });
}
void ZkSession::multiOn(Executor ex, std::vector<MultiOp> ops, MultiDone done) {
  struct MultiCall : InFlightCall {
    MultiCall(ZkSession* s, std::vector<MultiOp> o, Executor ex, MultiDone d)
        : session(s), ops(std::move(o)), executor(std::move(ex)), done(std::move(d)) {}
    void answerClosing() override {
      refuse(std::move(executor), std::move(done), ZkError::Closing);
    }
    ZkSession* session;
    std::vector<MultiOp> ops;
    std::vector<zoo_op_t> zops;
    std::vector<zoo_op_result_t> results;
    std::vector<std::string> created;  // buffers for the paths Create ops make
    Executor executor;
    MultiDone done;
  };
  auto* call = new MultiCall(this, std::move(ops), std::move(ex), std::move(done));
  const size_t n = call->ops.size();
  call->zops.resize(n);
  call->results.resize(n);
  call->created.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const auto& op = call->ops[i];
    switch (op.kind) {
      case MultiOp::Kind::Create:
        call->created[i].assign(op.path.size() + 16, '\0');  // room for a sequence suffix
        zoo_create_op_init(&call->zops[i], op.path.c_str(), op.data.data(),
                           static_cast<int>(op.data.size()),
                           options_.digest.empty() ? &ZOO_OPEN_ACL_UNSAFE : &kAuthenticatedAcl,
                           createMode(op.nodeKind), call->created[i].data(),
                           static_cast<int>(call->created[i].size()));
        break;
      case MultiOp::Kind::Remove:
        zoo_delete_op_init(&call->zops[i], op.path.c_str(), op.version);
        break;
      case MultiOp::Kind::Set:
        zoo_set_op_init(&call->zops[i], op.path.c_str(), op.data.data(),
                        static_cast<int>(op.data.size()), op.version, nullptr);
        break;
      case MultiOp::Kind::Check:
        zoo_check_op_init(&call->zops[i], op.path.c_str(), op.version);
        break;
    }
  }
  std::unique_lock lock(mu_);  // held while submitting: a handle is never closed under a call
  const int rc = issueListed(call, [&](zhandle_t* zh) {
    // libzookeeper_mt (3.8.0 and master as of 2026) frees a stale pointer in zoo_amulti when an
    // op fails to initialise: after the first op refused for a dead handle (ZINVALIDSTATE), each
    // later op frees that op's path again — our buffer, freed once per remaining op (glibc's
    // "double free detected", seen at 10 000 accounts when a session expired under a create
    // batch). Only a handle in the connected state is given a multi: a dead one gets the refusal
    // the library would give, one still (re)connecting gets ConnectionLoss, which every caller
    // already handles as "not known to be applied" and settles after the reconnect. The session
    // can still die while zoo_amulti runs only if the client completes a whole reconnect in that
    // time.
    if (const int state = zoo_state(zh); state != ZOO_CONNECTED_STATE) {
      return static_cast<int>(state < 0 ? ZINVALIDSTATE : ZCONNECTIONLOSS);
    }
    return zoo_amulti(
        zh, static_cast<int>(n), call->zops.data(), call->results.data(),
        [](int rc2, const void* p) {
          std::unique_ptr<MultiCall> c(static_cast<MultiCall*>(const_cast<void*>(p)));
          c->session->answered(c.get());
          const ZkError err = fromRc(rc2);
          if (!linkLost(err)) c->session->noteContact();
          std::vector<MultiResult> results(c->ops.size());
          for (size_t i = 0; i < results.size(); ++i) {
            // The others say RuntimeInconsistency or Ok, rolled back either way.
            const int own = c->results[i].err;
            if (!linkLost(err) && own != ZOK && own != ZRUNTIMEINCONSISTENCY) {
              results[i].failure = fromRc(own);
            }
            if (err == ZkError::Ok && c->ops[i].kind == MultiOp::Kind::Create) {
              results[i].path = c->created[i].c_str();
            }
          }
          asio::post(c->executor,
                     [done = std::move(c->done), err, results = std::move(results)]() mutable {
                       done(err, std::move(results));
                     });
        },
        call);
  });
  lock.unlock();
  if (rc != ZOK) {
    refuse(std::move(call->executor), std::move(call->done), fromRc(rc));
    delete call;
  }
}

void ZkSession::syncOn(Executor ex, std::string path, std::function<void(ZkError)> done) {
  using Done = std::function<void(ZkError)>;
  submit(std::move(ex), std::move(done), nullptr, nullptr, std::move(path),
         [](zhandle_t* zh, Call<Done>* call) {
           return zoo_async(
               zh, call->path.c_str(),
               [](int rc, const char*, const void* p) {
                 deliver(static_cast<Call<Done>*>(const_cast<void*>(p)), fromRc(rc));
               },
               call);
         });
}
}  // namespace zkagent::election::detail
