#include "device_query.hpp"

namespace zkagent::agent::detail {

std::optional<std::string> inBandRedirectReason(std::string_view leader, std::string_view target) {
  if (leader.size() > kMaxCloseReason) return std::nullopt;
  const auto question = target.find('?');
  std::string url(leader);
  url.append(target.substr(0, question));
  if (question != std::string_view::npos) {
    char separator = '?';
    forEachParameter(target.substr(question + 1),
                     [&](const std::string& key, std::string_view part) {
                       if (key == kTokenParameter) return;
                       url.push_back(separator);
                       url.append(part);
                       separator = '&';
                     });
  }
  if (url.size() <= kMaxCloseReason) return url;
  return std::string(leader);
}

}  // namespace zkagent::agent::detail
