#pragma once
// A stand-in for the agent's device endpoint (docs/presence-runtime.md), small enough to steer
// from a test: it answers upgrades by accepting (welcome frame), redirecting (307) or refusing
// (e.g. 503), answers pings unless told to stay silent, closes its connections with a chosen code
// and reason, and records what devices did. It runs on a thread of its own; every method may be
// called from the test thread.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace boost::asio {
class io_context;
}

namespace zkagent::device::testing {

class FakeAgent {
 public:
  explicit FakeAgent(std::string instance = "fake-agent", std::uint64_t token = 7);
  ~FakeAgent();
  FakeAgent(const FakeAgent&) = delete;
  FakeAgent& operator=(const FakeAgent&) = delete;

  std::string endpoint() const;  // ws://127.0.0.1:<port>
  std::uint16_t port() const;

  // How the next upgrade requests are answered.
  void accept();                               // 101 and a welcome (the default)
  void redirect(const std::string& location);  // 307 with this Location
  // 101, then at once close 4001 with `url` as the reason and no welcome (redirect=close).
  void redirectInBand(const std::string& url);
  void refuse(int status);        // e.g. 503 with Retry-After: 1
  void answerPings(bool answer);  // false: a silent (half-open) agent
  // Upgrades whose Authorization is not "Bearer <token>" get a 401 {"error": "token: ..."} (or a
  // 403 when `status` is 403); empty: no check (the default).
  void requireToken(const std::string& token, int status = 401);
  // After accepting, send `frame` instead of the welcome; an empty frame sends nothing.
  void replaceWelcome(const std::string& frame);
  // Closes every open device connection with `code` and `reason`.
  void closeAll(std::uint16_t code, const std::string& reason);

  int upgradeRequests() const;  // every request seen, answered or not
  int accepted() const;         // welcomes sent
  // When each welcome (or its replacement) was about to be sent: earlier than the device read it.
  std::vector<std::chrono::steady_clock::time_point> welcomeTimes() const;
  int openConnections() const;
  std::vector<std::string> targets() const;         // request targets, in order
  std::vector<std::string> authorizations() const;  // their Authorization headers, in order
  std::vector<std::uint64_t> pingSeqs(const std::string& device) const;
  std::vector<std::uint16_t> closeCodesFromDevices() const;  // close frames devices sent

  struct State;  // public only for the sessions in fake_agent.cpp

 private:
  // Declared first, destroyed last: its queued handlers hold the state and the sessions, so they
  // are released when it goes, after state_ (Asio destroys unrun handlers in its destructor).
  std::unique_ptr<boost::asio::io_context> io_;
  std::shared_ptr<State> state_;
};

}  // namespace zkagent::device::testing
