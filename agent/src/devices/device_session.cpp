// One open device connection: the welcome frame, pings answered with pongs in order, bad frames
// (1003), pongs piling up (1008), the table's ping timeout (4002) and the close handshake. Its
// lease leaves the table as soon as the device is gone or misbehaves.
#include <charconv>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>

#include "device_endpoint_core.hpp"
#include "device_frames.hpp"

namespace zkagent::agent::detail {
using nlohmann::json;

Session::Session(std::shared_ptr<DeviceEndpoint::Core> core) : core_(std::move(core)) {
  core_->sessions.insert(this);
  core_->countState(stateName(state_), 1);
}

Session::~Session() {
  forgetExpiry();
  if (inTable_) {
    core_->inTable.erase(epoch_.connection);
    core_->countDevices(key_.user, -1);
  }
  setState(State::Done);
  core_->sessions.erase(this);
  if (core_->stopping && core_->sessions.empty()) core_->stopped();
}

std::string_view Session::stateName(State state) {
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

void Session::setState(State next) {
  if (next == state_) return;
  core_->countState(stateName(state_), -1);
  core_->countState(stateName(next), 1);
  state_ = next;
}

void Session::closeWith(uint16_t code, std::string reason) {
  if (state_ == State::Upgrading) return abort();
  forgetExpiry();
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

void Session::released() {
  core_->inTable.erase(epoch_.connection);
  if (inTable_) core_->countDevices(key_.user, -1);
  inTable_ = false;
  if (state_ == State::Open) setState(State::Moving);
}

void Session::timedOut() {
  released();
  core_->m.pingTimeouts.inc();
  closeWith(kPingTimeout, "ping timeout");
}

void Session::tokenExpired() {
  forgetExpiry();
  core_->m.tokenExpired.inc();
  closeWith(kTokenExpired, "token expired");
}

void Session::forgetExpiry() {
  if (!expiry_) return;
  core_->expiries.erase(*expiry_);
  expiry_.reset();
}

void Session::leaveTable() {
  if (!inTable_) return;
  core_->inTable.erase(epoch_.connection);
  core_->countDevices(key_.user, -1);
  inTable_ = false;
  if (core_->table) core_->table->close(epoch_);
}

void Session::onAccepted(beast::error_code ec, uint64_t token) {
  finishUpgrade();
  buffer_.clear();
  buffer_.shrink_to_fit();
  // Cut off (evicted, shutdown) after the handshake completed but before this ran: the device has
  // no connection, so it must not enter the table and get a lease that is removed at once.
  if (ec || !socketOpen()) return;
  setNoDelay();
  // Leadership may have moved while the handshake ran: accept only under the same token.
  const auto decision = core_->gate(key_.user);
  setState(State::Open);
  if (core_->stopping || !decision.allowed() || static_cast<uint64_t>(decision.token) != token ||
      fencedUnder(decision.token) || !core_->table) {
    readLoop();
    return closeWith(core_->stopping ? kGoingAway : kLeaderMoved, "");
  }
  if (core_->verifier) {
    if (refusedFrom_ <= auth::unixNow()) {  // lapsed during the handshake
      readLoop();
      return tokenExpired();
    }
    expiry_ = core_->expiries.emplace(refusedFrom_, this);
  }
  epoch_ = core_->table->connect(key_, token);
  inTable_ = true;
  core_->inTable[epoch_.connection] = this;
  core_->countDevices(key_.user, 1);
  welcomePending_ = true;
  pump();
  readLoop();
}

void Session::readLoop() { readFrame(); }

void Session::onRead(beast::error_code ec) {
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
  if (!gotText()) {
    buffer_.consume(buffer_.size());
    return badFrame("binary frame");
  }
  const auto data = buffer_.cdata();
  auto ping = parsePing(std::string_view(static_cast<const char*>(data.data()), data.size()));
  buffer_.consume(buffer_.size());
  if (auto* why = std::get_if<std::string>(&ping)) return badFrame(*why);
  if (!pingWithinRate(SteadyClock::now())) {
    core_->m.pingFloods.inc();
    readLoop();
    return closeWith(kPolicy,
                     "pings faster than " + std::to_string(kMaxPingsPerSecond) + " per second");
  }
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

bool Session::pingWithinRate(SteadyClock::time_point now) {
  constexpr auto interval =
      std::chrono::duration_cast<SteadyClock::duration>(std::chrono::seconds(1)) /
      kMaxPingsPerSecond;
  constexpr auto tolerance = interval * (kPingBurst - 1);
  const auto due = std::max(pingsDueFrom_, now);
  if (due - now > tolerance) return false;
  pingsDueFrom_ = due + interval;
  return true;
}

void Session::badFrame(const std::string& why) {
  readLoop();
  closeWith(kBadFrame, ("bad frame: " + why).substr(0, 120));
}

void Session::pump() {
  if (writing_) return;
  if (state_ == State::Closing) {
    if (closeSent_) return;
    closeSent_ = true;
    writing_ = true;
    websocket::close_reason reason;
    reason.code = closeCode_;
    const auto text = std::string_view(closeReason_).substr(0, reason.reason.max_size());
    reason.reason.assign(text.data(), text.size());
    writeClose(reason);
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
  writeFrame();
}

void Session::onWritten(beast::error_code ec) {
  writing_ = false;
  if (!ec) pump();
}

void Session::onCloseWritten() {
  writing_ = false;
  abort();  // the device answered (or not): we are done
}

}  // namespace zkagent::agent::detail
