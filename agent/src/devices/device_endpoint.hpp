// The agent's device endpoint and presence runtime (docs/presence-runtime.md): a WebSocket
// listener of its own where devices of the accounts this agent leads connect, the presence
// model's ConnectionTable on an Asio clock, and the lease batches to the gateway.
//
//   auto devices = std::make_shared<DeviceEndpoint>(io, config);  // binds presence.listen
//   options.deviceEndpoint = devices->endpoint();                 // ws://host:port, advertised
//   devices->start(gate, sessionId);     // accept; gate = the election's fast check
//   devices->leadershipLost("acct-1");   // release its connections, close them with 4001
//   devices->stop(done);                 // 1001 (4001 for released ones), listener and timers off
//   devices->halt();                     // after stop/closeNow: its thread is joined
//
// The endpoint runs on an io_context of its own with one dedicated thread: the listener, every
// connection, the table, its clock and the lease writer's completions. So the model needs no
// locks, a device's frames are handled in order, and no completion hops between threads (which
// cost more than the heartbeats themselves on the agent's shared pool). The public calls are
// thread-safe; Beast stays inside the endpoint's sources (device_endpoint_core.hpp).
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "operations/shard_routes.hpp"
#include "zkagent/agent/config.hpp"
#include "zkagent/election.hpp"

namespace zkagent::agent::detail {

class DeviceEndpoint {
 public:
  using GateCheck = std::function<election::GateDecision(std::string_view account)>;
  // The operations' gate, asynchronous (lock delay, strict mode): `decided` runs once, on any
  // thread.
  using AdmitCheck =
      std::function<void(std::string account, std::function<void(election::GateDecision)> decided)>;

  // Throws std::system_error when presence.listen cannot be bound. `io` is the agent's: stop()'s
  // `done` runs there; the endpoint's own work runs on its own thread. `routes`: where each
  // account's lease writes go (a gateway cluster's shard owners).
  DeviceEndpoint(boost::asio::io_context& io, const Config& config,
                 std::shared_ptr<ShardRoutes> routes);
  ~DeviceEndpoint();  // closeNow() and halt()
  DeviceEndpoint(const DeviceEndpoint&) = delete;
  DeviceEndpoint& operator=(const DeviceEndpoint&) = delete;

  const std::string& endpoint() const;  // presence.advertise, or ws://{listen host}:{bound port}
  uint16_t port() const;

  // Starts accepting. A device is admitted by `admit`, the gate operations pass (lock delay and
  // strict mode included); `gate` is that gate's in-memory state, asked where nothing may wait
  // (a handshake that just finished, each lease entry). Both must stay callable for the life of
  // the io_context (capture weakly).
  void start(GateCheck gate, AdmitCheck admit, std::function<int64_t()> sessionId);
  // The account's leadership is gone (any reason): its leases are no longer written, its devices
  // are closed with 4001 and the new leader's device endpoint once it is known.
  void leadershipLost(const std::string& account);
  // The accounts this agent lost are with their successors now (a stopping agent's hand-over is
  // done; it will not hear who leads them): their devices still waiting to learn the new leader
  // are closed with 4001 at once, naming it when known, so they reconnect without the wait.
  void successorsTookOver();
  // Closes every connection (1001, or 4001 for those whose account was just lost), stops the
  // listener, the lease writer and the clock; `done` runs on the io_context once every
  // connection is gone (or after a short bound).
  void stop(std::function<void()> done);
  void closeNow();  // the same without waiting, for the destructor path
  // Ends the endpoint's thread and frees its sockets, timers and the lease writer's client (its
  // requests in flight are waited for); later calls are ignored. Must not run on the endpoint's
  // own thread (nor from `gate`): the owner calls it before the last reference to whatever `gate`
  // captures can be dropped there.
  void halt();

  // Devices connected under this agent's leadership of `account` now (any thread, even after
  // halt()).
  int64_t devices(std::string_view account) const;
  std::string metricsText() const;  // the zkagent_presence_* families

  struct Core;    // opaque; public so the endpoint's sessions can hold it
  struct Counts;  // metrics and device counts: outlive the Core for status and /metrics

 private:
  template <class F>
  void post(F&& f);  // onto the endpoint's thread, unless halted

  std::shared_ptr<Counts> counts_;
  std::unique_ptr<boost::asio::io_context> own_;  // before core_: its I/O objects live in it
  std::shared_ptr<Core> core_;
  boost::asio::io_context& agentIo_;
  const std::string advertised_;
  const uint16_t port_;
  std::thread thread_;
  std::mutex mutex_;  // post() against halt()
  bool halted_ = false;
};

}  // namespace zkagent::agent::detail
