// Which answers say the link failed and which operations this session may retry: one rule each,
// shared by the session, the elector and the group.
#include "keeper.hpp"

#include <gtest/gtest.h>

namespace zkagent::election::detail {
namespace {

TEST(KeeperErrors, OnlyALostConnectionLeavesAnOperationToRetryOnTheSameSession) {
  for (ZkError err :
       {ZkError::Ok, ZkError::NoNode, ZkError::NodeExists, ZkError::NotEmpty, ZkError::BadVersion,
        ZkError::ConnectionLoss, ZkError::SessionExpired, ZkError::Closing, ZkError::Other}) {
    EXPECT_EQ(retryable(err), err == ZkError::ConnectionLoss) << toString(err);
    const bool link =
        err == ZkError::ConnectionLoss || err == ZkError::SessionExpired || err == ZkError::Closing;
    EXPECT_EQ(linkLost(err), link) << toString(err);
  }
}

}  // namespace
}  // namespace zkagent::election::detail
