// The agent's device endpoint and presence runtime (docs/presence-runtime.md): a WebSocket
// listener of its own where devices of the accounts this agent leads connect, the presence
// model's ConnectionTable on an Asio clock, and the lease batches to the gateway.
//
//   auto devices = std::make_shared<DeviceEndpoint>(io, config);  // binds presence.listen
//   options.deviceEndpoint = devices->endpoint();                 // ws://host:port, advertised
//   devices->start(gate, sessionId);     // accept; gate = the election's fast check
//   devices->leadershipLost("acct-1");   // release its connections, close them with 4001
//   devices->stop(done);                 // 1001 (4001 for released ones), listener and timers off
//
// One strand runs everything (listener, every connection, the table, its clock and the lease
// writer), so the model needs no locks and a device's frames are handled in order. The public
// calls are thread-safe; Beast stays inside device_endpoint.cpp.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "zkagent/agent/config.hpp"
#include "zkagent/election.hpp"

namespace zkagent::agent::detail {

class DeviceEndpoint {
 public:
  using GateCheck = std::function<election::GateDecision(std::string_view account)>;

  // Throws std::system_error when presence.listen cannot be bound.
  DeviceEndpoint(boost::asio::io_context& io, const Config& config);
  ~DeviceEndpoint();
  DeviceEndpoint(const DeviceEndpoint&) = delete;
  DeviceEndpoint& operator=(const DeviceEndpoint&) = delete;

  const std::string& endpoint() const;  // presence.advertise, or ws://{listen host}:{bound port}
  uint16_t port() const;

  // Starts accepting. `gate` answers whether this agent leads an account (and with which token);
  // it must stay callable for the life of the io_context (capture weakly).
  void start(GateCheck gate, std::function<int64_t()> sessionId);
  // The account's leadership is gone (any reason): its leases are no longer written, its devices
  // are closed with 4001 and the new leader's device endpoint once it is known.
  void leadershipLost(const std::string& account);
  // Closes every connection (1001, or 4001 for those whose account was just lost), stops the
  // listener, the lease writer and the clock; `done` runs on the io_context once every
  // connection is gone (or after a short bound).
  void stop(std::function<void()> done);
  void closeNow();  // the same without waiting, for the destructor path

  // Devices connected under this agent's leadership of `account` now (any thread).
  int64_t devices(std::string_view account) const;
  std::string metricsText() const;  // the zkagent_presence_* families

  struct Core;  // opaque; public so the endpoint's sessions can hold it

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace zkagent::agent::detail
