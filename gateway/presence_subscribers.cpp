// The subscribers' WebSocket endpoint, ws:// or wss:// (the gateway's certificate, no client
// certificates: a subscriber proves who it is with a token). The only translation unit of the
// gateway that includes Beast's WebSocket; every handler runs on the presence model's strand.
#include "presence_subscribers.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_set>

#include "gateway.hpp"
#include "presence_relay.hpp"
#include "presence_store.hpp"
#include "subscriber_identity.hpp"
#include "zkagent/fencing.hpp"
#include "zkagent/http/accept_loop.hpp"
#include "zkagent/http/query.hpp"
#include "zkagent/http/tls.hpp"
#include "zkagent/http/websocket.hpp"
#include "zkagent/naming.hpp"

namespace zkagent::gateway {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using ordered = nlohmann::ordered_json;
using SteadyClock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kHeaderLimit = 16 * 1024;
constexpr auto kHandshakeTimeout = std::chrono::seconds(5);  // the TLS handshake (wss)
constexpr auto kUpgradeTimeout = std::chrono::seconds(5);    // reading the upgrade request
constexpr auto kCloseGrace = std::chrono::seconds(2);        // a close frame, then the socket goes
constexpr int kFullRetryAfterSeconds = 5;  // a 503 for a gateway at presence.max_subscribers

void checkTargetCount(const std::string& field, std::size_t count) {
  if (count > kMaxSubscribeTargets) {
    fencing::failField(field, "more than " + std::to_string(kMaxSubscribeTargets) + " targets");
  }
}

std::string checkedId(const std::string& field, std::string id) {
  if (auto error = naming::accountIdError(id)) fencing::failField(field, *error);
  return id;
}

ordered statusJson(const std::string& target, const presence::VisibleStatus& status,
                   std::uint64_t version) {
  ordered out{
      {"target", target}, {"status", presence::toString(status.status)}, {"version", version}};
  if (status.lastSeenMinute) out["last_seen_minute"] = *status.lastSeenMinute;
  return out;
}

}  // namespace

SubscribeRequest parseSubscribeQuery(std::string_view query) {
  std::optional<std::string> viewer, targets, token, via;
  std::string twice;  // the first parameter given twice
  http::forEachParameter(query, [&](const std::string& key, std::string_view part) {
    std::optional<std::string>* slot = key == "viewer"    ? &viewer
                                       : key == "targets" ? &targets
                                       : key == "token"   ? &token
                                       : key == "via"     ? &via
                                                          : nullptr;
    if (slot == nullptr)
      fencing::failField(key.substr(0, 64), "unknown parameter (viewer, targets, token, via)");
    if (*slot && twice.empty()) twice = key;
    *slot = http::parameterValue(part);
  });
  if (!twice.empty()) fencing::failField(twice, "given twice");
  if (!targets)
    fencing::failField("targets", "missing (a comma-separated list of account ids; may be empty)");
  SubscribeRequest request;
  if (viewer) request.viewer = checkedId("viewer", std::move(*viewer));
  request.token = std::move(token);
  if (via) {
    if (auto error = naming::instanceIdError(*via)) fencing::failField("via", *error);
    request.via = std::move(*via);
  }
  std::string_view list(*targets);
  for (std::size_t i = 0; !list.empty(); ++i) {
    const auto comma = list.find(',');
    request.targets.push_back(
        checkedId("targets[" + std::to_string(i) + "]", std::string(list.substr(0, comma))));
    checkTargetCount("targets", request.targets.size());
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    if (comma != std::string_view::npos && list.empty()) {
      fencing::failField("targets[" + std::to_string(i + 1) + "]", naming::kIdRule);
    }
  }
  return request;
}

SubscriberCommand parseSubscriberCommand(std::string_view text) {
  const auto message = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (message.is_discarded()) fencing::failField("message", "not valid JSON");
  if (!message.is_object()) fencing::failField("message", "must be a JSON object");
  for (const auto& [key, value] : message.items()) {
    if (key != "type" && key != "targets")
      fencing::failField(key.substr(0, 64), "unknown field (type, targets)");
  }
  SubscriberCommand command;
  const auto type = message.find("type");
  if (type == message.end()) fencing::failField("type", "missing");
  if (*type == "add") {
    command.add = true;
  } else if (*type == "remove") {
    command.add = false;
  } else {
    fencing::failField("type", "must be \"add\" or \"remove\"");
  }
  const auto targets = message.find("targets");
  if (targets == message.end()) fencing::failField("targets", "missing");
  if (!targets->is_array()) fencing::failField("targets", "must be an array of account ids");
  checkTargetCount("targets", targets->size());
  for (std::size_t i = 0; i < targets->size(); ++i) {
    const auto& id = (*targets)[i];
    const std::string field = "targets[" + std::to_string(i) + "]";
    if (!id.is_string()) fencing::failField(field, naming::kIdRule);
    command.targets.push_back(checkedId(field, id.get<std::string>()));
  }
  return command;
}

// What the endpoint keeps of a session, plain or TLS (Session<Stream> below); in cluster mode it
// also takes what its relay forwards from the owners of its other targets.
class SessionBase : public RelaySink {
 public:
  virtual ~SessionBase() = default;
  virtual void start() = 0;
  virtual void closeWith(std::uint16_t code, std::string reason) = 0;
};

std::optional<asio::ssl::context> subscriberTls(const Config& config) {
  if (config.tlsCert.empty()) return std::nullopt;
  return http::serverTlsContext({.cert = config.tlsCert, .key = config.tlsKey});
}

struct SubscriberEndpoint::Core : std::enable_shared_from_this<Core> {
  Core(asio::io_context& io, const Config& config, PresenceStore& presenceStore,
       metrics::Registry& registry)
      : strand(presenceStore.executor()),
        gatewayConfig(config),
        store(presenceStore),
        identity(config),
        tls(subscriberTls(config)),
        router({.bearerToken = config.bearerToken}),
        listener(std::make_shared<http::AcceptLoop>(
            strand,
            tcp::endpoint{asio::ip::make_address(config.subscribeAddress), config.subscribePort},
            http::AcceptLoop::Options{.name = "subscriber listener"})),
        coalesce(config.coalesceMs),
        queueLimit(static_cast<std::size_t>(config.subscriberQueue)),
        maxSubscribers(static_cast<std::size_t>(config.maxSubscribers)),
        subscribers(registry
                        .gauge("zkagent_gateway_presence_subscribers",
                               "Subscriber WebSocket sessions with a live subscription.")
                        .with({})),
        watched(registry
                    .gauge("zkagent_gateway_presence_watched_targets",
                           "(subscription, target) pairs watched over all subscribers.")
                    .with({})),
        events(registry
                   .counter("zkagent_gateway_presence_subscriber_events_total",
                            "Change events (and privacy removals) written to subscribers.")
                   .with({})),
        messages(registry
                     .counter("zkagent_gateway_presence_subscriber_messages_total",
                              "WebSocket messages written to subscribers (snapshots, merged "
                              "events, answers).")
                     .with({})),
        coalesced(registry
                      .counter("zkagent_gateway_presence_coalesced_events_total",
                               "Events replaced by a newer one for the same target before they "
                               "were sent (bursts merged per subscriber).")
                      .with({})),
        dropped(registry
                    .counter("zkagent_gateway_presence_dropped_subscribers_total",
                             "Subscribers closed with 4008 (resubscribe): more unsent messages "
                             "than presence.subscriber_queue.")
                    .with({})),
        refused(registry.counter("zkagent_gateway_presence_refused_subscribes_total",
                                 "Subscribe requests refused before the upgrade, by HTTP status.",
                                 {"code"})) {
    (void)io;
    // The Router gives the upgrade request the same 404/405 answers as the HTTP API, and the 401
    // of the agents' bearer token where no subscriber tokens are configured; who the subscriber
    // is, SubscriberIdentity decides.
    router.add(
        http::Method::Get, "/v1/presence/subscribe",
        [](const http::Request&) {
          http::Response upgrade;
          upgrade.status = 101;
          return upgrade;
        },
        identity.tokensRequired() ? http::Access::Public : http::Access::Token);
  }

  void admit(tcp::socket socket);

  asio::any_io_executor strand;
  const Config gatewayConfig;  // a copy: the relays' settings (RelayHub, built at start())
  PresenceStore& store;
  std::shared_ptr<RelayHub> relays;  // cluster mode, from start(): the shard map, live relays
  SubscriberIdentity identity;
  std::optional<asio::ssl::context> tls;  // set: wss
  http::Router router;
  std::shared_ptr<http::AcceptLoop> listener;
  const std::chrono::milliseconds coalesce;
  const std::size_t queueLimit;
  const std::size_t maxSubscribers;
  std::size_t admitted = 0;  // sessions past the cap check (upgrading or open), on the strand
  bool stopping = false;
  std::unordered_set<std::shared_ptr<SessionBase>> sessions;

  metrics::Gauge& subscribers;
  metrics::Gauge& watched;
  metrics::Counter& events;
  metrics::Counter& messages;
  metrics::Counter& coalesced;
  metrics::Counter& dropped;
  metrics::CounterFamily& refused;
};

// One subscriber connection; lives while one of its operations is pending. `Stream` is
// beast::tcp_stream (ws://) or an ssl_stream over one (wss://: the TLS handshake first, under its
// own deadline); everything after it is the same.
template <typename Stream>
class Session : public SessionBase, public std::enable_shared_from_this<Session<Stream>> {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  template <typename... Tls>
  Session(std::shared_ptr<SubscriberEndpoint::Core> core, tcp::socket socket, Tls&... tls)
      : core_(std::move(core)), ws_(std::move(socket), tls...), timer_(core_->strand) {}

  void start() override {
    if constexpr (kTls) {
      beast::get_lowest_layer(ws_).expires_after(kHandshakeTimeout);
      ws_.next_layer().async_handshake(asio::ssl::stream_base::server,
                                       [self = this->shared_from_this()](beast::error_code ec) {
                                         if (ec) return self->finish();
                                         self->readRequest();
                                       });
    } else {
      readRequest();
    }
  }

  // Closes the socket under every pending operation.
  void abort() {
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().shutdown(tcp::socket::shutdown_both, ignored);
    beast::get_lowest_layer(ws_).close();
    timer_.cancel();
  }

  // Sends a close frame with `code` after the message being written, drops the rest, and cuts the
  // socket kCloseGrace later if the peer does not take the close (a reader that is stuck).
  void closeWith(std::uint16_t code, std::string reason) override {
    if (!open_) return abort();
    if (closing_) return;
    closing_ = true;
    pending_.clear();
    if (writing_) {
      queue_.erase(queue_.begin() + 1, queue_.end());
    } else {
      queue_.clear();
    }
    unsubscribe();
    close_ = websocket::close_reason(static_cast<websocket::close_code>(code), reason);
    timer_.cancel();
    timer_.expires_after(kCloseGrace);
    timer_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (!ec) self->abort();
    });
    if (!writing_) sendClose();
  }

  // The model's sink: merge by target, flush at most once per coalesce interval.
  void onEvent(const presence::ChangeEvent& event) {
    if (closing_ || done_) return;
    // Cluster mode: only the owner of the target's shard speaks for it, and never backwards.
    if (relay_ && (!relay_->here(event.target) ||
                   (!event.removed &&
                    !relay_->admit(event.target, versionOf(event.target, event.version))))) {
      return;
    }
    relayed_.erase(event.target);
    auto [it, inserted] = pending_.insert_or_assign(event.target, event);
    if (!inserted) core_->coalesced.inc();
    scheduleFlush();
  }

  void relayed(const std::string& target, ordered entry) override {
    if (closing_ || done_) return;
    pending_.erase(target);
    if (!relayed_.insert_or_assign(target, std::move(entry)).second) core_->coalesced.inc();
    scheduleFlush();
  }

  void relayRefused(const std::string& why) override {
    spdlog::info("presence subscriber {} closed: {} (4008)", viewer_, why);
    closeWith(kResubscribeCode, why);
  }

 private:
  std::uint64_t versionOf(const std::string& target, std::uint64_t count) const {
    return core_->store.versionBase(target) + count;
  }

  void readRequest() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(0);
    beast::get_lowest_layer(ws_).expires_after(kUpgradeTimeout);
    bhttp::async_read(ws_.next_layer(), buffer_, *parser_,
                      [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                        self->onRequest(ec);
                      });
  }

  void onRequest(beast::error_code ec) {
    if (ec) return finish();
    const auto& raw = parser_->get();
    http::Request request;
    request.method = raw.method() == bhttp::verb::get ? http::Method::Get : http::Method::Other;
    request.target = std::string(raw.target());
    const auto question = request.target.find('?');
    request.path = request.target.substr(0, question);
    if (question != std::string::npos) request.query = request.target.substr(question + 1);
    if (auto auth = raw.find(bhttp::field::authorization); auth != raw.end()) {
      request.headers.emplace_back("authorization", std::string(auth->value()));
    }
    http::Response answer = core_->router.handle(request);
    std::optional<SubscribeRequest> subscribe;
    if (answer.status == 101) {
      auto identified = core_->identity.identify(request, auth::unixNow());
      if (auto* refusal = std::get_if<http::Response>(&identified)) {
        answer = std::move(*refusal);
      } else {
        subscribe = std::move(std::get<SubscribeRequest>(identified));
      }
    }
    if (answer.status == 101 && !websocket::is_upgrade(raw)) {
      answer = http::Response::error(426, "not a WebSocket upgrade");
      answer.headers.emplace_back("Upgrade", "websocket");
    }
    if (answer.status == 101 && core_->admitted >= core_->maxSubscribers) {
      answer = http::Response::error(503, "too many subscribers: this gateway serves at most " +
                                              std::to_string(core_->maxSubscribers) +
                                              " (presence.max_subscribers); retry");
      answer.headers.emplace_back("Retry-After", std::to_string(kFullRetryAfterSeconds));
    }
    if (answer.status != 101) return refuse(std::move(answer));
    admitted_ = true;  // counted against the cap until the session ends
    ++core_->admitted;
    subscribeRequest_ = std::move(*subscribe);
    viewer_ = subscribeRequest_.viewer;
    beast::get_lowest_layer(ws_).expires_never();
    ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
    ws_.read_message_max(kMaxSubscriberFrameBytes);
    ws_.async_accept(raw, [self = this->shared_from_this()](beast::error_code error) {
      self->onAccepted(error);
    });
  }

  void refuse(http::Response answer) {
    core_->refused.with({std::to_string(answer.status)}).inc();
    refusal_.emplace(static_cast<bhttp::status>(answer.status), 11);
    refusal_->set(bhttp::field::content_type, answer.contentType);
    for (const auto& [name, value] : answer.headers) refusal_->set(name, value);
    refusal_->keep_alive(false);
    refusal_->body() = std::move(answer.body);
    refusal_->prepare_payload();
    bhttp::async_write(ws_.next_layer(), *refusal_,
                       [self = this->shared_from_this()](beast::error_code, std::size_t) {
                         self->abort();
                         self->finish();
                       });
  }

  void onAccepted(beast::error_code ec) {
    parser_.reset();
    buffer_.clear();
    if (ec || core_->stopping) return finish();
    open_ = true;
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().set_option(tcp::no_delay(true), ignored);
    core_->store.post([self = this->shared_from_this()](presence::PresenceService& service) {
      if (self->closing_ || self->done_) return;
      std::weak_ptr<Session> weak = self;
      if (self->core_->relays) {
        const auto& request = self->subscribeRequest_;
        self->relay_ = std::make_shared<SubscriberRelay>(self->core_->relays, weak, request.viewer,
                                                         request.credential, request.via.empty());
        self->core_->relays->track(self->relay_);
      }
      auto subscribed = service.subscriptions().subscribe(
          self->subscribeRequest_.viewer, self->subscribeRequest_.targets,
          [weak](const presence::ChangeEvent& event) {
            if (auto session = weak.lock()) session->onEvent(event);
          });
      if (self->relay_) self->relay_->add(self->subscribeRequest_.targets);
      self->subscribeRequest_.targets = {};
      self->id_ = subscribed.id;
      self->subscribed_ = true;
      self->core_->subscribers.inc();
      self->core_->watched.set(static_cast<double>(service.subscriptions().targetsWatched()));
      ordered message{{"type", "snapshot"}, {"targets", self->snapshotJson(subscribed.snapshot)}};
      if (self->core_->store.warmingUp()) message["warming_up"] = true;
      self->enqueue(message.dump(), 0);
    });
    read();
  }

  // Cluster mode: only the targets this gateway owns; the others come through the relay.
  ordered snapshotJson(const std::vector<presence::SnapshotEntry>& snapshot) {
    auto entries = ordered::array();
    for (const auto& entry : snapshot) {
      const auto version = versionOf(entry.target, entry.version);
      if (relay_ && (!relay_->here(entry.target) || !relay_->admit(entry.target, version))) {
        continue;
      }
      entries.push_back(statusJson(entry.target, entry.status, version));
    }
    return entries;
  }

  void read() {
    ws_.async_read(incoming_, [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
      self->onMessage(ec);
    });
  }

  void onMessage(beast::error_code ec) {
    if (ec) return finish();
    const std::string text = beast::buffers_to_string(incoming_.data());
    incoming_.consume(incoming_.size());
    if (!closing_) handle(text);
    read();
  }

  void answerError(const std::string& error) {
    enqueue(ordered{{"type", "error"}, {"status", 400}, {"error", error}}.dump(), 0);
  }

  // add / remove; a bad message gets an error answer and changes nothing.
  void handle(const std::string& text) {
    SubscriberCommand command;
    try {
      command = parseSubscriberCommand(text);
    } catch (const fencing::BadRequest& error) {
      return answerError(error.what());
    }
    core_->store.post([self = this->shared_from_this(),
                       command = std::move(command)](presence::PresenceService& service) {
      if (self->closing_ || self->done_ || !self->subscribed_) return;
      auto& subscriptions = service.subscriptions();
      if (command.add) {
        if (subscriptions.targetCount(self->id_) + command.targets.size() > kMaxSubscribeTargets) {
          return self->answerError("targets: a subscription watches at most " +
                                   std::to_string(kMaxSubscribeTargets) + " targets");
        }
        const auto snapshot = subscriptions.addTargets(self->id_, command.targets);
        if (self->relay_) self->relay_->add(command.targets);
        self->enqueue(ordered{{"type", "snapshot"},
                              {"added", command.targets},
                              {"targets", self->snapshotJson(snapshot)}}
                          .dump(),
                      0);
      } else {
        subscriptions.removeTargets(self->id_, command.targets);
        if (self->relay_) self->relay_->remove(command.targets);
        for (const auto& target : command.targets) {
          self->pending_.erase(target);
          self->relayed_.erase(target);
        }
        self->enqueue(ordered{{"type", "unsubscribed"}, {"targets", command.targets}}.dump(), 0);
      }
      self->core_->watched.set(static_cast<double>(subscriptions.targetsWatched()));
    });
  }

  void scheduleFlush() {
    if (flushArmed_) return;
    flushArmed_ = true;
    const auto due = lastFlush_ + core_->coalesce;
    if (due <= SteadyClock::now()) {
      // Still after everything the current strand task delivers (one lease batch, say).
      asio::post(core_->strand, [self = this->shared_from_this()] { self->flush(); });
      return;
    }
    timer_.expires_at(due);
    timer_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (!ec) self->flush();
    });
  }

  void flush() {
    flushArmed_ = false;
    if ((pending_.empty() && relayed_.empty()) || closing_ || done_) return;
    auto events = ordered::array();
    for (const auto& [target, event] : pending_) {
      if (event.removed) {
        events.push_back(ordered{{"target", target}, {"removed", true}});
        continue;
      }
      auto out = statusJson(target, event.status, versionOf(target, event.version));
      out["observed_at_minute"] = event.observedAtMinute;
      events.push_back(std::move(out));
    }
    for (auto& relayed : relayed_) events.push_back(std::move(relayed.second));
    const std::size_t count = pending_.size() + relayed_.size();
    pending_.clear();
    relayed_.clear();
    lastFlush_ = SteadyClock::now();
    enqueue(ordered{{"type", "events"}, {"events", std::move(events)}}.dump(), count);
  }

  void enqueue(std::string message, std::size_t events) {
    if (closing_ || done_) return;
    queue_.emplace_back(std::move(message), events);
    if (queue_.size() > core_->queueLimit) {
      core_->dropped.inc();
      spdlog::info("presence subscriber {} closed: more than {} messages unsent (4008)", viewer_,
                   core_->queueLimit);
      return closeWith(kResubscribeCode, "resubscribe: too slow");
    }
    pump();
  }

  void pump() {
    if (writing_ || queue_.empty()) return;
    writing_ = true;
    ws_.async_write(asio::buffer(queue_.front().first),
                    [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                      self->onWritten(ec);
                    });
  }

  void onWritten(beast::error_code ec) {
    writing_ = false;
    if (ec) return finish();
    core_->messages.inc();
    if (queue_.front().second > 0) core_->events.inc(static_cast<double>(queue_.front().second));
    queue_.pop_front();
    if (closing_) return sendClose();
    pump();
  }

  void sendClose() {
    if (closeSent_) return;
    closeSent_ = true;
    ws_.async_close(close_,
                    [self = this->shared_from_this()](beast::error_code) { self->abort(); });
  }

  void unsubscribe() {
    if (relay_) {
      relay_->stop();
      relay_.reset();
    }
    if (!subscribed_) return;
    subscribed_ = false;
    core_->subscribers.dec();
    core_->store.post([core = core_, id = id_](presence::PresenceService& service) {
      service.subscriptions().unsubscribe(id);
      core->watched.set(static_cast<double>(service.subscriptions().targetsWatched()));
    });
  }

  void finish() {
    if (done_) return;
    done_ = true;
    if (admitted_) --core_->admitted;
    unsubscribe();
    pending_.clear();
    relayed_.clear();
    queue_.clear();
    timer_.cancel();
    auto self = this->shared_from_this();
    core_->sessions.erase(self);
  }

  std::shared_ptr<SubscriberEndpoint::Core> core_;
  zkagent::http::WebSocketStream<Stream> ws_;
  asio::steady_timer timer_;  // the next flush, then the close grace
  beast::flat_buffer buffer_;
  beast::flat_buffer incoming_;
  std::optional<bhttp::request_parser<bhttp::empty_body>> parser_;
  std::optional<bhttp::response<bhttp::string_body>> refusal_;
  SubscribeRequest subscribeRequest_;
  std::string viewer_;
  presence::SubscriptionId id_ = 0;
  bool admitted_ = false, subscribed_ = false, open_ = false, closing_ = false, closeSent_ = false,
       done_ = false;
  bool writing_ = false, flushArmed_ = false;
  SteadyClock::time_point lastFlush_{};
  std::map<std::string, presence::ChangeEvent> pending_;   // merged by target until the flush
  std::map<std::string, ordered> relayed_;                 // the same for what the relay forwards
  std::shared_ptr<SubscriberRelay> relay_;                 // cluster mode
  std::deque<std::pair<std::string, std::size_t>> queue_;  // message, events in it
  websocket::close_reason close_;
};

void SubscriberEndpoint::Core::admit(tcp::socket socket) {
  if (stopping) return;
  std::shared_ptr<SessionBase> session;
  if (tls) {
    session = std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(
        shared_from_this(), std::move(socket), *tls);
  } else {
    session = std::make_shared<Session<beast::tcp_stream>>(shared_from_this(), std::move(socket));
  }
  sessions.insert(session);
  session->start();
}

SubscriberEndpoint::SubscriberEndpoint(asio::io_context& io, const Config& config,
                                       PresenceStore& store, metrics::Registry& registry)
    : core_(std::make_shared<Core>(io, config, store, registry)) {}

SubscriberEndpoint::~SubscriberEndpoint() = default;

void SubscriberEndpoint::start() {
  if (auto* shards = core_->store.cluster()) {
    core_->relays = std::make_shared<RelayHub>(core_->strand, core_->gatewayConfig, *shards);
    core_->relays->start();
  }
  core_->listener->start([weak = std::weak_ptr<Core>(core_)](tcp::socket socket) {
    if (auto self = weak.lock()) self->admit(std::move(socket));
  });
}

void SubscriberEndpoint::stop() {
  asio::post(core_->strand, [core = core_] {
    core->stopping = true;
    core->listener->stop();
    if (core->relays) core->relays->stop();
    const auto sessions = core->sessions;
    for (const auto& session : sessions) session->closeWith(kGoingAwayCode, "gateway stopping");
  });
}

bool SubscriberEndpoint::secure() const { return core_->tls.has_value(); }

std::uint16_t SubscriberEndpoint::port() const { return core_->listener->port(); }

std::string SubscriberEndpoint::address() const {
  return core_->listener->endpoint().address().to_string();
}

}  // namespace zkagent::gateway
