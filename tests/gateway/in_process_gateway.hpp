// A gateway as main() wires it (token validator, presence store, router) with its io_context on a
// thread of its own, and no sockets: tests hand the router requests, with whatever the TLS layer
// would have set, and read its answers.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <memory>
#include <thread>

#include "gateway.hpp"
#include "presence_store.hpp"
#include "zkagent/http.hpp"
#include "zkagent/metrics.hpp"

namespace zkagent::gateway::testing {

class InProcessGateway {
 public:
  // `config.dataDir` holds the token log and the presence files; `leaders` is the ZooKeeper
  // check (none: the HWM alone).
  explicit InProcessGateway(Config config, LeaderSource* leaders = nullptr)
      : config_(std::move(config)),
        validator_(fencing::ValidatorOptions{.dataDir = config_.dataDir}),
        presence_(io_, config_, registry_),
        gateway_(config_, validator_, leaders, registry_, &presence_),
        router_(gateway_.router()),
        thread_([this] { io_.run(); }) {}
  ~InProcessGateway() {
    presence_.stop();
    work_.reset();
    thread_.join();
  }
  InProcessGateway(const InProcessGateway&) = delete;
  InProcessGateway& operator=(const InProcessGateway&) = delete;

  http::Response handle(http::Request request) { return router_.handle(std::move(request)); }
  const Config& config() const { return config_; }
  fencing::TokenValidator& validator() { return validator_; }
  PresenceStore& presence() { return presence_; }

 private:
  Config config_;
  metrics::Registry registry_;
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_{
      io_.get_executor()};
  fencing::TokenValidator validator_;
  PresenceStore presence_;
  Gateway gateway_;
  http::Router router_;
  std::thread thread_;
};

}  // namespace zkagent::gateway::testing
