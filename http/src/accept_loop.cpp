#include "zkagent/http/accept_loop.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/dispatch.hpp>

#include "zkagent/naming.hpp"

namespace zkagent::http {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {
std::string describe(const tcp::endpoint& endpoint) {
  return naming::toString({endpoint.address().to_string(), endpoint.port()});
}
}  // namespace

AcceptLoop::AcceptLoop(asio::any_io_executor executor, const tcp::endpoint& at, Options options)
    : acceptor_(executor),
      pause_(executor),
      options_(std::move(options)),
      nextPause_(options_.firstPause) {
  acceptor_.open(at.protocol());
  acceptor_.set_option(asio::socket_base::reuse_address(true));
  acceptor_.bind(at);
  acceptor_.listen(asio::socket_base::max_listen_connections);
  bound_ = acceptor_.local_endpoint();
}

void AcceptLoop::start(SocketHandler onSocket) {
  asio::dispatch(acceptor_.get_executor(),
                 [self = shared_from_this(), onSocket = std::move(onSocket)]() mutable {
                   if (self->stopped_) return;
                   self->onSocket_ = std::move(onSocket);
                   self->acceptNext();
                 });
}

void AcceptLoop::stop() {
  asio::dispatch(acceptor_.get_executor(), [self = shared_from_this()] {
    self->stopped_ = true;
    boost::system::error_code ignored;
    self->acceptor_.close(ignored);
    self->pause_.cancel();
    self->onSocket_ = nullptr;
  });
}

AcceptCounts AcceptLoop::counts() const {
  return {attempts_.load(), accepted_.load(), failures_.load(), failureRuns_.load()};
}

void AcceptLoop::acceptNext() {
  if (stopped_) return;
  ++attempts_;
  auto done = [self = shared_from_this()](boost::system::error_code error, Socket socket) {
    if (self->stopped_ || error == asio::error::operation_aborted || !self->acceptor_.is_open())
      return;
    if (error) return self->failed(error);
    ++self->accepted_;
    if (self->runFailures_ > 0) {
      const auto lasted = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - self->runStart_);
      spdlog::info("{} {}: accepting again after {} failed accepts over {} ms", self->options_.name,
                   describe(self->bound_), self->runFailures_, lasted.count());
      self->runFailures_ = 0;
      self->nextPause_ = self->options_.firstPause;
    }
    // A copy: the handler may stop the loop, which releases onSocket_.
    const SocketHandler handler = self->onSocket_;
    if (handler) handler(std::move(socket));
    self->acceptNext();
  };
  if (options_.socketExecutor) {
    acceptor_.async_accept(options_.socketExecutor(), std::move(done));
  } else {
    acceptor_.async_accept(std::move(done));
  }
}

void AcceptLoop::failed(const boost::system::error_code& error) {
  ++failures_;
  if (runFailures_++ == 0) {
    ++failureRuns_;
    runStart_ = std::chrono::steady_clock::now();
    spdlog::warn("{} {}: accept failed ({}); pausing accepts, retrying at most every {} ms",
                 options_.name, describe(bound_), error.message(), options_.maxPause.count());
  }
  pause_.expires_after(nextPause_);
  nextPause_ = std::min(nextPause_ * 2, options_.maxPause);
  pause_.async_wait([self = shared_from_this()](boost::system::error_code waited) {
    if (!waited) self->acceptNext();
  });
}

}  // namespace zkagent::http
