// The real gateway's HTTP API (Gateway::router over a TokenValidator, a presence store and a fake
// ZooKeeper view), without sockets: every request gets a sendable status, and on a gateway with
// an operator token no operator action (HWM reset, privacy PUT) succeeds without it.
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "fuzz_request.hpp"
#include "gateway.hpp"
#include "presence_store.hpp"

namespace {

using namespace zkagent;

constexpr std::string_view kOperatorToken = "op-token";

class FakeLeaders final : public gateway::LeaderSource {
 public:
  std::atomic<bool> reachable{true};
  bool trusted() const override { return reachable; }
  fencing::ActiveView active(std::string_view account) override {
    if (account.starts_with('a')) return {fencing::ActiveView::State::present, 7, "agent-a", 1};
    return fencing::ActiveView::absent();
  }
  fencing::ActiveView confirmedActive(std::string_view account) override { return active(account); }
};

// One gateway as main() wires it, with its io_context running on a thread of its own.
struct Instance {
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work{io.get_executor()};
  metrics::Registry registry;
  FakeLeaders leaders;
  std::unique_ptr<fencing::TokenValidator> validator;
  std::unique_ptr<gateway::PresenceStore> presence;
  std::unique_ptr<gateway::Gateway> gateway;
  std::unique_ptr<http::Router> router;
  std::thread thread;

  explicit Instance(gateway::Config config) {
    validator = std::make_unique<fencing::TokenValidator>(fencing::ValidatorOptions{});
    presence = std::make_unique<gateway::PresenceStore>(io, config, registry);
    gateway =
        std::make_unique<gateway::Gateway>(config, *validator, &leaders, registry, presence.get());
    router = std::make_unique<http::Router>(gateway->router());
    thread = std::thread([this] { io.run(); });
  }
};

gateway::Config configIn(const std::string& dir, bool secured) {
  gateway::Config config;
  config.dataDir = dir;
  if (secured) {
    config.bearerToken = "agent-token";
    config.operatorToken = std::string(kOperatorToken);
    config.tlsClientCa = "ca.pem";  // only its presence matters: instances are checked
  }
  return config;
}

// Instances live until the process exits (libFuzzer never returns from its loop).
std::vector<Instance*>& instances() {
  static std::vector<Instance*> all = [] {
    spdlog::set_level(spdlog::level::off);
    static char pattern[] = "/tmp/gateway-router-fuzz-XXXXXX";
    const std::string dir = mkdtemp(pattern);
    std::atexit([] { std::filesystem::remove_all(pattern); });
    return std::vector<Instance*>{new Instance(configIn(dir + "/open", false)),
                                  new Instance(configIn(dir + "/secured", true))};
  }();
  return all;
}

std::vector<std::string_view> segments(std::string_view path) {
  std::vector<std::string_view> out;
  for (size_t start = 0; start < path.size();) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    if (end > start) out.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool isOperatorAction(const http::Request& request) {
  const auto s = segments(request.path);
  if (request.method == http::Method::Post) {
    return s.size() == 4 && s[0] == "v1" && s[1] == "accounts" && s[3] == "reset-hwm";
  }
  return request.method == http::Method::Put && s.size() == 4 && s[0] == "v1" &&
         s[1] == "presence" && s[2] == "privacy";
}

}  // namespace

// Input: fuzz_request.hpp's encoding; bit 3 of the first byte picks the secured gateway, bit 4
// makes ZooKeeper unreachable for this request.
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool secured = (data[0] >> 3) & 1;
  Instance& instance = *instances()[secured ? 1 : 0];
  instance.leaders.reachable = ((data[0] >> 4) & 1) == 0;
  http::Request request = fuzz::requestOf(data, size);
  const bool operatorAction = isOperatorAction(request);
  const auto authorization = std::string(request.header("authorization").value_or(""));
  const http::Response response = instance.router->handle(std::move(request));
  fuzz::checkAnswer(response);
  if (secured && operatorAction && response.status < 300 &&
      authorization.substr(authorization.find(' ') + 1) != kOperatorToken) {
    __builtin_trap();
  }
  return 0;
}
