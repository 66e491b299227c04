// The one accept loop of every listener (the HTTP server, the agent's device endpoint, the
// gateway's subscriber listener): it listens on a TCP endpoint and hands each accepted socket to
// a callback.
//
// A failed accept does not retry at once: out of descriptors (EMFILE, ENFILE) or buffers, the
// connection stays in the backlog and the next accept fails the same way, so an immediate retry
// spins a core. Every failure pauses accepting on a timer instead, 50 ms doubling to 1 s, back to
// 50 ms after the next success; one warning when a pause starts a run of failures and one line
// when accepting works again, not a line per failure. The loop ends when stop() closes the
// acceptor.
//
//   auto listener = std::make_shared<http::AcceptLoop>(executor, endpoint,
//                                                      http::AcceptLoop::Options{"device
//                                                      endpoint"});
//   listener->start([self](tcp::socket socket) { self->serve(std::move(socket)); });
//   ...
//   asio::post(executor, [listener] { listener->stop(); });
#pragma once

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "zkagent/http.hpp"

namespace zkagent::http {

class AcceptLoop : public std::enable_shared_from_this<AcceptLoop> {
 public:
  using Socket = boost::asio::ip::tcp::socket;
  using SocketHandler = std::function<void(Socket)>;

  struct Options {
    std::string name;  // in the log lines: "device endpoint", "HTTP server 127.0.0.1:8480"
    std::chrono::milliseconds firstPause{50};
    std::chrono::milliseconds maxPause{1000};
    // Where each accepted socket's I/O runs (for example a new strand per connection); empty:
    // the loop's own executor.
    std::function<boost::asio::any_io_executor()> socketExecutor{};
  };

  // Opens, binds (reuse_address) and listens at once, so port() is known; throws
  // std::system_error when it cannot. Handlers run on `executor` (a strand when the context has
  // several threads).
  AcceptLoop(boost::asio::any_io_executor executor, const boost::asio::ip::tcp::endpoint& at,
             Options options);
  AcceptLoop(const AcceptLoop&) = delete;
  AcceptLoop& operator=(const AcceptLoop&) = delete;

  // Begins accepting; every socket goes to `onSocket` on the executor. Once. Give it a weak
  // reference to its owner: the loop holds the handler until stop().
  void start(SocketHandler onSocket);
  // Closes the acceptor, ends a pause and releases the handler. Idempotent.
  // Both run on the executor (at once when called there, else posted to it).
  void stop();

  const boost::asio::ip::tcp::endpoint& endpoint() const { return bound_; }
  std::uint16_t port() const { return bound_.port(); }
  AcceptCounts counts() const;  // from any thread

 private:
  void acceptNext();
  void failed(const boost::system::error_code& error);

  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer pause_;
  const Options options_;
  boost::asio::ip::tcp::endpoint bound_;  // kept: the acceptor's own is gone once closed
  SocketHandler onSocket_;
  bool stopped_ = false;
  std::chrono::milliseconds nextPause_;
  std::uint64_t runFailures_ = 0;  // failures since the last success
  std::chrono::steady_clock::time_point runStart_{};
  std::atomic<std::uint64_t> attempts_{0}, accepted_{0}, failures_{0}, failureRuns_{0};
};

}  // namespace zkagent::http
