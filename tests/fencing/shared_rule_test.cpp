// One fencing rule for operations (submit) and writes without an opId (admit, the presence
// leases): the same verdicts for the same token and view, the HWM raised by both, the HWM's
// holder, and what a write costs on disk.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>
#include <zkagent/fencing.hpp>

#include "temp_dir.hpp"

namespace zkagent::fencing::shared_rule_test {
namespace {

using testing::TempDir;

constexpr std::int64_t kSessionA = 11;

FencingToken as(std::string instance, std::int64_t session, std::uint64_t token,
                std::string account = "acct") {
  return FencingToken{std::move(account), token, std::move(instance), session};
}
FencingToken byA(std::uint64_t token, std::string account = "acct") {
  return as("host-a", kSessionA, token, std::move(account));
}

Operation op(FencingToken fencing, std::string opId) {
  return Operation{std::move(fencing), std::move(opId), R"({"n":1})"};
}

Decision admitOne(TokenValidator& validator, FencingToken fencing,
                  ActiveView active = ActiveView::unknown()) {
  const std::vector<FencedWrite> writes{{std::move(fencing), std::move(active)}};
  auto decisions = validator.admit(writes);
  EXPECT_EQ(decisions.size(), 1u);
  return decisions.empty() ? Decision{} : decisions.front();
}

ValidatorOptions durableIn(const std::filesystem::path& dir) {
  ValidatorOptions options;
  options.dataDir = dir;
  return options;
}

// Every case of the rule, each on a validator whose account A wrote under token 5 first.
struct Case {
  const char* name;
  FencingToken fencing;
  ActiveView active;
  Verdict expected;
  bool superseded;  // final for the token: a newer leader or another holder, not a lagging view
};

std::vector<Case> cases() {
  return {
      {"the holder at the hwm", byA(5), ActiveView::unknown(), Verdict::accepted, false},
      {"a higher token", as("host-b", 22, 6), ActiveView::unknown(), Verdict::accepted, false},
      {"below the hwm", byA(4), ActiveView::unknown(), Verdict::stale_token, true},
      {"another instance at the hwm", as("host-b", kSessionA, 5), ActiveView::unknown(),
       Verdict::not_current_leader, true},
      {"another session at the hwm", as("host-a", 12, 5), ActiveView::unknown(),
       Verdict::not_current_leader, true},
      // The successor's node not seen yet: the refusal may only mean a view that lags.
      {"no active node", byA(5), ActiveView::absent(), Verdict::not_current_leader, false},
      {"not the active seq", byA(5), ActiveView::present(6), Verdict::not_current_leader, true},
      {"a forged future token", byA(9), ActiveView::present(6), Verdict::not_current_leader, false},
      {"the active node's holder", as("host-b", 22, 6), ActiveView::heldBy(6, "host-b", 22),
       Verdict::accepted, false},
      {"the active seq from another instance", as("host-c", 22, 6),
       ActiveView::heldBy(6, "host-b", 22), Verdict::not_current_leader, true},
      {"the active seq from another session", as("host-b", 23, 6),
       ActiveView::heldBy(6, "host-b", 22), Verdict::not_current_leader, true},
      {"active seq below the hwm", byA(5), ActiveView::present(3), Verdict::account_fenced, true},
  };
}

TEST(SharedRule, OperationsAndLeaseWritesGetTheSameVerdictForTheSameTokenAndView) {
  for (const Case& c : cases()) {
    TokenValidator forOperations, forWrites;
    ASSERT_TRUE(forOperations.submit(op(byA(5), "first")).accepted());
    ASSERT_TRUE(admitOne(forWrites, byA(5)).accepted());

    const Decision operation = forOperations.submit(op(c.fencing, "second"), c.active);
    const Decision write = admitOne(forWrites, c.fencing, c.active);
    EXPECT_EQ(operation.verdict, c.expected) << c.name << ": " << operation.detail;
    EXPECT_EQ(write.verdict, c.expected) << c.name << ": " << write.detail;
    EXPECT_EQ(write.hwm, operation.hwm) << c.name;
    EXPECT_EQ(write.detail, operation.detail) << c.name;
    EXPECT_EQ(write.superseded, c.superseded) << c.name;
    EXPECT_EQ(operation.superseded, c.superseded) << c.name;
    EXPECT_EQ(forWrites.status("acct")->hwm, forOperations.status("acct")->hwm) << c.name;
  }
}

TEST(SharedRule, AnAcceptedLeaseWriteRaisesTheHwmForOperationsToo) {
  TokenValidator validator;
  ASSERT_TRUE(validator.submit(op(byA(5), "a-1")).accepted());
  const auto successor = as("host-b", 22, 7);
  ASSERT_TRUE(admitOne(validator, successor).accepted());
  EXPECT_EQ(validator.status("acct")->hwm, 7u);
  // The deposed leader, with nothing of the successor but its lease write seen so far.
  const Decision deposed = validator.submit(op(byA(5), "a-2"));
  EXPECT_EQ(deposed.verdict, Verdict::stale_token);
  EXPECT_EQ(admitOne(validator, byA(5)).verdict, Verdict::stale_token);
  EXPECT_TRUE(validator.submit(op(successor, "b-1")).accepted());
  EXPECT_EQ(validator.status("acct")->accepted, 2u) << "lease writes are not operations";
}

TEST(SharedRule, TheOperationThatRaisedTheHwmMakesItsWriterTheHolderForLeaseWrites) {
  TokenValidator validator;
  ASSERT_TRUE(validator.submit(op(byA(5), "a-1")).accepted());
  EXPECT_EQ(admitOne(validator, as("host-b", 22, 5)).verdict, Verdict::not_current_leader);
  EXPECT_TRUE(admitOne(validator, byA(5)).accepted());
}

TEST(SharedRule, AWriteForAnUnknownAccountThatIsRefusedLeavesNoState) {
  TokenValidator validator;
  EXPECT_EQ(admitOne(validator, byA(5), ActiveView::absent()).verdict, Verdict::not_current_leader);
  EXPECT_FALSE(validator.status("acct").has_value());
}

TEST(SharedRule, AResetHwmBelongsToWhoeverWritesUnderItFirst) {
  TokenValidator validator;
  ASSERT_TRUE(admitOne(validator, byA(5)).accepted());
  validator.resetHighWaterMark("acct", 9, "alice", "members node recreated");
  ASSERT_TRUE(admitOne(validator, as("host-b", 22, 9)).accepted());
  EXPECT_EQ(admitOne(validator, byA(9)).verdict, Verdict::not_current_leader);
  EXPECT_EQ(validator.submit(op(byA(9), "a-1")).verdict, Verdict::not_current_leader);
}

TEST(SharedRule, ABatchIsDecidedInOrderAccountByAccount) {
  TokenValidator validator;
  const std::vector<FencedWrite> writes{
      {byA(3, "one")}, {byA(2, "one")}, {as("host-b", 22, 4, "one")}, {byA(1, "two")}};
  const auto decisions = validator.admit(writes);
  ASSERT_EQ(decisions.size(), 4u);
  EXPECT_TRUE(decisions[0].accepted());
  EXPECT_EQ(decisions[1].verdict, Verdict::stale_token);
  EXPECT_TRUE(decisions[2].accepted());
  EXPECT_TRUE(decisions[3].accepted());
  EXPECT_EQ(validator.status("one")->hwm, 4u);
  EXPECT_EQ(validator.status("two")->hwm, 1u);
}

TEST(SharedRule, AnInvalidTokenInABatchDecidesNothing) {
  TokenValidator validator;
  const std::vector<FencedWrite> writes{{byA(3)}, {as("has space", 1, 4)}};
  EXPECT_THROW(validator.admit(writes), BadRequest);
  EXPECT_FALSE(validator.status("acct").has_value());
}

// One record per raise (or holder change), all the records of a call in one fsync, and nothing
// on disk for the holder's writes at its HWM: a leader's renewals cost no fsync.
TEST(SharedRule, OnlyARaiseIsWrittenAndABatchsRaisesShareOneSync) {
  TempDir dir;
  TokenValidator validator(durableIn(dir.path()));
  const std::vector<FencedWrite> firstWrites{
      {byA(3, "one")}, {byA(3, "two")}, {byA(3, "three")}, {byA(3, "one")}};
  for (const auto& decision : validator.admit(firstWrites)) ASSERT_TRUE(decision.accepted());
  auto stats = validator.commitStats();
  EXPECT_EQ(stats.recordsWritten, 3u);
  EXPECT_EQ(stats.syncs, 1u);

  for (int renewal = 0; renewal < 10; ++renewal) {
    for (const auto& decision : validator.admit(firstWrites)) ASSERT_TRUE(decision.accepted());
  }
  EXPECT_EQ(validator.commitStats().recordsWritten, 3u);
  EXPECT_EQ(validator.commitStats().syncs, 1u);

  ASSERT_TRUE(admitOne(validator, as("host-b", 22, 4, "two")).accepted());
  EXPECT_EQ(validator.commitStats().recordsWritten, 4u);
  EXPECT_EQ(validator.commitStats().syncs, 2u);
}

// The HWM a lease write raised, and who holds it, survive a restart: from the log, and from a
// snapshot after compaction.
TEST(SharedRule, TheRaisedHwmAndItsHolderSurviveARestartAndACompaction) {
  TempDir dir;
  {
    TokenValidator validator(durableIn(dir.path()));
    ASSERT_TRUE(admitOne(validator, byA(5)).accepted());
  }
  auto expectHeldByA = [](TokenValidator& validator, const char* when) {
    EXPECT_EQ(validator.status("acct")->hwm, 5u) << when;
    EXPECT_EQ(admitOne(validator, byA(4)).verdict, Verdict::stale_token) << when;
    EXPECT_EQ(admitOne(validator, as("host-b", 22, 5)).verdict, Verdict::not_current_leader)
        << when;
    EXPECT_EQ(validator.submit(op(as("host-b", 22, 5), "b-1")).verdict, Verdict::not_current_leader)
        << when;
    EXPECT_TRUE(admitOne(validator, byA(5)).accepted()) << when;
  };
  {
    TokenValidator validator(durableIn(dir.path()));
    EXPECT_EQ(validator.recovery().replayedRecords, 1u);
    expectHeldByA(validator, "replayed from the log");
    validator.compact();
  }
  TokenValidator validator(durableIn(dir.path()));
  EXPECT_EQ(validator.recovery().snapshotAccounts, 1u);
  EXPECT_EQ(validator.recovery().replayedRecords, 0u);
  expectHeldByA(validator, "restored from the snapshot");
}

// docs/fencing.md: tag 4, account, u64 hwm, holder instanceId, i64 holder sessionId.
TEST(SharedRule, ARaiseRecordMatchesTheDocumentedFormat) {
  TempDir dir;
  {
    TokenValidator validator(durableIn(dir.path()));
    ASSERT_TRUE(admitOne(validator, as("i", -1, 2, "a")).accepted());
  }
  std::ifstream in(dir.path() / "log.00000000000000000000", std::ios::binary);
  const std::string written{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const std::string expected(
      "\x1b\x00\x00\x00\x00\x00\x00\x00"  // length, then the CRC (a restart verifies it)
      "\x04"
      "\x01\x00\x00\x00"
      "a"
      "\x02\x00\x00\x00\x00\x00\x00\x00"
      "\x01\x00\x00\x00"
      "i"
      "\xff\xff\xff\xff\xff\xff\xff\xff",
      35);
  ASSERT_EQ(written.size(), expected.size());
  EXPECT_EQ(written.substr(0, 4), expected.substr(0, 4));
  EXPECT_EQ(written.substr(8), expected.substr(8));
}

// A snapshot written before holders were recorded (tag 17) still opens: its HWM holds, and the
// first writer under it becomes the holder.
TEST(SharedRule, ASnapshotWithoutHoldersOpensAndTheFirstWriterHoldsItsHwm) {
  TempDir dir;
  // CRC-32 (IEEE, as zlib.crc32), bit by bit.
  auto crc32 = [](const std::string& bytes) {
    std::uint32_t crc = 0xFFFFFFFFu;
    for (const char byte : bytes) {
      crc ^= static_cast<std::uint8_t>(byte);
      for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
  };
  auto little = [](std::uint64_t value, int bytes) {
    std::string out;
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
    return out;
  };
  auto frame = [&](const std::string& body) {
    return little(body.size(), 4) + little(crc32(body), 4) + body;
  };
  const std::string header =
      "\x10" + little(0x3145434E45464B5AULL, 8) + little(1, 8) + little(1, 8);
  const std::string account = std::string("\x11") + little(4, 4) + "acct" + little(6, 8) +
                              little(3, 8) + std::string(1, '\0') + little(0, 8) + little(0, 4);
  std::ofstream(dir.path() / "snapshot", std::ios::binary) << frame(header) << frame(account);

  TokenValidator validator(durableIn(dir.path()));
  EXPECT_EQ(validator.recovery().snapshotAccounts, 1u);
  EXPECT_EQ(validator.status("acct")->hwm, 6u);
  EXPECT_EQ(validator.status("acct")->accepted, 3u);
  EXPECT_EQ(admitOne(validator, byA(5)).verdict, Verdict::stale_token);
  EXPECT_TRUE(admitOne(validator, as("host-b", 22, 6)).accepted());
  EXPECT_EQ(admitOne(validator, byA(6)).verdict, Verdict::not_current_leader);
}

}  // namespace
}  // namespace zkagent::fencing::shared_rule_test
