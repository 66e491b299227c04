// Which endpoint a device tries next (detail.hpp, EndpointRound).
#include "detail.hpp"

namespace zkagent::device {

EndpointRound::EndpointRound(std::vector<WsUrl> endpoints) : endpoints_(std::move(endpoints)) {}

void EndpointRound::begin() { position_ = 0; }

std::optional<EndpointRound::Attempt> EndpointRound::next() {
  while (position_ <= endpoints_.size()) {
    const std::size_t position = position_++;
    if (position == 0) {
      if (!preferred_) continue;
      Attempt attempt{std::move(*preferred_), std::nullopt};
      preferred_.reset();
      current_.reset();
      return attempt;
    }
    const std::size_t index = (start_ + position - 1) % endpoints_.size();
    current_ = index;
    return Attempt{endpoints_[index], index};
  }
  return std::nullopt;
}

void EndpointRound::prefer(WsUrl url) { preferred_ = std::move(url); }

void EndpointRound::redirected() { current_.reset(); }

void EndpointRound::welcomed() { start_ = current_ ? (*current_ + 1) % endpoints_.size() : 0; }

}  // namespace zkagent::device
