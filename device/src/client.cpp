// DeviceClient: one WebSocket connection at a time to the agent leading the account, driven by one
// timer whose meaning follows the phase (backoff wait, connect deadline, next ping or silence
// check, close deadline). Every asynchronous handler holds the Connection it was started on and
// does nothing when that connection is no longer the current one, so a replaced socket's late
// completions cannot touch the new one.
#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/beast/websocket/ssl.hpp>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <variant>

#include "detail.hpp"
#include "zkagent/device.hpp"
#include "zkagent/http/tls.hpp"
#include "zkagent/http/websocket.hpp"

#if defined(__linux__)
#include <netinet/in.h>
#ifndef IP_BIND_ADDRESS_NO_PORT  // linux/in.h has it, but clashes with netinet/in.h
#define IP_BIND_ADDRESS_NO_PORT 24
#endif
#endif

namespace zkagent::device {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

// Frames are at most 4096 bytes both ways.
constexpr std::size_t kMaxFrame = 4096;

}  // namespace

// Named, not anonymous: DeviceClient::Impl and its handlers hold these, and a type with linkage
// may not hold a type without it (GCC's -Wsubobject-linkage when a library is one unity unit).
namespace client_state {

// One attempt's socket and buffers; pending handlers keep it alive after it was replaced.
struct Connection {
  using Plain = zkagent::http::WebSocketStream<tcp::socket>;
  using Tls = zkagent::http::WebSocketStream<asio::ssl::stream<tcp::socket>>;

  Connection(asio::io_context& io, asio::ssl::context* tls)
      : ws(tls ? Stream(std::in_place_type<Tls>, io, *tls)
               : Stream(std::in_place_type<Plain>, io)) {}

  tcp::socket& socket() {
    return std::visit([](auto& s) -> tcp::socket& { return beast::get_lowest_layer(s); }, ws);
  }
  // `f(stream)` on whichever stream this attempt uses.
  template <class F>
  decltype(auto) with(F&& f) {
    return std::visit(std::forward<F>(f), ws);
  }

  using Stream = std::variant<Plain, Tls>;
  Stream ws;
  beast::flat_buffer buffer;
  WsUrl url;                                           // where this attempt goes
  std::unique_ptr<websocket::response_type> response;  // the upgrade answer, only during it
  std::unique_ptr<tcp::resolver> resolver;             // only for host names, only while resolving
  std::string out;                                     // the frame being written
  bool writing = false;
  bool closing = false;
};

enum class Phase { Idle, Waiting, Connecting, AwaitingWelcome, Open, Stopping, Stopped };

}  // namespace client_state

using client_state::Connection;
using client_state::Phase;

namespace {

// DeviceOptions were validated before a client is built: every endpoint parses.
std::vector<WsUrl> configuredEndpoints(const DeviceOptions& options) {
  std::vector<WsUrl> endpoints;
  for (const auto& endpoint : options.endpoints) endpoints.push_back(*parseWsUrl(endpoint, false));
  return endpoints;
}

}  // namespace

struct DeviceClient::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::io_context& context, DeviceOptions deviceOptions)
      : io(context),
        options(std::move(deviceOptions)),
        timer(context),
        backoff(options.backoffInitial, options.backoffMax,
                jitterSeed(options.account, options.device, options.seed)),
        random(jitterSeed(options.account, options.device, options.seed) ^ 0x5DEECE66DULL),
        round(configuredEndpoints(options)) {
    if (!options.caFile.empty()) tls = sharedTlsContext(options.caFile);
    target = "/v1/devices?account=" + options.account + "&device=" + options.device +
             (options.redirectInBand ? "&redirect=close" : "");
  }

  asio::io_context& io;
  DeviceOptions options;
  std::shared_ptr<asio::ssl::context> tls;  // with caFile: for wss:// attempts
  std::string target;
  asio::steady_timer timer;
  std::uint64_t timerArm = 0;  // the wait that is current; older completions are ignored
  ReconnectBackoff backoff;
  std::uint64_t random;

  Phase phase = Phase::Idle;
  std::shared_ptr<Connection> conn;
  EndpointRound round;
  unsigned redirectsLeft = 0;
  SteadyClock::time_point deadline;  // connect/welcome/close deadline
  SteadyClock::time_point nextPingAt;
  SteadyClock::time_point lastFrameAt;  // anything from the agent
  std::uint64_t nextSeq = 1;
  std::uint64_t outstandingSeq = 0;
  SteadyClock::time_point outstandingSentAt;
  bool pingDue = false;       // a ping waits for the write in progress
  bool refreshToken = false;  // the last token was refused (401) or expired (4003)

  DeviceStats stats;
  std::function<void(const ConnectedInfo&)> connectedCallback;
  std::function<void(std::string_view)> redirectedCallback;
  std::function<void(std::string_view)> disconnectedCallback;
  std::function<void(Micros)> rttCallback;
  std::function<void()> stopDone;

  // --- the timer --------------------------------------------------------------------------

  void armAt(SteadyClock::time_point at) {
    timer.expires_at(at);
    timer.async_wait([self = shared_from_this(), arm = ++timerArm](beast::error_code error) {
      if (error || arm != self->timerArm) return;
      self->onTimer();
    });
  }

  void disarm() {
    ++timerArm;
    timer.cancel();
  }

  void onTimer() {
    const auto now = SteadyClock::now();
    switch (phase) {
      case Phase::Waiting:
        beginRound();
        return;
      case Phase::Connecting:
        failAttempt("connect_timeout");
        return;
      case Phase::AwaitingWelcome:
        failAttempt("welcome_timeout");
        return;
      case Phase::Open:
        if (options.timeout.count() > 0 && now >= lastFrameAt + options.timeout) {
          // Tell the agent if it still listens, but do not wait for it: it is gone to us.
          closeInBackground(websocket::close_code::normal, "agent_silent");
          lost("agent_silent");
          return;
        }
        if (options.heartbeat.count() > 0 && now >= nextPingAt) {
          sendPing();
          nextPingAt = now + heartbeatInterval();
        }
        armOpenTimer();
        return;
      case Phase::Stopping:
        finishStop();
        return;
      case Phase::Idle:
      case Phase::Stopped:
        return;
    }
  }

  void armOpenTimer() {
    auto at = SteadyClock::time_point::max();
    if (options.heartbeat.count() > 0) at = nextPingAt;
    if (options.timeout.count() > 0) at = std::min(at, lastFrameAt + options.timeout);
    if (at == SteadyClock::time_point::max()) {
      disarm();
      return;
    }
    armAt(at);
  }

  Millis heartbeatInterval() {
    const double scale = 1.0 - options.heartbeatJitter * unitRandom(random);
    return Millis{std::max<Millis::rep>(
        1, static_cast<Millis::rep>(static_cast<double>(options.heartbeat.count()) * scale))};
  }

  // --- rounds and attempts ----------------------------------------------------------------

  void wait(Millis delay) {
    phase = Phase::Waiting;
    armAt(SteadyClock::now() + delay);
  }

  void beginRound() {
    round.begin();
    nextInRound();
  }

  // Tries the next endpoint of the round, or waits for the next round when none is left.
  void nextInRound() {
    if (auto next = round.next()) return attempt(std::move(next->url), false);
    wait(backoff.next());
  }

  void attempt(WsUrl url, bool redirected) {
    if (!redirected) redirectsLeft = options.maxRedirects;
    if (url.target.empty()) url.target = target;
    const bool secure = url.tls;
    conn = std::make_shared<Connection>(io, secure ? tls.get() : nullptr);
    conn->url = std::move(url);
    phase = Phase::Connecting;
    deadline = SteadyClock::now() + options.connectTimeout;
    armAt(deadline);
    if (secure && !tls) {  // a redirect to wss:// without a CA to check the agent against
      failAttempt("tls_failed: no caFile for " + conn->url.endpoint());
      return;
    }

    beast::error_code error;
    const auto address = asio::ip::make_address(conn->url.host, error);
    if (!error) {
      connectTo(conn, tcp::endpoint(address, conn->url.port));
      return;
    }
    conn->resolver = std::make_unique<tcp::resolver>(io);
    conn->resolver->async_resolve(
        conn->url.host, std::to_string(conn->url.port),
        [self = shared_from_this(), c = conn](beast::error_code e,
                                              tcp::resolver::results_type results) {
          if (c != self->conn) return;
          c->resolver.reset();
          if (e || results.empty()) {
            self->failAttempt("connect_failed: cannot resolve " + c->url.host + ": " + e.message());
            return;
          }
          self->connectTo(c, *results.begin());
        });
  }

  void connectTo(const std::shared_ptr<Connection>& c, const tcp::endpoint& to) {
    auto& socket = c->socket();
    beast::error_code error;
    if (!options.localAddress.empty()) {
      socket.open(to.protocol(), error);
#if defined(IP_BIND_ADDRESS_NO_PORT)
      // Let connect() pick the port per destination, so one source address serves more than
      // the ~28000 ephemeral ports that bind() alone would allow.
      if (!error)
        socket.set_option(
            asio::detail::socket_option::boolean<IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT>(true), error);
#endif
      const auto local = asio::ip::make_address(options.localAddress, error);
      if (!error) socket.bind(tcp::endpoint(local, 0), error);
      if (error) {
        failAttempt("connect_failed: cannot bind " + options.localAddress + ": " + error.message());
        return;
      }
    }
    socket.async_connect(to, [self = shared_from_this(), c](beast::error_code e) {
      if (c != self->conn) return;
      if (e) {
        self->failAttempt("connect_failed: " + e.message());
        return;
      }
      self->secure(c);
    });
  }

  // wss://: the TLS handshake, with the agent's certificate checked against caFile and the host
  // dialled, before the upgrade request; bounded by the connect deadline like the rest.
  void secure(const std::shared_ptr<Connection>& c) {
    auto* stream = std::get_if<Connection::Tls>(&c->ws);
    if (stream == nullptr) return upgrade(c);
    http::expectServerName(stream->next_layer().native_handle(), c->url.host);
    stream->next_layer().async_handshake(
        asio::ssl::stream_base::client, [self = shared_from_this(), c](beast::error_code e) {
          if (c != self->conn) return;
          if (e) {
            return self->failAttempt(
                "tls_failed: " +
                http::handshakeFailure(
                    std::get<Connection::Tls>(c->ws).next_layer().native_handle(), e, c->url.host));
          }
          self->upgrade(c);
        });
  }

  void upgrade(const std::shared_ptr<Connection>& c) {
    beast::error_code ignored;
    c->socket().set_option(tcp::no_delay(true), ignored);
    websocket::stream_base::timeout timeouts{};
    timeouts.handshake_timeout = options.connectTimeout;     // also bounds our close handshake
    timeouts.idle_timeout = websocket::stream_base::none();  // silence is ours to judge
    timeouts.keep_alive_pings = false;
    c->with([&](auto& ws) {
      ws.set_option(timeouts);
      ws.read_message_max(kMaxFrame);
      ws.write_buffer_bytes(256);  // our frames are tiny; the default buffer is 4 KiB per device
      ws.auto_fragment(false);
    });
    if (options.tokenProvider) {
      std::string token;
      try {
        token = options.tokenProvider(refreshToken);
      } catch (const std::exception& e) {
        failAttempt(std::string("token_unavailable: ") + e.what());
        return;
      }
      refreshToken = false;
      if (!token.empty()) {
        c->with([&](auto& ws) {
          ws.set_option(websocket::stream_base::decorator(
              [bearer = "Bearer " + std::move(token)](websocket::request_type& request) {
                request.set(beast::http::field::authorization, bearer);
              }));
        });
      }
    }
    c->response = std::make_unique<websocket::response_type>();
    c->with([&](auto& ws) {
      ws.async_handshake(*c->response, c->url.hostHeader(), c->url.target,
                         [self = shared_from_this(), c](beast::error_code e) {
                           if (c != self->conn) return;
                           self->onUpgrade(c, e);
                         });
    });
  }

  void onUpgrade(const std::shared_ptr<Connection>& c, beast::error_code error) {
    auto response = std::move(c->response);
    if (error == websocket::error::upgrade_declined) {
      const unsigned status = response->result_int();
      if (status == 301 || status == 302 || status == 307 || status == 308) {
        redirect(std::string((*response)[beast::http::field::location]));
        return;
      }
      if (status == 401 || status == 403) {
        // The agent says why in the body's "error"; a 401 asks for a fresh token next time.
        if (status == 401) refreshToken = true;
        failAttempt((status == 401 ? "unauthorized: " : "forbidden: ") +
                    refusalReason(response->body()));
        return;
      }
      failAttempt("upgrade_refused:" + std::to_string(status));
      return;
    }
    if (error) {
      failAttempt("upgrade_failed: " + error.message());
      return;
    }
    phase = Phase::AwaitingWelcome;
    lastFrameAt = SteadyClock::now();
    read(c);
  }

  void redirect(const std::string& location) {
    auto url = parseWsUrl(location, true);
    if (!url) {
      failAttempt("bad_redirect");
      return;
    }
    if (redirectsLeft == 0) {
      failAttempt("too_many_redirects");
      return;
    }
    --redirectsLeft;
    ++stats.redirects;
    closeSocket(conn);
    if (redirectedCallback) redirectedCallback(location);
    if (phase != Phase::Connecting) return;  // the callback stopped us
    round.redirected();
    attempt(std::move(*url), true);
  }

  // The current attempt failed: report it and try the next endpoint of the round.
  void failAttempt(std::string reason) {
    closeSocket(conn);
    conn.reset();
    report(reason);
    if (phase == Phase::Connecting || phase == Phase::AwaitingWelcome) nextInRound();
  }

  // An established connection ended: report it and reconnect after the backoff delay.
  void lost(std::string reason) {
    closeSocket(conn);
    conn.reset();
    phase = Phase::Waiting;
    report(reason);
    if (phase == Phase::Waiting) wait(backoff.next());
  }

  void report(const std::string& reason) {
    ++stats.disconnects;
    if (disconnectedCallback) disconnectedCallback(reason);
  }

  static void closeSocket(const std::shared_ptr<Connection>& c) {
    if (!c) return;
    beast::error_code ignored;
    c->socket().close(ignored);
  }

  // Sends a close frame on the current connection and forgets it; its own handlers finish it
  // (Beast's handshake timeout bounds the wait for the agent's answer).
  void closeInBackground(websocket::close_code code, const char* why) {
    auto c = std::move(conn);
    if (!c || c->closing) return;
    c->closing = true;
    c->with([&](auto& ws) {
      ws.async_close(websocket::close_reason(code, why), [c](beast::error_code) {
        beast::error_code ignored;
        c->socket().close(ignored);
      });
    });
  }

  // --- the open connection ----------------------------------------------------------------

  void read(const std::shared_ptr<Connection>& c) {
    c->with([&](auto& ws) {
      ws.async_read(c->buffer, [self = shared_from_this(), c](beast::error_code e, std::size_t) {
        // While stopping, the close handshake finishes the connection, not the read.
        if (c != self->conn || self->phase == Phase::Stopping) return;
        self->onRead(c, e);
      });
    });
  }

  void onRead(const std::shared_ptr<Connection>& c, beast::error_code error) {
    if (error) {
      onReadError(c, error);
      return;
    }
    const auto now = SteadyClock::now();
    lastFrameAt = now;
    const auto data = c->buffer.cdata();
    const std::string_view text(static_cast<const char*>(data.data()), data.size());
    const bool wasText = c->with([](auto& ws) { return ws.got_text(); });
    if (wasText && phase == Phase::Open) {
      if (const auto seq = exactPong(text)) {
        c->buffer.consume(c->buffer.size());
        pong(*seq, now);
        if (conn == c) read(c);
        return;
      }
    }
    auto frame = nlohmann::json::parse(text, nullptr, false);
    c->buffer.consume(c->buffer.size());
    if (!wasText || frame.is_discarded() || !frame.is_object()) {
      protocolError("bad_frame: not a JSON object");
      return;
    }
    // value() would throw on a non-string type; a bad agent must not bring the device down.
    const auto typeField = frame.find("type");
    const std::string type =
        typeField != frame.end() && typeField->is_string() ? typeField->get<std::string>() : "";
    if (phase == Phase::AwaitingWelcome) {
      if (type != "welcome") {
        protocolError("bad_frame: expected welcome, got " + (type.empty() ? "no type" : type));
        return;
      }
      if (!welcome(c, frame)) return;
    } else if (type == "pong") {
      const auto seq = frame.find("seq");
      if (seq != frame.end() && seq->is_number_unsigned()) {
        pong(seq->get<std::uint64_t>(), now);
      } else {
        ++stats.heartbeatsAnswered;  // counted, but it answers no ping we timed
      }
    }
    // Other types are the agent's business (newer protocol); they still prove it is alive.
    if (conn == c) read(c);
  }

  bool welcome(const std::shared_ptr<Connection>& c, const nlohmann::json& frame) {
    auto info = parseWelcome(frame);
    if (!info) {
      protocolError("bad_frame: welcome needs agent, token and counter");
      return false;
    }
    info->endpoint = c->url.endpoint();

    phase = Phase::Open;
    backoff.reset();
    round.welcomed();
    ++stats.connects;
    if (options.heartbeat.count() > 0) nextPingAt = SteadyClock::now() + heartbeatInterval();
    armOpenTimer();
    if (connectedCallback) connectedCallback(*info);
    return true;
  }

  void pong(std::uint64_t seq, SteadyClock::time_point now) {
    ++stats.heartbeatsAnswered;
    if (seq != outstandingSeq) return;  // an older ping's answer: its send time is not kept
    outstandingSeq = 0;
    stats.lastRtt = std::chrono::duration_cast<Micros>(now - outstandingSentAt);
    if (rttCallback) rttCallback(stats.lastRtt);
  }

  void sendPing() {
    if (conn->writing) {
      pingDue = true;
      return;
    }
    pingDue = false;
    const auto c = conn;
    outstandingSeq = nextSeq++;
    outstandingSentAt = SteadyClock::now();
    pingFrame(c->out, outstandingSeq);
    c->writing = true;
    ++stats.heartbeatsSent;
    c->with([&](auto& ws) {
      ws.text(true);
      ws.async_write(asio::buffer(c->out),
                     [self = shared_from_this(), c](beast::error_code e, std::size_t) {
                       c->writing = false;
                       // A failed write shows up in the pending read as well; the read reports it.
                       if (e || c != self->conn || self->phase != Phase::Open) return;
                       if (self->pingDue) self->sendPing();
                     });
    });
  }

  void onReadError(const std::shared_ptr<Connection>& c, beast::error_code error) {
    const bool wasOpen = phase == Phase::Open;
    std::string reason;
    if (error == websocket::error::closed) {
      const auto why = c->with([](auto& ws) { return ws.reason(); });
      const auto code = static_cast<unsigned>(why.code);
      if (code == 4001 && phase == Phase::AwaitingWelcome && options.redirectInBand) {
        // An in-band redirect: right after the handshake, no welcome; followed like a 307.
        phase = Phase::Connecting;
        return redirect(std::string(why.reason.data(), why.reason.size()));
      }
      if (code == 4001) {
        reason = "leader_moved";
        // The reason names the new leader's endpoint when the agent knows it, or its whole URL
        // (an in-band redirect): a URL without a path gets ours.
        if (auto url = parseWsUrl(std::string_view(why.reason.data(), why.reason.size()), true)) {
          round.prefer(std::move(*url));
        }
      } else if (code == 4002) {
        reason = "ping_timeout";
      } else if (code == 4003) {
        reason = "token_expired";
        refreshToken = true;
      } else {
        reason = "closed_by_agent:" + std::to_string(code);
      }
    } else if (error == websocket::error::message_too_big) {
      protocolError("bad_frame: over 4096 bytes");
      return;
    } else {
      reason = "connection_lost: " + error.message();
    }
    if (wasOpen) {
      lost(reason);
    } else {
      failAttempt(reason);
    }
  }

  // The agent broke the protocol: close with 1002 and treat it like a lost connection.
  void protocolError(const std::string& reason) {
    const bool wasOpen = phase == Phase::Open;
    closeInBackground(websocket::close_code::protocol_error, "bad frame");
    if (wasOpen) {
      lost(reason);
    } else {
      failAttempt(reason);
    }
  }

  // --- stop -------------------------------------------------------------------------------

  void stop(std::function<void()> done) {
    if (phase == Phase::Stopping || phase == Phase::Stopped) {
      if (done) {
        if (phase == Phase::Stopped) {
          asio::post(io, std::move(done));
        } else {
          auto previous = std::move(stopDone);
          stopDone = [previous = std::move(previous), done = std::move(done)] {
            if (previous) previous();
            done();
          };
        }
      }
      return;
    }
    stopDone = std::move(done);
    const bool open = phase == Phase::Open && conn;
    phase = Phase::Stopping;
    if (!open) {
      closeSocket(conn);
      conn.reset();
      disarm();
      asio::post(io, [self = shared_from_this()] { self->finishStop(); });
      return;
    }
    const auto c = conn;
    c->closing = true;
    armAt(SteadyClock::now() + options.connectTimeout);
    c->with([&](auto& ws) {
      ws.async_close(websocket::close_reason(websocket::close_code::normal),
                     [self = shared_from_this(), c](beast::error_code) {
                       if (c == self->conn) self->finishStop();
                     });
    });
  }

  void finishStop() {
    if (phase != Phase::Stopping) return;
    phase = Phase::Stopped;
    closeSocket(conn);
    conn.reset();
    disarm();
    if (auto done = std::move(stopDone)) done();
  }

  void abandon() {
    connectedCallback = nullptr;
    redirectedCallback = nullptr;
    disconnectedCallback = nullptr;
    rttCallback = nullptr;
    stopDone = nullptr;
    phase = Phase::Stopped;
    closeSocket(conn);
    conn.reset();
    disarm();
  }
};

DeviceClient::DeviceClient(boost::asio::io_context& io, DeviceOptions options) {
  if (auto problem = validate(options); !problem.empty()) throw std::invalid_argument(problem);
  impl_ = std::make_shared<Impl>(io, std::move(options));
}

DeviceClient::~DeviceClient() { impl_->abandon(); }

void DeviceClient::onConnected(std::function<void(const ConnectedInfo&)> callback) {
  impl_->connectedCallback = std::move(callback);
}
void DeviceClient::onRedirected(std::function<void(std::string_view)> callback) {
  impl_->redirectedCallback = std::move(callback);
}
void DeviceClient::onDisconnected(std::function<void(std::string_view)> callback) {
  impl_->disconnectedCallback = std::move(callback);
}
void DeviceClient::onHeartbeatAnswered(std::function<void(Micros)> callback) {
  impl_->rttCallback = std::move(callback);
}

void DeviceClient::start(Millis delay) {
  if (impl_->phase != Phase::Idle) return;
  impl_->wait(delay);
}

void DeviceClient::stop(std::function<void()> done) { impl_->stop(std::move(done)); }

bool DeviceClient::connected() const { return impl_->phase == Phase::Open; }
const DeviceStats& DeviceClient::stats() const { return impl_->stats; }
const DeviceOptions& DeviceClient::options() const { return impl_->options; }

}  // namespace zkagent::device
