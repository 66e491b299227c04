// The device endpoint's front door: the listener, the upgrade request and its refusals. A request
// becomes a WebSocket only at /v1/devices with a valid account and device, for an account this
// agent serves and leads right now; otherwise it gets 400/404/426, a 307 to the leader's device
// endpoint, or a 503 with Retry-After; with redirect=close the last two come in band instead, as
// a close (4001 naming the leader's URL, 1013) right after the handshake. Unfinished upgrades are
// bounded in number and time.
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "device_endpoint_core.hpp"

namespace zkagent::agent::detail {
using nlohmann::json;

namespace {

// What a device asks for in /v1/devices?account=A&device=D[&redirect=close]: its two ids and
// whether a non-leader redirects it in band; or the 400 naming the parameter. Other parameters
// are left to their own readers.
struct DeviceQuery {
  presence::DeviceKey key;
  bool redirectInBand = false;
  std::optional<std::string> token;  // the `token` parameter (browsers), if given
};

std::variant<DeviceQuery, Refusal> parseQuery(std::string_view query) {
  std::optional<std::string> values[4];
  constexpr std::string_view names[4] = {"account", "device", kRedirectParameter, kTokenParameter};
  std::string_view twice;  // the first parameter given twice
  forEachParameter(query, [&](const std::string& key, std::string_view part) {
    for (int i = 0; i < 4; ++i) {
      if (key != names[i]) continue;
      if (values[i] && twice.empty()) twice = names[i];
      const auto eq = part.find('=');
      values[i] = eq == std::string_view::npos ? "" : percentDecode(part.substr(eq + 1));
    }
  });
  if (!twice.empty()) {
    return Refusal{bhttp::status::bad_request, "bad_request", std::string(twice) + ": given twice",
                   ""};
  }
  for (int i = 0; i < 2; ++i) {
    if (!values[i]) {
      return Refusal{bhttp::status::bad_request, "bad_request", std::string(names[i]) + ": missing",
                     ""};
    }
    if (auto error = naming::accountIdError(*values[i])) {
      return Refusal{bhttp::status::bad_request, "bad_request",
                     std::string(names[i]) + ": " + *error, ""};
    }
  }
  if (values[2] && *values[2] != kRedirectInBand) {
    return Refusal{bhttp::status::bad_request, "bad_request",
                   std::string(kRedirectParameter) + ": must be '" + std::string(kRedirectInBand) +
                       "' (the in-band redirect) or absent",
                   ""};
  }
  return DeviceQuery{
      {std::move(*values[0]), std::move(*values[1])}, values[2].has_value(), std::move(values[3])};
}

}  // namespace

DeviceEndpoint::Core::Core(asio::io_context& agentIo, asio::io_context& own, const Config& config,
                           std::shared_ptr<Counts> c)
    : io(agentIo),
      executor(own.get_executor()),
      instanceId(config.instanceId),
      settings(config.presence),
      counts(std::move(c)),
      m(counts->m),
      clock(executor),
      reaper(executor),
      stopTimer(executor),
      tlsTimer(executor) {
  if (config.presence.auth) verifier.emplace(*config.presence.auth);
  const auto address = asio::ip::make_address(
      config.presence.listen.host == "localhost" ? "127.0.0.1" : config.presence.listen.host);
  if (config.presence.tls) {
    tls.emplace(http::serverTlsContext(
        http::ServerTls{.cert = config.presence.tls->cert, .key = config.presence.tls->key}));
    // An idle connection keeps no read or write buffer of OpenSSL's (about 34 KiB each otherwise):
    // devices are mostly idle between heartbeats, and there are tens of thousands of them.
    SSL_CTX_set_mode(tls->native_handle(), SSL_MODE_RELEASE_BUFFERS);
  }
  listener = std::make_shared<http::AcceptLoop>(
      executor, tcp::endpoint(address, config.presence.listen.port),
      http::AcceptLoop::Options{.name = "device endpoint"});
  port = listener->port();
  advertised = config.presence.advertise.empty()
                   ? std::string(tls ? "wss://" : "ws://") +
                         naming::toString({config.presence.listen.host, port})
                   : config.presence.advertise;
  for (const char* state : {"upgrading", "open", "moving", "closing"})
    m.connections.with({state}).set(0);
}

void DeviceEndpoint::Core::admit(tcp::socket socket) {
  if (stopping || sessions.size() >= kMaxConnections) {
    m.refused.with({"capacity"}).inc();
    beast::error_code ignored;
    socket.close(ignored);
    return;
  }
  if (upgrading.size() >= kMaxUpgrading) {
    // A flood of connects that never finish their upgrade: the oldest makes room.
    auto oldest = upgrading.begin();
    auto session = oldest->second.second.lock();
    if (upgrading.size() >= kMaxUpgradingBurst || !session ||
        (oldest->second.first < SteadyClock::now() - kStaleUpgrade && session->idle())) {
      if (session) session->abort();
      upgrading.erase(oldest);
      m.refused.with({"evicted"}).inc();
    }
  }
  auto session = makeSession(std::move(socket));
  const uint64_t id = ++nextUpgrade;
  upgrading.emplace(id, std::make_pair(SteadyClock::now(), session));
  session->start(id);
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
    self->expireTokens();
    self->reap();
  });
}

void DeviceEndpoint::Core::queueTlsHandshake(std::shared_ptr<Session> session) {
  tlsWaiting.emplace_back(SteadyClock::now(), std::move(session));
  startTlsHandshakes();
}

void DeviceEndpoint::Core::tlsHandshakeDone(uint64_t upgradeId) {
  tlsHandshaking.erase(upgradeId);
  startTlsHandshakes();
}

void DeviceEndpoint::Core::startTlsHandshakes() {
  if (stopping) return;
  const auto now = SteadyClock::now();
  // A handshake that has held its place for kTlsSlotHold goes on without it (a stalled client).
  std::erase_if(tlsHandshaking,
                [&](const auto& entry) { return entry.second + kTlsSlotHold <= now; });
  // The oldest in line first leave it: cut off by the reaper meanwhile, or waited too long.
  while (!tlsWaiting.empty()) {
    auto& oldest = tlsWaiting.front();
    if (!oldest.second->upgradePending()) {
      tlsWaiting.pop_front();
    } else if (oldest.first + kTlsQueueWait <= now) {
      oldest.second->shed();
      tlsWaiting.pop_front();
    } else {
      break;
    }
  }
  while (!tlsWaiting.empty() && tlsHandshaking.size() < kMaxTlsHandshakes) {
    auto session = std::move(tlsWaiting.back().second);  // the newest: most of its timeout left
    tlsWaiting.pop_back();
    if (!session->upgradePending()) continue;
    tlsHandshaking.emplace(session->upgradeId(), now);
    session->beginTlsHandshake();
  }
  if (tlsWaiting.empty() || tlsTimerArmed) return;
  // Places free up as handshakes finish; this tick covers those that stall, and sheds in time.
  tlsTimerArmed = true;
  tlsTimer.expires_after(kTlsQueueTick);
  tlsTimer.async_wait([weak = weak_from_this()](beast::error_code ec) {
    auto self = weak.lock();
    if (!self) return;
    self->tlsTimerArmed = false;
    if (!ec) self->startTlsHandshakes();
  });
}

void DeviceEndpoint::Core::expireTokens() {
  const int64_t now = auth::unixNow();
  while (!expiries.empty() && expiries.begin()->first <= now) {
    expiries.begin()->second->tokenExpired();  // erases its entry
  }
}

std::optional<std::string> DeviceEndpoint::Core::leaderElsewhere(
    const election::GateDecision& decision) const {
  if (!decision.leader || decision.leader->instanceId == instanceId ||
      decision.leader->deviceEndpoint.empty()) {
    return std::nullopt;
  }
  return decision.leader->deviceEndpoint;
}

void Session::start(uint64_t upgradeId) {
  upgradeId_ = upgradeId;
  parser_.emplace();
  parser_->header_limit(kHeaderLimit);
  parser_->body_limit(0);
  // TLS: nothing is spent on a connection before its ClientHello is there.
  if (tls()) return awaitBytes();
  readRequest();
}

void Session::onBytes(beast::error_code ec) {
  if (ec || !socketOpen()) return finishUpgrade();
  if (peerClosed()) {  // its device gave up while it waited in the listen backlog
    core_->m.refused.with({"tls_gone"}).inc();
    abort();
    return finishUpgrade();
  }
  core_->queueTlsHandshake(shared_from_this());
}

void Session::onTlsHandshake(beast::error_code ec) {
  core_->tlsHandshakeDone(upgradeId_);
  if (!ec) return readRequest();
  core_->m.refused.with({"tls_handshake"}).inc();
  abort();
  finishUpgrade();
}

void Session::shed() {
  core_->m.refused.with({"tls_busy"}).inc();
  abort();
  finishUpgrade();
}

void Session::finishUpgrade() {
  core_->upgrading.erase(upgradeId_);
  parser_.reset();
  refusal_.reset();
}

void Session::onRequest(beast::error_code ec) {
  requestRead_ = true;
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
  auto parsed = parseQuery(question == std::string_view::npos ? std::string_view{}
                                                              : target.substr(question + 1));
  if (auto* refusal = std::get_if<Refusal>(&parsed)) return refuse(std::move(*refusal));
  auto& query = std::get<DeviceQuery>(parsed);
  key_ = std::move(query.key);
  // Who is asking comes first: a refused token is never redirected and admits nothing.
  const auto authorization = request[bhttp::field::authorization];
  if (auto refusal =
          authenticate(std::string_view(authorization.data(), authorization.size()), query.token)) {
    return refuse(std::move(*refusal));
  }
  if (!core_->counts->deviceCounts.contains(key_.user)) {
    return refuse(Refusal{bhttp::status::not_found, "unknown_account",
                          "account: '" + key_.user + "' is not served by this agent", ""});
  }
  if (!websocket::is_upgrade(request)) {
    return refuse(
        Refusal{bhttp::status::upgrade_required, "not_upgrade", "not a WebSocket upgrade", ""});
  }
  // The gate operations pass decides (lock delay, strict mode); its answer comes back here.
  if (core_->stopping || !core_->admitGate) {
    return onGate({election::GateDecision::Verdict::Suspended, -1, 0, std::nullopt}, target,
                  query.redirectInBand);
  }
  core_->awaitingGate.emplace(upgradeId_, shared_from_this());
  core_->admitGate(
      key_.user, [weak = weak_from_this(), executor = core_->executor, target = std::string(target),
                  inBand = query.redirectInBand](election::GateDecision decision) mutable {
        asio::post(executor, [weak = std::move(weak), decision = std::move(decision),
                              target = std::move(target), inBand] {
          if (auto self = weak.lock()) self->onGate(decision, target, inBand);
        });
      });
}

void Session::onGate(const election::GateDecision& decision, std::string_view target, bool inBand) {
  core_->awaitingGate.erase(upgradeId_);                  // the caller holds this Session
  if (!parser_ || !socketOpen()) return finishUpgrade();  // cut off meanwhile
  if (!core_->stopping && decision.allowed() && !fencedUnder(decision.token)) {
    return upgrade(static_cast<uint64_t>(decision.token));
  }
  const auto leader = core_->stopping ? std::nullopt : core_->leaderElsewhere(decision);
  if (inBand) {
    // Clients that cannot follow an HTTP redirect (browsers) get the same answer as a close.
    auto reason = leader ? inBandRedirectReason(*leader, target) : std::nullopt;
    if (reason) return redirectInBand(kLeaderMoved, std::move(*reason));
    if (leader) spdlog::warn("leader endpoint '{}' does not fit a close reason", *leader);
    return redirectInBand(kTryAgainLater, "no_leader: no leader known, retry");
  }
  if (leader) {
    return refuse(Refusal{bhttp::status::temporary_redirect, "307",
                          "not_leader: account '" + key_.user + "' is led by another agent",
                          *leader + std::string(target)});
  }
  refuse(Refusal{bhttp::status::service_unavailable, "503",
                 "no_leader: no leader known for account '" + key_.user + "', retry", ""});
}

std::optional<Refusal> Session::authenticate(std::string_view authorization,
                                             const std::optional<std::string>& queryToken) {
  const auto& verifier = core_->verifier;
  if (!verifier) return std::nullopt;
  auto unauthorized = [&](std::string_view reason, std::string error) {
    core_->m.authRefused.with({std::string(reason)}).inc();
    return Refusal{bhttp::status::unauthorized, "unauthorized", std::move(error), ""};
  };
  std::string_view token;
  if (!authorization.empty()) {
    const auto bearer = auth::bearerToken(authorization);
    if (!bearer) {
      return unauthorized(auth::nameOf(auth::Failure::malformed),
                          "token: the Authorization header must be 'Bearer <token>'");
    }
    token = *bearer;
  } else if (queryToken) {
    token = *queryToken;
  }
  auto verdict = verifier->verify(token, "device", auth::unixNow());
  if (auto* refused = std::get_if<auth::Refused>(&verdict)) {
    return unauthorized(auth::nameOf(refused->failure), refused->detail);
  }
  const auto& claims = std::get<auth::Claims>(verdict);
  auto forbidden = [&](std::string_view reason, std::string error) {
    core_->m.authRefused.with({std::string(reason)}).inc();
    return Refusal{bhttp::status::forbidden, "forbidden", std::move(error), ""};
  };
  if (claims.account != key_.user) {
    return forbidden("wrong_account", "token: its account is not '" + key_.user + "'");
  }
  if (claims.subject != key_.device) {
    return forbidden("wrong_device", "token: its sub is not device '" + key_.device + "'");
  }
  refusedFrom_ = claims.expiresAt + verifier->settings().leeway.count() + 1;
  return std::nullopt;
}

bool Session::fencedUnder(int64_t token) const {
  auto it = core_->fenced.find(key_.user);
  return it != core_->fenced.end() && static_cast<int64_t>(it->second) == token;
}

void Session::refuse(Refusal refusal) {
  if (refusal.reason == "307" || refusal.reason == "503") {
    core_->m.redirects.with({refusal.reason}).inc();
  } else {
    core_->m.refused.with({refusal.reason}).inc();
  }
  refusal_.emplace(refusal.status, 11);
  refusal_->set(bhttp::field::content_type, "application/json");
  if (!refusal.location.empty()) refusal_->set(bhttp::field::location, refusal.location);
  if (refusal.status == bhttp::status::service_unavailable)
    refusal_->set(bhttp::field::retry_after, std::to_string(kRetryAfterSeconds));
  if (refusal.status == bhttp::status::upgrade_required)
    refusal_->set(bhttp::field::upgrade, "websocket");
  if (refusal.status == bhttp::status::unauthorized)
    refusal_->set(bhttp::field::www_authenticate, R"(Bearer realm="zkagent-devices")");
  refusal_->keep_alive(false);
  refusal_->body() = json{{"error", refusal.error}}.dump();
  refusal_->prepare_payload();
  writeRefusal();
}

void Session::onRefusalWritten() {
  abort();
  finishUpgrade();
}

void Session::upgrade(uint64_t token) {
  acceptToken_ = token;
  acceptSocket();
}

// Completes the handshake only to close at once: nothing enters the table, no lease is written,
// the device is not counted.
void Session::redirectInBand(uint16_t code, std::string reason) {
  core_->m.redirects.with({std::to_string(code)}).inc();
  inBandCode_ = code;
  closeReason_ = std::move(reason);
  acceptSocket();
}

void Session::onHandshake(beast::error_code ec) {
  if (inBandCode_ == 0) return onAccepted(ec, acceptToken_);
  finishUpgrade();
  if (ec) return;
  setState(State::Moving);
  readLoop();  // reads the device's answer to the close
  closeWith(inBandCode_, std::move(closeReason_));
}

}  // namespace zkagent::agent::detail
