// The matching unit (p2p/match.hpp): wildcards, non-overtaking order, unlinking.
#include <gtest/gtest.h>

#include <vector>

#include "p2p/match.hpp"
#include "p2p/wire.hpp"

using namespace rmp::p2p;

namespace {

struct Recv {
  int src = rmp::any_source, tag = rmp::any_tag;
  Recv* prev = nullptr;
  Recv* next = nullptr;
};
struct Msg {
  EagerHeader h{};
  Msg* prev = nullptr;
  Msg* next = nullptr;
};

Msg message(int src, int tag) { return Msg{EagerHeader{0, 0, tag, src}}; }

}  // namespace

TEST(Match, Wildcards) {
  EXPECT_TRUE(matches(1, 2, 1, 2));
  EXPECT_FALSE(matches(1, 2, 1, 3));
  EXPECT_FALSE(matches(1, 2, 0, 2));
  EXPECT_TRUE(matches(rmp::any_source, 2, 5, 2));
  EXPECT_FALSE(matches(rmp::any_source, 2, 5, 3));
  EXPECT_TRUE(matches(1, rmp::any_tag, 1, 77));
  EXPECT_FALSE(matches(1, rmp::any_tag, 2, 77));
  EXPECT_TRUE(matches(rmp::any_source, rmp::any_tag, 9, 9));
}

TEST(Match, UnexpectedOldestFirst) {
  MatchQueues<Recv, Msg> q;
  std::vector<Msg> m = {message(0, 1), message(1, 1), message(0, 2), message(0, 1)};
  for (Msg& x : m) q.unexpected.push_back(&x);
  EXPECT_EQ(q.unexpected.n, 4u);
  EXPECT_EQ(q.find_unexpected(0, 1), &m[0]);  // not m[3]: no overtaking
  EXPECT_EQ(q.find_unexpected(1, rmp::any_tag), &m[1]);
  EXPECT_EQ(q.find_unexpected(rmp::any_source, 2), &m[2]);
  EXPECT_EQ(q.find_unexpected(2, 1), nullptr);
  q.unexpected.unlink(&m[0]);
  EXPECT_EQ(q.find_unexpected(0, 1), &m[3]);
  EXPECT_EQ(q.find_unexpected(rmp::any_source, rmp::any_tag), &m[1]);
  q.unexpected.unlink(&m[3]);  // the tail
  q.unexpected.unlink(&m[1]);  // the head
  EXPECT_EQ(q.unexpected.head, &m[2]);
  EXPECT_EQ(q.unexpected.tail, &m[2]);
  EXPECT_EQ(q.unexpected.n, 1u);
  q.unexpected.unlink(&m[2]);
  EXPECT_EQ(q.unexpected.head, nullptr);
  EXPECT_EQ(q.unexpected.tail, nullptr);
  EXPECT_EQ(q.find_unexpected(rmp::any_source, rmp::any_tag), nullptr);
}

TEST(Match, PostedOldestFirstWithWildcards) {
  MatchQueues<Recv, Msg> q;
  std::vector<Recv> r = {{3, 5}, {rmp::any_source, 5}, {3, rmp::any_tag},
                         {rmp::any_source, rmp::any_tag}};
  for (Recv& x : r) q.posted.push_back(&x);
  EXPECT_EQ(q.find_posted(3, 5), &r[0]);
  EXPECT_EQ(q.find_posted(4, 5), &r[1]);
  EXPECT_EQ(q.find_posted(3, 6), &r[2]);
  EXPECT_EQ(q.find_posted(4, 6), &r[3]);
  q.posted.unlink(&r[0]);
  EXPECT_EQ(q.find_posted(3, 5), &r[1]);  // the wildcard posted before the specific one
  q.posted.unlink(&r[1]);
  q.posted.unlink(&r[2]);
  EXPECT_EQ(q.find_posted(3, 5), &r[3]);
  q.posted.unlink(&r[3]);
  EXPECT_EQ(q.find_posted(3, 5), nullptr);
  EXPECT_EQ(q.posted.n, 0u);
}
