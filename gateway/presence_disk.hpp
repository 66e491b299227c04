// What the gateway keeps of presence on disk, in its data dir: the privacy rules per account and
// a restart counter that makes subscriber versions survive restarts. Leases stay soft state.
//
//   <dataDir>/presence/privacy/<account>.json   one account's rules, replaced atomically
//   <dataDir>/presence/generation               restarts so far (decimal), bumped at start
//
// A version sent to subscribers is generation << 32 | the view's in-memory version: the view
// restarts at 0 with every process, the generation only grows, so versions never go backwards
// across a restart and cost one small fsync'ed write per start (not per change).
//
// Single mode only: in cluster mode the rules live in ZooKeeper and the versions' high part is
// the cluster epoch of the target shard's take (docs/gateway-cluster.md "Presence"); the
// generation is still counted there, unused.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "zkagent/presence/privacy.hpp"

namespace zkagent::gateway {

class PresenceDisk {
 public:
  // Creates the directories if needed. Throws std::runtime_error when the dir is unusable.
  explicit PresenceDisk(std::filesystem::path dataDir);

  // Reads, increments and durably writes the restart counter; returns the new value (1 on the
  // first start). Throws std::runtime_error when it cannot be read or written.
  std::uint64_t nextGeneration();
  // Every stored account's rules. A file that does not parse is an error (throws, naming it):
  // serving with silently lost privacy rules would show users to viewers they excluded.
  std::map<std::string, presence::TargetPrivacy> loadPrivacy() const;
  // Writes a temporary file, fsyncs it, renames it over the account's file and fsyncs the
  // directory: a crash leaves the old rules or the new ones, never a mix.
  void savePrivacy(const std::string& account, const presence::TargetPrivacy& rules) const;

 private:
  std::filesystem::path dir_;
};

}  // namespace zkagent::gateway
