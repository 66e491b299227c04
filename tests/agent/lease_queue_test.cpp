// The lease writer's queue on its own (agent/src/lease_queue.hpp): coalescing per device, the
// order entries leave in, the bound and what is dropped first when it is reached.
#include "devices/lease_queue.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace {

using zkagent::agent::detail::LeaseBatch;
using zkagent::agent::detail::LeaseDrops;
using zkagent::agent::detail::LeaseQueue;
using zkagent::agent::detail::QueuedRemoval;
using zkagent::presence::Epoch;
using zkagent::presence::LeaseEntry;
using zkagent::presence::LeaveReason;

LeaseEntry entry(const std::string& device, std::uint64_t counter, std::uint64_t token = 7) {
  return LeaseEntry{{"acct", device}, Epoch{token, counter}};
}
QueuedRemoval removal(const std::string& device, std::uint64_t counter, std::uint64_t token = 7) {
  return QueuedRemoval{entry(device, counter, token), LeaveReason::Close};
}

// "r:device/counter" for renewals, "x:device/counter" for removals, in the batch's order.
std::vector<std::string> names(const LeaseBatch& batch) {
  std::vector<std::string> out;
  for (const auto& r : batch.remove)
    out.push_back("x:" + r.entry.key.device + "/" + std::to_string(r.entry.epoch.connection));
  for (const auto& r : batch.renew)
    out.push_back("r:" + r.key.device + "/" + std::to_string(r.epoch.connection));
  return out;
}

LeaseBatch takeAll(LeaseQueue& queue, std::size_t max = 1000) {
  LeaseDrops refused;
  auto batch = queue.take(
      max, [](const LeaseEntry&) { return true; }, refused);
  EXPECT_EQ(refused.renewals + refused.removals, 0u);
  return batch;
}

using Names = std::vector<std::string>;

TEST(LeaseQueue, RenewalsOfOneDeviceCoalesceAndTheNewestEpochWins) {
  LeaseQueue queue(100);
  queue.renew(entry("phone", 1));
  queue.renew(entry("phone", 3));
  queue.renew(entry("phone", 2));  // an older connection's renewal adds nothing
  queue.renew(entry("phone", 3));
  queue.renew(entry("tablet", 4));
  EXPECT_EQ(queue.size(), 2u);
  EXPECT_EQ(names(takeAll(queue)), (Names{"r:phone/3", "r:tablet/4"}));
  EXPECT_TRUE(queue.empty());
}

TEST(LeaseQueue, ARemovalReplacesItsOwnConnectionsRenewalAndIsNeverFollowedByIt) {
  LeaseQueue queue(100);
  queue.renew(entry("phone", 1));
  queue.remove(removal("phone", 1));
  queue.renew(entry("phone", 1));  // a renewal tick that raced the close: the connection is gone
  EXPECT_EQ(queue.size(), 1u);
  EXPECT_EQ(names(takeAll(queue)), (Names{"x:phone/1"}));
}

TEST(LeaseQueue, ANewerConnectionAfterARemovalKeepsBothRemovalFirst) {
  LeaseQueue queue(100);
  queue.renew(entry("phone", 1));
  queue.remove(removal("phone", 1));
  queue.renew(entry("phone", 2));  // the device reconnected
  EXPECT_EQ(queue.size(), 2u);
  // One entry per batch: the removal leaves before the newer connection's renewal.
  EXPECT_EQ(names(takeAll(queue, 1)), (Names{"x:phone/1"}));
  EXPECT_EQ(names(takeAll(queue, 1)), (Names{"r:phone/2"}));

  // The newer connection renewed before the older one closed: the same two, and in one batch
  // the renewal rides with the removal (the gateway applies renewals first: never offline).
  queue.renew(entry("tablet", 3));
  queue.renew(entry("tablet", 4));
  queue.remove(removal("tablet", 3));
  EXPECT_EQ(names(takeAll(queue)), (Names{"x:tablet/3", "r:tablet/4"}));
}

TEST(LeaseQueue, RemovalsLeaveFirstThenRenewalsOldestFirstInBatchesOfMax) {
  LeaseQueue queue(100);
  queue.renew(entry("a", 1));
  queue.renew(entry("b", 2));
  queue.remove(removal("c", 3));
  queue.renew(entry("d", 4));
  queue.remove(removal("e", 5));
  queue.renew(entry("a", 6));  // coalesced: keeps a's place in the line
  EXPECT_EQ(names(takeAll(queue, 2)), (Names{"x:c/3", "x:e/5"}));
  EXPECT_EQ(names(takeAll(queue, 2)), (Names{"r:a/6", "r:b/2"}));
  EXPECT_EQ(names(takeAll(queue, 2)), (Names{"r:d/4"}));
  EXPECT_TRUE(queue.empty());
}

TEST(LeaseQueue, AFullQueueDropsTheOldestRenewalsFirstThenTheOldestRemovals) {
  LeaseQueue queue(4);
  EXPECT_EQ(queue.capacity(), 4u);
  LeaseDrops drops;
  drops += queue.renew(entry("a", 1));
  drops += queue.renew(entry("b", 2));
  drops += queue.renew(entry("c", 3));
  drops += queue.remove(removal("x", 10));
  EXPECT_EQ(drops.renewals + drops.removals, 0u);
  EXPECT_EQ(queue.size(), 4u);

  auto d = queue.remove(removal("y", 11));  // full: a's renewal makes room
  EXPECT_EQ(d.renewals, 1u);
  EXPECT_EQ(d.removals, 0u);
  d = queue.renew(entry("b", 12));  // coalesced: needs no room
  EXPECT_EQ(d.renewals + d.removals, 0u);
  queue.remove(removal("z", 13));      // drops b
  d = queue.remove(removal("w", 14));  // drops c, the last renewal
  EXPECT_EQ(d.renewals, 1u);
  EXPECT_EQ(queue.renewals(), 0u);
  EXPECT_EQ(queue.size(), 4u);

  d = queue.renew(entry("q", 15));  // only removals queued: the renewal itself is dropped
  EXPECT_EQ(d.renewals, 1u);
  EXPECT_EQ(d.removals, 0u);
  d = queue.remove(removal("v", 16));  // no renewal left: the oldest removal (x) goes
  EXPECT_EQ(d.renewals, 0u);
  EXPECT_EQ(d.removals, 1u);
  EXPECT_EQ(queue.size(), 4u);
  EXPECT_EQ(names(takeAll(queue)), (Names{"x:y/11", "x:z/13", "x:w/14", "x:v/16"}));
}

TEST(LeaseQueue, NeverHoldsMoreThanItsCapacityUnderAnyMixOfWrites) {
  LeaseQueue queue(50);
  LeaseDrops drops;
  for (std::uint64_t i = 1; i <= 2000; ++i) {
    std::string device = "d";  // (not "d" + ...: GCC 12 warns falsely, -Wrestrict)
    device += std::to_string(i % 300);
    if (i % 3 == 0) {
      drops += queue.remove(removal(device, i - 1));
    } else {
      drops += queue.renew(entry(device, i));
    }
    ASSERT_LE(queue.size(), 50u) << "after write " << i;
  }
  EXPECT_GT(drops.renewals, 0u);
  EXPECT_GT(drops.removals, 0u);
  EXPECT_EQ(queue.size(), 50u);
}

TEST(LeaseQueue, FailedRemovalsGoBackAheadOfEverythingAndMakeRoomFromRenewals) {
  LeaseQueue queue(3);
  queue.remove(removal("a", 1));
  queue.remove(removal("b", 2));
  auto sent = takeAll(queue);
  ASSERT_EQ(sent.remove.size(), 2u);
  queue.remove(removal("c", 3));
  queue.renew(entry("d", 4));
  queue.renew(entry("e", 5));
  // The batch failed: its removals come back first, in their order; d's renewal makes room.
  auto drops = queue.requeue(std::move(sent.remove));
  EXPECT_EQ(drops.renewals, 2u);
  EXPECT_EQ(drops.removals, 0u);
  EXPECT_EQ(names(takeAll(queue)), (Names{"x:a/1", "x:b/2", "x:c/3"}));

  // Full of removals: the requeued ones are the oldest and are the ones dropped.
  queue.remove(removal("f", 6));
  queue.remove(removal("g", 7));
  queue.remove(removal("h", 8));
  drops = queue.requeue({removal("old", 0)});
  EXPECT_EQ(drops.removals, 1u);
  EXPECT_EQ(names(takeAll(queue)), (Names{"x:f/6", "x:g/7", "x:h/8"}));
}

TEST(LeaseQueue, EntriesTheGateRefusesLeaveTheQueueCountedAndTheBatchFillsWithOthers) {
  LeaseQueue queue(100);
  queue.remove(removal("old", 1, /*token=*/3));
  queue.remove(removal("a", 2));
  queue.renew(entry("old2", 3, /*token=*/3));
  queue.renew(entry("b", 4));
  queue.renew(entry("c", 5));
  LeaseDrops refused;
  auto batch = queue.take(
      3, [](const LeaseEntry& e) { return e.epoch.leaderToken == 7; }, refused);
  EXPECT_EQ(names(batch), (Names{"x:a/2", "r:b/4", "r:c/5"}));
  EXPECT_EQ(refused.removals, 1u);
  EXPECT_EQ(refused.renewals, 1u);
  EXPECT_TRUE(queue.empty());
}

TEST(LeaseQueue, ACapacityOfZeroIsRefused) { EXPECT_THROW(LeaseQueue(0), std::invalid_argument); }

}  // namespace
