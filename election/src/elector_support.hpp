// What the Elector's files share: the member node's name and the small helpers of its callbacks.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zkagent/election.hpp"

namespace zkagent::election::detail {

inline int64_t unixMillis() {
  return std::chrono::duration_cast<Millis>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Members are "m-" + the sequence number ZooKeeper appends (ten digits, zero-padded).
inline constexpr std::string_view kMemberPrefix = "m-";

// "m-0000000007" -> 7; -1 for names that are not ours to order (foreign clutter is ignored).
inline int64_t seqOf(std::string_view name) {
  if (name.size() <= kMemberPrefix.size() || !name.starts_with(kMemberPrefix)) return -1;
  int64_t seq = 0;
  for (char c : name.substr(kMemberPrefix.size())) {
    if (c < '0' || c > '9') return -1;
    seq = seq * 10 + (c - '0');
  }
  return seq;
}

// 7 -> "m-0000000007": the name ZooKeeper gave the member with that sequence number.
inline std::string memberName(int64_t seq) {
  char digits[24];
  std::snprintf(digits, sizeof digits, "%010lld", static_cast<long long>(seq));
  return std::string(kMemberPrefix) + digits;
}

// Joins N asynchronous answers into one callback.
template <typename T>
struct Gather {
  size_t pending;
  std::vector<T> items;
  std::function<void(std::vector<T>)> done;
  void add(std::optional<T> item) {
    if (item) items.push_back(std::move(*item));
    if (--pending == 0) done(std::move(items));
  }
};

}  // namespace zkagent::election::detail
