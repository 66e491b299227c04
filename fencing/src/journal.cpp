#include "journal.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <boost/crc.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

namespace zkagent::fencing::detail {
namespace fs = std::filesystem;
namespace {

// Record type tags (first body byte). Never renumber: they are on disk.
enum class Tag : std::uint8_t {
  accepted_op = 1,
  account_fenced = 2,
  hwm_reset = 3,
  snapshot_header = 16,
  account_snapshot = 17,
};
constexpr std::uint64_t kSnapshotMagic = 0x3145434E45464B5AULL;  // "ZKFENCE1", little-endian
constexpr std::size_t kFrameHeaderBytes = 8;
constexpr const char* kSnapshotName = "snapshot";
constexpr const char* kSnapshotTempName = "snapshot.tmp";
constexpr const char* kLockName = "LOCK";
constexpr std::string_view kLogPrefix = "log.";

struct SnapshotHeader {
  std::uint64_t logGeneration = 0;  // logs with a lower generation are folded into the snapshot
  std::uint64_t accounts = 0;
};
using Record = std::variant<AcceptedOp, AccountFenced, HwmReset, SnapshotHeader, AccountSnapshot>;

std::uint32_t crc32(std::string_view bytes) {
  boost::crc_32_type crc;
  crc.process_bytes(bytes.data(), bytes.size());
  return crc.checksum();
}

void appendLittle(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

class Writer {
 public:
  explicit Writer(Tag tag) { u8(static_cast<std::uint8_t>(tag)); }
  void u8(std::uint8_t value) { body_.push_back(static_cast<char>(value)); }
  void u32(std::uint32_t value) { appendLittle(body_, value, 4); }
  void u64(std::uint64_t value) { appendLittle(body_, value, 8); }
  void i64(std::int64_t value) { u64(static_cast<std::uint64_t>(value)); }
  void str(std::string_view text) {
    u32(static_cast<std::uint32_t>(text.size()));
    body_.append(text);
  }
  std::string frame() const {
    std::string out;
    out.reserve(kFrameHeaderBytes + body_.size());
    appendLittle(out, body_.size(), 4);
    appendLittle(out, crc32(body_), 4);
    out += body_;
    return out;
  }

 private:
  std::string body_;
};

struct Truncated {};  // a field ran past the end of its record

class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  std::uint8_t u8() { return static_cast<std::uint8_t>(take(1)[0]); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(little(4)); }
  std::uint64_t u64() { return little(8); }
  std::int64_t i64() { return static_cast<std::int64_t>(u64()); }
  std::string str() { return std::string(take(u32())); }
  bool done() const { return bytes_.empty(); }

 private:
  std::string_view take(std::size_t count) {
    if (count > bytes_.size()) throw Truncated{};
    const std::string_view taken = bytes_.substr(0, count);
    bytes_.remove_prefix(count);
    return taken;
  }
  std::uint64_t little(int count) {
    const std::string_view raw = take(static_cast<std::size_t>(count));
    std::uint64_t value = 0;
    for (int i = count - 1; i >= 0; --i) value = (value << 8) | static_cast<std::uint8_t>(raw[i]);
    return value;
  }
  std::string_view bytes_;
};

std::string encode(const AcceptedOp& accepted) {
  const Operation& op = accepted.operation;
  Writer out(Tag::accepted_op);
  out.str(op.fencing.account);
  out.str(op.opId);
  out.u64(op.fencing.token);
  out.str(op.fencing.instanceId);
  out.i64(op.fencing.sessionId);
  out.str(op.payload);
  out.u64(accepted.hwm);
  return out.frame();
}

std::string encode(const AccountFenced& fenced) {
  Writer out(Tag::account_fenced);
  out.str(fenced.account);
  out.u64(fenced.activeSeq);
  out.u64(fenced.hwm);
  out.i64(fenced.unixMillis);
  return out.frame();
}

std::string encode(const HwmReset& reset) {
  Writer out(Tag::hwm_reset);
  out.str(reset.account);
  out.u64(reset.hwm);
  out.str(reset.actor);
  out.str(reset.reason);
  out.i64(reset.unixMillis);
  return out.frame();
}

std::string encode(const SnapshotHeader& header) {
  Writer out(Tag::snapshot_header);
  out.u64(kSnapshotMagic);
  out.u64(header.logGeneration);
  out.u64(header.accounts);
  return out.frame();
}

std::string encode(const AccountSnapshot& account) {
  Writer out(Tag::account_snapshot);
  out.str(account.account);
  out.u64(account.hwm);
  out.u64(account.accepted);
  out.u8(account.fenced ? 1 : 0);
  out.u64(account.fencedAtActiveSeq);
  out.u32(static_cast<std::uint32_t>(account.recentOps.size()));
  for (const auto& [opId, hwm] : account.recentOps) {
    out.str(opId);
    out.u64(hwm);
  }
  return out.frame();
}

// Decodes one body; nullopt for an unknown tag, a short field or trailing bytes.
std::optional<Record> decodeBody(std::string_view body) {
  try {
    Reader in(body);
    std::optional<Record> record;
    switch (static_cast<Tag>(in.u8())) {
      case Tag::accepted_op: {
        AcceptedOp accepted;
        Operation& op = accepted.operation;
        op.fencing.account = in.str();
        op.opId = in.str();
        op.fencing.token = in.u64();
        op.fencing.instanceId = in.str();
        op.fencing.sessionId = in.i64();
        op.payload = in.str();
        accepted.hwm = in.u64();
        record = std::move(accepted);
        break;
      }
      case Tag::account_fenced: {
        AccountFenced fenced;
        fenced.account = in.str();
        fenced.activeSeq = in.u64();
        fenced.hwm = in.u64();
        fenced.unixMillis = in.i64();
        record = std::move(fenced);
        break;
      }
      case Tag::hwm_reset: {
        HwmReset reset;
        reset.account = in.str();
        reset.hwm = in.u64();
        reset.actor = in.str();
        reset.reason = in.str();
        reset.unixMillis = in.i64();
        record = std::move(reset);
        break;
      }
      case Tag::snapshot_header: {
        if (in.u64() != kSnapshotMagic) return std::nullopt;
        SnapshotHeader header;
        header.logGeneration = in.u64();
        header.accounts = in.u64();
        record = header;
        break;
      }
      case Tag::account_snapshot: {
        AccountSnapshot account;
        account.account = in.str();
        account.hwm = in.u64();
        account.accepted = in.u64();
        account.fenced = in.u8() != 0;
        account.fencedAtActiveSeq = in.u64();
        const std::uint32_t count = in.u32();
        for (std::uint32_t i = 0; i < count; ++i) {
          std::string opId = in.str();
          account.recentOps.emplace_back(std::move(opId), in.u64());
        }
        record = std::move(account);
        break;
      }
      default:
        return std::nullopt;
    }
    if (!in.done()) return std::nullopt;
    return record;
  } catch (const Truncated&) {
    return std::nullopt;
  }
}

struct FrameAt {
  std::optional<Record> record;  // nullopt: no valid frame here
  std::size_t bytes = 0;
  std::string problem;
};

FrameAt readFrame(std::string_view bytes, std::size_t offset) {
  const std::string_view rest = bytes.substr(offset);
  if (rest.size() < kFrameHeaderBytes) return {std::nullopt, 0, "partial record header"};
  Reader header(rest.substr(0, kFrameHeaderBytes));
  const std::uint32_t length = header.u32();
  const std::uint32_t checksum = header.u32();
  if (length == 0 || length > rest.size() - kFrameHeaderBytes) {
    return {std::nullopt, 0, "record length " + std::to_string(length) + " runs past the end"};
  }
  const std::string_view body = rest.substr(kFrameHeaderBytes, length);
  if (crc32(body) != checksum) return {std::nullopt, 0, "CRC mismatch"};
  auto record = decodeBody(body);
  if (!record) return {std::nullopt, 0, "undecodable record"};
  return {std::move(record), kFrameHeaderBytes + length, {}};
}

struct Scan {
  std::size_t validBytes = 0;
  std::string problem;            // empty: every byte was a valid record
  bool validRecordAfter = false;  // a valid record follows the bad one: not a torn tail
};

Scan scanRecords(std::string_view bytes, const std::function<void(Record&&)>& onRecord) {
  Scan scan;
  while (scan.validBytes < bytes.size()) {
    FrameAt frame = readFrame(bytes, scan.validBytes);
    if (!frame.record) {
      scan.problem = std::move(frame.problem);
      for (std::size_t at = scan.validBytes + 1; at < bytes.size() && !scan.validRecordAfter;
           ++at) {
        scan.validRecordAfter = readFrame(bytes, at).record.has_value();
      }
      return scan;
    }
    onRecord(std::move(*frame.record));
    scan.validBytes += frame.bytes;
  }
  return scan;
}

[[noreturn]] void throwErrno(const std::string& what) {
  throw StorageError(what + ": " + std::strerror(errno));
}

std::string readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw StorageError("cannot read " + path.string());
  std::ostringstream content;
  content << in.rdbuf();
  return std::move(content).str();
}

void writeAll(int fd, std::string_view bytes, const fs::path& path) {
  while (!bytes.empty()) {
    const ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      throwErrno("write to " + path.string());
    }
    bytes.remove_prefix(static_cast<std::size_t>(written));
  }
}

// A new or renamed directory entry is only durable once the directory itself is synced.
void syncDirectory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throwErrno("open directory " + dir.string());
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throwErrno("fsync directory " + dir.string());
}

fs::path logPath(const fs::path& dir, std::uint64_t generation) {
  std::string number = std::to_string(generation);
  return dir / (std::string(kLogPrefix) + std::string(20 - number.size(), '0') + number);
}

// Log generations present in dir, ascending.
std::vector<std::uint64_t> logGenerations(const fs::path& dir) {
  std::vector<std::uint64_t> generations;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(kLogPrefix) || name.size() != kLogPrefix.size() + 20) continue;
    const std::string digits = name.substr(kLogPrefix.size());
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    generations.push_back(std::stoull(digits));
  }
  std::sort(generations.begin(), generations.end());
  return generations;
}

// Loads dir/snapshot (written atomically, so any defect is real corruption). Returns the log
// generation it covers, 0 without a snapshot.
std::uint64_t loadSnapshot(const fs::path& dir,
                           const std::function<void(AccountSnapshot&&)>& restore) {
  const fs::path path = dir / kSnapshotName;
  if (!fs::exists(path)) return 0;
  const std::string bytes = readFile(path);
  std::optional<SnapshotHeader> header;
  std::uint64_t accounts = 0;
  bool wellFormed = true;
  const Scan scan = scanRecords(bytes, [&](Record&& record) {
    if (!header) {
      if (auto* first = std::get_if<SnapshotHeader>(&record)) header = *first;
      else wellFormed = false;
    } else if (auto* account = std::get_if<AccountSnapshot>(&record)) {
      ++accounts;
      restore(std::move(*account));
    } else {
      wellFormed = false;
    }
  });
  if (!scan.problem.empty() || !wellFormed || !header || header->accounts != accounts) {
    throw StorageError("snapshot " + path.string() + " is corrupt (" +
                       (scan.problem.empty() ? "unexpected content" : scan.problem) +
                       " at offset " + std::to_string(scan.validBytes) +
                       "); restore the data directory from a backup");
  }
  return header->logGeneration;
}

}  // namespace

std::string encodeEvent(const Event& event) {
  return std::visit([](const auto& change) { return encode(change); }, event);
}

Journal::Journal(const fs::path& dataDir, const std::function<void(AccountSnapshot&&)>& restore,
                 const std::function<void(Event&&)>& replay, RecoveryReport& report)
    : dir_(dataDir) {
  std::error_code error;
  fs::create_directories(dir_, error);
  if (error) throw StorageError("cannot create data directory " + dir_.string() + ": " + error.message());
  const fs::path lockPath = dir_ / kLockName;
  lockFd_ = ::open(lockPath.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lockFd_ < 0) throwErrno("open " + lockPath.string());
  if (::flock(lockFd_, LOCK_EX | LOCK_NB) != 0) {
    const int lockErrno = errno;
    ::close(lockFd_);
    errno = lockErrno;
    throwErrno("data directory " + dir_.string() + " is in use by another validator");
  }
  try {
    fs::remove(dir_ / kSnapshotTempName);  // an unfinished compaction
    generation_ = loadSnapshot(dir_, [&](AccountSnapshot&& account) {
      ++report.snapshotAccounts;
      restore(std::move(account));
    });
    std::vector<std::uint64_t> generations = logGenerations(dir_);
    for (const std::uint64_t folded : generations) {
      if (folded < generation_) fs::remove(logPath(dir_, folded));  // compaction finished
    }
    std::erase_if(generations, [&](std::uint64_t g) { return g < generation_; });
    for (const std::uint64_t generation : generations) {
      const fs::path path = logPath(dir_, generation);
      const std::string bytes = readFile(path);
      const Scan scan = scanRecords(bytes, [&](Record&& record) {
        std::visit(
            [&](auto&& change) {
              using Change = std::decay_t<decltype(change)>;
              if constexpr (std::is_constructible_v<Event, Change&&>) {
                ++report.replayedRecords;
                replay(Event(std::move(change)));
              } else {
                throw StorageError("log " + path.string() + " holds a snapshot record");
              }
            },
            std::move(record));
      });
      if (scan.problem.empty()) continue;
      // Only the unacknowledged end of the newest log may be damaged by a crash.
      if (generation != generations.back() || scan.validRecordAfter) {
        throw StorageError("log " + path.string() + " is corrupt at offset " +
                           std::to_string(scan.validBytes) + " (" + scan.problem +
                           ") with valid records after it; inspect it, then restore the data "
                           "directory or truncate the log at that offset");
      }
      fs::resize_file(path, scan.validBytes);
      report.truncatedBytes = bytes.size() - scan.validBytes;
      report.truncationReason = scan.problem + " at offset " + std::to_string(scan.validBytes) +
                                " of " + path.filename().string();
    }
    if (!generations.empty()) generation_ = generations.back();
    const fs::path path = logPath(dir_, generation_);
    logFd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (logFd_ < 0) throwErrno("open " + path.string());
    // Makes the truncation and a newly created log durable before anything is appended.
    if (::fsync(logFd_) != 0) throwErrno("fsync " + path.string());
    syncDirectory(dir_);
    logBytes_ = fs::file_size(path);
  } catch (...) {
    if (logFd_ >= 0) ::close(logFd_);
    ::close(lockFd_);
    throw;
  }
}

Journal::~Journal() {
  ::close(logFd_);
  ::close(lockFd_);
}

void Journal::appendDurably(std::string_view records) {
  const fs::path path = logPath(dir_, generation_);
  writeAll(logFd_, records, path);
  if (::fdatasync(logFd_) != 0) throwErrno("fdatasync " + path.string());
  logBytes_ += records.size();
}

void Journal::rotate(const std::vector<AccountSnapshot>& state) {
  const std::uint64_t next = generation_ + 1;
  const fs::path nextLog = logPath(dir_, next);
  const int nextFd = ::open(nextLog.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (nextFd < 0) throwErrno("create " + nextLog.string());
  try {
    syncDirectory(dir_);
    std::string snapshot = encode(SnapshotHeader{next, state.size()});
    for (const AccountSnapshot& account : state) snapshot += encode(account);
    const fs::path temp = dir_ / kSnapshotTempName;
    const int snapshotFd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (snapshotFd < 0) throwErrno("create " + temp.string());
    try {
      writeAll(snapshotFd, snapshot, temp);
      if (::fsync(snapshotFd) != 0) throwErrno("fsync " + temp.string());
    } catch (...) {
      ::close(snapshotFd);
      throw;
    }
    ::close(snapshotFd);
    fs::rename(temp, dir_ / kSnapshotName);
    syncDirectory(dir_);
  } catch (...) {
    ::close(nextFd);
    throw;
  }
  ::close(logFd_);
  logFd_ = nextFd;
  for (const std::uint64_t folded : logGenerations(dir_)) {
    if (folded < next) fs::remove(logPath(dir_, folded));
  }
  generation_ = next;
  logBytes_ = 0;
}

}  // namespace zkagent::fencing::detail

namespace zkagent::fencing {

std::vector<LoggedOperation> readLoggedOperations(const std::filesystem::path& dataDir) {
  using namespace detail;
  if (!fs::is_directory(dataDir)) throw StorageError("no data directory " + dataDir.string());
  const std::uint64_t snapshotGeneration = loadSnapshot(dataDir, [](AccountSnapshot&&) {});
  std::vector<LoggedOperation> operations;
  for (const std::uint64_t generation : logGenerations(dataDir)) {
    if (generation < snapshotGeneration) continue;
    const Scan scan = scanRecords(readFile(logPath(dataDir, generation)), [&](Record&& record) {
      if (auto* accepted = std::get_if<AcceptedOp>(&record)) {
        operations.push_back({std::move(accepted->operation), accepted->hwm});
      }
    });
    if (!scan.problem.empty()) break;
  }
  return operations;
}

}  // namespace zkagent::fencing
