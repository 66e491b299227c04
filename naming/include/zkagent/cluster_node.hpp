// The shard count of a gateway cluster as it travels in JSON: the data of
// `{root}/@gateway-cluster` (written once by the first cluster gateway, read by every later
// gateway and by the agents) and the `shards` field of a gateway's 421 answer. Kept apart from
// naming.hpp so that only the few files that read it pay for the JSON header.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "zkagent/naming.hpp"

namespace zkagent::naming {

// {"shards":N}
inline std::string clusterNodeData(std::uint32_t shards) {
  return nlohmann::json{{"shards", shards}}.dump();
}

// The `shards` field of a cluster node's data or of a 421 body: an unsigned integer from 1 to
// kMaxShards, or nullopt (missing, another type, out of range: the text came from ZooKeeper or
// from whatever answered at a gateway's address, so nothing here throws).
inline std::optional<std::uint32_t> shardCountIn(const nlohmann::json& body) {
  const auto field = body.is_object() ? body.find("shards") : body.end();
  // A signed integer too: parsed text holds non-negative numbers as unsigned, a json built in
  // code holds an int as signed.
  if (field == body.end() || !field->is_number_integer()) return std::nullopt;
  if (!field->is_number_unsigned() && field->get<std::int64_t>() <= 0) return std::nullopt;
  const auto count = field->get<std::uint64_t>();
  if (count == 0 || count > kMaxShards) return std::nullopt;
  return static_cast<std::uint32_t>(count);
}
// The same from a cluster node's data as ZooKeeper holds it (text that may not be JSON at all).
inline std::optional<std::uint32_t> parseClusterNode(std::string_view data) {
  return shardCountIn(nlohmann::json::parse(data, nullptr, false));
}

}  // namespace zkagent::naming
