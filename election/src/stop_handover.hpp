// StopHandover: how a stopping group hands its led accounts over. Each elector hands back the
// operations that release its account (none when it led nothing); they go out batched into multis
// as soon as a batch is full (one request and one transaction for hundreds of accounts, and the
// first successors start while the other electors still answer). A batch that fails on a node
// (touched by hand, lost meanwhile) is sent again one account per multi. The session is closed
// once, when every elector and every multi has answered, or when the deadline passes: the
// hand-over is a courtesy, closing the session is what frees the nodes.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "keeper.hpp"
#include "multi_batches.hpp"

namespace zkagent::election::detail {

class StopHandover : public std::enable_shared_from_this<StopHandover> {
 public:
  // Expects `electors` calls of collect(); `closeSession` runs once, on no lock.
  static std::shared_ptr<StopHandover> start(boost::asio::io_context& io,
                                             std::shared_ptr<Keeper> keeper, size_t electors,
                                             std::chrono::milliseconds deadline,
                                             std::function<void()> closeSession);
  StopHandover(boost::asio::io_context& io, std::shared_ptr<Keeper> keeper, size_t electors,
               std::function<void()> closeSession);

  // One elector's operations, from its strand: a full batch goes out from there at once.
  void collect(std::vector<MultiOp> ops);

 private:
  using Batch = std::vector<std::vector<MultiOp>>;  // an account's operations are never split
  void send(Batch batch);
  void answered();
  // Closes the session unless it is closed already or something is unanswered (and not `force`d).
  void closeIf(bool force);

  std::shared_ptr<Keeper> keeper_;
  boost::asio::strand<boost::asio::io_context::executor_type> strand_;  // multis answer here
  boost::asio::steady_timer deadline_;
  std::function<void()> closeSession_;
  std::mutex mu_;      // electors answer on their strands, multis on strand_
  size_t unanswered_;  // electors that have not handed back their operations yet
  MultiBatches<std::vector<MultiOp>> batch_;
  size_t inFlight_ = 0;  // multis sent and not answered
  bool closed_ = false;
};

}  // namespace zkagent::election::detail
