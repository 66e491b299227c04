#include "presence_disk.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "presence_privacy.hpp"
#include "zkagent/fencing.hpp"
#include "zkagent/naming.hpp"

namespace zkagent::gateway {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void failIo(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

void syncPath(const fs::path& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) failIo("open " + path.string());
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) failIo("fsync " + path.string());
}

// Temporary file, fsync, rename over `path`, fsync of the directory.
void replaceFile(const fs::path& path, std::string_view contents) {
  const fs::path temp = path.string() + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.flush();
    if (!out) failIo("write " + temp.string());
  }
  syncPath(temp, O_RDONLY);
  std::error_code error;
  fs::rename(temp, path, error);
  if (error) throw std::runtime_error("rename " + temp.string() + ": " + error.message());
  syncPath(path.parent_path(), O_RDONLY | O_DIRECTORY);
}

std::string readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) failIo("read " + path.string());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

PresenceDisk::PresenceDisk(fs::path dataDir) : dir_(std::move(dataDir) / "presence") {
  std::error_code error;
  fs::create_directories(dir_ / "privacy", error);
  if (error)
    throw std::runtime_error("create " + (dir_ / "privacy").string() + ": " + error.message());
}

std::uint64_t PresenceDisk::nextGeneration() {
  const fs::path path = dir_ / "generation";
  std::uint64_t generation = 0;
  if (fs::exists(path)) {
    const std::string text = readFile(path);
    try {
      std::size_t used = 0;
      generation = std::stoull(text, &used);
      if (used == 0) throw std::invalid_argument("empty");
    } catch (const std::exception&) {
      throw std::runtime_error(path.string() +
                               ": not a restart counter; versions sent to "
                               "subscribers would go backwards");
    }
  }
  ++generation;
  replaceFile(path, std::to_string(generation) + "\n");
  return generation;
}

std::map<std::string, presence::TargetPrivacy> PresenceDisk::loadPrivacy() const {
  std::map<std::string, presence::TargetPrivacy> all;
  for (const auto& entry : fs::directory_iterator(dir_ / "privacy")) {
    const fs::path& path = entry.path();
    if (path.extension() != ".json") continue;  // a .tmp left by a crash: the old file holds
    const std::string account = path.stem().string();
    if (naming::accountIdError(account)) continue;
    try {
      all.emplace(account, parsePrivacyBody(readFile(path)));
    } catch (const fencing::BadRequest& error) {
      throw std::runtime_error(path.string() + ": " + error.what());
    }
  }
  return all;
}

void PresenceDisk::savePrivacy(const std::string& account,
                               const presence::TargetPrivacy& rules) const {
  replaceFile(dir_ / "privacy" / (account + ".json"), privacyJson(rules) + "\n");
}

}  // namespace zkagent::gateway
