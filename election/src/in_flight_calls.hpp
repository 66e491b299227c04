// The calls a ZooKeeper handle holds, so that every one is answered even when the C client drops
// it. libzookeeper_mt 3.8.0 stops its completion thread as soon as a close is requested: answers
// still queued then (and the ZCLOSING answers its close makes up for requests in flight) are never
// called. The caller would never hear back, and what its call captured (its owner, which holds the
// session) would never be freed. So ZkSession lists each call until its completion runs and, once
// a handle's threads are joined, answers what is left of that handle Closing. Private to
// election/src.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace zkagent::election::detail {

// One call handed to the C client; the completion that answers it unlists it first.
struct InFlightCall {
  InFlightCall() = default;
  virtual ~InFlightCall() = default;
  InFlightCall(const InFlightCall&) = delete;
  InFlightCall& operator=(const InFlightCall&) = delete;
  // Posts ZkError::Closing to the caller (the C client will not call this call any more).
  virtual void answerClosing() = 0;

  uint64_t generation = 0;  // of the handle the call is issued on (set when listed)
  InFlightCall* prev = nullptr;
  InFlightCall* next = nullptr;
};

// An intrusive list (no allocation per call; the C client's threads and the issuing threads both
// touch it, hence the lock).
class InFlightCalls {
 public:
  InFlightCalls() = default;
  InFlightCalls(const InFlightCalls&) = delete;
  InFlightCalls& operator=(const InFlightCalls&) = delete;
  // Calls the session never got to answer (it is going away with a handle open): freed unanswered.
  ~InFlightCalls() { takeAll(); }

  void add(InFlightCall* call) {
    std::lock_guard lock(mu_);
    call->prev = nullptr;
    call->next = head_;
    if (head_ != nullptr) head_->prev = call;
    head_ = call;
  }
  void remove(InFlightCall* call) {
    std::lock_guard lock(mu_);
    unlink(call);
  }
  // The calls of handle `generation` still listed. Only once that handle is closed (its threads
  // joined) are they known to be dropped.
  std::vector<std::unique_ptr<InFlightCall>> takeGeneration(uint64_t generation) {
    return take([generation](const InFlightCall& c) { return c.generation == generation; });
  }

 private:
  std::vector<std::unique_ptr<InFlightCall>> takeAll() {
    return take([](const InFlightCall&) { return true; });
  }
  template <typename Pred>
  std::vector<std::unique_ptr<InFlightCall>> take(Pred pred) {
    std::vector<std::unique_ptr<InFlightCall>> out;
    std::lock_guard lock(mu_);
    for (InFlightCall* c = head_; c != nullptr;) {
      InFlightCall* next = c->next;
      if (pred(*c)) {
        unlink(c);
        out.emplace_back(c);
      }
      c = next;
    }
    return out;
  }
  void unlink(InFlightCall* call) {
    if (call->prev != nullptr) call->prev->next = call->next;
    if (call->next != nullptr) call->next->prev = call->prev;
    if (head_ == call) head_ = call->next;
    call->prev = call->next = nullptr;
  }

  std::mutex mu_;
  InFlightCall* head_ = nullptr;
};

}  // namespace zkagent::election::detail
