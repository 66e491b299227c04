// The device endpoint's front door: the listener, the upgrade request and its refusals. A request
// becomes a WebSocket only at /v1/devices with a valid account and device, for an account this
// agent serves and leads right now; otherwise it gets 400/404/426, a 307 to the leader's device
// endpoint, or a 503 with Retry-After. Unfinished upgrades are bounded in number and time.
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "device_endpoint_core.hpp"

namespace zkagent::agent::detail {
using nlohmann::json;

namespace {

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
    if (auto error = naming::accountIdError(*values[i])) {
      return Refusal{bhttp::status::bad_request, "bad_request",
                     std::string(names[i]) + ": " + *error, ""};
    }
  }
  return presence::DeviceKey{std::move(*values[0]), std::move(*values[1])};
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
                   ? "ws://" + naming::toString({config.presence.listen.host, port})
                   : config.presence.advertise;
  for (const char* state : {"upgrading", "open", "moving", "closing"})
    m.connections.with({state}).set(0);
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

void Session::start(uint64_t upgradeId) {
  upgradeId_ = upgradeId;
  parser_.emplace();
  parser_->header_limit(kHeaderLimit);
  parser_->body_limit(0);
  bhttp::async_read(
      ws_.next_layer(), buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->onRequest(ec); });
}

void Session::finishUpgrade() {
  core_->upgrading.erase(upgradeId_);
  parser_.reset();
  refusal_.reset();
}

void Session::onRequest(beast::error_code ec) {
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

void Session::upgrade(uint64_t token) {
  ws_.set_option(
      websocket::stream_base::timeout{kHandshakeTimeout, websocket::stream_base::none(), false});
  ws_.read_message_max(kMaxFrameBytes);
  ws_.write_buffer_bytes(256);  // our frames are tiny: keep the write buffer small
  ws_.auto_fragment(false);
  ws_.async_accept(parser_->get(), [self = shared_from_this(), token](beast::error_code ec) {
    self->onAccepted(ec, token);
  });
}

}  // namespace zkagent::agent::detail
