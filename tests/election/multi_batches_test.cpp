// The byte-bounded packing shared by batched creates and stop's hand-over multis.
#include "multi_batches.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace {

using zkagent::election::detail::MultiBatches;

// Feeds items of the given sizes (each item is its own size) and returns the batches, in order.
std::vector<std::vector<size_t>> pack(size_t limit, const std::vector<size_t>& sizes) {
  MultiBatches<size_t> batches(limit);
  std::vector<std::vector<size_t>> out;
  for (size_t size : sizes) {
    if (auto full = batches.add(size, size)) out.push_back(std::move(*full));
  }
  if (!batches.empty()) out.push_back(batches.take());
  return out;
}

TEST(MultiBatches, FillsEachBatchUpToTheLimitInArrivalOrder) {
  using Batches = std::vector<std::vector<size_t>>;
  EXPECT_EQ(pack(10, {4, 6, 3, 3, 3, 2}), (Batches{{4, 6}, {3, 3, 3}, {2}}));
  EXPECT_EQ(pack(10, {10, 1}), (Batches{{10}, {1}}));
}

TEST(MultiBatches, AnItemLargerThanTheLimitTravelsAloneAndIsNeverSplit) {
  using Batches = std::vector<std::vector<size_t>>;
  EXPECT_EQ(pack(10, {3, 25, 2}), (Batches{{3}, {25}, {2}}));
  EXPECT_EQ(pack(10, {25}), (Batches{{25}}));
}

TEST(MultiBatches, TakeStartsOverEmpty) {
  MultiBatches<int> batches(10);
  EXPECT_TRUE(batches.empty());
  EXPECT_FALSE(batches.add(1, 9));
  EXPECT_EQ(batches.take(), std::vector<int>{1});
  EXPECT_TRUE(batches.empty());
  EXPECT_FALSE(batches.add(2, 9)) << "the bytes of the taken batch no longer count";
}

}  // namespace
