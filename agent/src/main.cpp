// zk-agent --config agent.json: runs the agent until SIGTERM/SIGINT (docs/operator-guide.md).
#include <sched.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

#include "zkagent/agent.hpp"
#include "zkagent/logging.hpp"
#include "zkagent/naming.hpp"

namespace {

// The cores this process may run on: its affinity mask (taskset, a cpuset, systemd's
// CPUAffinity), not every core of the machine.
unsigned usableCores() {
  cpu_set_t cores;
  if (sched_getaffinity(0, sizeof cores, &cores) == 0) return std::max(1, CPU_COUNT(&cores));
  return std::max(1u, std::thread::hardware_concurrency());
}

constexpr std::string_view kUsage = R"(usage: zk-agent --config FILE [--check-config]
       zk-agent --help | --version

Joins the leader election of every configured account on one ZooKeeper session, lets an
account's operations through to the fencing-gateway only while this host leads it, and serves
the admin API (status, metrics, drain, resign, ops).

  --config FILE    the JSON configuration (docs/configuration.md); ZKAGENT_ADMIN_TOKEN, when
                   set, is the admin token (not together with admin.token or token_file)
  --check-config   validate FILE, print the effective configuration, exit 0 (2 when invalid)
  --help           this text
  --version        the version

On start it prints "LISTENING HOST:PORT" (the admin address) and "DEVICES ws://HOST:PORT" (the
device endpoint) on stdout. SIGTERM or SIGINT:
refuse new operations, resign every account, close the session, exit 0.
)";

int run(const zkagent::agent::Config& config) {
  using namespace zkagent::agent;
  namespace logging = zkagent::logging;
  logging::setUp(
      {"zk-agent",
       config.log.format == LogFormat::Json ? logging::Format::Json : logging::Format::Text,
       config.log.level});
  boost::asio::io_context io;
  Agent agent(io, config);
  agent.start();
  const std::string admin =
      zkagent::naming::toString({config.admin.listen.host, agent.adminPort()});
  std::printf("LISTENING %s\n", admin.c_str());
  std::printf("DEVICES %s\n", agent.deviceEndpoint().c_str());
  std::fflush(stdout);
  spdlog::info("zk-agent {} started instance={} accounts={} admin={}:{}", ZKAGENT_VERSION,
               config.instanceId, config.accounts.size(), config.admin.listen.host,
               agent.adminPort());
  if (config.admin.token.empty() && config.admin.openOperatorActions) {
    spdlog::warn("admin.open_operator_actions: drain and resign need no token");
  } else if (config.admin.token.empty()) {
    spdlog::warn(
        "no admin token: drain and resign are refused (set admin.token, admin.token_file or {})",
        zkagent::agent::kAdminTokenVariable);
  }
  if (config.presence.insecure) {
    spdlog::warn("presence.insecure: devices connect over plain ws:// on {}",
                 agent.deviceEndpoint());
  }
  if (config.presence.insecureNoDeviceAuth) {
    spdlog::warn(
        "presence.insecure_no_device_auth: devices connect without a token on {}: anyone who "
        "reaches it can claim any device",
        agent.deviceEndpoint());
  } else if (config.presence.auth) {
    spdlog::info("device tokens required on {} ({} key(s))", agent.deviceEndpoint(),
                 config.presence.auth->keys.size());
  }

  boost::asio::signal_set signals(io, SIGTERM, SIGINT);
  boost::asio::steady_timer deadline(io);
  signals.async_wait([&](const boost::system::error_code& ec, int signal) {
    if (ec) return;
    spdlog::info("signal {} received", signal);
    // The bound on shutdown: an unreachable ZooKeeper must not keep the process alive.
    deadline.expires_after(config.shutdownTimeout);
    deadline.async_wait([&io](const boost::system::error_code& e) {
      if (e) return;
      spdlog::warn("shutdown did not finish in time; exiting anyway");
      io.stop();
    });
    agent.shutdown([&io] { io.stop(); });
  });

  // One io thread per usable core, at most four: more threads than cores add only wake-ups
  // between them (measured on 2 cores: 45 us of agent CPU per forwarded operation on one thread,
  // 50 on two, 74 on four). Handlers that block run on the admin server's own pool.
  const unsigned cores = usableCores();
  std::vector<std::thread> threads;
  for (unsigned i = 1; i < std::min(cores, 4u); ++i) threads.emplace_back([&io] { io.run(); });
  io.run();
  for (auto& t : threads) t.join();
  spdlog::info("exiting");
  zkagent::logging::flush();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args(argv + 1, argv + argc);
  std::string_view configPath;
  bool checkOnly = false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (args[i] == "--version") {
      std::cout << "zk-agent " << ZKAGENT_VERSION << "\n";
      return 0;
    }
    if (args[i] == "--check-config") {
      checkOnly = true;
    } else if (args[i] == "--config" && i + 1 < args.size()) {
      configPath = args[++i];
    } else {
      std::cerr << "zk-agent: unknown argument '" << args[i] << "'\n" << kUsage;
      return 2;
    }
  }
  if (configPath.empty()) {
    std::cerr << "zk-agent: --config FILE is required\n" << kUsage;
    return 2;
  }
  zkagent::agent::Config config;
  try {
    const char* token = std::getenv(zkagent::agent::kAdminTokenVariable);
    config = zkagent::agent::loadConfig(std::string(configPath),
                                        token ? std::optional<std::string>(token) : std::nullopt);
  } catch (const zkagent::agent::ConfigError& e) {
    std::cerr << "zk-agent: invalid config " << configPath << ": " << e.what() << "\n";
    return 2;
  }
  if (checkOnly) {
    if (config.presence.insecureNoDeviceAuth) {
      std::cerr << "zk-agent: warning: presence.insecure_no_device_auth: devices connect without "
                   "a token\n";
    }
    std::cout << zkagent::agent::describe(config) << "\n";
    return 0;
  }
  try {
    return run(config);
  } catch (const std::exception& e) {
    std::cerr << "zk-agent: " << e.what() << "\n";
    return 1;
  }
}
