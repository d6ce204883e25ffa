// p2p over the real shm transport with ranks as threads.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "tests/unit/thread_ranks.hpp"

using rmp::p2p::Channel;
using rmp::testing::ThreadRank;
using rmp::testing::run_thread_ranks;

namespace {

std::vector<unsigned char> pattern(std::size_t n, int seed) {
  std::vector<unsigned char> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 131 + seed * 7 + 3) & 0xff);
  return v;
}

void exchange_sizes(ThreadRank& t, const std::vector<std::size_t>& sizes) {
  auto& e = t.engine;
  const int me = t.world.rank(), n = t.world.size();
  for (std::size_t s : sizes) {
    for (int k = 1; k < n; ++k) {
      const int to = (me + k) % n, from = (me - k + n) % n;
      auto out = pattern(s, me * 100 + k);
      std::vector<unsigned char> in(s + 1, 0xee);
      auto* r = e.irecv(t.world, Channel::user, in.data(), s, from, 7);
      auto* q = e.isend(t.world, Channel::user, out.data(), s, to, 7, false);
      auto st = e.wait(r);
      e.wait(q);
      auto want = pattern(s, from * 100 + k);
      ASSERT_EQ(st.bytes, s);
      ASSERT_EQ(st.source, from);
      ASSERT_TRUE(std::equal(want.begin(), want.end(), in.begin())) << "size " << s;
      ASSERT_EQ(in[s], 0xee) << "wrote past the message, size " << s;
    }
  }
}

}  // namespace

TEST(P2pThreads, Exchange_AllProtocolSizes_TwoAndFourRanks) {
  std::vector<std::size_t> sizes{0, 1, 8, 35, 36, 37, 100, 1000, 4096, 16383, 16384, 16385,
                                 131071, 131072, 131073, 1000003, 4u << 20};
  for (int n : {2, 3, 4}) run_thread_ranks(n, [&](ThreadRank& t) { exchange_sizes(t, sizes); });
}

TEST(P2pThreads, UnexpectedFlood_StaysWithinCredits) {
  run_thread_ranks(2, [](ThreadRank& t) {
    auto& e = t.engine;
    const int count = 20000;
    if (t.world.rank() == 0) {
      std::vector<int> v(count);
      std::iota(v.begin(), v.end(), 0);
      std::vector<rmp::detail::RequestState*> rs;
      for (int i = 0; i < count; ++i)
        rs.push_back(e.isend(t.world, Channel::user, &v[i], sizeof(int), 1, i == count - 1 ? 2 : 1, false));
      for (auto* r : rs) e.wait(r);
      EXPECT_GT(t.ctx.counters().credit_stalls, 0u);
    } else {
      int last = -1;
      e.wait(e.irecv(t.world, Channel::user, &last, sizeof last, 0, 2));
      EXPECT_EQ(last, count - 1);
      for (int i = 0; i < count - 1; ++i) {
        int x = -1;
        e.wait(e.irecv(t.world, Channel::user, &x, sizeof x, 0, 1));
        ASSERT_EQ(x, i);
      }
      const auto& p = t.ctx.params();
      EXPECT_LE(t.ctx.counters().unexpected_eager_bytes_peak, p.rq_depth * p.eager_threshold);
    }
  });
}
