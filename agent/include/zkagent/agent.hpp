// zk-agent: the per-host agent. It joins the election of every configured
// account on one ZooKeeper session, lets an account's outbound operations through only while it
// leads that account (forwarding them to the fencing-gateway with the fencing token), publishes
// a health report, stands as a candidate only while schedulable, drains on request and serves
// the admin HTTP API (status, metrics, resign, drain, ops).
//
// Embedding code runs its own operations through the gate:
//
//   boost::asio::io_context io;
//   zkagent::agent::Agent agent(io, zkagent::agent::loadConfig("agent.json"));
//   agent.start();                      // then io.run() on a few threads
//   auto outcome = agent.gate().execute("acct-1", [](const zkagent::fencing::FencingToken& t) {
//     send(t);                          // runs only while this agent leads acct-1
//   });
//   if (!outcome.executed()) log(outcome.reason());
//
// Rules live in zkagent/agent/config.hpp (the config validator) and zkagent/agent/health.hpp
// (freshness, schedulability, placement table); this class wires them to ZooKeeper and HTTP.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "zkagent/agent/config.hpp"
#include "zkagent/agent/health.hpp"
#include "zkagent/election.hpp"
#include "zkagent/fencing.hpp"

namespace boost::asio {
class io_context;
}

namespace zkagent::http {
class Router;
}

namespace zkagent::agent {

class Gate {
 public:
  enum class Result { Executed, NotLeader, Suspended, Drifted, UnknownAccount, Stopping };

  struct Outcome {
    Result result = Result::NotLeader;
    std::optional<election::ActiveInfo> leader;  // refusals: who leads, when known
    bool executed() const { return result == Result::Executed; }
    std::string_view reason() const;  // "executed", "not_leader", "suspended", ...
  };

  virtual ~Gate() = default;
  // Runs `operation` with the fencing token iff this agent leads `account` now (after the
  // lock-delay, if one applies: the call then waits that long). Thread-safe; blocks only for the
  // lock-delay and, in strict mode, one ZooKeeper round trip, so never call it on the threads
  // that run the agent's io_context (the agent's own operation route waits without a thread).
  virtual Outcome execute(std::string_view account,
                          const std::function<void(const fencing::FencingToken&)>& operation) = 0;
};

class Agent {
 public:
  // Throws std::system_error when the admin address cannot be bound.
  Agent(boost::asio::io_context& io, Config config);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  void start();
  uint16_t adminPort() const;
  // Where devices connect (presence.advertise, or ws://{presence.listen host}:{bound port}).
  const std::string& deviceEndpoint() const;

  Gate& gate();
  // Lifecycle leaving: withdraw where not leading, hand each led account to a schedulable
  // successor, report drained once nothing is led (blocked reasons in the status meanwhile).
  void drain();
  // SIGTERM: refuse new operations, resign every account, close the session, stop serving.
  // `done` runs on the io_context.
  void shutdown(std::function<void()> done);

  std::string statusJson() const;   // GET /v1/status
  std::string metricsText() const;  // GET /metrics
  // The admin API's routes, as the admin server serves them: for driving them without sockets.
  http::Router adminRouter();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace zkagent::agent
