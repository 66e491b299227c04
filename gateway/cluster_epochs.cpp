#include "cluster_epochs.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/steady_timer.hpp>
#include <charconv>
#include <memory>

#include "zkagent/naming.hpp"

namespace zkagent::gateway {

namespace {
// A bump that failed for another reason than a concurrent bump (the link) is tried again this
// much later, while the take lasts; one whose node does not parse, once a second.
constexpr std::chrono::milliseconds kRetry{100};
constexpr std::chrono::milliseconds kRetryUnreadable{1000};
}  // namespace

std::optional<std::uint64_t> parseEpoch(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  std::uint64_t value = 0;
  const auto parsed = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || parsed.ec != std::errc{} || parsed.ptr != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

ClusterEpochs::ClusterEpochs(boost::asio::io_context& io, election::ElectionGroup& group,
                             std::string root, std::uint32_t shards)
    : io_(io), group_(group), path_(naming::gatewayEpochPath(root)), takes_(shards) {}

void ClusterEpochs::onTakeOrLoss(std::uint32_t index, std::int64_t token) {
  if (index >= takes_.size()) return;
  {
    std::lock_guard lock(mutex_);
    takes_[index].token = token;
  }
  if (token >= 0) bump(index, token);
}

std::uint64_t ClusterEpochs::epochFor(std::uint32_t index, std::int64_t token) const {
  std::lock_guard lock(mutex_);
  const Take& take = takes_.at(index);
  return take.epochToken == token ? take.epoch : 0;
}

std::uint64_t ClusterEpochs::latest(std::uint32_t index) const {
  std::lock_guard lock(mutex_);
  return takes_.at(index).epoch;
}

bool ClusterEpochs::stillTaken(std::uint32_t index, std::int64_t token) const {
  std::lock_guard lock(mutex_);
  return takes_[index].token == token;
}

// Reads the counter with its version and sets it one higher with that version; a BadVersion (or
// NodeExists on the first create) means another gateway bumped it meanwhile: read again.
void ClusterEpochs::bump(std::uint32_t index, std::int64_t token) {
  if (!stillTaken(index, token)) return;
  auto& session = group_.session();
  session.get(path_, nullptr,
              [this, &session, index, token](election::ZkError read, std::string data,
                                             election::NodeStat stat) {
                if (read == election::ZkError::NoNode) {
                  session.create(
                      path_, "1", election::NodeKind::Persistent,
                      [this, index, token](election::ZkError created, const std::string&) {
                        if (created == election::ZkError::Ok) {
                          return got(index, token, 1);
                        }
                        if (created == election::ZkError::NodeExists) {
                          return bump(index, token);
                        }
                        retry(index, token, created, kRetry);
                      });
                  return;
                }
                if (read != election::ZkError::Ok) return retry(index, token, read, kRetry);
                const auto current = parseEpoch(data);
                if (!current) {
                  spdlog::error(
                      "cluster: {} holds '{}', not a decimal epoch: presence writes for shard {} "
                      "are refused until it is fixed",
                      path_, data.substr(0, 64), naming::shardId(index));
                  return retry(index, token, election::ZkError::Other, kRetryUnreadable);
                }
                const auto next = *current + 1;
                session.set(path_, std::to_string(next), stat.version,
                            [this, index, token, next](election::ZkError set, election::NodeStat) {
                              if (set == election::ZkError::Ok) return got(index, token, next);
                              if (set == election::ZkError::BadVersion) return bump(index, token);
                              retry(index, token, set, kRetry);
                            });
              });
}

void ClusterEpochs::retry(std::uint32_t index, std::int64_t token, election::ZkError error,
                          std::chrono::milliseconds after) {
  spdlog::debug("cluster: epoch bump for shard {} failed ({}), again in {} ms",
                naming::shardId(index), toString(error), after.count());
  auto timer = std::make_shared<boost::asio::steady_timer>(io_, after);
  timer->async_wait([this, timer, index, token](const boost::system::error_code& cancelled) {
    if (!cancelled) bump(index, token);
  });
}

void ClusterEpochs::got(std::uint32_t index, std::int64_t token, std::uint64_t epoch) {
  std::lock_guard lock(mutex_);
  Take& take = takes_[index];
  if (take.token != token) return;  // lost meanwhile: the next take bumps again
  take.epoch = epoch;
  take.epochToken = token;
  spdlog::info("shard {} token {} presence epoch {}", naming::shardId(index), token, epoch);
}

}  // namespace zkagent::gateway
