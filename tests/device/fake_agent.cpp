#include "fake_agent.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "zkagent/http/websocket.hpp"

namespace zkagent::device::testing {

// Outside the anonymous namespace: FakeAgent::State keeps one (GCC's -Wsubobject-linkage once this
// file is part of a unity build).
enum class Answer { Accept, Redirect, RedirectInBand, Refuse };

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

std::string queryValue(const std::string& target, const std::string& key) {
  const auto query = target.find('?');
  if (query == std::string::npos) return {};
  std::size_t at = query + 1;
  while (at < target.size()) {
    const auto end = std::min(target.find('&', at), target.size());
    const auto pair = target.substr(at, end - at);
    if (pair.rfind(key + "=", 0) == 0) return pair.substr(key.size() + 1);
    at = end + 1;
  }
  return {};
}

}  // namespace

struct Session;

struct FakeAgent::State : std::enable_shared_from_this<State> {
  State(asio::io_context& context, std::string instanceId, std::uint64_t leaderToken)
      : instance(std::move(instanceId)), token(leaderToken), io(context), acceptor(io) {}

  std::string instance;
  std::uint64_t token;
  asio::io_context& io;
  tcp::acceptor acceptor;
  std::thread thread;
  std::set<std::shared_ptr<Session>> sessions;  // io thread only

  mutable std::mutex mutex;
  Answer answer = Answer::Accept;
  std::string location;
  int status = 503;
  bool answering = true;
  std::optional<std::string> welcomeOverride;
  std::vector<std::chrono::steady_clock::time_point> welcomeTimes;
  int requests = 0;
  std::uint64_t counter = 0;
  std::vector<std::string> targets;
  std::vector<std::string> authorizations;
  std::string requiredToken;
  int tokenStatus = 401;
  std::map<std::string, std::vector<std::uint64_t>> pings;
  std::vector<std::uint16_t> closeCodes;

  void acceptNext();
};

struct Session : std::enable_shared_from_this<Session> {
  Session(std::shared_ptr<FakeAgent::State> owner, tcp::socket s)
      : state(std::move(owner)), socket(std::move(s)) {}

  std::shared_ptr<FakeAgent::State> state;
  tcp::socket socket;
  beast::flat_buffer buffer;
  http::request<http::string_body> request;
  http::response<http::string_body> refusal;
  std::optional<zkagent::http::WebSocketStream<tcp::socket>> ws;
  std::deque<std::string> outbox;
  std::string device;

  void start() {
    http::async_read(socket, buffer, request,
                     [self = shared_from_this()](beast::error_code e, std::size_t) {
                       if (!e) self->decide();
                     });
  }

  void decide() {
    const std::string target(request.target());
    device = queryValue(target, "device");
    std::unique_lock lock(state->mutex);
    ++state->requests;
    state->targets.push_back(target);
    const std::string authorization(request[http::field::authorization]);
    state->authorizations.push_back(authorization);
    const bool tokenRefused =
        !state->requiredToken.empty() && authorization != "Bearer " + state->requiredToken;
    const Answer answer = state->answer;
    if (answer == Answer::Accept && !tokenRefused) {
      const std::uint64_t counter = ++state->counter;
      lock.unlock();
      ws.emplace(std::move(socket));
      ws->async_accept(request, [self = shared_from_this(), counter](beast::error_code e) {
        if (!e) self->welcome(counter);
      });
      return;
    }
    if (answer == Answer::RedirectInBand && !tokenRefused) {
      websocket::close_reason why;
      why.code = 4001;
      why.reason = state->location;
      lock.unlock();
      ws.emplace(std::move(socket));
      ws->async_accept(request, [self = shared_from_this(), why](beast::error_code e) {
        if (!e) self->ws->async_close(why, [self](beast::error_code) {});
      });
      return;
    }
    refusal.version(request.version());
    refusal.keep_alive(false);
    if (tokenRefused) {
      refusal.result(static_cast<unsigned>(state->tokenStatus));
      refusal.body() = state->tokenStatus == 401 ? R"({"error":"token: expired 5 s ago"})"
                                                 : R"({"error":"token: its sub is not device"})";
    } else if (answer == Answer::Redirect) {
      refusal.result(http::status::temporary_redirect);
      refusal.set(http::field::location, state->location);
      refusal.body() = R"({"error":"not the leader"})";
    } else {
      refusal.result(static_cast<unsigned>(state->status));
      refusal.set(http::field::retry_after, "1");
      refusal.body() = R"({"error":"no leader"})";
    }
    lock.unlock();
    refusal.set(http::field::content_type, "application/json");
    refusal.prepare_payload();
    http::async_write(socket, refusal, [self = shared_from_this()](beast::error_code, std::size_t) {
      beast::error_code ignored;
      self->socket.shutdown(tcp::socket::shutdown_both, ignored);
    });
  }

  void welcome(std::uint64_t counter) {
    state->sessions.insert(shared_from_this());
    nlohmann::json frame{
        {"type", "welcome"},     {"account", queryValue(std::string(request.target()), "account")},
        {"device", device},      {"agent", state->instance},
        {"token", state->token}, {"counter", counter},
        {"heartbeat_ms", 30000}, {"timeout_ms", 75000}};
    std::optional<std::string> override;
    {
      std::lock_guard lock(state->mutex);
      override = state->welcomeOverride;
      state->welcomeTimes.push_back(std::chrono::steady_clock::now());
    }
    if (!override) {
      send(frame.dump());
    } else if (!override->empty()) {
      send(*override);
    }
    read();
  }

  void read() {
    ws->async_read(buffer, [self = shared_from_this()](beast::error_code e, std::size_t) {
      if (e) {
        if (e == websocket::error::closed) {
          std::lock_guard lock(self->state->mutex);
          self->state->closeCodes.push_back(self->ws->reason().code);
        }
        self->state->sessions.erase(self);
        return;
      }
      self->onFrame();
      self->read();
    });
  }

  void onFrame() {
    const auto data = buffer.cdata();
    auto frame = nlohmann::json::parse(
        std::string_view(static_cast<const char*>(data.data()), data.size()), nullptr, false);
    buffer.consume(buffer.size());
    if (!frame.is_object() || frame.value("type", "") != "ping") return;
    const auto seq = frame.value("seq", std::uint64_t{0});
    bool answering = false;
    {
      std::lock_guard lock(state->mutex);
      state->pings[device].push_back(seq);
      answering = state->answering;
    }
    if (answering) send(nlohmann::json{{"type", "pong"}, {"seq", seq}}.dump());
  }

  void send(std::string frame) {
    outbox.push_back(std::move(frame));
    if (outbox.size() == 1) writeFront();
  }

  void writeFront() {
    ws->text(true);
    ws->async_write(asio::buffer(outbox.front()),
                    [self = shared_from_this()](beast::error_code e, std::size_t) {
                      if (e) return;
                      self->outbox.pop_front();
                      if (!self->outbox.empty()) self->writeFront();
                    });
  }
};

void FakeAgent::State::acceptNext() {
  acceptor.async_accept([self = shared_from_this()](beast::error_code e, tcp::socket socket) {
    if (e) return;
    std::make_shared<Session>(self, std::move(socket))->start();
    self->acceptNext();
  });
}

FakeAgent::FakeAgent(std::string instance, std::uint64_t token)
    : io_(std::make_unique<asio::io_context>()),
      state_(std::make_shared<State>(*io_, std::move(instance), token)) {
  const tcp::endpoint local(asio::ip::make_address("127.0.0.1"), 0);
  state_->acceptor.open(local.protocol());
  state_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  state_->acceptor.bind(local);
  state_->acceptor.listen(asio::socket_base::max_listen_connections);
  state_->acceptNext();
  state_->thread = std::thread([state = state_] { state->io.run(); });
}

FakeAgent::~FakeAgent() {
  state_->io.stop();
  state_->thread.join();
  // Sessions hold the state; break the cycle now that no handler can run.
  state_->sessions.clear();
}

std::uint16_t FakeAgent::port() const { return state_->acceptor.local_endpoint().port(); }
std::string FakeAgent::endpoint() const { return "ws://127.0.0.1:" + std::to_string(port()); }

void FakeAgent::accept() {
  std::lock_guard lock(state_->mutex);
  state_->answer = Answer::Accept;
}

void FakeAgent::redirect(const std::string& location) {
  std::lock_guard lock(state_->mutex);
  state_->answer = Answer::Redirect;
  state_->location = location;
}

void FakeAgent::redirectInBand(const std::string& url) {
  std::lock_guard lock(state_->mutex);
  state_->answer = Answer::RedirectInBand;
  state_->location = url;
}

void FakeAgent::refuse(int status) {
  std::lock_guard lock(state_->mutex);
  state_->answer = Answer::Refuse;
  state_->status = status;
}

void FakeAgent::requireToken(const std::string& token, int status) {
  std::lock_guard lock(state_->mutex);
  state_->requiredToken = token;
  state_->tokenStatus = status;
}

std::vector<std::string> FakeAgent::authorizations() const {
  std::lock_guard lock(state_->mutex);
  return state_->authorizations;
}

void FakeAgent::answerPings(bool answer) {
  std::lock_guard lock(state_->mutex);
  state_->answering = answer;
}

void FakeAgent::replaceWelcome(const std::string& frame) {
  std::lock_guard lock(state_->mutex);
  state_->welcomeOverride = frame;
}

void FakeAgent::closeAll(std::uint16_t code, const std::string& reason) {
  asio::post(state_->io, [state = state_, code, reason] {
    websocket::close_reason why;
    why.code = code;
    why.reason = reason;
    for (const auto& session : state->sessions) {
      session->ws->async_close(why, [session](beast::error_code) {});
    }
  });
}

int FakeAgent::upgradeRequests() const {
  std::lock_guard lock(state_->mutex);
  return state_->requests;
}

int FakeAgent::accepted() const {
  std::lock_guard lock(state_->mutex);
  return static_cast<int>(state_->counter);
}

std::vector<std::chrono::steady_clock::time_point> FakeAgent::welcomeTimes() const {
  std::lock_guard lock(state_->mutex);
  return state_->welcomeTimes;
}

int FakeAgent::openConnections() const {
  std::promise<int> count;
  auto future = count.get_future();
  asio::post(state_->io, [&] { count.set_value(static_cast<int>(state_->sessions.size())); });
  return future.get();
}

std::vector<std::string> FakeAgent::targets() const {
  std::lock_guard lock(state_->mutex);
  return state_->targets;
}

std::vector<std::uint64_t> FakeAgent::pingSeqs(const std::string& device) const {
  std::lock_guard lock(state_->mutex);
  const auto it = state_->pings.find(device);
  return it == state_->pings.end() ? std::vector<std::uint64_t>{} : it->second;
}

std::vector<std::uint16_t> FakeAgent::closeCodesFromDevices() const {
  std::lock_guard lock(state_->mutex);
  return state_->closeCodes;
}

}  // namespace zkagent::device::testing
