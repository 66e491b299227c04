// Subscriber fan-out at the gateway: many WebSocket subscribers, each watching many targets, and a
// burst of accounts going offline at once. A fencing-gateway process (HWM mode, no ZooKeeper) gets
// one lease per account by hand, every subscriber gets its snapshot, then one lease batch removes
// every device; the subscribers' events are timed from that batch (this process sends it and
// holds the subscriber connections, so one clock measures both ends).
//
//   subscriber-fanout-bench --out DIR [--subscribers 1000] [--targets 100] [--accounts 1000]
//                           [--debounce-ms 0] [--coalesce-ms 100]
//
// Reports events per second, p50/p99 delivery latency from the removal batch, messages per
// subscriber (coalescing) and the gateway's resident memory per subscription.
#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../../tests/presence_runtime/presence_cluster.hpp"
#include "zkagent/http/websocket.hpp"
#include "zkagent/naming.hpp"
#include "zkbench/process.hpp"
#include "zkbench/stats.hpp"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using zktest::presence::Cluster;
using zktest::presence::json;

struct Options {
  std::filesystem::path out;
  int subscribers = 1000, targets = 100, accounts = 1000, debounceMs = 0, coalesceMs = 100;
};

std::string accountName(int i) { return "acct-" + std::to_string(i); }
std::string viewerName(int i) { return "viewer-" + std::to_string(i); }
// Viewer v watches accounts v, v+1, ... v+targets-1 (mod accounts): each account has `targets`
// watchers when subscribers == accounts.
int targetOf(int viewer, int k, const Options& o) { return (viewer + k) % o.accounts; }

struct Shared {
  Clock::time_point burstAt{};
  bool burstSent = false;
  int snapshots = 0, failures = 0;
  std::vector<double> latenciesMs;  // per offline event, from the removal batch
  Clock::time_point lastEvent{};
};

class Subscriber : public std::enable_shared_from_this<Subscriber> {
 public:
  Subscriber(asio::io_context& io, Shared& shared, uint16_t port, std::string target)
      : ws_(io), shared_(shared), port_(port), target_(std::move(target)) {}

  void start() {
    auto self = shared_from_this();
    beast::get_lowest_layer(ws_).async_connect(
        asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_),
        [self](beast::error_code ec) {
          if (ec) return self->fail(ec);
          self->ws_.set_option(websocket::stream_base::decorator([](websocket::request_type& req) {
            req.set(beast::http::field::authorization,
                    std::string("Bearer ") + zktest::presence::kGatewayToken);
          }));
          self->ws_.async_handshake("127.0.0.1:" + std::to_string(self->port_), self->target_,
                                    [self](beast::error_code hec) {
                                      if (hec) return self->fail(hec);
                                      self->read();
                                    });
        });
  }
  int messagesAfterBurst() const { return messagesAfterBurst_; }

 private:
  void fail(const beast::error_code& ec) {
    if (shared_.failures++ == 0) std::cerr << "first subscriber failure: " << ec.message() << "\n";
  }
  void read() {
    auto self = shared_from_this();
    ws_.async_read(buffer_, [self](beast::error_code ec, std::size_t) {
      if (ec) return self->fail(ec);
      const auto at = Clock::now();
      // Counted on the raw text, not parsed: one client thread reads what the gateway's threads
      // write, and a JSON parse of every message would make the client the bottleneck.
      const auto message = beast::buffers_to_string(self->buffer_.data());
      self->buffer_.consume(self->buffer_.size());
      if (message.find(R"("type":"snapshot")") != std::string::npos) {
        ++self->shared_.snapshots;
      } else if (message.find(R"("type":"events")") != std::string::npos &&
                 self->shared_.burstSent) {
        ++self->messagesAfterBurst_;
        const double latency =
            std::chrono::duration<double, std::milli>(at - self->shared_.burstAt).count();
        const std::string_view offline = R"("status":"offline")";
        for (size_t pos = message.find(offline); pos != std::string::npos;
             pos = message.find(offline, pos + offline.size())) {
          self->shared_.latenciesMs.push_back(latency);
        }
        self->shared_.lastEvent = at;
      }
      self->read();
    });
  }

  zkagent::http::WebSocketStream<beast::tcp_stream> ws_;
  beast::flat_buffer buffer_;
  Shared& shared_;
  uint16_t port_;
  std::string target_;
  int messagesAfterBurst_ = 0;
};

// Runs `io` until `done` or the deadline; false on timeout.
bool runUntil(asio::io_context& io, const std::function<bool()>& done,
              std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    io.run_for(5ms);
    io.restart();
  }
  return true;
}

json metricsOf(Cluster& cluster) {
  json out = json::object();
  auto r = cluster.gateway().get("/metrics");
  std::istringstream in(r.body);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("zkagent_gateway_presence_"))
      out[line.substr(0, line.rfind(' '))] = std::stod(line.substr(line.rfind(' ') + 1));
  }
  return out;
}

int run(const Options& o) {
  std::filesystem::create_directories(o.out);
  zktest::presence::Timing timing;
  timing.leaseTtlMs = 600000;  // nothing expires by itself during the run
  timing.sweepMs = 100;
  timing.debounceMs = o.debounceMs;
  timing.coalesceMs = o.coalesceMs;
  Cluster cluster("", "", o.out / "cluster", timing);
  auto& gateway = cluster.gateway();

  // Privacy: each account lets exactly its watchers see it.
  for (int a = 0; a < o.accounts; ++a) {
    json contacts = json::array();
    for (int v = 0; v < o.subscribers; ++v) {
      for (int k = 0; k < o.targets; ++k) {
        if (targetOf(v, k, o) == a) {
          contacts.push_back(viewerName(v));
          break;
        }
      }
    }
    if (cluster.setPrivacy(accountName(a), {{"granularity", "exact"}, {"contacts", contacts}}) !=
        200)
      throw std::runtime_error("privacy refused for " + accountName(a));
  }
  auto leaseBatch = [&](const char* kind) {
    json entries = json::array();
    for (int a = 0; a < o.accounts; ++a) {
      json entry{
          {"account", accountName(a)}, {"device", "phone"}, {"token", 1}, {"counter", a + 1}};
      if (std::string(kind) == "remove") entry["reason"] = "close";
      entries.push_back(entry);
    }
    return json{{"instanceId", "bench"}, {"sessionId", 1}, {kind, entries}}.dump();
  };
  auto renewed = gateway.post("/v1/presence/leases", leaseBatch("renew"));
  if (renewed.status != 200) throw std::runtime_error("renew refused: " + renewed.body);

  const pid_t gatewayPid = cluster.gatewayProcess().pid();
  const long rssBefore = zkbench::rssKiB(gatewayPid);
  asio::io_context io;
  Shared shared;
  std::vector<std::shared_ptr<Subscriber>> subscribers;
  const uint16_t port = zkagent::naming::trailingPort(cluster.subscribeUrl()).value();
  const auto connectStart = Clock::now();
  for (int v = 0; v < o.subscribers; ++v) {
    std::string targets;
    for (int k = 0; k < o.targets; ++k) targets += (k ? "," : "") + accountName(targetOf(v, k, o));
    subscribers.push_back(std::make_shared<Subscriber>(
        io, shared, port,
        "/v1/presence/subscribe?viewer=" + viewerName(v) + "&targets=" + targets));
    subscribers.back()->start();
    // A few hundred handshakes in flight at most, not the whole backlog at once.
    if (v % 200 == 199)
      runUntil(
          io, [&] { return shared.snapshots + shared.failures > v - 100; }, 30s);
  }
  if (!runUntil(
          io, [&] { return shared.snapshots + shared.failures >= o.subscribers; }, 60s) ||
      shared.failures > 0)
    throw std::runtime_error("subscribed " + std::to_string(shared.snapshots) + ", failed " +
                             std::to_string(shared.failures));
  const double subscribeSeconds =
      std::chrono::duration<double>(Clock::now() - connectStart).count();
  runUntil(
      io, [] { return false; }, 500ms);  // settle
  const long rssAfter = zkbench::rssKiB(gatewayPid);
  const json before = metricsOf(cluster);

  const size_t expected = static_cast<size_t>(o.subscribers) * static_cast<size_t>(o.targets);
  shared.burstAt = Clock::now();
  shared.burstSent = true;
  // The removal batch is sent on another thread so this one keeps reading the subscribers.
  double answeredMs = 0;
  std::thread burst([&] {
    auto removed = gateway.post("/v1/presence/leases", leaseBatch("remove"));
    answeredMs = std::chrono::duration<double, std::milli>(Clock::now() - shared.burstAt).count();
    if (removed.status != 200) std::cerr << "remove refused: " << removed.body << "\n";
  });
  const bool complete = runUntil(
      io, [&] { return shared.latenciesMs.size() >= expected; },
      std::chrono::milliseconds(30000 + o.debounceMs));
  burst.join();
  runUntil(
      io, [] { return false; }, std::chrono::milliseconds(2 * o.coalesceMs + 200));
  const json after = metricsOf(cluster);

  std::vector<double> messages;
  for (const auto& s : subscribers) messages.push_back(s->messagesAfterBurst());
  std::sort(messages.begin(), messages.end());
  std::vector<double> latencies = shared.latenciesMs;
  std::sort(latencies.begin(), latencies.end());
  const double spanS = std::chrono::duration<double>(shared.lastEvent - shared.burstAt).count();
  const double deliverySpanS = spanS - o.debounceMs / 1000.0;
  json report{
      {"subscribers", o.subscribers},
      {"targets_per_subscriber", o.targets},
      {"accounts", o.accounts},
      {"burst", "one POST /v1/presence/leases removing every account's only device"},
      {"debounce_ms", o.debounceMs},
      {"coalesce_ms", o.coalesceMs},
      {"events_expected", expected},
      {"events_delivered", shared.latenciesMs.size()},
      {"complete", complete},
      {"removal_batch_answered_ms", answeredMs},
      {"delivery_span_ms", deliverySpanS * 1000},
      {"events_per_second",
       deliverySpanS > 0 ? static_cast<double>(shared.latenciesMs.size()) / deliverySpanS : 0},
      {"latency_ms",
       {{"p50", zkbench::quantileOfSorted(latencies, 0.5)},
        {"p99", zkbench::quantileOfSorted(latencies, 0.99)},
        {"max", zkbench::quantileOfSorted(latencies, 1.0)}}},
      {"messages_per_subscriber",
       {{"min", zkbench::quantileOfSorted(messages, 0)},
        {"median", zkbench::quantileOfSorted(messages, 0.5)},
        {"max", zkbench::quantileOfSorted(messages, 1.0)}}},
      {"subscribe_seconds", subscribeSeconds},
      {"gateway_rss_kb", {{"before", rssBefore}, {"subscribed", rssAfter}}},
      {"rss_bytes_per_subscriber",
       static_cast<double>(rssAfter - rssBefore) * 1024 / o.subscribers},
      {"rss_bytes_per_watched_target",
       static_cast<double>(rssAfter - rssBefore) * 1024 / static_cast<double>(expected)},
      {"metrics_before_burst", before},
      {"metrics_after_burst", after}};
  std::ofstream(o.out / "fanout.json") << report.dump(2) << "\n";

  std::printf("subscriber fan-out: %d subscribers x %d targets, %d accounts offline in one batch\n",
              o.subscribers, o.targets, o.accounts);
  std::printf("events delivered    %zu / %zu\n", shared.latenciesMs.size(), expected);
  std::printf("events per second   %.0f (over %.0f ms after the debounce)\n",
              report["events_per_second"].get<double>(), deliverySpanS * 1000);
  std::printf("latency p50/p99/max %.1f / %.1f / %.1f ms from the removal batch (debounce %d ms)\n",
              report["latency_ms"]["p50"].get<double>(), report["latency_ms"]["p99"].get<double>(),
              report["latency_ms"]["max"].get<double>(), o.debounceMs);
  std::printf("removal batch        answered after %.1f ms\n", answeredMs);
  std::printf("messages/subscriber min %.0f median %.0f max %.0f (coalesce %d ms)\n",
              report["messages_per_subscriber"]["min"].get<double>(),
              report["messages_per_subscriber"]["median"].get<double>(),
              report["messages_per_subscriber"]["max"].get<double>(), o.coalesceMs);
  std::printf(
      "gateway RSS         %ld -> %ld kB: %.0f B per subscriber, %.0f B per target watched\n",
      rssBefore, rssAfter, report["rss_bytes_per_subscriber"].get<double>(),
      report["rss_bytes_per_watched_target"].get<double>());
  std::printf("report: %s\n", (o.out / "fanout.json").c_str());
  return complete ? 0 : 1;
}

int usage(const std::string& problem) {
  std::cerr << "subscriber-fanout-bench: " << problem
            << "\nusage: subscriber-fanout-bench --out DIR [--subscribers 1000] [--targets 100] "
               "[--accounts 1000] [--debounce-ms 0] [--coalesce-ms 100]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return usage(flag + ": needs a value");
    const std::string value = argv[++i];
    if (flag == "--out") {
      o.out = value;
      continue;
    }
    int* field = flag == "--subscribers"   ? &o.subscribers
                 : flag == "--targets"     ? &o.targets
                 : flag == "--accounts"    ? &o.accounts
                 : flag == "--debounce-ms" ? &o.debounceMs
                 : flag == "--coalesce-ms" ? &o.coalesceMs
                                           : nullptr;
    if (!field) return usage(flag + ": unknown flag");
    try {
      *field = std::stoi(value);
    } catch (const std::exception&) {
      return usage(flag + ": not an integer: " + value);
    }
  }
  if (o.out.empty()) return usage("--out: required");
  if (o.subscribers < 1 || o.subscribers > 9000)
    return usage("--subscribers: must be between 1 and 9000 (one fd each, hard limit 20000)");
  if (o.accounts < 1 || o.targets < 1 || o.targets > o.accounts)
    return usage("--targets: must be between 1 and --accounts");
  if (o.debounceMs < 0 || o.coalesceMs < 0) return usage("--debounce-ms/--coalesce-ms: >= 0");
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "subscriber-fanout-bench: " << e.what() << "\n";
    return 1;
  }
}
