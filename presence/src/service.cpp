#include "zkagent/presence.hpp"

namespace zkagent::presence {

PresenceService::PresenceService(Clock& clock, const Params& params,
                                 PresenceView::PublishHandler onPublished)
    : view_(clock, params,
            [this, onPublished = std::move(onPublished)](const UserChange& change) {
              subscriptions_.onUserChange(change);
              if (onPublished) onPublished(change);
            }),
      subscriptions_(clock, params, view_, privacy_),
      leases_(clock, params, [this](const DeviceChange& change) { view_.onDeviceChange(change); }) {
}

}  // namespace zkagent::presence
