// The relay's version rule (gateway/presence_relay.*, docs/gateway-cluster.md "Versions never go
// backwards"): a real SubscriberRelay linked over a loopback WebSocket to a fake former owner, with
// the shard map given by a fake ShardOwnership, so that the one window in which only the rule
// protects the subscriber can be held open: the edge has just taken the target's shard and sent
// its own first change (a higher epoch), and its 100 ms map pass has not yet moved the target off
// the old owner's link, when the old owner sends a late, lower version.
#include "presence_relay.hpp"

#include <gtest/gtest.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "gateway.hpp"
#include "zkagent/http/websocket.hpp"
#include "zkagent/naming.hpp"
#include "zktest/deadline.hpp"

using namespace zkagent;
using namespace std::chrono_literals;
using nlohmann::json;

// Named, not anonymous: the test files of gateway_test are one translation unit (unity build).
namespace presence_relay_test {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

constexpr std::uint32_t kShards = 8;

std::uint64_t version(std::uint64_t epoch, std::uint64_t count) { return (epoch << 32) + count; }

// An owner's subscriber listener for one relay link: accepts it, keeps what the edge sends first
// (its "add"), then writes the frames the test hands it, in order.
class FakeOwner {
 public:
  FakeOwner() : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeOwner() {
    {
      std::lock_guard lock(mutex_);
      stopped_ = true;
    }
    wake_.notify_all();
    if (!accepted_) {  // unblocks accept(): the thread then fails the upgrade and ends
      asio::io_context io;
      tcp::socket poke(io);
      boost::system::error_code ignored;
      poke.connect(acceptor_.local_endpoint(), ignored);
      thread_.join();
      return;
    }
    thread_.join();
  }
  FakeOwner(const FakeOwner&) = delete;
  FakeOwner& operator=(const FakeOwner&) = delete;

  std::string url() const {
    return "ws://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }
  void send(json frame) {
    {
      std::lock_guard lock(mutex_);
      outgoing_.push_back(frame.dump());
    }
    wake_.notify_all();
  }
  std::optional<json> firstFrame() const {
    std::lock_guard lock(mutex_);
    return first_;
  }

 private:
  void serve() {
    tcp::socket socket(io_);
    boost::system::error_code error;
    acceptor_.accept(socket, error);
    accepted_ = true;
    if (error) return;
    zkagent::http::WebSocketStream<tcp::socket> ws(std::move(socket));
    ws.accept(error);
    if (error) return;
    beast::flat_buffer buffer;
    ws.read(buffer, error);
    if (error) return;
    {
      std::lock_guard lock(mutex_);
      first_ = json::parse(beast::buffers_to_string(buffer.data()), nullptr, false);
    }
    ws.text(true);
    std::unique_lock lock(mutex_);
    while (true) {
      wake_.wait(lock, [this] { return stopped_ || !outgoing_.empty(); });
      if (stopped_) break;
      const auto frame = std::move(outgoing_.front());
      outgoing_.pop_front();
      lock.unlock();
      ws.write(asio::buffer(frame), error);
      lock.lock();
      if (error) break;
    }
    lock.unlock();
    beast::get_lowest_layer(ws).close(error);
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::thread thread_;
  std::atomic<bool> accepted_{false};
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::string> outgoing_;
  std::optional<json> first_;
  bool stopped_ = false;
};

// The shard map as the test sets it: every shard owned by the fake owner in the map the relay hub
// reads every 100 ms (ownerOfShard), and the elections' gate (owner) saying "owned here" for the
// targets the edge has taken. Keeping the two apart holds open the window between a take and the
// hub's next pass.
class FakeShards final : public gateway::ShardOwnership {
 public:
  explicit FakeShards(std::string subscribeUrl) : subscribeUrl_(std::move(subscribeUrl)) {}
  void take(const std::string& target) {
    std::lock_guard lock(mutex_);
    taken_.insert(target);
  }

  Answer owner(std::string_view account) const override {
    {
      std::lock_guard lock(mutex_);
      if (taken_.contains(account)) {
        Answer answer;
        answer.kind = Answer::Kind::Owned;
        answer.shard = naming::shardId(naming::shardOf(account, kShards));
        answer.take = 1;
        answer.epoch = 6;
        return answer;
      }
    }
    return ownerOfShard(naming::shardOf(account, kShards));
  }
  Answer ownerOfShard(std::uint32_t index) const override {
    Answer answer;
    answer.kind = Answer::Kind::Elsewhere;
    answer.shard = naming::shardId(index);
    answer.owner = "http://127.0.0.1:1";
    answer.subscribeUrl = subscribeUrl_;
    return answer;
  }
  std::uint32_t shardCount() const override { return kShards; }
  std::size_t owned() const override { return 0; }
  void stop(std::function<void()> handedOver) override { handedOver(); }
  DrainAnswer drain(std::chrono::milliseconds) override {
    return {Standing::Standing, "not a cluster", false};
  }
  Standing standing() const override { return Standing::Standing; }
  std::uint64_t epochOf(std::string_view) const override { return 0; }
  std::optional<std::string> writePrivacy(const std::string&, const std::string&,
                                          std::chrono::milliseconds) override {
    return "not a cluster";
  }
  void watchPrivacy(PrivacyHandler) override {}

 private:
  const std::string subscribeUrl_;
  mutable std::mutex mutex_;
  std::set<std::string, std::less<>> taken_;
};

// The subscriber session's side: what the relay forwards, as (target, version).
class RecordingSink final : public gateway::RelaySink {
 public:
  void relayed(const std::string& target, nlohmann::ordered_json entry) override {
    std::lock_guard lock(mutex_);
    seen_.emplace_back(target, entry.value("version", std::uint64_t{0}));
  }
  void relayRefused(const std::string& why) override {
    std::lock_guard lock(mutex_);
    refused_.push_back(why);
  }
  std::vector<std::pair<std::string, std::uint64_t>> seen() const {
    std::lock_guard lock(mutex_);
    return seen_;
  }
  bool saw(const std::string& target, std::uint64_t atVersion) const {
    std::lock_guard lock(mutex_);
    return std::find(seen_.begin(), seen_.end(), std::make_pair(target, atVersion)) != seen_.end();
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::pair<std::string, std::uint64_t>> seen_;
  std::vector<std::string> refused_;
};

std::string describe(const std::vector<std::pair<std::string, std::uint64_t>>& seen) {
  std::string text;
  for (const auto& entry : seen) {
    text += " " + entry.first + "@" + std::to_string(entry.second >> 32) + ":" +
            std::to_string(entry.second & 0xffffffffu);
  }
  return text;
}

json status(const std::string& target, std::string_view state, std::uint64_t atVersion) {
  return {{"target", target}, {"status", state}, {"version", atVersion}};
}

TEST(PresenceRelay, AFormerOwnersLateLowerVersionNeverReachesTheSubscriber) {
  FakeOwner former;
  FakeShards shards(former.url());
  asio::io_context io;
  auto work = asio::make_work_guard(io);
  std::thread thread([&io] { io.run(); });
  auto strand = asio::make_strand(io);
  // What runs on the presence model's strand, as the subscriber session calls it.
  const auto onStrand = [&strand](std::function<void()> task) {
    std::promise<void> done;
    asio::post(strand, [&task, &done] {
      task();
      done.set_value();
    });
    done.get_future().wait();
  };

  gateway::Config config;
  config.gatewayId = "gw-edge";
  auto hub = std::make_shared<gateway::RelayHub>(strand, config, shards);
  auto sink = std::make_shared<RecordingSink>();
  std::shared_ptr<gateway::SubscriberRelay> relay;
  const std::string target = "acc-t", sentinel = "acc-u";
  onStrand([&] { hub->start(); });  // its first map pass runs before the next task
  onStrand([&] {
    relay = std::make_shared<gateway::SubscriberRelay>(hub, sink, "viewer-1", "", true);
    hub->track(relay);
    relay->add({target, sentinel});
  });
  ASSERT_TRUE(zktest::eventually([&] { return former.firstFrame().has_value(); }, 5s))
      << "the relay never linked to the owner";
  EXPECT_EQ(former.firstFrame()->value("type", ""), "add") << *former.firstFrame();

  // The owner's snapshot, under its epoch 5.
  former.send({{"type", "snapshot"},
               {"targets", json::array({status(target, "online", version(5, 3)),
                                        status(sentinel, "online", version(5, 1))})}});
  ASSERT_TRUE(zktest::eventually([&] { return sink->saw(sentinel, version(5, 1)); }, 5s))
      << describe(sink->seen());

  // The edge takes the target's shard (epoch 6): its own model's first change goes out, past the
  // same rule, before the hub's next pass has moved the target off the former owner's link.
  shards.take(target);
  bool ownSent = false;
  onStrand([&] { ownSent = relay->here(target) && relay->admit(target, version(6, 1)); });
  ASSERT_TRUE(ownSent) << "the edge's own first change under its take was not let through";

  // The former owner, late: a change of its epoch 5 (a lease expiring there), then a change of
  // the sentinel so that the test knows the late one has been handled.
  former.send(
      {{"type", "events"}, {"events", json::array({status(target, "offline", version(5, 4))})}});
  former.send(
      {{"type", "events"}, {"events", json::array({status(sentinel, "away", version(5, 2))})}});
  ASSERT_TRUE(zktest::eventually([&] { return sink->saw(sentinel, version(5, 2)); }, 5s))
      << describe(sink->seen());
  EXPECT_FALSE(sink->saw(target, version(5, 4)))
      << "the subscriber got epoch 5 after epoch 6 for " << target << ":" << describe(sink->seen());
  // What went out for the target, relayed and own, in order: never lower than before.
  std::vector<std::uint64_t> sent;
  for (const auto& entry : sink->seen()) {
    if (entry.first == target) sent.push_back(entry.second);
  }
  EXPECT_EQ(sent, std::vector<std::uint64_t>{version(5, 3)}) << describe(sink->seen());
  // An equal version (a snapshot repeated by a link opened again) still goes out.
  onStrand([&] { EXPECT_TRUE(relay->admit(target, version(6, 1))); });

  onStrand([&] {
    relay->stop();
    hub->stop();
  });
  io.stop();
  thread.join();
}

}  // namespace presence_relay_test
