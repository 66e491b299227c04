// Elector: handover-reason inference: what the leadership event says about the leader we took
// over from.
#include <nlohmann/json.hpp>

#include "elector.hpp"

namespace zkagent::election::detail {

// What the leadership log line and event say about the predecessor: its handover record tells a
// clean resign or stop from a lost session (and so whether the agent applies its lock-delay).
void Elector::prepareAnnouncement(const std::string* handover, uint64_t linkAtRead) {
  pendingLink_ = linkAtRead;
  pendingPrevious_ = lastLeaderSeen_;
  auto& prev = pendingPrevious_;
  auto j = handover ? nlohmann::json::parse(*handover, nullptr, false) : nlohmann::json();
  std::optional<ActiveInfo> handedOver;
  if (j.is_object() && j.value("seq", int64_t{-1}) >= 0) {
    handedOver =
        ActiveInfo{j.value("seq", int64_t{-1}), j.value("instanceId", std::string()), 0, 0, "", ""};
  }
  if (prev && prev->seq == seq_ && prev->instanceId == ctx_->options.instanceId) {
    pendingHandoverReason_ = "drift";  // we lost it ourselves and took it back
  } else if (handedOver && (!prev || prev->seq < handedOver->seq)) {
    // We never saw the last leader, but it left its record on the way out.
    prev = handedOver;
    pendingHandoverReason_ = j.value("reason", std::string("resigned"));
  } else if (!prev) {
    pendingHandoverReason_ = "elected";
  } else if (handedOver && handedOver->seq == prev->seq &&
             handedOver->instanceId == prev->instanceId) {
    pendingHandoverReason_ = j.value("reason", std::string("resigned"));
  } else {
    pendingHandoverReason_ = "session_expired";  // it left without a word: its session ended
  }
}
}  // namespace zkagent::election::detail
