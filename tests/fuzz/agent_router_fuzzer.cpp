// The real agent's admin API (Agent::adminRouter over a running Agent whose ZooKeeper and gateway
// are unreachable), without sockets for the requests: every request gets a sendable status,
// drain and resign never succeed without the admin token, and with no token configured they are
// always refused.
#include <spdlog/spdlog.h>
#include <zookeeper/zookeeper.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "fuzz_request.hpp"
#include "zkagent/agent.hpp"

namespace {

using namespace zkagent;

constexpr std::string_view kAdminToken = "admin-token";

// One agent as zk-agent runs it, on an io_context of its own thread.
struct Instance {
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work{io.get_executor()};
  std::unique_ptr<agent::Agent> agent;
  std::unique_ptr<http::Router> router;
  std::thread thread;

  explicit Instance(const std::string& token) {
    // Nothing listens on port 1: the session keeps connecting, the gateway link is never up,
    // and a read of `active` gives up after the 1 ms request timeout.
    agent = std::make_unique<agent::Agent>(
        io, agent::parseConfig(R"({"instance_id":"fuzz-agent",
          "zookeeper":{"hosts":"127.0.0.1:1"},"accounts":["acct-0","acct-1"],
          "gateway":{"url":"http://127.0.0.1:1","heartbeat_interval_ms":0,"request_timeout_ms":1},
          "admin":{"listen":"127.0.0.1:0","token":")" +
                               token + R"("},"presence":{"listen":"127.0.0.1:0"}})"));
    agent->start();
    router = std::make_unique<http::Router>(agent->adminRouter());
    thread = std::thread([this] { io.run(); });
  }
};

// Instances live until the process exits (libFuzzer never returns from its loop).
std::vector<Instance*>& instances() {
  static std::vector<Instance*> all = [] {
    spdlog::set_level(spdlog::level::off);
    zoo_set_log_stream(std::fopen("/dev/null", "w"));
    return std::vector<Instance*>{new Instance(""), new Instance(std::string(kAdminToken))};
  }();
  return all;
}

bool isOperatorAction(const http::Request& request) {
  if (request.method != http::Method::Post) return false;
  std::vector<std::string_view> s;
  const std::string_view path = request.path;
  for (size_t start = 0; start < path.size();) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    if (end > start) s.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  return (s.size() == 2 && s[0] == "v1" && s[1] == "drain") ||
         (s.size() == 4 && s[0] == "v1" && s[1] == "accounts" && s[3] == "resign");
}

}  // namespace

// Input: fuzz_request.hpp's encoding; bit 3 of the first byte picks the agent with a token.
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool withToken = (data[0] >> 3) & 1;
  Instance& instance = *instances()[withToken ? 1 : 0];
  http::Request request = fuzz::requestOf(data, size);
  const bool operatorAction = isOperatorAction(request);
  const auto authorization = std::string(request.header("authorization").value_or(""));
  const http::Response response = instance.router->handle(std::move(request));
  fuzz::checkAnswer(response);
  if (operatorAction && response.status < 300 &&
      (!withToken || authorization.substr(authorization.find(' ') + 1) != kAdminToken)) {
    __builtin_trap();
  }
  return 0;
}
