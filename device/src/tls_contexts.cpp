// The TLS contexts of the process's clients, one per CA file.
#include <map>
#include <mutex>

#include "detail.hpp"
#include "zkagent/http/tls.hpp"

namespace zkagent::device {

std::shared_ptr<boost::asio::ssl::context> sharedTlsContext(const std::string& caFile) {
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<boost::asio::ssl::context>> contexts;
  std::lock_guard lock(mutex);
  auto& slot = contexts[caFile];
  auto context = slot.lock();
  if (!context) {
    context = std::make_shared<boost::asio::ssl::context>(http::clientTlsContext({.ca = caFile}));
    slot = context;
  }
  return context;
}

}  // namespace zkagent::device
