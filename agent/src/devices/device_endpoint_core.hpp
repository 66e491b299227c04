// The device endpoint's inside, shared by its sources (Beast is included here and in them only):
//   device_endpoint.cpp    the public DeviceEndpoint, its thread and its metrics
//   device_upgrade.cpp     the listener, the upgrade request and its refusals (404, 307, 503, or
//                          in band with redirect=close: 4001, 1013)
//   device_session.cpp     one open connection: welcome, pings and pongs, bad frames, closes
//   device_stream.cpp      the socket under a session: plain (ws://) or TLS (wss://, presence.tls);
//                          the only file that instantiates Beast's WebSocket stream
//   device_leadership.cpp  the per-account table: leadership released, 4001 closes, fencing, stop
//
// Memory per connection is kept small on purpose (tens of thousands of devices per agent): one
// websocket stream over a plain socket or an OpenSSL stream (its own timer only bounds the accept
// and close handshakes), one flat_buffer, a few words of state. Silent devices are found by the
// table's periodic check, not by a timer per connection; unfinished upgrades (TLS handshake
// included) by one reaper timer.
#pragma once

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "device_endpoint.hpp"
#include "device_query.hpp"
#include "lease_writer.hpp"
#include "zkagent/auth.hpp"
#include "zkagent/http/accept_loop.hpp"
#include "zkagent/http/tls.hpp"
#include "zkagent/naming.hpp"
#include "zkagent/presence/asio_clock.hpp"
#include "zkagent/presence/connection_table.hpp"

namespace zkagent::agent::detail {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

// Bounds of the endpoint (docs/agent.md "Limits worth knowing").
inline constexpr size_t kMaxConnections = 200000;  // sockets at once; more are closed at accept
// Unfinished upgrades. Over the soft bound the oldest is dropped if it has waited kStaleUpgrade and
// has sent nothing (an idle connect); a reconnect storm (every device of a deposed leader at once)
// is let through up to the hard bound, where the oldest is dropped anyway, even when this thread
// is too busy to read the storm's requests within kStaleUpgrade. Dropping a device's upgrade
// sends it into a longer backoff and slows the storm down.
inline constexpr size_t kMaxUpgrading = 4096;
inline constexpr size_t kMaxUpgradingBurst = 16384;
inline constexpr auto kStaleUpgrade = std::chrono::seconds(1);
// TLS handshakes (wss://). Each costs a private-key operation, milliseconds on a loaded machine.
// In a connect storm beyond what the thread can do within the devices' connect timeout, working
// through them in arrival order only serves connections whose devices have given up: the listen
// backlog (4096) fills with connections whose device has closed (CLOSE-WAIT), each gets a full
// server handshake, and live devices wait behind them until they give up too (issue 24: 3000
// devices on a loaded machine, none connected for minutes). So: a connection whose device has
// already closed its side gets no TLS work (`tls_gone`); at most kMaxTlsHandshakes run at once,
// the others wait in line and the newest goes first (it has the most of its timeout left), and
// one that waited kTlsQueueWait is closed unworked (`tls_busy`). A handshake holds its place at
// most kTlsSlotHold, so clients that stall mid-handshake cannot block the line.
inline constexpr size_t kMaxTlsHandshakes = 32;
inline constexpr auto kTlsSlotHold = std::chrono::milliseconds(1000);
inline constexpr auto kTlsQueueWait = std::chrono::milliseconds(2500);
inline constexpr auto kTlsQueueTick = std::chrono::milliseconds(100);  // re-check while waiting
inline constexpr size_t kHeaderLimit = 8 * 1024;  // upgrade request header bytes
inline constexpr size_t kMaxFrameBytes = 4096;    // one device frame; over it the stream sends 1009
inline constexpr size_t kMaxQueuedPongs = 64;     // a device that pings without reading is cut off
// Pings per connection: kPingBurst at once, then kMaxPingsPerSecond sustained; a device over it is
// closed with 1008. A device heartbeats every few seconds at most; a flood costs one check each.
inline constexpr int kMaxPingsPerSecond = 20;
inline constexpr int kPingBurst = 40;
inline constexpr int kRetryAfterSeconds = 1;                         // a 503's Retry-After
inline constexpr auto kUpgradeTimeout = std::chrono::seconds(5);     // request read + refusal write
inline constexpr auto kHandshakeTimeout = std::chrono::seconds(5);   // websocket accept and close
inline constexpr auto kStopGrace = std::chrono::milliseconds(1000);  // close handshakes at shutdown
inline constexpr auto kLeaderLookup =
    std::chrono::milliseconds(50);  // new leader's endpoint, polled
inline constexpr int kLeaderLookups = 10;

enum CloseCode : uint16_t {
  kNormal = 1000,
  kGoingAway = 1001,
  kBadFrame = 1003,
  kPolicy = 1008,
  kTooBig = 1009,
  kTryAgainLater = 1013,  // in-band redirect with no leader known
  kLeaderMoved = 4001,
  kPingTimeout = 4002,
  kTokenExpired = 4003,  // the device's token expired: reconnect with a fresh one
};

// An upgrade answered with an HTTP error or redirect instead of the handshake.
struct Refusal {
  bhttp::status status;
  std::string reason;  // metric label
  std::string error;   // the body's "error"
  std::string location;
};

struct DeviceEndpoint::Counts {
  explicit Counts(const Config& config) {
    for (const auto& account : config.accounts) deviceCounts.try_emplace(account, 0);
  }
  metrics::Registry registry;  // owned here: sessions may outlive the agent's own registry
  PresenceMetrics m{registry};
  // Fixed key set (the configured accounts): written on the endpoint's thread, read by
  // /v1/status.
  std::map<std::string, std::atomic<int64_t>, std::less<>> deviceCounts;
};

class Session;

struct DeviceEndpoint::Core : std::enable_shared_from_this<Core> {
  Core(asio::io_context& agentIo, asio::io_context& own, const Config& config,
       std::shared_ptr<Counts> counts);

  void admit(tcp::socket socket);  // one socket from the listener
  // A session over `socket`: plain, or TLS when presence.tls is set (device_stream.cpp).
  std::shared_ptr<Session> makeSession(tcp::socket socket);
  void reap();
  // A TLS connection's ClientHello arrived: its handshake starts when a place is free.
  void queueTlsHandshake(std::shared_ptr<Session> session);
  void tlsHandshakeDone(uint64_t upgradeId);
  // Starts waiting handshakes while places are free; sheds those that waited too long.
  void startTlsHandshakes();
  void expireTokens();  // 4003 for every connection whose token is no longer valid
  void leadershipLost(const std::string& account);
  void closeMoved(std::string account, std::vector<std::weak_ptr<Session>> sessions, int attempt);
  void closeMovingNow();
  void onTimeout(presence::Epoch epoch);
  void onFenced(const std::string& account, uint64_t token);
  void stop(std::function<void()> done);
  void stopped();
  std::optional<std::string> leaderElsewhere(const election::GateDecision& decision) const;
  void countDevices(const std::string& account, int64_t delta);
  void countState(std::string_view state, double delta) {
    if (!state.empty()) m.connections.with({state}).inc(delta);
  }

  asio::io_context& io;       // the agent's: stop()'s `done` runs there
  PresenceExecutor executor;  // the endpoint's own io_context, one thread
  const std::string instanceId;
  const Config::Presence settings;
  std::shared_ptr<Counts> counts;
  PresenceMetrics& m;
  std::shared_ptr<http::AcceptLoop> listener;
  std::optional<asio::ssl::context> tls;  // presence.tls: devices connect with wss://
  std::string advertised;
  uint16_t port = 0;
  presence::AsioClock clock;
  GateCheck gate;
  DeviceEndpoint::AdmitCheck admitGate;
  std::function<int64_t()> sessionId;
  std::shared_ptr<GatewayLeaseWriter> writer;
  std::unique_ptr<presence::ConnectionTable> table;
  asio::steady_timer reaper, stopTimer, tlsTimer;
  bool tlsTimerArmed = false;
  // TLS handshakes in progress (upgrade id -> when it began), and those waiting for a place.
  std::map<uint64_t, SteadyClock::time_point> tlsHandshaking;
  std::deque<std::pair<SteadyClock::time_point, std::shared_ptr<Session>>> tlsWaiting;
  bool stopping = false;
  bool handedOver = false;  // a stopping agent's accounts are with their successors
  std::function<void()> stopDone;

  std::unordered_set<Session*> sessions;           // every live session
  std::unordered_map<uint64_t, Session*> inTable;  // by Epoch::connection
  // Upgrades waiting for the gate, by upgrade id: owned here, on this thread, so that the agent's
  // io (which answers the gate) never holds a Session of this io_context.
  std::unordered_map<uint64_t, std::shared_ptr<Session>> awaitingGate;
  std::map<uint64_t, std::pair<SteadyClock::time_point, std::weak_ptr<Session>>> upgrading;
  uint64_t nextUpgrade = 0;
  std::unordered_map<std::string, uint64_t> fenced;  // account -> token the gateway refused
  // presence.auth: devices' tokens are checked at the upgrade (401/403) and their connections
  // closed with 4003 once the token lapses. Absent: no token is asked for (loopback only, or
  // presence.insecure_no_device_auth).
  std::optional<auth::Verifier> verifier;
  // Open connections by the first unix second their token is refused (exp + leeway + 1); the
  // reaper's one-second tick closes them. One node per authenticated connection, none per ping.
  std::multimap<int64_t, Session*> expiries;
};

// One device connection. Lives while an operation of it is pending; every handler runs on the
// endpoint's thread. The upgrade half is in device_upgrade.cpp, the open connection in
// device_session.cpp; the socket under it (plain or TLS) is a subclass's (device_stream.cpp),
// reached through the few I/O calls below, each of which calls back one of the on* handlers.
class Session : public std::enable_shared_from_this<Session> {
 public:
  enum class State : uint8_t { Upgrading, Open, Moving, Closing, Done };

  explicit Session(std::shared_ptr<DeviceEndpoint::Core> core);
  // Only reached without a final handler when the io_context is torn down: nothing more is
  // written then, the bookkeeping is only kept consistent.
  virtual ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void start(uint64_t upgradeId);
  // Closes the socket under any pending operation (an upgrade that took too long, shutdown).
  virtual void abort() = 0;
  // Sends a close frame with `code` (once; later calls are ignored) after any write in progress.
  void closeWith(uint16_t code, std::string reason);
  // The table forgot this connection (leadership lost): still answer pings until it is closed.
  void released();
  // The table timed this connection out (its lease removal is already sent).
  void timedOut();
  // Its token is no longer valid: close 4003 (once).
  void tokenExpired();
  // An upgrade that has sent nothing yet: its request not read and no byte waiting in its socket.
  // Only such a connection is an idle connect; one whose bytes wait for this (busy) thread is a
  // device in a reconnect storm.
  bool idle() const { return !requestRead_ && bytesWaiting() == 0; }
  State state() const { return state_; }
  // Still upgrading and its socket open (not cut off by the reaper or a stop meanwhile).
  bool upgradePending() const { return state_ == State::Upgrading && socketOpen(); }
  uint64_t upgradeId() const { return upgradeId_; }
  // Its place in line came (Core::startTlsHandshakes): the TLS handshake, then the request.
  void beginTlsHandshake() { tlsHandshake(); }
  // Waited too long for a place: closed without a handshake.
  void shed();
  const presence::DeviceKey& key() const { return key_; }
  uint64_t token() const { return epoch_.leaderToken; }

 protected:
  // The stream's part. Each completes on the endpoint's thread with the handler named.
  virtual bool tls() const = 0;
  virtual void awaitBytes() = 0;    // TLS: until the socket is readable (a ClientHello): onBytes
  virtual void tlsHandshake() = 0;  // TLS: the server handshake: onTlsHandshake
  virtual void readRequest() = 0;   // the upgrade request: onRequest
  virtual void writeRefusal() = 0;  // *refusal_, then the socket is closed: onRefusalWritten
  virtual void acceptSocket() = 0;  // the WebSocket handshake for *parser_: onHandshake
  virtual void readFrame() = 0;     // one message into buffer_: onRead (gotText() tells its kind)
  virtual void writeFrame() = 0;    // out_ as a text frame: onWritten
  virtual void writeClose(const websocket::close_reason& reason) = 0;  // onCloseWritten
  virtual bool socketOpen() const = 0;
  virtual size_t bytesWaiting() const = 0;  // unread bytes in the TCP socket
  virtual bool peerClosed() = 0;            // the device shut its side (FIN or reset) already
  virtual bool gotText() const = 0;
  virtual void setNoDelay() = 0;

  void onBytes(beast::error_code ec);
  void onTlsHandshake(beast::error_code ec);  // on failure nothing is written back (no HTTP)
  void onRequest(beast::error_code ec);
  void onRefusalWritten();
  void onHandshake(beast::error_code ec);
  void onRead(beast::error_code ec);
  void onWritten(beast::error_code ec);
  void onCloseWritten();

  beast::flat_buffer buffer_{kHeaderLimit + 1024};
  std::optional<bhttp::request_parser<bhttp::empty_body>> parser_;  // while upgrading
  std::optional<bhttp::response<bhttp::string_body>> refusal_;      // while refusing
  std::string out_;                                                 // the frame being written

 private:
  static std::string_view stateName(State state);
  void setState(State next);

  void finishUpgrade();
  // Removes the lease at once (the device is gone or misbehaved) when it is still in the table.
  void leaveTable();

  bool fencedUnder(int64_t token) const;
  // One more ping within the rate limit (GCRA: one time point per connection, no queue).
  bool pingWithinRate(SteadyClock::time_point now);
  // With presence.auth: the refusal (401 bad token, 403 another account's or device's) of the
  // request's token, from `Authorization: Bearer` or else the `token` query parameter; on success
  // the token's validity is kept for the expiry check.
  std::optional<Refusal> authenticate(std::string_view authorization,
                                      const std::optional<std::string>& queryToken);
  void forgetExpiry();
  void refuse(Refusal refusal);
  // The gate's answer for this request: upgrade, redirect (307, or in band) or 503.
  void onGate(const election::GateDecision& decision, std::string_view target, bool inBand);
  void upgrade(uint64_t token);
  void redirectInBand(uint16_t code, std::string reason);
  void onAccepted(beast::error_code ec, uint64_t token);

  void readLoop();
  void badFrame(const std::string& why);
  // The one writer: the welcome, then pongs in order, or the close frame; never two at once.
  void pump();

  std::shared_ptr<DeviceEndpoint::Core> core_;
  std::vector<uint64_t> pongs_;
  std::string closeReason_;
  presence::DeviceKey key_;
  presence::Epoch epoch_;
  uint64_t upgradeId_ = 0;
  uint64_t acceptToken_ = 0;                // the handshake in progress admits under this token, or
  uint16_t inBandCode_ = 0;                 // closes at once with this code (an in-band redirect)
  int64_t refusedFrom_ = 0;                 // with a token: the first unix second it is refused
  SteadyClock::time_point pingsDueFrom_{};  // the rate limit's theoretical arrival time
  std::optional<std::multimap<int64_t, Session*>::iterator> expiry_;  // in core_->expiries
  uint16_t closeCode_ = kNormal;
  State state_ = State::Upgrading;
  bool inTable_ = false, writing_ = false, welcomePending_ = false, closeSent_ = false;
  bool requestRead_ = false;
};

}  // namespace zkagent::agent::detail
