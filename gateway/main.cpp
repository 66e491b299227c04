// fencing-gateway: wires the durable TokenValidator, the optional ZooKeeper cache and the HTTP
// API together, prints "LISTENING HOST:PORT" once it serves, and stops on SIGINT/SIGTERM.
#include <spdlog/spdlog.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "gateway.hpp"
#include "presence_store.hpp"
#include "presence_subscribers.hpp"
#include "zkagent/logging.hpp"

namespace {

using namespace zkagent;

std::optional<http::ServerTls> listenerTls(const gateway::Config& config) {
  if (config.tlsCert.empty()) return std::nullopt;
  return http::ServerTls{
      .cert = config.tlsCert, .key = config.tlsKey, .clientCa = config.tlsClientCa};
}

// Re-reads the ZooKeeper trust state and sweeps silent agents every second, so a change is
// logged and shown in the metrics even when no request arrives.
void refreshPeriodically(boost::asio::steady_timer& timer, gateway::Gateway& gateway) {
  timer.expires_after(std::chrono::seconds(1));
  timer.async_wait([&timer, &gateway](const boost::system::error_code& error) {
    if (error) return;
    gateway.refreshCheckMode();
    gateway.sweepAgents();
    refreshPeriodically(timer, gateway);
  });
}

int run(const gateway::Config& config) {
  fencing::TokenValidator validator({.dataDir = config.dataDir,
                                     .commitMode = config.commitMode,
                                     .compactAfterLogBytes = config.compactAfterMib << 20});
  const auto& recovery = validator.recovery();
  spdlog::info("data dir {}: {} accounts from snapshot, {} log records replayed{}",
               config.dataDir.string(), recovery.snapshotAccounts, recovery.replayedRecords,
               recovery.truncatedBytes == 0
                   ? std::string()
                   : ", cut " + std::to_string(recovery.truncatedBytes) +
                         " bytes of torn tail: " + recovery.truncationReason);

  std::unique_ptr<gateway::LeaderSource> leaders;
  if (!config.zkHosts.empty()) {
    leaders = gateway::makeZooKeeperLeaderSource(config);
    spdlog::info("ZooKeeper check on {} root {}, while unreachable: {}", config.zkHosts,
                 config.zkRoot,
                 config.untrusted == gateway::UntrustedPolicy::Refuse ? "refuse" : "hwm_only");
  } else {
    spdlog::warn("no ZooKeeper configured: operations are checked on the high-water mark only");
  }
  // Declared first: the store and the subscribers use it until they are gone.
  std::unique_ptr<gateway::ShardOwnership> shards;
  metrics::Registry registry;
  boost::asio::io_context io;
  gateway::PresenceStore presence(io, config, registry);
  gateway::SubscriberEndpoint subscribers(io, config, presence, registry);
  // Cluster mode: stands for the cluster's shards before serving (a shard count that differs from
  // the cluster's is a start error), advertising the subscriber listener bound above.
  if (config.clusterShards != 0) {
    auto clusterConfig = config;
    clusterConfig.subscribeUrl =
        gateway::subscribeUrlOf(config, subscribers.secure(), subscribers.port());
    shards = gateway::makeZooKeeperShardOwnership(clusterConfig);
    presence.attachCluster(*shards);
  }
  gateway::Gateway gateway(config, validator, leaders.get(), registry, &presence, shards.get());

  auto& rateLimited = registry
                          .counter("zkagent_gateway_rate_limited_requests_total",
                                   "Requests refused with 429: over the per-connection rate.")
                          .with({});
  // One body limit for every route: a lease batch's; /v1/ops refuses larger operations itself.
  http::Server server(io,
                      {.address = config.listenAddress,
                       .port = config.listenPort,
                       .bodyLimit = gateway::kMaxLeaseBatchBytes,
                       .handlerThreads = config.handlerThreads,
                       .tls = listenerTls(config),
                       .maxRequestsPerSecond = config.maxRequestsPerSecond,
                       .onRateLimited = [&rateLimited] { rateLimited.inc(); }},
                      gateway.router());
  server.start();
  subscribers.start();
  auto bracketed = [](std::string address) {
    return address.find(':') != std::string::npos ? "[" + address + "]" : address;
  };
  const auto host = bracketed(server.address());
  std::cout << "LISTENING " << host << ":" << server.port() << std::endl;
  std::cout << "SUBSCRIBE-LISTENING " << bracketed(subscribers.address()) << ":"
            << subscribers.port() << std::endl;
  spdlog::info("fencing-gateway {} listening on {}://{}:{}{}", ZKAGENT_VERSION,
               config.tlsCert.empty() ? "http" : "https", host, server.port(),
               config.bearerToken.empty() ? " without authentication" : " (bearer token required)");
  if (config.operatorToken.empty()) {
    spdlog::info("no operator token: HWM reset, privacy rules and drain are refused");
  }
  if (!config.tlsClientCa.empty()) {
    spdlog::info(
        "client certificates from {} required; an agent acts only as the instance its "
        "certificate names",
        config.tlsClientCa);
  } else if (config.insecure) {
    spdlog::warn("insecure: plain HTTP on {}: anyone who can reach it can submit for any instance",
                 host);
  }
  if (config.insecure && !subscribers.secure()) {
    spdlog::warn("insecure: subscribers on plain WebSocket at {}:{}",
                 bracketed(subscribers.address()), subscribers.port());
  }
  spdlog::info("presence leases: ttl {} ms, swept every {} ms; soft state, warming up for one ttl",
               config.leaseTtlMs, config.leaseSweepMs);
  spdlog::info(
      "presence subscribers on {}://{}:{}/v1/presence/subscribe: debounce {} ms, "
      "coalesce {} ms, queue {} messages, at most {} subscribers, versions from {}",
      subscribers.secure() ? "wss" : "ws", bracketed(subscribers.address()), subscribers.port(),
      config.debounceMs, config.coalesceMs, config.subscriberQueue, config.maxSubscribers,
      shards ? std::string("each shard's cluster epoch")
             : "restart " + std::to_string(presence.generation()));

  boost::asio::steady_timer refresh(io);
  refreshPeriodically(refresh, gateway);
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& error, int signal) {
    if (error) return;
    spdlog::info("signal {}: stopping", signal);
    auto stopServing = [&] {
      server.stop();
      subscribers.stop();
      refresh.cancel();
      presence.stop();  // its sweep timers would keep io.run() going
    };
    if (!shards) return stopServing();
    // Requests keep being served (421 for the shards handed over) until every shard has its next
    // owner, so an agent is never left without one.
    shards->stop([&io, stopServing] {
      boost::asio::post(io, [stopServing] {
        spdlog::info("cluster: shards handed over");
        stopServing();
      });
    });
  });

  std::vector<std::thread> threads;
  for (size_t i = 1; i < config.ioThreads; ++i) threads.emplace_back([&io] { io.run(); });
  io.run();
  for (auto& thread : threads) thread.join();
  spdlog::info("stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto environment = [](const char* name) {
    const char* value = std::getenv(name);
    return value ? std::optional<std::string>(value) : std::nullopt;
  };
  auto commandLine = zkagent::gateway::parseCommandLine(
      args, environment("ZKAGENT_GATEWAY_TOKEN"), environment("ZKAGENT_GATEWAY_OPERATOR_TOKEN"));
  if (!commandLine.config) {
    (commandLine.exitCode == 0 ? std::cout : std::cerr) << commandLine.message;
    return commandLine.exitCode;
  }
  const auto& config = *commandLine.config;
  namespace logging = zkagent::logging;
  logging::setUp({"fencing-gateway",
                  config.jsonLogs ? logging::Format::Json : logging::Format::Text,
                  config.logLevel});
  for (const auto& warning : config.warnings) spdlog::warn("config: {}", warning);
  try {
    return run(config);
  } catch (const std::exception& error) {
    spdlog::critical("cannot run: {}", error.what());
    return 1;
  }
}
