// Buffers for the payloads of unexpected eager messages, kept for reuse once delivered. A fresh
// heap buffer for each one cost a first write to every page of it: on this project's VMs
// ~11.5 us a page (runtime/shared_memory.cpp), 370 us for a 128 KiB payload, which glibc takes
// from mmap and returns at free. Bidirectional windows of 4 x 128 KiB eager messages, where a
// rank's next window often arrives before it has posted its receives, ran at 1.5-2.6 GB/s.
// Capacities are powers of two (at least kMinBytes); a buffer goes back to its class while the
// cache holds at most `max_cached` bytes, and is freed otherwise.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace rmp::p2p {

class BufferCache {
public:
  static constexpr std::size_t kMinBytes = 256;

  explicit BufferCache(std::size_t max_cached) : max_cached_(max_cached) {}

  struct Buffer {
    std::unique_ptr<std::byte[]> data;
    std::size_t capacity = 0;
  };

  // A buffer of at least `bytes` (bytes > 0): a cached one of its class, or a new one.
  Buffer take(std::size_t bytes) {
    const std::size_t cls = class_of(bytes);
    std::vector<std::unique_ptr<std::byte[]>>& free = free_[cls];
    const std::size_t capacity = std::size_t{1} << cls;
    if (!free.empty()) {
      Buffer b{std::move(free.back()), capacity};
      free.pop_back();
      cached_ -= capacity;
      return b;
    }
    return {std::unique_ptr<std::byte[]>(new std::byte[capacity]), capacity};
  }

  // `b` (from take) is no longer needed.
  void give(Buffer b) {
    if (!b.data) return;
    if (cached_ + b.capacity > max_cached_) return;  // freed
    free_[class_of(b.capacity)].push_back(std::move(b.data));
    cached_ += b.capacity;
  }

  std::size_t cached_bytes() const { return cached_; }

private:
  static std::size_t class_of(std::size_t bytes) {
    return static_cast<std::size_t>(std::bit_width(std::max(bytes, kMinBytes) - 1));
  }

  std::size_t max_cached_;
  std::size_t cached_ = 0;
  std::array<std::vector<std::unique_ptr<std::byte[]>>, 64> free_{};
};

}  // namespace rmp::p2p
