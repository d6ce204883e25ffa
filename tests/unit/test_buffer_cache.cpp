// The buffers of unexpected eager payloads (p2p/buffer_cache.hpp): reused by size class,
// bounded in what they keep.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "p2p/buffer_cache.hpp"

using rmp::p2p::BufferCache;

TEST(BufferCache, ReusesABufferOfTheSameClass) {
  BufferCache c(1 << 20);
  BufferCache::Buffer a = c.take(100000);
  EXPECT_EQ(a.capacity, 131072u);
  std::memset(a.data.get(), 7, 100000);  // writable to its size
  const std::byte* p = a.data.get();
  c.give(std::move(a));
  EXPECT_EQ(c.cached_bytes(), 131072u);
  BufferCache::Buffer b = c.take(131072);  // same class: the same buffer
  EXPECT_EQ(b.data.get(), p);
  EXPECT_EQ(c.cached_bytes(), 0u);
  BufferCache::Buffer d = c.take(131073);  // the next class: a new one
  EXPECT_EQ(d.capacity, 262144u);
  EXPECT_NE(d.data.get(), p);
  BufferCache::Buffer tiny = c.take(1);
  EXPECT_EQ(tiny.capacity, BufferCache::kMinBytes);
}

TEST(BufferCache, KeepsAtMostItsLimit) {
  BufferCache c(3 * 65536);
  std::vector<BufferCache::Buffer> held;
  for (int i = 0; i < 5; ++i) held.push_back(c.take(65536));
  for (BufferCache::Buffer& b : held) c.give(std::move(b));
  EXPECT_EQ(c.cached_bytes(), 3 * 65536u) << "two of five freed";
  c.give({});  // an empty buffer is nothing
  EXPECT_EQ(c.cached_bytes(), 3 * 65536u);
  for (int i = 0; i < 4; ++i) held[static_cast<std::size_t>(i)] = c.take(40000);
  EXPECT_EQ(c.cached_bytes(), 0u);
}
