// p2p header encode/decode.
#include <gtest/gtest.h>

#include "p2p/wire.hpp"

using namespace rmp::p2p;

TEST(Wire, RtsRoundTrip) {
  RtsHeader h{{7, 3, 99, 2}, 123456789, kRtsExplored, 0xabcdef, 0x7fff0000, {}};
  h.key.len = 4;
  h.key.bytes[0] = std::byte{0x42};
  auto b = bytes_of(h);
  RtsHeader d{};
  ASSERT_TRUE(decode(b, d));
  EXPECT_EQ(d.e.credits, 7u);
  EXPECT_EQ(d.e.ctx, 3u);
  EXPECT_EQ(d.e.tag, 99);
  EXPECT_EQ(d.e.src, 2);
  EXPECT_EQ(d.size, 123456789u);
  EXPECT_EQ(d.flags, kRtsExplored);
  EXPECT_EQ(d.sid, 0xabcdefu);
  EXPECT_EQ(d.addr, 0x7fff0000u);
  EXPECT_EQ(d.key.len, 4);
  EXPECT_EQ(d.key.bytes[0], std::byte{0x42});
}

TEST(Wire, RtsSizeKeepsItsBitsBesideTheFlags) {
  // The size shares a word with the flags: the largest size (56 bits) and the flags do not
  // disturb each other.
  constexpr std::uint64_t kLargest = (std::uint64_t{1} << 56) - 1;
  RtsHeader h{{}, kLargest, 0, 1, 2, {}};
  RtsHeader d{};
  ASSERT_TRUE(decode(bytes_of(h), d));
  EXPECT_EQ(d.size, kLargest);
  EXPECT_EQ(d.flags, 0u);
  h.size = 0;
  h.flags = 0xff;
  ASSERT_TRUE(decode(bytes_of(h), d));
  EXPECT_EQ(d.size, 0u);
  EXPECT_EQ(d.flags, 0xffu);
}

TEST(Wire, ShortHeaderIsRejected) {
  EagerHeader e{1, 2, 3, 4};
  auto b = bytes_of(e);
  SyncHeader s{};
  EXPECT_FALSE(decode(b, s));  // 16 bytes cannot hold a 24-byte header
  EagerHeader d{};
  EXPECT_TRUE(decode(b, d));
  EXPECT_EQ(d.tag, 3);
}

TEST(Wire, HeadersFitTheRingLine) {
  EXPECT_EQ(sizeof(EagerHeader), 16u);
  EXPECT_LE(sizeof(RtsHeader), 63u);
}
