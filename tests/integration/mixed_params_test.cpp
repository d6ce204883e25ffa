// Ranks started with different settings (the mixedparams variant: RMP_ITEST_RANK_ENV gives even
// ranks rendezvous for everything in 4 KiB fragments, odd ranks eager up to 1 MiB in 1 MiB
// fragments). Point-to-point thresholds may differ per rank (DESIGN §2: every receiver
// handles every protocol); collectives take rank 0's values (Context::coll_params). The sizes
// here are fixed, not derived from this rank's knobs, so that every rank agrees on them.
#include "harness.hpp"

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

namespace {

using namespace itest;

// Both ranks' protocol edges: inline (≤ 1024), eager (0 or 1 MiB), the pair ring's 64 KiB.
const std::vector<std::size_t> kSizes = {0,     1,      28,      1023,    1024,    1025,
                                         4095,  4096,   4097,    65535,   65536,   65537,
                                         70000, 100000, 1048575, 1048576, 1048577, (3u << 20) + 5};

// Every rank sends every size in turn to the rank `shift` ahead, all with one tag, and receives
// the same from the rank `shift` behind: non-overtaking order and every byte checked. The even
// ranks speak first (their settings then size the pair they connect: a ring sized for the
// low-threshold rank alone lost the other's large eager messages).
TEST(MixedParams, EverySizeInOrderBetweenRanksOfDifferentSettings) {
  const rmp::Comm& w = rmp::world();
  const int n = size(), r = rank();
  if (n < 2) GTEST_SKIP() << "needs two ranks with different settings";
  for (int shift = 1; shift < n; ++shift) {
    const int dst = (r + shift) % n, src = (r - shift + n) % n;
    int heard = -1;
    rmp::Request hello = w.irecv(&heard, 1, src, 1);
    if (r % 2 != 0 && src % 2 == 0) hello.wait();  // the even one first
    w.send(&r, 1, dst, 1);
    hello.wait();
    EXPECT_EQ(heard, src);
    std::vector<std::vector<char>> in(kSizes.size());
    std::vector<rmp::Request> reqs;
    for (std::size_t i = 0; i < kSizes.size(); ++i) {
      in[i].assign(kSizes[i] + 4, sentinel<char>());
      reqs.push_back(w.irecv(in[i].data(), kSizes[i] + 4, src, 2));
    }
    for (std::size_t i = 0; i < kSizes.size(); ++i) {
      const std::vector<char> out = make_message<char>(kSizes[i], seed(r, dst, i, shift));
      w.send(out.data(), out.size(), dst, 2);  // blocking: the case that lost messages
    }
    for (std::size_t i = 0; i < kSizes.size(); ++i) {
      const rmp::Status st = reqs[i].wait();
      EXPECT_EQ(st.bytes, kSizes[i]) << "message " << i << " from " << who(src);
      EXPECT_TRUE(matches(in[i].data(), kSizes[i], seed(src, r, i, shift)))
          << "message " << i << " (" << kSizes[i] << " B) from " << who(src);
      EXPECT_TRUE(untouched(in[i].data() + kSizes[i], 4));
    }
  }
}

// Collectives shaped by fragment_size, pipeline_depth and eager_threshold (segments, the
// node-shared chunks, the size at which a path is chosen), with ranks forcing different
// algorithms: every rank must take the same algorithm and path (rank 0's), so the results are
// right and the same on every rank (different ones waited for each other forever). Repeated,
// so that the path choices explore and settle.
TEST(MixedParams, CollectivesAgreeOnTheirShape) {
  const rmp::Comm& w = rmp::world();
  const int n = size(), r = rank();
  for (const std::size_t count :
       {std::size_t{1}, std::size_t{1000}, std::size_t{20000}, std::size_t{150000}}) {
    for (int it = 0; it < 6; ++it) {
      std::vector<double> in(count), out(count, -1);
      for (std::size_t i = 0; i < count; ++i) in[i] = static_cast<double>((i % 97) + r);
      w.allreduce(in.data(), out.data(), count, rmp::Op::sum);
      for (std::size_t i = 0; i < count; i += 997)
        ASSERT_EQ(out[i], static_cast<double>(n * (i % 97) + n * (n - 1) / 2))
            << "allreduce of " << count << " at " << i;
      std::vector<double> red(count, -1);
      const int root = it % n;
      w.reduce(in.data(), red.data(), count, rmp::Op::sum, root);
      if (r == root) {
        for (std::size_t i = 0; i < count; i += 997) ASSERT_EQ(red[i], out[i]);
      }
      std::vector<std::int64_t> b(count);
      if (r == root) std::iota(b.begin(), b.end(), std::int64_t{it});
      w.bcast(b.data(), count, root);
      for (std::size_t i = 0; i < count; i += 997)
        ASSERT_EQ(b[i], static_cast<std::int64_t>(i) + it) << "bcast of " << count;
      std::vector<int> mine(count, r), all(count * static_cast<std::size_t>(n), -1);
      w.allgather(mine.data(), count, all.data());
      for (int q = 0; q < n; ++q)
        ASSERT_EQ(all[static_cast<std::size_t>(q) * count + count / 2], q)
            << "allgather of " << count;
      std::vector<int> to(count * static_cast<std::size_t>(n)), from(to.size(), -1);
      for (std::size_t i = 0; i < to.size(); ++i) to[i] = r * 1000 + static_cast<int>(i / count);
      w.alltoall(to.data(), count, from.data());
      for (int q = 0; q < n; ++q)
        ASSERT_EQ(from[static_cast<std::size_t>(q) * count + count - 1], q * 1000 + r)
            << "alltoall of " << count;
      w.barrier();
    }
  }
}

}  // namespace
