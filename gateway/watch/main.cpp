// zk-presence-watch: one subscriber of the fencing-gateway's presence stream, printing one line
// per snapshot entry and change (see kUsage and docs/presence-runtime.md "Subscribers"), over
// ws:// or wss:// (the gateway's certificate checked against --ca and the host dialled).
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "zkagent/http/tls.hpp"
#include "zkagent/http/websocket.hpp"
#include "zkagent/naming.hpp"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;
using nlohmann::json;

const char* const kUsage =
    R"(usage: zk-presence-watch --gateway URL [--ca FILE] --viewer V --targets A,B,... [--token T]

Subscribes to the presence of the targets as viewer V at the fencing-gateway's subscriber
endpoint and prints one line per event on stdout, flushed at once:
  SNAPSHOT <target> <status> <version>          one per target V may see (others are absent)
  SNAPSHOT-END
  CHANGE <target> <status> <version> <observed_at_minute> <unix_ns>
  REMOVED <target> <unix_ns>                    V may no longer see the target
  UNSUBSCRIBED <target,...>
  ERROR <message>                               the gateway refused a message
  CLOSED <code> <unix_ns> <reason>
status is online, offline, recently, long_ago or unknown. Lines on stdin change the
subscription: "add A,B", "remove A", or a raw JSON message sent as it is.
Exit: 0 on SIGTERM/SIGINT (a close frame is sent first) or a normal close, 1 when the gateway
refuses or cannot be reached (with wss://: also when its certificate does not verify against
--ca or does not name HOST), 3 when it closes the stream (4008: too slow, resubscribe),
2 for bad arguments.

options:
  --gateway URL     the subscriber endpoint (presence.subscribe_listen): ws://HOST:PORT, or
                    wss://HOST:PORT when the gateway has a certificate (tls.cert)
  --ca FILE         with wss:// (required): the CA (PEM) the gateway's certificate must chain
                    to; the certificate must also name HOST (a DNS name or an IP address)
  --viewer V        the viewing account
  --targets A,B     accounts to watch (may be empty: "")
  --token T         bearer token, when the gateway has one
)";

struct Options {
  std::string host, port, viewer, targets, token;
  bool tls = false;  // wss://
  std::string ca;
};

[[noreturn]] void usageError(const std::string& message) {
  std::cerr << "zk-presence-watch: " << message << "\n" << kUsage;
  std::exit(2);
}

Options parseArgs(int argc, char** argv) {
  Options options;
  bool haveTargets = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (i + 1 >= argc) usageError(flag + ": needs a value");
    const std::string value = argv[++i];
    if (flag == "--gateway") {
      std::string rest = value;
      options.tls = rest.starts_with("wss://");
      if (options.tls) {
        rest = rest.substr(6);
      } else if (rest.starts_with("ws://")) {
        rest = rest.substr(5);
      }
      if (rest.ends_with("/")) rest.pop_back();
      zkagent::naming::HostPort address;
      if (rest.find('/') != std::string::npos ||
          zkagent::naming::hostPortError(rest, address, zkagent::naming::PortZero::Refused)) {
        usageError("--gateway: expected ws://HOST:PORT or wss://HOST:PORT, got '" + value + "'");
      }
      options.host = address.host;
      options.port = std::to_string(address.port);
    } else if (flag == "--ca") {
      options.ca = value;
    } else if (flag == "--viewer") {
      if (auto error = zkagent::naming::accountIdError(value)) usageError("--viewer: " + *error);
      options.viewer = value;
    } else if (flag == "--targets") {
      std::string_view list(value);
      while (!list.empty()) {
        const auto comma = list.find(',');
        if (auto error = zkagent::naming::accountIdError(list.substr(0, comma))) {
          usageError("--targets: each " + *error + ", got '" + value + "'");
        }
        list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
      }
      options.targets = value;
      haveTargets = true;
    } else if (flag == "--token") {
      options.token = value;
    } else {
      usageError(flag + ": unknown option");
    }
  }
  if (options.host.empty()) usageError("--gateway: required");
  if (options.tls && options.ca.empty()) {
    usageError("--ca: required with a wss:// gateway (the CA its certificate chains to)");
  }
  if (!options.tls && !options.ca.empty()) usageError("--ca: only with a wss:// gateway");
  if (!options.ca.empty() && !std::ifstream(options.ca)) {
    usageError("--ca: cannot read " + options.ca);
  }
  if (options.viewer.empty()) usageError("--viewer: required");
  if (!haveTargets) usageError("--targets: required");
  return options;
}

std::int64_t unixNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void emit(const std::string& line) {
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

std::vector<std::string> splitList(std::string_view list) {
  std::vector<std::string> out;
  while (!list.empty()) {
    const auto comma = list.find(',');
    if (auto item = list.substr(0, comma); !item.empty()) out.emplace_back(item);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
  }
  return out;
}

// `Stream` is beast::tcp_stream (ws://) or an ssl_stream over one (wss://).
template <typename Stream>
class Watch {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  template <typename... Tls>
  Watch(asio::io_context& io, Options options, Tls&... tls)
      : io_(io),
        options_(std::move(options)),
        resolver_(io),
        ws_(io, tls...),
        stdin_(io, ::dup(0)) {}

  int run() {
    asio::signal_set signals(io_, SIGINT, SIGTERM);
    signals.async_wait([this](beast::error_code ec, int) {
      if (ec) return;
      stopping_ = true;
      if (!open_) {
        io_.stop();
        return;
      }
      ws_.async_close(websocket::close_code::normal, [this](beast::error_code) { io_.stop(); });
    });
    resolver_.async_resolve(options_.host, options_.port,
                            [this](beast::error_code ec, tcp::resolver::results_type results) {
                              if (ec)
                                return failed("resolve " + options_.host + ": " + ec.message());
                              connect(results);
                            });
    io_.run();
    return exitCode_;
  }

 private:
  void failed(const std::string& why) {
    std::cerr << "zk-presence-watch: " << why << std::endl;
    exitCode_ = 1;
    io_.stop();
  }

  void connect(const tcp::resolver::results_type& results) {
    beast::get_lowest_layer(ws_).expires_after(std::chrono::seconds(10));
    beast::get_lowest_layer(ws_).async_connect(
        results, [this](beast::error_code ec, const tcp::endpoint&) {
          if (ec)
            return failed("connect " + options_.host + ":" + options_.port + ": " + ec.message());
          if constexpr (kTls) {
            beast::get_lowest_layer(ws_).expires_after(std::chrono::seconds(10));
            zkagent::http::expectServerName(ws_.next_layer().native_handle(), options_.host);
            ws_.next_layer().async_handshake(asio::ssl::stream_base::client,
                                             [this](beast::error_code error) {
                                               if (error) return failed(tlsRefusal(error));
                                               upgrade();
                                             });
          } else {
            upgrade();
          }
        });
  }

  // Why the TLS handshake failed, in the words every client of the project uses.
  std::string tlsRefusal(const beast::error_code& ec) {
    return "TLS handshake with " + options_.host + ":" + options_.port + ": " +
           zkagent::http::handshakeFailure(ws_.next_layer().native_handle(), ec, options_.host) +
           " (trusted CA: " + options_.ca + ")";
  }

  // The WebSocket upgrade (over TLS with wss://).
  void upgrade() {
    ws_.set_option(websocket::stream_base::decorator([this](websocket::request_type& req) {
      if (!options_.token.empty()) {
        req.set(beast::http::field::authorization, "Bearer " + options_.token);
      }
    }));
    const std::string target =
        "/v1/presence/subscribe?viewer=" + options_.viewer + "&targets=" + options_.targets;
    ws_.async_handshake(response_, options_.host + ":" + options_.port, target,
                        [this](beast::error_code error) { onHandshake(error); });
  }

  void onHandshake(beast::error_code ec) {
    // A WebSocket handshake error means an HTTP answer was read; anything else means none came.
    if (ec && ec != websocket::condition::handshake_failed) {
      return failed("subscribe failed at " + options_.host + ":" + options_.port +
                    ": no HTTP answer (" + ec.message() + ")" +
                    (kTls ? "" : "; a wss:// listener answers nothing to ws://"));
    }
    if (ec) {
      return failed("subscribe refused: HTTP " + std::to_string(response_.result_int()) + " " +
                    response_.body());
    }
    beast::get_lowest_layer(ws_).expires_never();
    ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::client));
    open_ = true;
    readStdin();
    read();
  }

  void read() {
    ws_.async_read(buffer_, [this](beast::error_code ec, std::size_t) {
      if (ec) return onClosed(ec);
      const std::string text = beast::buffers_to_string(buffer_.data());
      buffer_.consume(buffer_.size());
      print(text);
      read();
    });
  }

  void print(const std::string& text) {
    const auto message = json::parse(text, nullptr, false);
    if (message.is_discarded() || !message.is_object()) return emit("ERROR unparsable message");
    const std::string type = message.value("type", "");
    if (type == "snapshot") {
      for (const auto& entry : message.value("targets", json::array())) {
        emit("SNAPSHOT " + entry.value("target", "?") + " " + entry.value("status", "?") + " " +
             std::to_string(entry.value("version", std::uint64_t{0})));
      }
      emit("SNAPSHOT-END");
    } else if (type == "events") {
      const auto now = std::to_string(unixNanos());
      for (const auto& event : message.value("events", json::array())) {
        if (event.value("removed", false)) {
          emit("REMOVED " + event.value("target", "?") + " " + now);
          continue;
        }
        emit("CHANGE " + event.value("target", "?") + " " + event.value("status", "?") + " " +
             std::to_string(event.value("version", std::uint64_t{0})) + " " +
             std::to_string(event.value("observed_at_minute", std::int64_t{0})) + " " + now);
      }
    } else if (type == "unsubscribed") {
      std::string targets;
      for (const auto& target : message.value("targets", json::array())) {
        targets += (targets.empty() ? "" : ",") + target.get<std::string>();
      }
      emit("UNSUBSCRIBED " + targets);
    } else if (type == "error") {
      emit("ERROR " + message.value("error", std::string("?")));
    } else {
      emit("ERROR unknown message type '" + type + "'");
    }
  }

  void onClosed(beast::error_code ec) {
    if (stopping_) return;
    const auto reason = ws_.reason();
    emit("CLOSED " + std::to_string(reason.code) + " " + std::to_string(unixNanos()) + " " +
         std::string(reason.reason.c_str()));
    exitCode_ =
        ec == websocket::error::closed && reason.code == websocket::close_code::normal ? 0 : 3;
    io_.stop();
  }

  void readStdin() {
    asio::async_read_until(stdin_, input_, '\n', [this](beast::error_code ec, std::size_t n) {
      if (ec) return;  // stdin closed: keep watching
      std::string line(asio::buffers_begin(input_.data()),
                       asio::buffers_begin(input_.data()) + static_cast<std::ptrdiff_t>(n));
      input_.consume(n);
      while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
      if (line.starts_with("add ") || line.starts_with("remove ")) {
        const auto space = line.find(' ');
        send(json{{"type", line.substr(0, space)}, {"targets", splitList(line.substr(space + 1))}}
                 .dump());
      } else if (!line.empty()) {
        send(line);
      }
      readStdin();
    });
  }

  void send(std::string message) {
    outgoing_.push_back(std::move(message));
    if (outgoing_.size() == 1) writeNext();
  }

  void writeNext() {
    ws_.async_write(asio::buffer(outgoing_.front()), [this](beast::error_code ec, std::size_t) {
      if (ec) return;
      outgoing_.pop_front();
      if (!outgoing_.empty()) writeNext();
    });
  }

  asio::io_context& io_;
  Options options_;
  tcp::resolver resolver_;
  zkagent::http::WebSocketStream<Stream> ws_;
  asio::posix::stream_descriptor stdin_;
  websocket::response_type response_;
  beast::flat_buffer buffer_;
  asio::streambuf input_;
  std::deque<std::string> outgoing_;
  bool open_ = false, stopping_ = false;
  int exitCode_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Options options = parseArgs(argc, argv);
  asio::io_context io;
  if (!options.tls) return Watch<beast::tcp_stream>(io, std::move(options)).run();
  std::optional<asio::ssl::context> tls;
  try {
    tls.emplace(zkagent::http::clientTlsContext({.ca = options.ca}));
  } catch (const std::invalid_argument& error) {
    usageError(std::string("--ca: ") + error.what());
  }
  return Watch<beast::ssl_stream<beast::tcp_stream>>(io, std::move(options), *tls).run();
}
