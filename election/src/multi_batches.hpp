// MultiBatches: items packed, in arrival order, into batches of at most a byte limit each, so that
// each batch goes out as one multi far below the server's 1 MiB request limit (jute.maxbuffer).
// An item is never split; one larger than the limit travels alone. Not thread-safe: callers hold
// their own lock.
//
//   MultiBatches<Op> batches(16 * 1024);
//   if (auto full = batches.add(op, bytesOf(op))) send(std::move(*full));
//   if (!batches.empty()) send(batches.take());   // at the end
#pragma once

#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

namespace zkagent::election::detail {

template <typename T>
class MultiBatches {
 public:
  explicit MultiBatches(size_t limitBytes) : limit_(limitBytes) {}

  // Adds `item` of `bytes`; returns the batch it closed when the item did not fit in it.
  std::optional<std::vector<T>> add(T item, size_t bytes) {
    std::optional<std::vector<T>> full;
    if (!current_.empty() && bytes_ + bytes > limit_) full = take();
    current_.push_back(std::move(item));
    bytes_ += bytes;
    return full;
  }
  // The batch being filled, which starts over empty.
  std::vector<T> take() {
    bytes_ = 0;
    return std::exchange(current_, {});
  }
  bool empty() const { return current_.empty(); }

 private:
  size_t limit_;
  size_t bytes_ = 0;
  std::vector<T> current_;
};

}  // namespace zkagent::election::detail
