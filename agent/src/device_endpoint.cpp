// The device endpoint: Beast WebSocket sessions over the presence model's ConnectionTable. The
// only translation unit of the agent that includes Beast.
//
// Memory per connection is kept small on purpose (tens of thousands of devices per agent): one
// websocket stream over a plain socket (its own timer only bounds the accept and close
// handshakes), one flat_buffer, a few words of state. Silent devices are found by the table's
// periodic check, not by a timer per connection; unfinished upgrades by one reaper timer.
#include "device_endpoint.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <charconv>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include "device_frames.hpp"
#include "lease_writer.hpp"
#include "presence_config.hpp"
#include "zkagent/presence/asio_clock.hpp"
#include "zkagent/presence/connection_table.hpp"

namespace zkagent::agent::detail {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

namespace {
// Bounds of the endpoint (docs/agent.md "Limits worth knowing").
constexpr size_t kMaxConnections = 200000;  // sockets at once; more are closed at accept
// Unfinished upgrades. Over the soft bound the oldest is dropped if it has waited kStaleUpgrade (an
// idle connect); a reconnect storm (every device of a deposed leader within a few hundred ms) is
// younger than that and is let through up to the hard bound, where the oldest is dropped anyway.
// Dropping young upgrades sends their devices into longer backoff and slows the storm down.
constexpr size_t kMaxUpgrading = 4096;
constexpr size_t kMaxUpgradingBurst = 16384;
constexpr auto kStaleUpgrade = std::chrono::seconds(1);
constexpr size_t kHeaderLimit = 8 * 1024;  // upgrade request header bytes
constexpr size_t kMaxFrameBytes = 4096;    // one device frame; over it the stream sends 1009
constexpr size_t kMaxQueuedPongs = 64;     // a device that pings without reading is cut off
constexpr auto kUpgradeTimeout = std::chrono::seconds(5);      // request read + refusal write
constexpr auto kHandshakeTimeout = std::chrono::seconds(5);    // websocket accept and close
constexpr auto kStopGrace = std::chrono::milliseconds(1000);   // close handshakes at shutdown
constexpr auto kLeaderLookup = std::chrono::milliseconds(50);  // new leader's endpoint, polled
constexpr int kLeaderLookups = 10;

enum CloseCode : uint16_t {
  kNormal = 1000,
  kGoingAway = 1001,
  kBadFrame = 1003,
  kPolicy = 1008,
  kTooBig = 1009,
  kLeaderMoved = 4001,
  kPingTimeout = 4002,
};

std::string percentDecode(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%' && i + 2 < in.size() && hex(in[i + 1]) >= 0 && hex(in[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(in[i + 1]) * 16 + hex(in[i + 2])));
      i += 2;
    } else {
      out.push_back(in[i] == '+' ? ' ' : in[i]);
    }
  }
  return out;
}

struct Refusal {
  bhttp::status status;
  std::string reason;  // metric label
  std::string error;   // the body's "error"
  std::string location;
};

// The two ids of /v1/devices?account=A&device=D, or the 400 naming the parameter.
std::variant<presence::DeviceKey, Refusal> parseIds(std::string_view query) {
  std::optional<std::string> values[2];
  constexpr std::string_view names[2] = {"account", "device"};
  while (!query.empty()) {
    const auto amp = query.find('&');
    const auto part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    const auto eq = part.find('=');
    const auto key = percentDecode(part.substr(0, eq));
    for (int i = 0; i < 2; ++i) {
      if (key != names[i]) continue;
      if (values[i]) {
        return Refusal{bhttp::status::bad_request, "bad_request",
                       std::string(names[i]) + ": given twice", ""};
      }
      values[i] = eq == std::string_view::npos ? "" : percentDecode(part.substr(eq + 1));
    }
  }
  for (int i = 0; i < 2; ++i) {
    if (!values[i]) {
      return Refusal{bhttp::status::bad_request, "bad_request", std::string(names[i]) + ": missing",
                     ""};
    }
    if (election::accountIdError(*values[i])) {
      return Refusal{bhttp::status::bad_request, "bad_request",
                     std::string(names[i]) + ": must match [A-Za-z0-9_.-]{1,128}, not '.' or '..'",
                     ""};
    }
  }
  return presence::DeviceKey{std::move(*values[0]), std::move(*values[1])};
}

}  // namespace

PresenceMetrics::PresenceMetrics(metrics::Registry& r)
    : connections(r.gauge("zkagent_presence_device_connections",
                          "Device WebSocket connections by state.", {"state"})),
      heartbeats(r.counter("zkagent_presence_heartbeats_total",
                           "Device heartbeats (pings) answered with a pong.")
                     .with({})),
      pingTimeouts(r.counter("zkagent_presence_ping_timeouts_total",
                             "Device connections closed (4002) after ping_timeout_ms of silence.")
                       .with({})),
      redirects(r.counter("zkagent_presence_redirects_total",
                          "Upgrades sent elsewhere: 307 to the leader, 503 when none is known.",
                          {"code"})),
      refused(r.counter("zkagent_presence_refused_upgrades_total",
                        "Device upgrades refused before the handshake, by reason.", {"reason"})),
      closes(r.counter("zkagent_presence_closes_total",
                       "Close frames the agent sent to devices, by close code.", {"code"})),
      leaderMovedCloses(r.counter("zkagent_presence_leader_moved_closes_total",
                                  "Device connections closed with 4001 (leader moved).")
                            .with({})),
      leaseBatches(r.counter("zkagent_presence_lease_batches_total",
                             "POST /v1/presence/leases requests, by result.", {"result"})),
      leaseEntries(r.counter("zkagent_presence_lease_entries_total",
                             "Lease entries by kind (renew, remove) and result (sent, failed, "
                             "dropped: this agent did not lead the account under that token).",
                             {"kind", "result"})),
      fencedAccounts(r.counter("zkagent_presence_fenced_total",
                               "Accounts whose lease writes the gateway fenced (a newer leader).")
                         .with({})) {}

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

  void accept();
  void reap();
  void leadershipLost(const std::string& account);
  void closeMoved(std::string account, std::vector<std::weak_ptr<Session>> sessions, int attempt);
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
  tcp::acceptor acceptor;
  std::string advertised;
  uint16_t port = 0;
  presence::AsioClock clock;
  GateCheck gate;
  std::function<int64_t()> sessionId;
  std::shared_ptr<GatewayLeaseWriter> writer;
  std::unique_ptr<presence::ConnectionTable> table;
  asio::steady_timer reaper, acceptRetry, stopTimer;
  bool stopping = false;
  std::function<void()> stopDone;

  std::unordered_set<Session*> sessions;           // every live session
  std::unordered_map<uint64_t, Session*> inTable;  // by Epoch::connection
  std::map<uint64_t, std::pair<SteadyClock::time_point, std::weak_ptr<Session>>> upgrading;
  uint64_t nextUpgrade = 0;
  std::unordered_map<std::string, uint64_t> fenced;  // account -> token the gateway refused
};

// One device connection. Lives while an operation of it is pending; every handler runs on the
// endpoint's thread.
class Session : public std::enable_shared_from_this<Session> {
 public:
  enum class State : uint8_t { Upgrading, Open, Moving, Closing, Done };

  Session(std::shared_ptr<DeviceEndpoint::Core> core, tcp::socket socket)
      : core_(std::move(core)), ws_(std::move(socket)) {
    core_->sessions.insert(this);
    core_->countState(stateName(state_), 1);
  }
  // Only reached without a final handler when the io_context is torn down: nothing more is
  // written then, the bookkeeping is only kept consistent.
  ~Session() {
    if (inTable_) {
      core_->inTable.erase(epoch_.connection);
      core_->countDevices(key_.user, -1);
    }
    setState(State::Done);
    core_->sessions.erase(this);
    if (core_->stopping && core_->sessions.empty()) core_->stopped();
  }

  void start(uint64_t upgradeId) {
    upgradeId_ = upgradeId;
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(0);
    bhttp::async_read(
        ws_.next_layer(), buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->onRequest(ec); });
  }

  // Closes the socket under any pending operation (an upgrade that took too long, shutdown).
  void abort() {
    beast::error_code ignored;
    ws_.next_layer().shutdown(tcp::socket::shutdown_both, ignored);
    ws_.next_layer().close(ignored);
  }

  // Sends a close frame with `code` (once; later calls are ignored) after any write in progress.
  void closeWith(uint16_t code, std::string reason) {
    if (state_ == State::Upgrading) return abort();
    if (state_ == State::Closing || state_ == State::Done) return;
    leaveTable();
    setState(State::Closing);
    pongs_.clear();
    welcomePending_ = false;
    closeCode_ = code;
    closeReason_ = std::move(reason);
    core_->m.closes.with({std::to_string(code)}).inc();
    pump();
  }

  // The table forgot this connection (leadership lost): still answer pings until it is closed.
  void released() {
    core_->inTable.erase(epoch_.connection);
    if (inTable_) core_->countDevices(key_.user, -1);
    inTable_ = false;
    if (state_ == State::Open) setState(State::Moving);
  }
  // The table timed this connection out (its lease removal is already sent).
  void timedOut() {
    released();
    core_->m.pingTimeouts.inc();
    closeWith(kPingTimeout, "ping timeout");
  }
  State state() const { return state_; }
  const presence::DeviceKey& key() const { return key_; }
  uint64_t token() const { return epoch_.leaderToken; }

 private:
  static std::string_view stateName(State state) {
    switch (state) {
      case State::Upgrading:
        return "upgrading";
      case State::Open:
        return "open";
      case State::Moving:
        return "moving";
      case State::Closing:
        return "closing";
      case State::Done:
        return "";
    }
    return "";
  }
  void setState(State next) {
    if (next == state_) return;
    core_->countState(stateName(state_), -1);
    core_->countState(stateName(next), 1);
    state_ = next;
  }

  void finishUpgrade() {
    core_->upgrading.erase(upgradeId_);
    parser_.reset();
    refusal_.reset();
  }

  // Removes the lease at once (the device is gone or misbehaved) when it is still in the table.
  void leaveTable() {
    if (!inTable_) return;
    core_->inTable.erase(epoch_.connection);
    core_->countDevices(key_.user, -1);
    inTable_ = false;
    if (core_->table) core_->table->close(epoch_);
  }

  void onRequest(beast::error_code ec) {
    if (ec == bhttp::error::end_of_stream || ec == asio::error::eof ||
        ec == asio::error::operation_aborted || ec == asio::error::connection_reset) {
      return finishUpgrade();
    }
    if (ec) {
      return refuse(
          Refusal{bhttp::status::bad_request, "bad_request", "request: " + ec.message(), ""});
    }
    const auto& request = parser_->get();
    const std::string_view target(request.target().data(), request.target().size());
    const auto question = target.find('?');
    if (target.substr(0, question) != "/v1/devices") {
      return refuse(Refusal{bhttp::status::not_found, "not_found",
                            "not found: devices connect to /v1/devices", ""});
    }
    auto ids = parseIds(question == std::string_view::npos ? std::string_view{}
                                                           : target.substr(question + 1));
    if (auto* refusal = std::get_if<Refusal>(&ids)) return refuse(std::move(*refusal));
    key_ = std::move(std::get<presence::DeviceKey>(ids));
    if (!core_->counts->deviceCounts.contains(key_.user)) {
      return refuse(Refusal{bhttp::status::not_found, "unknown_account",
                            "account: '" + key_.user + "' is not served by this agent", ""});
    }
    if (!websocket::is_upgrade(request)) {
      return refuse(
          Refusal{bhttp::status::upgrade_required, "not_upgrade", "not a WebSocket upgrade", ""});
    }
    const auto decision = core_->gate(key_.user);
    if (!core_->stopping && decision.allowed() && !fencedUnder(decision.token)) {
      return upgrade(static_cast<uint64_t>(decision.token));
    }
    if (!core_->stopping) {
      if (auto leader = core_->leaderElsewhere(decision)) {
        return refuse(Refusal{bhttp::status::temporary_redirect, "307",
                              "not_leader: account '" + key_.user + "' is led by another agent",
                              *leader + std::string(target)});
      }
    }
    refuse(Refusal{bhttp::status::service_unavailable, "503",
                   "no_leader: no leader known for account '" + key_.user + "', retry", ""});
  }

  bool fencedUnder(int64_t token) const {
    auto it = core_->fenced.find(key_.user);
    return it != core_->fenced.end() && static_cast<int64_t>(it->second) == token;
  }

  void refuse(Refusal refusal) {
    if (refusal.reason == "307" || refusal.reason == "503") {
      core_->m.redirects.with({refusal.reason}).inc();
    } else {
      core_->m.refused.with({refusal.reason}).inc();
    }
    refusal_.emplace(refusal.status, 11);
    refusal_->set(bhttp::field::content_type, "application/json");
    if (!refusal.location.empty()) refusal_->set(bhttp::field::location, refusal.location);
    if (refusal.status == bhttp::status::service_unavailable)
      refusal_->set(bhttp::field::retry_after, "1");
    if (refusal.status == bhttp::status::upgrade_required)
      refusal_->set(bhttp::field::upgrade, "websocket");
    refusal_->keep_alive(false);
    refusal_->body() = json{{"error", refusal.error}}.dump();
    refusal_->prepare_payload();
    bhttp::async_write(ws_.next_layer(), *refusal_,
                       [self = shared_from_this()](beast::error_code, size_t) {
                         self->abort();
                         self->finishUpgrade();
                       });
  }

  void upgrade(uint64_t token) {
    ws_.set_option(
        websocket::stream_base::timeout{kHandshakeTimeout, websocket::stream_base::none(), false});
    ws_.read_message_max(kMaxFrameBytes);
    ws_.write_buffer_bytes(256);  // our frames are tiny: keep the write buffer small
    ws_.auto_fragment(false);
    ws_.async_accept(parser_->get(), [self = shared_from_this(), token](beast::error_code ec) {
      self->onAccepted(ec, token);
    });
  }

  void onAccepted(beast::error_code ec, uint64_t token) {
    finishUpgrade();
    buffer_.clear();
    buffer_.shrink_to_fit();
    if (ec) return;
    beast::error_code ignored;
    ws_.next_layer().set_option(tcp::no_delay(true), ignored);
    // Leadership may have moved while the handshake ran: accept only under the same token.
    const auto decision = core_->gate(key_.user);
    setState(State::Open);
    if (core_->stopping || !decision.allowed() || static_cast<uint64_t>(decision.token) != token ||
        fencedUnder(decision.token) || !core_->table) {
      readLoop();
      return closeWith(core_->stopping ? kGoingAway : kLeaderMoved, "");
    }
    epoch_ = core_->table->connect(key_, token);
    inTable_ = true;
    core_->inTable[epoch_.connection] = this;
    core_->countDevices(key_.user, 1);
    welcomePending_ = true;
    pump();
    readLoop();
  }

  void readLoop() {
    ws_.async_read(buffer_,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->onRead(ec); });
  }

  void onRead(beast::error_code ec) {
    if (ec) {
      // The device closed, the socket failed, or the stream failed it (1009 for a big frame):
      // its lease goes at once.
      if (ec == websocket::error::message_too_big) core_->m.closes.with({"1009"}).inc();
      leaveTable();
      setState(State::Done);
      return;
    }
    if (state_ == State::Closing) {
      buffer_.consume(buffer_.size());
      return readLoop();  // until the device answers our close
    }
    if (!ws_.got_text()) {
      buffer_.consume(buffer_.size());
      return badFrame("binary frame");
    }
    const auto data = buffer_.cdata();
    auto ping = parsePing(std::string_view(static_cast<const char*>(data.data()), data.size()));
    buffer_.consume(buffer_.size());
    if (auto* why = std::get_if<std::string>(&ping)) return badFrame(*why);
    core_->m.heartbeats.inc();
    if (inTable_) core_->table->ping(epoch_);
    if (pongs_.size() >= kMaxQueuedPongs) {
      readLoop();
      return closeWith(kPolicy, "pings faster than pongs can be written");
    }
    pongs_.push_back(std::get<uint64_t>(ping));
    pump();
    readLoop();
  }

  void badFrame(const std::string& why) {
    readLoop();
    closeWith(kBadFrame, ("bad frame: " + why).substr(0, 120));
  }

  // The one writer: the welcome, then pongs in order, or the close frame; never two at once.
  void pump() {
    if (writing_) return;
    if (state_ == State::Closing) {
      if (closeSent_) return;
      closeSent_ = true;
      writing_ = true;
      websocket::close_reason reason;
      reason.code = closeCode_;
      const auto text = std::string_view(closeReason_).substr(0, reason.reason.max_size());
      reason.reason.assign(text.data(), text.size());
      ws_.async_close(reason, [self = shared_from_this()](beast::error_code) {
        self->writing_ = false;
        self->abort();  // the device answered (or not): we are done
      });
      return;
    }
    if (welcomePending_) {
      welcomePending_ = false;
      out_ = json{{"type", "welcome"},
                  {"account", key_.user},
                  {"device", key_.device},
                  {"agent", core_->instanceId},
                  {"token", epoch_.leaderToken},
                  {"counter", epoch_.connection},
                  {"heartbeat_ms", core_->settings.heartbeat.count()},
                  {"timeout_ms", core_->settings.pingTimeout.count()}}
                 .dump();
    } else if (!pongs_.empty()) {
      // Into the same buffer every time: no allocation per pong once it has grown.
      constexpr std::string_view head = R"({"type":"pong","seq":)";
      char digits[24];
      const auto end = std::to_chars(digits, digits + sizeof digits, pongs_.front()).ptr;
      out_.assign(head);
      out_.append(digits, end);
      out_.push_back('}');
      pongs_.erase(pongs_.begin());
    } else {
      return;
    }
    writing_ = true;
    ws_.text(true);
    ws_.async_write(asio::buffer(out_), [self = shared_from_this()](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (!ec) self->pump();
    });
  }

  std::shared_ptr<DeviceEndpoint::Core> core_;
  websocket::stream<tcp::socket> ws_;
  beast::flat_buffer buffer_{kHeaderLimit + 1024};
  std::optional<bhttp::request_parser<bhttp::empty_body>> parser_;  // while upgrading
  std::optional<bhttp::response<bhttp::string_body>> refusal_;      // while refusing
  std::string out_;                                                 // the frame being written
  std::vector<uint64_t> pongs_;
  std::string closeReason_;
  presence::DeviceKey key_;
  presence::Epoch epoch_;
  uint64_t upgradeId_ = 0;
  uint16_t closeCode_ = kNormal;
  State state_ = State::Upgrading;
  bool inTable_ = false, writing_ = false, welcomePending_ = false, closeSent_ = false;
};

DeviceEndpoint::Core::Core(asio::io_context& agentIo, asio::io_context& own, const Config& config,
                           std::shared_ptr<Counts> c)
    : io(agentIo),
      executor(own.get_executor()),
      instanceId(config.instanceId),
      settings(config.presence),
      counts(std::move(c)),
      m(counts->m),
      acceptor(executor),
      clock(executor),
      reaper(executor),
      acceptRetry(executor),
      stopTimer(executor) {
  const auto address = asio::ip::make_address(
      config.presence.listen.host == "localhost" ? "127.0.0.1" : config.presence.listen.host);
  const tcp::endpoint at(address, config.presence.listen.port);
  acceptor.open(at.protocol());
  acceptor.set_option(tcp::acceptor::reuse_address(true));
  acceptor.bind(at);
  acceptor.listen(asio::socket_base::max_listen_connections);
  port = acceptor.local_endpoint().port();
  advertised = config.presence.advertise.empty()
                   ? "ws://" + config.presence.listen.host + ":" + std::to_string(port)
                   : config.presence.advertise;
  for (const char* state : {"upgrading", "open", "moving", "closing"})
    m.connections.with({state}).set(0);
}

void DeviceEndpoint::Core::countDevices(const std::string& account, int64_t delta) {
  if (auto it = counts->deviceCounts.find(account); it != counts->deviceCounts.end())
    it->second += delta;
}

void DeviceEndpoint::Core::accept() {
  acceptor.async_accept([self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !self->acceptor.is_open()) return;
    if (ec) {
      // Out of descriptors or similar: back off a little instead of spinning.
      spdlog::warn("device endpoint accept failed: {}", ec.message());
      self->acceptRetry.expires_after(std::chrono::milliseconds(100));
      self->acceptRetry.async_wait([self](beast::error_code e) {
        if (!e) self->accept();
      });
      return;
    }
    if (self->stopping || self->sessions.size() >= kMaxConnections) {
      self->m.refused.with({"capacity"}).inc();
      beast::error_code ignored;
      socket.close(ignored);
      return self->accept();
    }
    if (self->upgrading.size() >= kMaxUpgrading &&
        (self->upgrading.size() >= kMaxUpgradingBurst ||
         self->upgrading.begin()->second.first < SteadyClock::now() - kStaleUpgrade)) {
      // A flood of connects that never finish their upgrade: the oldest makes room.
      auto oldest = self->upgrading.begin();
      if (auto session = oldest->second.second.lock()) session->abort();
      self->upgrading.erase(oldest);
      self->m.refused.with({"evicted"}).inc();
    }
    auto session = std::make_shared<Session>(self, std::move(socket));
    const uint64_t id = ++self->nextUpgrade;
    self->upgrading.emplace(id, std::make_pair(SteadyClock::now(), session));
    session->start(id);
    self->accept();
  });
}

// Every second: upgrades that did not finish within kUpgradeTimeout are cut off.
void DeviceEndpoint::Core::reap() {
  reaper.expires_after(std::chrono::seconds(1));
  reaper.async_wait([weak = weak_from_this()](beast::error_code ec) {
    auto self = weak.lock();
    if (ec || !self || self->stopping) return;
    const auto cutoff = SteadyClock::now() - kUpgradeTimeout;
    while (!self->upgrading.empty() && self->upgrading.begin()->second.first < cutoff) {
      if (auto session = self->upgrading.begin()->second.second.lock()) session->abort();
      self->upgrading.erase(self->upgrading.begin());
      self->m.refused.with({"timeout"}).inc();
    }
    self->reap();
  });
}

std::optional<std::string> DeviceEndpoint::Core::leaderElsewhere(
    const election::GateDecision& decision) const {
  if (!decision.leader || decision.leader->instanceId == instanceId ||
      decision.leader->deviceEndpoint.empty()) {
    return std::nullopt;
  }
  return decision.leader->deviceEndpoint;
}

void DeviceEndpoint::Core::leadershipLost(const std::string& account) {
  if (!table) return;
  std::vector<std::weak_ptr<Session>> moving;
  for (const auto& entry : table->release(account)) {
    auto it = inTable.find(entry.epoch.connection);
    if (it == inTable.end()) continue;
    Session* session = it->second;
    session->released();
    moving.push_back(session->weak_from_this());
  }
  if (!moving.empty()) closeMoved(account, std::move(moving), 0);
}

// Closes the released connections with 4001 and the new leader's endpoint as the reason; the
// successor usually shows up within milliseconds of a handover, so wait briefly for it.
void DeviceEndpoint::Core::closeMoved(std::string account,
                                      std::vector<std::weak_ptr<Session>> moving, int attempt) {
  const auto leader = gate ? leaderElsewhere(gate(account)) : std::nullopt;
  if (!leader && attempt < kLeaderLookups && !stopping) {
    auto timer = std::make_shared<asio::steady_timer>(executor, kLeaderLookup);
    timer->async_wait([self = shared_from_this(), timer, account = std::move(account),
                       moving = std::move(moving), attempt](beast::error_code) mutable {
      self->closeMoved(std::move(account), std::move(moving), attempt + 1);
    });
    return;
  }
  for (const auto& weak : moving) {
    auto session = weak.lock();
    if (!session || session->state() != Session::State::Moving) continue;
    m.leaderMovedCloses.inc();
    session->closeWith(kLeaderMoved, leader.value_or(""));
  }
}

void DeviceEndpoint::Core::onTimeout(presence::Epoch epoch) {
  auto it = inTable.find(epoch.connection);
  if (it != inTable.end()) it->second->timedOut();
}

// The gateway refused writes under `token`: a newer leader exists even if our gate has not seen
// it yet (a paused agent after SIGCONT). Stop serving the account under that token.
void DeviceEndpoint::Core::onFenced(const std::string& account, uint64_t token) {
  fenced[account] = token;
  spdlog::warn("presence writes fenced account={} token={} instance={}: closing its devices",
               account, token, instanceId);
  bool under = false;
  for (const auto& [counter, session] : inTable) {
    if (session->key().user == account && session->token() <= token) under = true;
  }
  if (under) leadershipLost(account);
}

void DeviceEndpoint::Core::stop(std::function<void()> done) {
  stopDone = std::move(done);
  stopping = true;
  beast::error_code ignored;
  acceptor.close(ignored);
  reaper.cancel();
  acceptRetry.cancel();
  if (writer) writer->stop();
  if (table) table->crash();  // no more timers, renewals or removals
  clock.cancelAll();
  inTable.clear();
  std::vector<std::shared_ptr<Session>> all;
  for (Session* session : sessions) all.push_back(session->shared_from_this());
  for (auto& session : all) {
    const bool moving = session->state() == Session::State::Moving;
    session->released();
    session->closeWith(moving ? kLeaderMoved : kGoingAway, moving ? "" : "agent shutting down");
  }
  all.clear();
  if (sessions.empty()) return stopped();
  stopTimer.expires_after(kStopGrace);
  stopTimer.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec) return;
    std::vector<std::shared_ptr<Session>> left;
    for (Session* session : self->sessions) left.push_back(session->shared_from_this());
    for (auto& session : left) session->abort();
    self->stopped();
  });
}

void DeviceEndpoint::Core::stopped() {
  stopTimer.cancel();
  if (auto done = std::move(stopDone)) {
    stopDone = nullptr;
    asio::post(io, std::move(done));
  }
}

// ---------------------------------------------------------------------------------------------

DeviceEndpoint::DeviceEndpoint(asio::io_context& io, const Config& config)
    : counts_(std::make_shared<Counts>(config)),
      // One thread runs it: the hint lets Asio skip the locking and waking a pool would need.
      own_(std::make_unique<asio::io_context>(1)),
      core_(std::make_shared<Core>(io, *own_, config, counts_)),
      agentIo_(io),
      advertised_(core_->advertised),
      port_(core_->port) {
  // The writer needs the gateway settings now; its gate is wired in start().
  core_->writer = std::make_shared<GatewayLeaseWriter>(
      core_->executor, config, core_->m,
      [weak = std::weak_ptr<Core>(core_)](std::string_view account) {
        auto core = weak.lock();
        if (!core || !core->gate)
          return election::GateDecision{election::GateDecision::Verdict::Suspended, -1, 0, {}};
        return core->gate(account);
      },
      [weak = std::weak_ptr<Core>(core_)] {
        auto core = weak.lock();
        return core && core->sessionId ? core->sessionId() : int64_t{0};
      },
      [weak = std::weak_ptr<Core>(core_)](const std::string& account, uint64_t token) {
        if (auto core = weak.lock()) core->onFenced(account, token);
      });
  // Runs until halt(), also while nothing is pending (before start(), after stop()).
  thread_ = std::thread([io = own_.get()] {
    auto work = asio::make_work_guard(*io);
    io->run();
  });
}

DeviceEndpoint::~DeviceEndpoint() {
  closeNow();
  halt();
}

template <class F>
void DeviceEndpoint::post(F&& f) {
  std::lock_guard lock(mutex_);
  if (!halted_) asio::post(*own_, std::forward<F>(f));
}

void DeviceEndpoint::halt() {
  {
    std::lock_guard lock(mutex_);
    if (halted_) return;
    halted_ = true;
  }
  if (thread_.get_id() == std::this_thread::get_id()) {
    // Misuse (the owner's last reference dropped inside `gate`): the thread cannot join itself,
    // and the io_context cannot be destroyed under its own run(). Leave it to the process; the
    // Core goes as if a handler dropped it.
    own_->stop();
    thread_.detach();
    static_cast<void>(own_.release());
    return;
  }
  own_->stop();
  thread_.join();
  // Nothing runs the io_context now. The lease writer's client posts its answers into it from
  // its own worker: wait for that worker before the io_context goes.
  core_->writer->shutdown();
  // Pending handlers hold sessions, and sessions hold the Core: destroying the io_context
  // destroys them, and with the last of them the Core's sockets and timers, while their services
  // still exist.
  core_.reset();
  own_.reset();
}

const std::string& DeviceEndpoint::endpoint() const { return advertised_; }
uint16_t DeviceEndpoint::port() const { return port_; }

void DeviceEndpoint::start(GateCheck gate, std::function<int64_t()> sessionId) {
  post([core = core_, gate = std::move(gate), sessionId = std::move(sessionId)]() mutable {
    if (core->stopping) return;
    core->gate = std::move(gate);
    core->sessionId = std::move(sessionId);
    core->table = std::make_unique<presence::ConnectionTable>(
        core->clock, presenceParams(core->settings), presence::GatewayIdentity{core->instanceId, 0},
        *core->writer,
        [weak = std::weak_ptr<DeviceEndpoint::Core>(core)](const presence::DeviceKey&,
                                                           presence::Epoch epoch) {
          if (auto c = weak.lock()) c->onTimeout(epoch);
        });
    core->accept();
    core->reap();
    spdlog::info("device endpoint listening on {} instance={}", core->advertised, core->instanceId);
  });
}

void DeviceEndpoint::leadershipLost(const std::string& account) {
  post([core = core_, account] { core->leadershipLost(account); });
}

void DeviceEndpoint::stop(std::function<void()> done) {
  std::unique_lock lock(mutex_);
  if (halted_) {
    lock.unlock();
    return asio::post(agentIo_, std::move(done));
  }
  lock.unlock();
  post([core = core_, done = std::move(done)]() mutable {
    if (core->stopping) return asio::post(core->io, std::move(done));
    core->stop(std::move(done));
  });
}

void DeviceEndpoint::closeNow() {
  post([core = core_] {
    if (!core->stopping) core->stop([] {});
  });
}

int64_t DeviceEndpoint::devices(std::string_view account) const {
  auto it = counts_->deviceCounts.find(account);
  return it == counts_->deviceCounts.end() ? 0 : it->second.load();
}

std::string DeviceEndpoint::metricsText() const { return counts_->registry.expose(); }

}  // namespace zkagent::agent::detail
