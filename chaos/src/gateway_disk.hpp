// The gateway's data directory on a filesystem of its own (chaos-runner --disk-faults): the
// gateway_disk_full nemesis fills it to the last byte and frees it again.
#pragma once

#include <cstdint>
#include <filesystem>

namespace zkagent::chaos {

class GatewayDisk {
 public:
  // Mounts a tmpfs of `bytes` on `dir` (which must exist); throws std::runtime_error when it
  // cannot (the runner then needs CAP_SYS_ADMIN: root, or a user and mount namespace).
  GatewayDisk(std::filesystem::path dir, std::uint64_t bytes);
  // keep()s what is on it if nobody did.
  ~GatewayDisk();
  GatewayDisk(const GatewayDisk&) = delete;
  GatewayDisk& operator=(const GatewayDisk&) = delete;

  // Writes a ballast file until the filesystem refuses (ENOSPC); the bytes written.
  std::uint64_t fill();
  // Deletes the ballast: the space is back at once.
  void free();
  // Unmounts it, leaving its files (the gateway's log, for the checker) in the same directory
  // on the disk beneath. Call once the gateway has stopped.
  void keep();

 private:
  std::filesystem::path dir_;
  bool mounted_ = false;
};

}  // namespace zkagent::chaos
