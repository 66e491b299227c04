#include "zktest/small_filesystem.hpp"

#include <sys/mount.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

namespace zktest {
namespace fs = std::filesystem;

namespace {
constexpr const char* kBallast = "ballast";
}

SmallFilesystem::SmallFilesystem(fs::path dir, std::uint64_t bytes) : dir_(std::move(dir)) {
  fs::create_directories(dir_);
  const std::string options = "size=" + std::to_string(bytes);
  if (::mount("tmpfs", dir_.c_str(), "tmpfs", 0, options.c_str()) != 0) {
    throw std::runtime_error("cannot mount a tmpfs on " + dir_.string() + ": " +
                             std::strerror(errno));
  }
  mounted_ = true;
}

SmallFilesystem::~SmallFilesystem() {
  if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
}

std::uint64_t SmallFilesystem::fill() {
  std::FILE* ballast = std::fopen((dir_ / kBallast).c_str(), "w");
  if (ballast == nullptr) return 0;  // already full: not even a new file fits
  const std::string chunk(1 << 16, 'x');
  std::uint64_t written = 0;
  for (;;) {
    const std::size_t n = std::fwrite(chunk.data(), 1, chunk.size(), ballast);
    written += n;
    if (n < chunk.size() || std::fflush(ballast) != 0) break;
  }
  // Whatever the last flush could not write is dropped with the stream.
  std::fclose(ballast);
  return written;
}

void SmallFilesystem::free() { fs::remove(dir_ / kBallast); }

void SmallFilesystem::keep() {
  if (!mounted_) return;
  free();
  const fs::path aside = dir_.string() + ".kept";
  fs::remove_all(aside);
  fs::copy(dir_, aside, fs::copy_options::recursive);
  if (::umount2(dir_.c_str(), 0) != 0 && ::umount2(dir_.c_str(), MNT_DETACH) != 0) {
    throw std::runtime_error("cannot unmount " + dir_.string() + ": " + std::strerror(errno));
  }
  mounted_ = false;
  fs::remove_all(dir_);
  fs::rename(aside, dir_);
}

}  // namespace zktest
