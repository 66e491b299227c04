#include "journal.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <boost/crc.hpp>
#include <cerrno>
#include <concepts>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <tuple>

namespace zkagent::fencing::detail {
namespace fs = std::filesystem;
namespace {

constexpr std::uint64_t kSnapshotMagic = 0x3145434E45464B5AULL;  // "ZKFENCE1", little-endian
constexpr std::size_t kFrameHeaderBytes = 8;
constexpr const char* kSnapshotName = "snapshot";
constexpr const char* kSnapshotTempName = "snapshot.tmp";
constexpr const char* kLockName = "LOCK";
constexpr std::string_view kLogPrefix = "log.";

struct SnapshotHeader {
  std::uint64_t magic = kSnapshotMagic;
  std::uint64_t logGeneration = 0;  // logs with a lower generation are folded into the snapshot
  std::uint64_t accounts = 0;
};
// A snapshot account written before HWM holders were recorded (tag 17): read, never written.
struct HolderlessAccountSnapshot {
  AccountSnapshot account;
};
using Record =
    std::variant<AcceptedOp, AccountFenced, HwmReset, HwmRaised, SnapshotHeader, AccountSnapshot>;

// Each record's fields in on-disk order, one list serving both encoding and decoding.
template <class R, class Record>
concept RecordOf = std::same_as<std::remove_const_t<R>, Record>;

auto fieldsOf(RecordOf<AcceptedOp> auto& r) {
  auto& op = r.operation;
  return std::tie(op.fencing.account, op.opId, op.fencing.token, op.fencing.instanceId,
                  op.fencing.sessionId, op.payload, r.hwm);
}
auto fieldsOf(RecordOf<AccountFenced> auto& r) {
  return std::tie(r.account, r.activeSeq, r.hwm, r.unixMillis);
}
auto fieldsOf(RecordOf<HwmReset> auto& r) {
  return std::tie(r.account, r.hwm, r.actor, r.reason, r.unixMillis);
}
auto fieldsOf(RecordOf<HwmRaised> auto& r) {
  return std::tie(r.account, r.hwm, r.instanceId, r.sessionId);
}
auto fieldsOf(RecordOf<SnapshotHeader> auto& r) {
  return std::tie(r.magic, r.logGeneration, r.accounts);
}
auto fieldsOf(RecordOf<AccountSnapshot> auto& r) {
  return std::tie(r.account, r.hwm, r.accepted, r.fenced, r.fencedAtActiveSeq, r.recentOps,
                  r.holderInstance, r.holderSession);
}
auto fieldsOf(RecordOf<HolderlessAccountSnapshot> auto& r) {
  auto& a = r.account;
  return std::tie(a.account, a.hwm, a.accepted, a.fenced, a.fencedAtActiveSeq, a.recentOps);
}

// Tags are the first body byte. Never renumber: they are on disk.
template <class R>
constexpr std::uint8_t kTag = 0;
template <>
constexpr std::uint8_t kTag<AcceptedOp> = 1;
template <>
constexpr std::uint8_t kTag<AccountFenced> = 2;
template <>
constexpr std::uint8_t kTag<HwmReset> = 3;
template <>
constexpr std::uint8_t kTag<HwmRaised> = 4;
template <>
constexpr std::uint8_t kTag<SnapshotHeader> = 16;
template <>
constexpr std::uint8_t kTag<HolderlessAccountSnapshot> = 17;
template <>
constexpr std::uint8_t kTag<AccountSnapshot> = 18;

std::uint32_t crc32(std::string_view bytes) {
  boost::crc_32_type crc;
  crc.process_bytes(bytes.data(), bytes.size());
  return crc.checksum();
}

void appendLittle(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

// Integers little-endian, bool as one byte, strings and lists with a u32 count first.
class Writer {
 public:
  void put(bool value) { body_.push_back(value ? '\1' : '\0'); }
  void put(std::uint8_t value) { body_.push_back(static_cast<char>(value)); }
  void put(std::uint32_t value) { appendLittle(body_, value, 4); }
  void put(std::uint64_t value) { appendLittle(body_, value, 8); }
  void put(std::int64_t value) { put(static_cast<std::uint64_t>(value)); }
  void put(const std::string& text) {
    put(static_cast<std::uint32_t>(text.size()));
    body_.append(text);
  }
  void put(const std::vector<std::pair<std::string, std::uint64_t>>& entries) {
    put(static_cast<std::uint32_t>(entries.size()));
    for (const auto& [key, value] : entries) {
      put(key);
      put(value);
    }
  }
  // u32 body length, u32 CRC-32 of the body, body.
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
  void get(bool& value) { value = take(1)[0] != 0; }
  void get(std::uint8_t& value) { value = static_cast<std::uint8_t>(take(1)[0]); }
  void get(std::uint32_t& value) { value = static_cast<std::uint32_t>(little(4)); }
  void get(std::uint64_t& value) { value = little(8); }
  void get(std::int64_t& value) { value = static_cast<std::int64_t>(little(8)); }
  void get(std::string& text) {
    std::uint32_t size = 0;
    get(size);
    text = std::string(take(size));
  }
  void get(std::vector<std::pair<std::string, std::uint64_t>>& entries) {
    std::uint32_t count = 0;
    get(count);
    for (std::uint32_t i = 0; i < count; ++i) get(entries.emplace_back());
  }
  void get(std::pair<std::string, std::uint64_t>& entry) {
    get(entry.first);
    get(entry.second);
  }
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

template <class R>
std::string encode(const R& record) {
  Writer out;
  out.put(kTag<R>);
  std::apply([&](const auto&... field) { (out.put(field), ...); }, fieldsOf(record));
  return out.frame();
}

template <class R>
R decodeAs(Reader& in) {
  R record;
  std::apply([&](auto&... field) { (in.get(field), ...); }, fieldsOf(record));
  return record;
}

// Decodes one body; nullopt for an unknown tag, a bad magic, a short field or trailing bytes.
std::optional<Record> decodeBody(std::string_view body) {
  try {
    Reader in(body);
    std::uint8_t tag = 0;
    in.get(tag);
    Record record;
    switch (tag) {
      case kTag<AcceptedOp>:
        record = decodeAs<AcceptedOp>(in);
        break;
      case kTag<AccountFenced>:
        record = decodeAs<AccountFenced>(in);
        break;
      case kTag<HwmReset>:
        record = decodeAs<HwmReset>(in);
        break;
      case kTag<HwmRaised>:
        record = decodeAs<HwmRaised>(in);
        break;
      case kTag<SnapshotHeader>:
        record = decodeAs<SnapshotHeader>(in);
        break;
      case kTag<HolderlessAccountSnapshot>:
        record = decodeAs<HolderlessAccountSnapshot>(in).account;
        break;
      case kTag<AccountSnapshot>:
        record = decodeAs<AccountSnapshot>(in);
        break;
      default:
        return std::nullopt;
    }
    const auto* header = std::get_if<SnapshotHeader>(&record);
    if (!in.done() || (header != nullptr && header->magic != kSnapshotMagic)) return std::nullopt;
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
  std::uint32_t length = 0;
  std::uint32_t checksum = 0;
  header.get(length);
  header.get(checksum);
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
      if (auto* first = std::get_if<SnapshotHeader>(&record))
        header = *first;
      else
        wellFormed = false;
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
  if (error)
    throw StorageError("cannot create data directory " + dir_.string() + ": " + error.message());
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

void Journal::truncateToDurable() {
  const fs::path path = logPath(dir_, generation_);
  if (::ftruncate(logFd_, static_cast<off_t>(logBytes_)) != 0) {
    throwErrno("ftruncate " + path.string());
  }
  if (::fdatasync(logFd_) != 0) throwErrno("fdatasync " + path.string());
}

void Journal::rotate(const std::vector<AccountSnapshot>& state) {
  const std::uint64_t next = generation_ + 1;
  const fs::path nextLog = logPath(dir_, next);
  const int nextFd =
      ::open(nextLog.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (nextFd < 0) throwErrno("create " + nextLog.string());
  try {
    syncDirectory(dir_);
    std::string snapshot = encode(SnapshotHeader{kSnapshotMagic, next, state.size()});
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
