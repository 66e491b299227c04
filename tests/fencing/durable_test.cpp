// The durable validator: restart, torn records, compaction, concurrency.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>
#include <zkagent/fencing.hpp>

#include "sync_recorder.hpp"
#include "temp_dir.hpp"

namespace zkagent::fencing {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

Operation op(std::uint64_t token, std::string opId, std::string account = "acct") {
  return Operation{{std::move(account), token, "host-a", 11}, std::move(opId), R"({"n":1})"};
}

ValidatorOptions durableIn(const fs::path& dir, CommitMode mode = CommitMode::group) {
  ValidatorOptions options;
  options.dataDir = dir;
  options.commitMode = mode;
  return options;
}

std::vector<fs::path> logFiles(const fs::path& dir) {
  std::vector<fs::path> logs;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().starts_with("log.")) logs.push_back(entry.path());
  }
  std::sort(logs.begin(), logs.end());
  return logs;
}

void flipByte(const fs::path& file, std::uintmax_t offset) {
  std::fstream stream(file, std::ios::in | std::ios::out | std::ios::binary);
  stream.seekg(static_cast<std::streamoff>(offset));
  char byte = 0;
  stream.get(byte);
  stream.seekp(static_cast<std::streamoff>(offset));
  stream.put(static_cast<char>(byte ^ 0x5A));
}

// Ten accepted operations with tokens 1..10, opIds "op-1".."op-10".
void writeTenOps(const fs::path& dir) {
  TokenValidator validator(durableIn(dir));
  for (int i = 1; i <= 10; ++i) {
    ASSERT_TRUE(
        validator.submit(op(static_cast<std::uint64_t>(i), "op-" + std::to_string(i))).accepted());
  }
}

std::string readBytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(DurableValidator, AcceptedRecordMatchesTheDocumentedFormat) {
  TempDir dir;
  {
    TokenValidator validator(durableIn(dir.path()));
    validator.submit(Operation{{"a", 2, "i", -1}, "o", "null"});
  }
  // docs/fencing.md: u32 length, u32 CRC-32 (IEEE, as zlib.crc32), tag 1, account, opId,
  // u64 token, instanceId, i64 sessionId, payload, u64 hwm; little-endian, u32-prefixed strings.
  const std::string expected(
      "\x30\x00\x00\x00\x20\xfc\x25\x9e"
      "\x01"
      "\x01\x00\x00\x00"
      "a"
      "\x01\x00\x00\x00"
      "o"
      "\x02\x00\x00\x00\x00\x00\x00\x00"
      "\x01\x00\x00\x00"
      "i"
      "\xff\xff\xff\xff\xff\xff\xff\xff"
      "\x04\x00\x00\x00"
      "null"
      "\x02\x00\x00\x00\x00\x00\x00\x00",
      56);
  EXPECT_EQ(readBytes(logFiles(dir.path()).at(0)), expected);
}

TEST(DurableValidator, StateSurvivesRestart) {
  TempDir dir;
  {
    TokenValidator validator(durableIn(dir.path()));
    validator.submit(op(4, "a"));
    validator.submit(op(9, "b", "other"));
    EXPECT_EQ(validator.submit(op(3, "c")).verdict, Verdict::stale_token);
  }
  TokenValidator reopened(durableIn(dir.path()));
  EXPECT_EQ(reopened.recovery().replayedRecords, 2u);
  EXPECT_EQ(reopened.status("acct")->hwm, 4u);
  EXPECT_EQ(reopened.status("acct")->accepted, 1u);
  EXPECT_EQ(reopened.status("other")->hwm, 9u);
  EXPECT_EQ(reopened.submit(op(3, "d")).verdict, Verdict::stale_token);
}

TEST(DurableValidator, RetryAfterRestartGetsTheFirstAnswer) {
  TempDir dir;
  {
    TokenValidator validator(durableIn(dir.path()));
    validator.submit(op(4, "a"));
    validator.submit(op(6, "b"));
  }
  TokenValidator reopened(durableIn(dir.path()));
  const Decision retry = reopened.submit(op(4, "a"));
  EXPECT_TRUE(retry.replayed);
  EXPECT_EQ(retry.hwm, 4u);
  EXPECT_EQ(readLoggedOperations(dir.path()).size(), 2u) << "a retry must not be logged again";
}

TEST(DurableValidator, FenceAndResetSurviveRestart) {
  TempDir dir;
  {
    TokenValidator validator(durableIn(dir.path()));
    validator.submit(op(50, "a"));
    EXPECT_EQ(validator.submit(op(1, "b"), ActiveView::present(1)).verdict,
              Verdict::account_fenced);
  }
  {
    TokenValidator reopened(durableIn(dir.path()));
    EXPECT_TRUE(reopened.status("acct")->fenced);
    EXPECT_EQ(reopened.status("acct")->fencedAtActiveSeq, 1u);
    EXPECT_EQ(reopened.submit(op(51, "c")).verdict, Verdict::account_fenced);
    reopened.resetHighWaterMark("acct", 1, "alice", "zookeeper data was wiped");
  }
  TokenValidator reopened(durableIn(dir.path()));
  EXPECT_FALSE(reopened.status("acct")->fenced);
  EXPECT_EQ(reopened.status("acct")->hwm, 1u);
  EXPECT_TRUE(reopened.submit(op(1, "d"), ActiveView::present(1)).accepted());
}

TEST(DurableValidator, TornLastRecordIsCutAndTheRestRecovered) {
  TempDir dir;
  writeTenOps(dir.path());
  const fs::path log = logFiles(dir.path()).at(0);
  fs::resize_file(log, fs::file_size(log) - 5);  // the crash hit the middle of op-10
  {
    TokenValidator reopened(durableIn(dir.path()));
    EXPECT_GT(reopened.recovery().truncatedBytes, 0u);
    EXPECT_FALSE(reopened.recovery().truncationReason.empty());
    EXPECT_EQ(reopened.status("acct")->hwm, 9u);
    EXPECT_EQ(reopened.status("acct")->accepted, 9u);
    EXPECT_TRUE(reopened.submit(op(11, "op-11")).accepted());
  }
  // Records appended after the cut are read back: the cut left a clean end.
  TokenValidator again(durableIn(dir.path()));
  EXPECT_EQ(again.recovery().truncatedBytes, 0u);
  EXPECT_EQ(again.status("acct")->hwm, 11u);
  EXPECT_EQ(readLoggedOperations(dir.path()).size(), 10u);
}

TEST(DurableValidator, CorruptLastRecordIsCut) {
  TempDir dir;
  writeTenOps(dir.path());
  const fs::path log = logFiles(dir.path()).at(0);
  flipByte(log, fs::file_size(log) - 3);
  TokenValidator reopened(durableIn(dir.path()));
  EXPECT_NE(reopened.recovery().truncationReason.find("CRC"), std::string::npos);
  EXPECT_EQ(reopened.status("acct")->hwm, 9u);
}

TEST(DurableValidator, PartialRecordHeaderIsCut) {
  TempDir dir;
  writeTenOps(dir.path());
  const fs::path log = logFiles(dir.path()).at(0);
  std::ofstream(log, std::ios::app | std::ios::binary).write("\x07\x00", 2);
  TokenValidator reopened(durableIn(dir.path()));
  EXPECT_EQ(reopened.recovery().truncatedBytes, 2u);
  EXPECT_EQ(reopened.status("acct")->hwm, 10u);
}

TEST(DurableValidator, CorruptionBeforeValidRecordsRefusesToStart) {
  TempDir dir;
  writeTenOps(dir.path());
  const fs::path log = logFiles(dir.path()).at(0);
  const auto sizeBefore = fs::file_size(log);
  flipByte(log, 12);  // inside op-1: acknowledged records follow, cutting would lose them
  try {
    TokenValidator reopened(durableIn(dir.path()));
    FAIL() << "opened a log that is corrupt in the middle";
  } catch (const StorageError& error) {
    EXPECT_NE(std::string(error.what()).find("corrupt at offset 0"), std::string::npos)
        << error.what();
  }
  EXPECT_EQ(fs::file_size(log), sizeBefore) << "a refused recovery must change nothing";
}

TEST(DurableValidator, CompactionKeepsStateAndBoundsTheLog) {
  TempDir dir;
  ValidatorOptions options = durableIn(dir.path());
  options.compactAfterLogBytes = 2048;
  options.rememberedOpsPerAccount = 16;
  {
    TokenValidator validator(options);
    for (int i = 1; i <= 300; ++i) {
      validator.submit(op(static_cast<std::uint64_t>(i), "op-" + std::to_string(i),
                          i % 2 == 0 ? "even" : "odd"));
    }
    validator.resetHighWaterMark("odd", 7, "alice", "test");
  }
  ASSERT_EQ(logFiles(dir.path()).size(), 1u) << "old logs must be deleted after compaction";
  EXPECT_LT(fs::file_size(logFiles(dir.path()).at(0)), 2048u + 512u);
  EXPECT_TRUE(fs::exists(dir.path() / "snapshot"));

  TokenValidator reopened(options);
  EXPECT_EQ(reopened.status("even")->hwm, 300u);
  EXPECT_EQ(reopened.status("even")->accepted, 150u);
  EXPECT_EQ(reopened.status("odd")->hwm, 7u);
  EXPECT_EQ(reopened.status("odd")->accepted, 150u);
  EXPECT_TRUE(reopened.submit(op(300, "op-300", "even")).replayed);  // recent: remembered
  EXPECT_FALSE(reopened.submit(op(300, "op-2", "even")).replayed);   // beyond the last 16
}

TEST(DurableValidator, ExplicitCompactionThenRestart) {
  TempDir dir;
  {
    TokenValidator validator(durableIn(dir.path()));
    validator.submit(op(3, "a"));
    validator.compact();
    EXPECT_TRUE(readLoggedOperations(dir.path()).empty()) << "the snapshot folded the log";
    validator.submit(op(5, "b"));
  }
  TokenValidator reopened(durableIn(dir.path()));
  EXPECT_EQ(reopened.recovery().snapshotAccounts, 1u);
  EXPECT_EQ(reopened.recovery().replayedRecords, 1u);
  EXPECT_EQ(reopened.status("acct")->hwm, 5u);
  EXPECT_EQ(reopened.status("acct")->accepted, 2u);
  EXPECT_TRUE(reopened.submit(op(3, "a")).replayed);
}

TEST(DurableValidator, LogLeftOverFromAnInterruptedCompactionIsNotReplayedTwice) {
  TempDir dir;
  writeTenOps(dir.path());
  const fs::path oldLog = logFiles(dir.path()).at(0);
  const fs::path saved = dir.path().parent_path() / (dir.path().filename().string() + ".saved");
  fs::copy_file(oldLog, saved);
  {
    TokenValidator validator(durableIn(dir.path()));
    validator.compact();
  }
  // As if the process died after renaming the snapshot, before deleting the old log.
  fs::rename(saved, oldLog);
  TokenValidator reopened(durableIn(dir.path()));
  EXPECT_EQ(reopened.status("acct")->accepted, 10u);
  EXPECT_FALSE(fs::exists(oldLog));
}

// A disk that fails a sync (EIO; a full disk fails the write before it): the failed decision is
// refused, everything after it too, and nothing changes until the disk works again. Recovery
// then cuts the log back to what was durable, so the refused decision is neither in the state nor
// replayed at the next start, and the validator resumes without a restart.
TEST(DurableValidator, AFailedSyncRefusesUntilTheStoreRecoversWithOnlyWhatWasDurable) {
  TempDir dir;
  {
    TokenValidator validator(durableIn(dir.path()));
    ASSERT_TRUE(validator.submit(op(5, "a")).accepted());
    testing::failSyncs(true);
    EXPECT_THROW(validator.submit(op(6, "b")), StorageError);
    EXPECT_THROW(validator.submit(op(7, "c")), StorageError) << "refused until it recovers";
    EXPECT_THROW(validator.resetHighWaterMark("acct", 1, "alice", "x"), StorageError);
    EXPECT_FALSE(validator.recoverStorage()) << "the disk still fails";
    testing::failSyncs(false);
    ASSERT_TRUE(validator.recoverStorage());
    EXPECT_TRUE(validator.recoverStorage()) << "nothing failed since: at once";
    EXPECT_EQ(validator.status("acct")->hwm, 5u) << "the refused raise was never durable";
    ASSERT_EQ(readLoggedOperations(dir.path()).size(), 1u);
    const Decision retried = validator.submit(op(6, "b"));
    EXPECT_TRUE(retried.accepted());
    EXPECT_FALSE(retried.replayed) << "decided anew: its first attempt was refused";
  }
  TokenValidator reopened(durableIn(dir.path()));
  EXPECT_EQ(reopened.status("acct")->hwm, 6u);
  const auto logged = readLoggedOperations(dir.path());
  ASSERT_EQ(logged.size(), 2u);
  EXPECT_EQ(logged[0].operation.opId, "a");
  EXPECT_EQ(logged[1].operation.opId, "b");
}

TEST(DurableValidator, DataDirectoryIsExclusive) {
  TempDir dir;
  TokenValidator first(durableIn(dir.path()));
  EXPECT_THROW(TokenValidator second(durableIn(dir.path())), StorageError);
}

TEST(DurableValidator, PerOperationCommitModeRecoversTheSame) {
  TempDir dir;
  {
    TokenValidator validator(durableIn(dir.path(), CommitMode::per_operation));
    for (int i = 1; i <= 5; ++i)
      validator.submit(op(static_cast<std::uint64_t>(i), std::to_string(i)));
  }
  TokenValidator reopened(durableIn(dir.path()));
  EXPECT_EQ(reopened.status("acct")->hwm, 5u);
  EXPECT_EQ(readLoggedOperations(dir.path()).size(), 5u);
}

// Many threads with different tokens and retries: every accepted operation is in the log
// exactly once, no rejected one is, and tokens never go down along the log.
void concurrentSubmittersTest(CommitMode mode) {
  TempDir dir;
  constexpr int kThreads = 16;
  constexpr int kOpsPerThread = 60;
  std::vector<std::set<std::string>> acceptedBy(kThreads);
  std::vector<std::set<std::string>> rejectedBy(kThreads);
  {
    TokenValidator validator(durableIn(dir.path(), mode));
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kOpsPerThread; ++i) {
          std::string id =
              std::to_string(t);  // built by appending: GCC 12 -Wrestrict false positive
          id += '-';
          id += std::to_string(i);
          // Leaders 1..4 take turns so that stale tokens are rejected along the way.
          const Operation operation = op(static_cast<std::uint64_t>(1 + (t + i) % 4), id);
          const Decision first = validator.submit(operation);
          (first.accepted() ? acceptedBy[t] : rejectedBy[t]).insert(id);
          if (first.accepted()) {
            EXPECT_TRUE(validator.submit(operation).replayed) << id;
          }
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    const CommitStats stats = validator.commitStats();
    std::size_t acceptedSoFar = 0;
    for (const auto& ids : acceptedBy) acceptedSoFar += ids.size();
    EXPECT_EQ(stats.recordsWritten, acceptedSoFar);
    if (mode == CommitMode::per_operation) {
      EXPECT_EQ(stats.syncs, stats.recordsWritten);
    } else {
      EXPECT_LE(stats.syncs, stats.recordsWritten);
    }
  }
  std::map<std::string, int> timesLogged;
  std::uint64_t highest = 0;
  for (const LoggedOperation& logged : readLoggedOperations(dir.path())) {
    ++timesLogged[logged.operation.opId];
    EXPECT_GE(logged.operation.fencing.token, highest) << logged.operation.opId;
    highest = std::max(highest, logged.operation.fencing.token);
  }
  std::size_t accepted = 0;
  for (int t = 0; t < kThreads; ++t) {
    accepted += acceptedBy[t].size();
    for (const std::string& id : acceptedBy[t]) EXPECT_EQ(timesLogged[id], 1) << id;
    for (const std::string& id : rejectedBy[t]) EXPECT_EQ(timesLogged.count(id), 0u) << id;
  }
  EXPECT_EQ(timesLogged.size(), accepted);
  EXPECT_GT(accepted, 0u);
  TokenValidator reopened(durableIn(dir.path()));
  EXPECT_EQ(reopened.status("acct")->accepted, accepted);
}

TEST(DurableValidator, ConcurrentSubmittersWithGroupCommitLogEachAcceptedOpOnce) {
  concurrentSubmittersTest(CommitMode::group);
}

TEST(DurableValidator, ConcurrentSubmittersWithPerOperationCommitLogEachAcceptedOpOnce) {
  concurrentSubmittersTest(CommitMode::per_operation);
}

TEST(DurableValidator, ConcurrentSubmittersDuringCompactionLoseNothing) {
  TempDir dir;
  ValidatorOptions options = durableIn(dir.path());
  options.compactAfterLogBytes = 4096;
  constexpr int kThreads = 8;
  constexpr int kOpsPerThread = 50;
  {
    TokenValidator validator(options);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        const std::string account = "acct" + std::to_string(t);
        for (int i = 1; i <= kOpsPerThread; ++i) {
          EXPECT_TRUE(
              validator.submit(op(static_cast<std::uint64_t>(i), std::to_string(i), account))
                  .accepted());
          if (i % 10 == 0) validator.compact();
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
  TokenValidator reopened(options);
  for (int t = 0; t < kThreads; ++t) {
    const AccountStatus status = *reopened.status("acct" + std::to_string(t));
    EXPECT_EQ(status.hwm, static_cast<std::uint64_t>(kOpsPerThread));
    EXPECT_EQ(status.accepted, static_cast<std::uint64_t>(kOpsPerThread));
  }
}

}  // namespace
}  // namespace zkagent::fencing
