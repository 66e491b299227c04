// zkagent presence: which devices of an account are online, with a computable error (a worst-case
// delay from leaving to the published offline, per way of leaving). Plain C++ with no I/O and no
// threads: time comes from an injected Clock, so the same code runs under VirtualClock in tests and
// experiments and under Asio timers in the agent and the gateway (each calls the model from one
// strand).
//
//   device --heartbeat--> ConnectionTable (leader agent) --renew/remove, with Epoch--> LeaseStore
//   LeaseStore --device change--> PresenceView (debounce) --user change--> Subscriptions (privacy)
//
// Ways of leaving and their worst-case detection delay are in bounds() (params.hpp): with the
// defaults a close is published within 20 s, a half-open connection within 100 s and a crashed
// leader agent within 175 s. PresenceService bundles the store side the fencing-gateway runs.
#pragma once

#include "zkagent/presence/clock.hpp"
#include "zkagent/presence/connection_table.hpp"
#include "zkagent/presence/leases.hpp"
#include "zkagent/presence/params.hpp"
#include "zkagent/presence/privacy.hpp"
#include "zkagent/presence/stable_random.hpp"
#include "zkagent/presence/subscriptions.hpp"
#include "zkagent/presence/view.hpp"

namespace zkagent::presence {

// The store side wired together: lease changes feed the view, published changes feed the
// subscriptions and then `onPublished` (for metrics or tests).
class PresenceService {
 public:
  // Throws std::invalid_argument for invalid params.
  PresenceService(Clock& clock, const Params& params,
                  PresenceView::PublishHandler onPublished = {});

  LeaseStore& leases() { return leases_; }
  const PresenceView& view() const { return view_; }
  PrivacyRules& privacy() { return privacy_; }
  Subscriptions& subscriptions() { return subscriptions_; }

 private:
  PrivacyRules privacy_;
  PresenceView view_;
  Subscriptions subscriptions_;
  LeaseStore leases_;
};

}  // namespace zkagent::presence
