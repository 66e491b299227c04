// How the answer of one ZkSession call reaches its caller: the heap state the C client hands back
// to the completion, and the posting of the answer onto the caller's executor. Private to the
// zk_session*.cpp files.
#pragma once

#include <zookeeper/zookeeper.h>

#include <boost/asio/post.hpp>
#include <type_traits>

#include "zk_session.hpp"

namespace zkagent::election::detail {

inline NodeStat toNodeStat(const Stat* stat) {
  NodeStat out;
  if (stat != nullptr) {
    out.ephemeralOwner = stat->ephemeralOwner;
    out.version = stat->version;
    out.mzxid = stat->mzxid;
  }
  return out;
}

// Reports a call that the C client refused synchronously (bad state, marshalling error).
template <typename... Args>
void refuse(Executor ex, std::function<void(ZkError, Args...)> done, ZkError err) {
  boost::asio::post(ex, [done = std::move(done), err] { done(err, std::decay_t<Args>{}...); });
}

// Heap state of one asynchronous call; its completion frees it, or the session does when the C
// client drops it (in_flight_calls.hpp).
template <typename Done>
struct Call : InFlightCall {
  Call(ZkSession* s, Executor ex, Done d, const void* o = nullptr, TypedWatch w = {},
       std::string p = {})
      : session(s),
        executor(std::move(ex)),
        done(std::move(d)),
        owner(o),
        watch(std::move(w)),
        path(std::move(p)) {}
  void answerClosing() override { refuse(std::move(executor), std::move(done), ZkError::Closing); }

  ZkSession* session;
  Executor executor;
  Done done;
  // Watch registration, applied on the completion thread so it is ordered before any event.
  const void* owner;
  TypedWatch watch;
  std::string path;
};

template <typename Done, typename... Args>
void deliver(Call<Done>* call, ZkError err, Args&&... args) {
  call->session->answered(call);
  if (!linkLost(err)) {
    call->session->noteContact();  // any answer proves the server still knows our session
  }
  boost::asio::post(call->executor,
                    [done = std::move(call->done), err,
                     ... a = std::forward<Args>(args)]() mutable { done(err, std::move(a)...); });
  delete call;
}

}  // namespace zkagent::election::detail
