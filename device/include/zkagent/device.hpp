// device: the client a device application embeds to stay present at the agent that leads its
// account (wire protocol: docs/presence-runtime.md; usage and the zk-device tool: docs/device.md).
//
//   boost::asio::io_context io;
//   zkagent::device::DeviceClient device(io, {.endpoints = {"ws://10.0.0.1:8471",
//                                                          "ws://10.0.0.2:8471"},
//                                            .account = "acme", .device = "phone-1"});
//   device.onConnected([](const ConnectedInfo& c) { ... c.agent, c.token, c.counter ... });
//   device.onDisconnected([](std::string_view reason) { ... "leader_moved", "agent_silent" ... });
//   device.start();
//   io.run();                       // one thread; every callback runs on it
//   ...
//   device.stop([&] { io.stop(); });  // close 1000, then the callback
//
// What the client does, so the application does not have to:
// - Connects to `endpoints` in order and upgrades `GET /v1/devices?account=A&device=D`. A 307
//   (this agent does not lead A) is followed to its `Location` at once, at most `maxRedirects`
//   times per endpoint; any other refusal (503 no leader yet, 404, ...) or a failed connect moves
//   on to the next endpoint. When every endpoint of a round failed, it waits a backoff delay and
//   starts a new round.
// - After the agent's `welcome` frame it is connected (onConnected), and sends a `ping` every
//   `heartbeat` x U[1 - heartbeatJitter, 1]; the pong's round trip is measured by `seq`.
// - It treats the agent as gone when no frame at all came from it for `timeout`: it closes,
//   reports "agent_silent" and reconnects. An agent's close is reported by its meaning
//   ("leader_moved" for 4001, whose reason endpoint is then tried first; "ping_timeout" for 4002;
//   "closed_by_agent:<code>" otherwise) and is followed by a reconnect as well.
// - With a `tokenProvider`, every upgrade carries `Authorization: Bearer <token>`; a 401
//   ("unauthorized: <reason>") or a 4003 close ("token_expired") makes the next call ask for a
//   fresh token.
// - Every reconnect waits first: full jitter, U[0, min(backoffMax, backoffInitial x 2^attempt)],
//   also before the first retry, so that the devices of a dead agent spread their reconnects
//   over the window instead of arriving in the same millisecond. `attempt` counts failed rounds
//   and returns to 0 once a connection is made. The jitter is seeded from CRC32 of
//   "account/device" and `seed`, so runs are reproducible and devices differ.
//
// Threading and size: the client lives on the caller's io_context, which one thread runs; make
// every call on that thread (or before it runs). A client holds one socket, one read buffer and
// one timer of its own, no thread, so that one process can hold tens of thousands of them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace zkagent::device {

using Millis = std::chrono::milliseconds;
using Micros = std::chrono::microseconds;

struct DeviceOptions {
  // Agents' device endpoints, "ws://host:port" or "wss://host:port" (a "/" may end it).
  std::vector<std::string> endpoints;
  std::string account;  // both ids: [A-Za-z0-9_.-]{1,128}, not "." or ".."
  std::string device;
  Millis heartbeat{30000};       // ping interval before jitter; 0 sends no pings
  double heartbeatJitter = 0.1;  // each interval is heartbeat x U[1 - jitter, 1]
  Millis timeout{75000};         // the agent is gone after this without a frame; 0: never.
                                 // Must exceed 2 x heartbeat; must be 0 when heartbeat is
                                 // 0, as the agent only sends frames in answer to pings.
  Millis backoffInitial{200};    // reconnect window of the first retry
  Millis backoffMax{30000};      // cap of the window
  Millis connectTimeout{5000};   // TCP connect + upgrade + welcome; also bounds a close
  unsigned maxRedirects = 3;     // redirects followed per endpoint before giving up on it
  // Asks for in-band redirects (`redirect=close`): an agent that does not lead the account
  // completes the upgrade and closes at once with 4001 naming the leader's URL, which is followed
  // at once like a 307 (what browsers need; docs/device-protocol.md "Redirects").
  bool redirectInBand = false;
  std::string localAddress;  // bind this local IP before connecting; empty: any
  std::uint64_t seed = 0;    // mixed into the jitter seed
  // The device's token (docs/auth.md), sent as `Authorization: Bearer <token>` on every upgrade;
  // empty: none (an agent on loopback without presence.auth). Called before every connect
  // (redirects included) with `refresh` true when the agent refused the last token (401) or
  // closed its connection because it expired (4003): a cached token must not be handed back
  // then. An exception from it fails the attempt ("token_unavailable: <what>").
  std::function<std::string(bool refresh)> tokenProvider;
  // PEM file of the CA that agents' certificates chain to; required for wss:// (endpoints, and
  // redirects to wss:// URLs, which fail with "tls_failed: no caFile" without it). The agent's
  // certificate must also name the host dialled (DNS name or IP address), or the attempt fails
  // with "tls_failed: <reason>" before anything is sent.
  std::string caFile;
};

// Empty when `options` is valid; else "<field>: <problem>" for the first bad field, e.g.
// "endpoints[1]: must be ws://host:port".
std::string validate(const DeviceOptions& options);

// The reconnect delay policy: delay(attempt) = U[0, min(max, initial x 2^attempt)], from a small
// generator seeded as described above. The client owns one; it is public to be read and tested.
class ReconnectBackoff {
 public:
  ReconnectBackoff(Millis initial, Millis max, std::uint64_t seed);
  // The delay before the next round; the attempt counts up (the window stops growing at max).
  Millis next();
  // After a successful connection: the next delay is drawn from [0, initial] again.
  void reset() { attempt_ = 0; }
  unsigned attempt() const { return attempt_; }
  // The upper end of the window for `attempt`.
  Millis window(unsigned attempt) const;

 private:
  Millis initial_;
  Millis max_;
  std::uint64_t state_;
  unsigned attempt_ = 0;
};

// The jitter seed of a device: CRC32 of "account/device" in the high half, xor `seed`.
std::uint64_t jitterSeed(std::string_view account, std::string_view device, std::uint64_t seed);

// What the agent's welcome frame said: the connection's epoch and the agent's own settings.
struct ConnectedInfo {
  std::string agent;          // the agent's instance id
  std::uint64_t token = 0;    // the leader's fencing token
  std::uint64_t counter = 0;  // the agent's connection counter
  std::string endpoint;       // ws://host:port actually connected to (after redirects)
  Millis agentHeartbeat{0};   // the agent's heartbeat_ms and timeout_ms, 0 when absent
  Millis agentTimeout{0};
};

struct DeviceStats {
  std::uint64_t connects = 0;     // welcomes received
  std::uint64_t disconnects = 0;  // onDisconnected calls (failed attempts included)
  std::uint64_t redirects = 0;
  std::uint64_t heartbeatsSent = 0;
  std::uint64_t heartbeatsAnswered = 0;  // pongs received
  Micros lastRtt{0};                     // round trip of the latest answered ping
};

class DeviceClient {
 public:
  // Throws std::invalid_argument with validate()'s message when `options` are not valid.
  DeviceClient(boost::asio::io_context& io, DeviceOptions options);
  // Drops the connection without a close frame; callbacks are not called any more.
  ~DeviceClient();
  DeviceClient(const DeviceClient&) = delete;
  DeviceClient& operator=(const DeviceClient&) = delete;

  // Set callbacks before start().
  void onConnected(std::function<void(const ConnectedInfo&)> callback);
  // The URL of a followed 307, with its path and query.
  void onRedirected(std::function<void(std::string_view url)> callback);
  // After a connection ended or an attempt failed, e.g. "leader_moved", "ping_timeout",
  // "agent_silent", "closed_by_agent:1001", "connection_lost: End of file",
  // "connect_failed: Connection refused", "connect_timeout", "welcome_timeout",
  // "upgrade_refused:503", "too_many_redirects", "bad_frame: ...", "token_expired" (4003),
  // "unauthorized: <agent's reason>" (401: the token; a fresh one is asked for next),
  // "forbidden: <agent's reason>" (403: the token is another account's or device's). Not called
  // for stop().
  void onDisconnected(std::function<void(std::string_view reason)> callback);
  // Every answered ping whose round trip is known (the pong of the latest ping).
  void onHeartbeatAnswered(std::function<void(Micros rtt)> callback);

  // Starts connecting after `delay` (spreads the start of many devices).
  void start(Millis delay = Millis{0});
  // Sends close 1000 when connected and waits for the agent's close (at most connectTimeout),
  // or stops waiting/connecting; then calls `done` (always asynchronously). Idempotent.
  void stop(std::function<void()> done = {});

  bool connected() const;
  const DeviceStats& stats() const;
  const DeviceOptions& options() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace zkagent::device
