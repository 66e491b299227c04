// A tmpfs of a given size mounted for a test or a chaos run: a disk that can be filled to the last
// byte and freed again (a full-disk fault without touching the machine's own disks).
#pragma once

#include <cstdint>
#include <filesystem>

namespace zktest {

class SmallFilesystem {
 public:
  // Mounts a tmpfs of `bytes` on `dir` (created when missing). Throws std::runtime_error naming
  // the reason when it cannot: mounting needs CAP_SYS_ADMIN (root, or a user and mount namespace).
  SmallFilesystem(std::filesystem::path dir, std::uint64_t bytes);
  // Detaches it (its files go with it) unless keep() ran.
  ~SmallFilesystem();
  SmallFilesystem(const SmallFilesystem&) = delete;
  SmallFilesystem& operator=(const SmallFilesystem&) = delete;

  // Writes a ballast file until the filesystem refuses (ENOSPC); the bytes written.
  std::uint64_t fill();
  // Deletes the ballast: the space is back at once.
  void free();
  // Unmounts it, leaving its files in the same directory on the disk beneath (for a checker that
  // reads them afterwards). Call once nothing writes there any more.
  void keep();

 private:
  std::filesystem::path dir_;
  bool mounted_ = false;
};

}  // namespace zktest
