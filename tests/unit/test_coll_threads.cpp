// Every collective algorithm, called directly (algorithms.hpp), with ranks as threads over the
// real shm transport: 1–8 ranks, sizes around the segment edges, every root shape, v-variants
// with zero counts and scattered displacements, in place — each result checked against a
// sequential reference computed from the same inputs, and reductions compared bit for bit
// across ranks. Then the dispatch path: every algorithm forced through RMP_<COLL>_ALGO, and
// the default selection of every collective.
//
// Sizes: the sweep runs with RMP_FRAGMENT_SIZE=4096 and RMP_PIPELINE_DEPTH=2, so the segment
// edges (1023, 1024, 1025 four-byte elements) and multi-segment pipelines with a wrapping
// window are reached with small buffers; 8 thread-ranks share 2 cores here, and the same edges
// at the default 128 KiB fragment would cost 32× the copying for no new code path. The MiB
// sizes run once per algorithm family at the default parameters (Large_* tests), at 3 and 8
// ranks only. Release build, this machine (2 cores shared): see the report for timings.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <complex>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/algorithms.hpp"
#include "collectives/node_shared.hpp"
#include "collectives/nonblocking.hpp"
#include "collectives/reduce_ops.hpp"
#include "collectives/select.hpp"
#include "runtime/node_segment.hpp"
#include "tests/coll_values.hpp"
#include "tests/unit/coll_env.hpp"
#include "tests/unit/thread_ranks.hpp"

namespace {

using rmp::Op;
using rmp::detail::CommImpl;
using rmp::detail::Type;
using rmp::testing::run_thread_ranks;
using rmp::testing::ThreadRank;
namespace coll = rmp::coll;
using coll::Layout;

using rmp::testing::ScopedEnv;

// The sweep's small segments (see the header comment).
struct SmallSegments {
  ScopedEnv frag{"RMP_FRAGMENT_SIZE", "4096"};
  ScopedEnv depth{"RMP_PIPELINE_DEPTH", "2"};
};
constexpr std::size_t kSeg = 4096;

// ---- Values --------------------------------------------------------------------------------

using rmp::testing::exact_value;
using rmp::testing::h;
using rmp::testing::messy_value;
using rmp::testing::pattern_block;

// Calls f(T{}) with the C++ type of t.
template <class F>
void with_type(Type t, F&& f) {
  switch (t) {
    case Type::i8:
      return f(static_cast<signed char>(0));
    case Type::u8:
      return f(static_cast<unsigned char>(0));
    case Type::i16:
      return f(short{});
    case Type::u16:
      return f(static_cast<unsigned short>(0));
    case Type::i32:
      return f(int{});
    case Type::u32:
      return f(0u);
    case Type::i64:
      return f(0LL);
    case Type::u64:
      return f(0ULL);
    case Type::f32:
      return f(0.0f);
    case Type::f64:
      return f(0.0);
    case Type::c32:
      return f(std::complex<float>{});
    case Type::c64:
      return f(std::complex<double>{});
    case Type::byte:
      return f(std::byte{});
  }
}

constexpr Type kTypes[] = {Type::i8,  Type::u8,  Type::i16, Type::u16, Type::i32,
                           Type::u32, Type::i64, Type::u64, Type::f32, Type::f64,
                           Type::c32, Type::c64, Type::byte};
constexpr Op kOps[] = {Op::sum, Op::prod, Op::min, Op::max, Op::land,
                       Op::lor, Op::band, Op::bor, Op::bxor};

struct TypeOp {
  Type t;
  Op op;
};
std::vector<TypeOp> all_pairs() {
  std::vector<TypeOp> v;
  for (Type t : kTypes)
    for (Op op : kOps)
      if (coll::op_applies(op, t)) v.push_back({t, op});
  return v;
}
// The sweep cycles through the pairs so that every one shows up in every collective.
TypeOp pair_for(std::size_t i) {
  static const std::vector<TypeOp> pairs = all_pairs();
  return pairs[i % pairs.size()];
}
// Where a sweep at n ranks starts in that cycle: each rank count 11 pairs further on, so that
// the windows of rank counts 1-8 together cover all 87 pairs in each sweep (its calls at one
// rank count, 18 and more, are fewer than the pairs). (43, coprime too, left two windows:
// 86 = −1 mod 87.)
std::size_t sweep_start(int n, std::size_t base) { return base + 11 * static_cast<std::size_t>(n); }

// memcpy that accepts the null data() of an empty vector (memcpy itself may not).
void copy_in(void* dst, const void* src, std::size_t n) {
  if (n) std::memcpy(dst, src, n);
}

std::size_t esize_of(Type t) {
  std::size_t s = 0;
  with_type(t, [&](auto v) { s = sizeof v; });
  return s;
}

// Input vector of `rank` (count elements) as bytes.
std::vector<std::byte> input(Type t, Op op, int rank, std::size_t count, std::uint64_t salt,
                             bool messy = false) {
  std::vector<std::byte> v(count * esize_of(t));
  with_type(t, [&](auto z) {
    using T = decltype(z);
    for (std::size_t i = 0; i < count; ++i) {
      const T x = messy ? messy_value<T>(op, rank, i, salt) : exact_value<T>(op, rank, i, salt);
      copy_in(v.data() + i * sizeof(T), &x, sizeof(T));
    }
  });
  return v;
}

// Reduction of ranks [first, last) of element i..i+count (in rank order) as bytes.
std::vector<std::byte> reference(Type t, Op op, int first, int last, std::size_t offset,
                                 std::size_t count, std::uint64_t salt) {
  std::vector<std::byte> v(count * esize_of(t));
  with_type(t, [&](auto z) {
    using T = decltype(z);
    for (std::size_t i = 0; i < count; ++i) {
      const T acc = rmp::testing::fold<T>(op, first, last, offset + i, salt);
      copy_in(v.data() + i * sizeof(T), &acc, sizeof(T));
    }
  });
  return v;
}

std::uint64_t digest(const void* p, std::size_t n) {
  std::uint64_t x = 0xcbf29ce484222325ULL;
  for (std::size_t i = 0; i < n; ++i)
    x = (x ^ static_cast<const unsigned char*>(p)[i]) * 0x100000001b3ULL;
  return x;
}

// ---- Checking ------------------------------------------------------------------------------

// Failures found on the rank threads. Ranks never stop early (the others would wait for them
// in the next collective); the first few messages are kept.
class Failures {
public:
  void add(const std::string& what) {
    std::lock_guard g(m_);
    if (count_++ < 20) msgs_ += what + "\n";
  }
  void equal(const void* got, const void* want, std::size_t n, const std::string& what) {
    if (n == 0 || std::memcmp(got, want, n) == 0) return;
    std::size_t i = 0;
    while (static_cast<const std::byte*>(got)[i] == static_cast<const std::byte*>(want)[i]) ++i;
    add(what + ": differs from the reference at byte " + std::to_string(i) + " of " +
        std::to_string(n));
  }
  // Element values against the reference: floating elements compare with ==, so +0 and −0
  // match (the order of a reduction may change the sign of a zero; API.md allows results to
  // differ from the sequential fold by rounding). Bits across ranks are checked separately.
  void same_values(Type t, const void* got, const void* want, std::size_t count,
                   const std::string& what) {
    bool ok = true;
    std::size_t i = 0;
    with_type(t, [&](auto z) {
      using T = decltype(z);
      for (; i < count; ++i) {
        T a, b;
        copy_in(&a, static_cast<const std::byte*>(got) + i * sizeof(T), sizeof(T));
        copy_in(&b, static_cast<const std::byte*>(want) + i * sizeof(T), sizeof(T));
        if (!(a == b)) {
          ok = false;
          break;
        }
      }
    });
    if (!ok)
      add(what + ": differs from the reference at element " + std::to_string(i) + " of " +
          std::to_string(count));
  }
  void report() const { EXPECT_EQ(count_, 0u) << msgs_; }

private:
  std::mutex m_;
  std::size_t count_ = 0;
  std::string msgs_;
};

std::string where(const char* algo, int n, int rank, std::size_t size, int root = -1) {
  std::string s = std::string(algo) + " n=" + std::to_string(n) + " rank=" + std::to_string(rank) +
                  " size=" + std::to_string(size);
  if (root >= 0) s += " root=" + std::to_string(root);
  return s;
}

std::vector<int> roots_for(int n) {
  std::vector<int> r{0};
  if (n > 1) r.push_back(n - 1);
  if (n > 2) r.push_back(n / 2);
  return r;
}

// Element counts around the edges: empty, one, fewer than the ranks, the segment in elements
// −1/0/+1, and more than a segment per rank (kCountEdges of them; esize: the call's type's).
constexpr std::size_t kCountEdges = 7;
std::vector<std::size_t> counts_for(int n, std::size_t esize) {
  const std::size_t s = kSeg / esize;
  std::vector<std::size_t> v{0, 1,     static_cast<std::size_t>(n > 1 ? n - 1 : 2), s - 1,
                             s, s + 1, static_cast<std::size_t>(n) * s + 3};
  return v;
}

// Per-rank counts for the v-variants: some zero, some larger than a segment.
std::vector<std::size_t> v_counts(int n, std::uint64_t salt, std::size_t esize) {
  std::vector<std::size_t> c(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const std::uint64_t x = h(i, 0, salt);
    c[i] = x % 3 == 0 ? 0 : x % 3 == 1 ? 1 + x % 7 : kSeg / esize + x % 5;
  }
  return c;
}
// Displacements: packed in rank order, or (scattered) in reverse order with gaps, which
// exercises the packing paths. Returns the extent in elements.
std::size_t v_displs(const std::vector<std::size_t>& counts, bool scattered,
                     std::vector<std::size_t>& displs) {
  const std::size_t n = counts.size();
  displs.assign(n, 0);
  std::size_t end = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t i = scattered ? n - 1 - k : k;
    displs[i] = end + (scattered ? 3 : 0);
    end = displs[i] + counts[i];
  }
  return end;
}

// ---- The sweep, one collective family at a time ------------------------------------------------

using Body = std::function<void(ThreadRank&, Failures&)>;
void for_rank_counts(const Body& body, std::initializer_list<int> ns = {1, 2, 3, 4, 5, 6, 7, 8}) {
  for (int n : ns) {
    Failures f;
    run_thread_ranks(n, [&](ThreadRank& t) { body(t, f); });
    SCOPED_TRACE("n=" + std::to_string(n));
    f.report();
  }
}

// The node-shared algorithms with the signatures of the others, so that the sweeps run them
// like any algorithm. Thread-ranks share one node, so from 2 ranks on the communicator's
// segment exists; a single rank has none and runs the p2p algorithm (as the dispatch does).
void bcast_shm(const CommImpl& c, void* buf, std::size_t bytes, int root) {
  if (coll::NodeShared* ns = coll::node_shared(c)) return coll::shm_bcast(c, *ns, buf, bytes, root);
  coll::bcast_binomial(c, buf, bytes, root);
}
void bcast_shm_direct(const CommImpl& c, void* buf, std::size_t bytes, int root) {
  if (coll::NodeShared* ns = coll::node_shared(c))
    return coll::shm_bcast_direct(c, *ns, buf, bytes, root);
  coll::bcast_binomial(c, buf, bytes, root);
}
void allreduce_shm(const CommImpl& c, const void* in, void* out, std::size_t count,
                   std::size_t esize, Type t, Op op) {
  if (coll::NodeShared* ns = coll::node_shared(c))
    return coll::shm_allreduce(c, *ns, in, out, count, esize, t, op);
  coll::allreduce_recursive_doubling(c, in, out, count, esize, t, op);
}
void reduce_shm_direct(const CommImpl& c, const void* in, void* out, std::size_t count,
                       std::size_t esize, Type t, Op op, int root) {
  if (coll::NodeShared* ns = coll::node_shared(c))
    return coll::shm_reduce_direct(c, *ns, in, out, count, esize, t, op, root);
  coll::reduce_binomial(c, in, out, count, esize, t, op, root);
}
void allreduce_shm_direct(const CommImpl& c, const void* in, void* out, std::size_t count,
                          std::size_t esize, Type t, Op op) {
  if (coll::NodeShared* ns = coll::node_shared(c))
    return coll::shm_allreduce_direct(c, *ns, in, out, count, esize, t, op);
  coll::allreduce_recursive_doubling(c, in, out, count, esize, t, op);
}
void allgather_shm_direct(const CommImpl& c, const void* in, void* out, const Layout& l) {
  if (coll::NodeShared* ns = coll::node_shared(c))
    return coll::shm_allgather_direct(c, *ns, in, out, l);
  coll::allgather_ring(c, in, out, l);
}
void reduce_shm(const CommImpl& c, const void* in, void* out, std::size_t count, std::size_t esize,
                Type t, Op op, int root) {
  if (coll::NodeShared* ns = coll::node_shared(c))
    return coll::shm_reduce(c, *ns, in, out, count, esize, t, op, root);
  coll::reduce_binomial(c, in, out, count, esize, t, op, root);
}
void allgather_shm(const CommImpl& c, const void* in, void* out, const Layout& l) {
  if (coll::NodeShared* ns = coll::node_shared(c)) return coll::shm_allgather(c, *ns, in, out, l);
  coll::allgather_ring(c, in, out, l);
}
void reduce_scatter_shm(const CommImpl& c, const void* in, void* out, coll::sizes counts,
                        std::size_t esize, Type t, Op op) {
  if (coll::NodeShared* ns = coll::node_shared(c))
    return coll::shm_reduce_scatter(c, *ns, in, out, counts, esize, t, op);
  coll::reduce_scatter_ring(c, in, out, counts, esize, t, op);
}
void alltoall_shm(const CommImpl& c, const void* in, void* out, std::size_t bytes) {
  coll::NodeShared* ns = coll::node_shared(c);
  if (ns && coll::shm_alltoall_fits(c, *ns)) return coll::shm_alltoall(c, *ns, in, out, bytes);
  const Layout l = Layout::uniform(bytes);
  coll::alltoall_pairwise(c, in, l, out, l);
}

}  // namespace

// reduce_into (out = a op b in one pass; the chunked shm allreduce uses it) against copying a
// and combining b in place, bit for bit, for every Op x type, on order-sensitive inputs.
TEST(ReduceKernels, ReduceInto_SameBitsAsCopyThenReduceApply) {
  for (TypeOp p : all_pairs())
    for (std::size_t count : {std::size_t{1}, std::size_t{37}, std::size_t{1000}}) {
      const auto a = input(p.t, p.op, 0, count, 77, true), b = input(p.t, p.op, 1, count, 77, true);
      std::vector<std::byte> apart(a.size()), in_place = a;
      coll::reduce_into(p.op, p.t, a.data(), b.data(), apart.data(), count);
      coll::reduce_apply(p.op, p.t, b.data(), in_place.data(), count);
      EXPECT_EQ(apart, in_place) << coll::type_name(p.t) << " " << coll::op_name(p.op)
                                 << " count=" << count;
    }
}

// Both barriers, dissemination and the node-shared flag barrier; a rank that arrives late
// (asleep first, by turns) holds every other rank in.
TEST(CollThreads, Barrier_NoRankLeavesBeforeAllArrive) {
  for (int n = 1; n <= 8; ++n) {
    for (const bool shm : {false, true}) {
      std::atomic<int> arrived{0};
      Failures f;
      run_thread_ranks(n, [&](ThreadRank& t) {
        coll::NodeShared* ns = shm ? coll::node_shared(t.world) : nullptr;
        if (shm && n > 1 && !ns) f.add("no node segment");
        auto barrier = [&] {
          if (ns) coll::shm_barrier(t.world, *ns);
          else coll::barrier_dissemination(t.world);
        };
        for (int round = 1; round <= 20; ++round) {
          if (round % n == t.world.rank() && round % 4 == 0)
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
          arrived.fetch_add(1);
          barrier();
          if (arrived.load() < round * n)
            f.add(std::string(shm ? "shm" : "dissemination") + ": left barrier round " +
                  std::to_string(round) + " early");
          barrier();  // nobody starts the next round before the check
        }
      });
      f.report();
    }
  }
}

TEST(CollThreads, Bcast_EveryAlgorithmRankCountSizeAndRoot) {
  SmallSegments small;
  using Fn = void (*)(const CommImpl&, void*, std::size_t, int);
  const std::pair<const char*, Fn> algos[] = {{"binomial", coll::bcast_binomial},
                                              {"scatter_allgather", coll::bcast_scatter_allgather},
                                              {"pipeline", coll::bcast_pipeline},
                                              {"shm", bcast_shm},
                                              {"shm_direct", bcast_shm_direct}};
  for_rank_counts([&](ThreadRank& t, Failures& f) {
    const int n = t.world.size(), me = t.world.rank();
    if (coll::segment_bytes(t.world) != kSeg || coll::segments_in_flight(t.world) != 2)
      f.add("the sweep's segments did not reach the rank's parameters");
    // The direct bcast's root writes a share of 1/n of the message, in whole lines, into the
    // others' buffers where ranks have cores of their own and that share takes longer to copy
    // than a copy takes to start (rndv_setup_us × get_bw bytes); around that size too.
    const rmp::rt::Params& p = t.world.engine().context().coll_params();
    const std::size_t split = std::max<std::size_t>(
        static_cast<std::size_t>(p.rndv_setup_us * 1e-6 * p.get_bw) * static_cast<std::size_t>(n),
        2 * kSeg);
    std::uint64_t salt = 1;
    for (auto [name, fn] : algos)
      for (std::size_t bytes :
           {std::size_t{0}, std::size_t{1}, std::size_t{7}, kSeg - 1, kSeg, kSeg + 1, 3 * kSeg + 5,
            split - 65, split, split + 64 * static_cast<std::size_t>(n) + 3})
        for (int root : roots_for(n)) {
          ++salt;
          std::vector<std::byte> buf = me == root ? pattern_block(root, bytes, salt)
                                                  : std::vector<std::byte>(bytes, std::byte{0xee});
          fn(t.world, buf.data(), bytes, root);
          f.equal(buf.data(), pattern_block(root, bytes, salt).data(), bytes,
                  where(name, n, me, bytes, root));
        }
  });
}

// Small node-shared bcasts of up to 56 bytes travel beside the root's published count too, as
// a sequence lock (CountLine): a receiver that finds its bcast the latest copies it
// from there, else (the root already writing a later one there) from its slot. Many bcasts in
// a row, sizes around that bound, with the root running up to its 16 slots ahead of receivers
// that now and then stall: every receiver gets every bcast's own bytes.
TEST(CollThreads, SmallBcasts_RootRunningAhead_EveryReceiverGetsEachOnesBytes) {
  constexpr int kCalls = 3000;
  for_rank_counts(
      [&](ThreadRank& t, Failures& f) {
        const int n = t.world.size(), me = t.world.rank();
        for (int i = 0; i < kCalls; ++i) {
          // 0-66: both sides of 56 (and of 64, a whole slot line).
          const std::size_t bytes = static_cast<std::size_t>(i % 67);
          const int root = (i / 500) % n;
          const auto salt = static_cast<std::uint64_t>(i) + 1;
          std::vector<std::byte> buf = me == root ? pattern_block(root, bytes, salt)
                                                  : std::vector<std::byte>(bytes, std::byte{0xee});
          // A receiver stalls now and then, so that the root runs ahead and writes later
          // bcasts beside its count while this one is being read.
          if (me != root && (i + me) % 97 == 0)
            std::this_thread::sleep_for(std::chrono::microseconds(200));
          bcast_shm(t.world, buf.data(), bytes, root);
          f.equal(buf.data(), pattern_block(root, bytes, salt).data(), bytes,
                  where("shm", n, me, bytes, root));
        }
      },
      {2, 3, 4});
}

// Small node-shared reduces likewise: each contribution of up to 56 bytes also travels beside
// its rank's count (CountLine), and the root reads it from there while the count is still that
// reduce's. Contributors run up to 16 reduces ahead of a root that now and then stalls, and the
// root changes every 500: every root gets every reduce's own sum.
TEST(CollThreads, SmallReduces_ContributorsRunningAhead_EveryRootGetsEachOnesSum) {
  constexpr int kCalls = 3000;
  // Sums of bytes (0-66 of them: both sides of 56 and of 64, sub-word lengths), of 64-bit
  // integers (0-8: 48, 56 and 64 bytes) and of complex doubles (0-4: 48 and 64 bytes), every
  // value exact.
  struct Kind {
    Type type;
    std::size_t esize, most;
  };
  const Kind kinds[] = {{Type::u8, 1, 66}, {Type::i64, 8, 8}, {Type::c64, 16, 4}};
  for (const Kind& k : kinds) {
    SCOPED_TRACE("type " + std::to_string(static_cast<int>(k.type)));
    for_rank_counts(
        [&](ThreadRank& t, Failures& f) {
          const int n = t.world.size(), me = t.world.rank();
          for (int i = 0; i < kCalls; ++i) {
            const std::size_t count = static_cast<std::size_t>(i) % (k.most + 1);
            const int root = (i / 500) % n;
            // Element j of rank q's contribution as an integer (u8: its low byte; c64: the real
            // part, below 2^20 so that sums stay exact; the imaginary part is -q).
            auto value = [&](int q, std::size_t j) {
              const std::int64_t v =
                  static_cast<std::int64_t>(i) * 1000003 + q * 7919 + static_cast<std::int64_t>(j);
              return k.type == Type::c64 ? v % (1 << 20) : v;
            };
            std::vector<std::byte> in(count * k.esize), out(count * k.esize, std::byte{0xee}),
                want(count * k.esize);
            for (std::size_t j = 0; j < count; ++j) {
              std::int64_t sum = 0;
              for (int q = 0; q < n; ++q) sum += value(q, j);
              if (k.type == Type::u8) {
                in[j] = static_cast<std::byte>(value(me, j));
                want[j] = static_cast<std::byte>(sum);
              } else if (k.type == Type::i64) {
                const std::int64_t v = value(me, j);
                std::memcpy(&in[j * 8], &v, 8);
                std::memcpy(&want[j * 8], &sum, 8);
              } else {
                const std::complex<double> v(static_cast<double>(value(me, j)), -1.0 * me),
                    w(static_cast<double>(sum), -0.5 * n * (n - 1));
                std::memcpy(&in[j * 16], &v, 16);
                std::memcpy(&want[j * 16], &w, 16);
              }
            }
            if (me == root && (i + me) % 97 == 0)
              std::this_thread::sleep_for(std::chrono::microseconds(200));
            reduce_shm(t.world, in.data(), out.data(), count, k.esize, k.type, Op::sum, root);
            if (me == root)
              f.equal(out.data(), want.data(), count * k.esize,
                      where("shm", n, me, count * k.esize, root));
          }
        },
        {2, 3, 4});
  }
}

namespace {

using ReduceFn = void (*)(const CommImpl&, const void*, void*, std::size_t, std::size_t, Type, Op,
                          int);
using AllreduceFn = void (*)(const CommImpl&, const void*, void*, std::size_t, std::size_t, Type,
                             Op);
// The non-blocking allreduce's two schedules, started and waited for.
void iallreduce_with(coll::IallreduceSchedule schedule, const CommImpl& c, const void* in,
                     void* out, std::size_t count, std::size_t esize, Type t, Op op) {
  // Not owned: the thread-rank's world outlives the operation.
  std::shared_ptr<CommImpl> comm(const_cast<CommImpl*>(&c), [](CommImpl*) {});
  rmp::detail::Engine& e = c.engine();
  e.wait(e.start(coll::iallreduce(comm, in, out, count, esize, t, op, schedule)));
}
void iallreduce_binomial(const CommImpl& c, const void* in, void* out, std::size_t count,
                         std::size_t esize, Type t, Op op) {
  iallreduce_with(coll::IallreduceSchedule::binomial, c, in, out, count, esize, t, op);
}
void iallreduce_rabenseifner(const CommImpl& c, const void* in, void* out, std::size_t count,
                             std::size_t esize, Type t, Op op) {
  iallreduce_with(coll::IallreduceSchedule::rabenseifner, c, in, out, count, esize, t, op);
}

const std::pair<const char*, AllreduceFn> kAllreduce[] = {
    {"recursive_doubling", coll::allreduce_recursive_doubling},
    {"rabenseifner", coll::allreduce_rabenseifner},
    {"ring", coll::allreduce_ring},
    {"shm", allreduce_shm},
    {"shm_direct", allreduce_shm_direct},
    {"iallreduce binomial", iallreduce_binomial},
    {"iallreduce rabenseifner", iallreduce_rabenseifner}};

const std::pair<const char*, ReduceFn> kReduces[] = {{"binomial", coll::reduce_binomial},
                                                     {"rabenseifner", coll::reduce_rabenseifner},
                                                     {"shm", reduce_shm},
                                                     {"shm_direct", reduce_shm_direct}};

using ReduceScatterFn = void (*)(const CommImpl&, const void*, void*, coll::sizes, std::size_t,
                                 Type, Op);
const std::pair<const char*, ReduceScatterFn> kReduceScatters[] = {
    {"recursive_halving", coll::reduce_scatter_recursive_halving},
    {"ring", coll::reduce_scatter_ring},
    {"shm", reduce_scatter_shm}};

using ScanFn = void (*)(const CommImpl&, const void*, void*, std::size_t, std::size_t, Type, Op,
                        bool);
const std::pair<const char*, ScanFn> kScans[] = {
    {"recursive_doubling", coll::scan_recursive_doubling}, {"chain", coll::scan_chain}};

}  // namespace

TEST(CollThreads, Reduce_EveryAlgorithmRankCountSizeAndRoot) {
  SmallSegments small;
  for_rank_counts([&](ThreadRank& t, Failures& f) {
    const int n = t.world.size(), me = t.world.rank();
    std::size_t k = sweep_start(n, 0);
    for (auto [name, fn] : kReduces)
      for (std::size_t edge = 0; edge < kCountEdges; ++edge)
        for (int root : roots_for(n)) {
          const auto [type, op] = pair_for(k++);
          const std::size_t es = esize_of(type);
          const std::size_t count = counts_for(n, es)[edge];
          const bool inplace = k % 2 == 0 && me == root;
          auto in = input(type, op, me, count, k);
          std::vector<std::byte> out(count * es, std::byte{0xee});
          if (inplace) out = in;
          fn(t.world, inplace ? nullptr : in.data(), out.data(), count, es, type, op, root);
          if (me == root)
            f.same_values(type, out.data(), reference(type, op, 0, n, 0, count, k).data(), count,
                          where(name, n, me, count, root) + " " + coll::type_name(type) + " " +
                              coll::op_name(op) + (inplace ? " in place" : ""));
        }
  });
}

TEST(CollThreads, Allreduce_EveryAlgorithmRankCountAndSize_SameBitsEverywhere) {
  SmallSegments small;
  std::vector<std::vector<std::uint64_t>> digests(8);
  for (int n = 1; n <= 8; ++n) {
    Failures f;
    for (auto& d : digests) d.clear();
    run_thread_ranks(n, [&](ThreadRank& t) {
      const int me = t.world.rank();
      std::size_t k = sweep_start(n, 0);
      for (auto [name, fn] : kAllreduce)
        for (std::size_t edge = 0; edge < kCountEdges; ++edge) {
          // Exact inputs against the reference...
          const auto [type, op] = pair_for(k++);
          const std::size_t es = esize_of(type);
          const std::size_t count = counts_for(n, es)[edge];
          auto in = input(type, op, me, count, k);
          std::vector<std::byte> out(count * es, std::byte{0xee});
          const bool inplace = k % 2 == 0;
          if (inplace) out = in;
          fn(t.world, inplace ? nullptr : in.data(), out.data(), count, es, type, op);
          f.same_values(
              type, out.data(), reference(type, op, 0, n, 0, count, k).data(), count,
              where(name, n, me, count) + " " + coll::type_name(type) + " " + coll::op_name(op));
          // ...and order-sensitive ones, whose bits must agree across ranks.
          for (auto [mt, mop] : {TypeOp{Type::f64, Op::sum}, TypeOp{Type::f32, Op::min},
                                 TypeOp{Type::c32, Op::prod}}) {
            const std::size_t mes = esize_of(mt);
            auto min_ = input(mt, mop, me, count, k, true);
            std::vector<std::byte> mout(count * mes);
            fn(t.world, min_.data(), mout.data(), count, mes, mt, mop);
            digests[me].push_back(digest(mout.data(), mout.size()));
          }
        }
    });
    for (int r = 1; r < n; ++r)
      EXPECT_EQ(digests[r], digests[0])
          << "n=" << n << ": rank " << r << " got other bits than rank 0";
    f.report();
  }
}

TEST(CollThreads, Allreduce_EveryOpAndElementType_EveryAlgorithm) {
  for_rank_counts(
      [&](ThreadRank& t, Failures& f) {
        const int n = t.world.size(), me = t.world.rank();
        std::uint64_t salt = 100;
        for (auto [name, fn] : kAllreduce)
          for (TypeOp p : all_pairs()) {
            const std::size_t count = 37, es = esize_of(p.t);
            auto in = input(p.t, p.op, me, count, ++salt);
            std::vector<std::byte> out(count * es);
            fn(t.world, in.data(), out.data(), count, es, p.t, p.op);
            f.same_values(
                p.t, out.data(), reference(p.t, p.op, 0, n, 0, count, salt).data(), count,
                where(name, n, me, count) + " " + coll::type_name(p.t) + " " + coll::op_name(p.op));
          }
      },
      {3, 4});
}

// Every op × type pair through every algorithm of every reducing collective, with vectors of
// a segment of that type −1/0/+1 elements, at a non-power-of-two rank count and a power of two.
TEST(CollThreads, Reductions_EveryOpAndElementType_EveryAlgorithm_AtSegmentEdges) {
  SmallSegments small;
  for_rank_counts(
      [&](ThreadRank& t, Failures& f) {
        const int n = t.world.size(), me = t.world.rank(), root = n - 1;
        std::uint64_t salt = 3000;
        for (TypeOp p : all_pairs())
          for (std::size_t edge = 0; edge < 3; ++edge) {
            const std::size_t es = esize_of(p.t), count = kSeg / es - 1 + edge;
            const std::string what =
                std::string(" ") + coll::type_name(p.t) + " " + coll::op_name(p.op);
            auto in = input(p.t, p.op, me, count, ++salt);
            const auto expected = reference(p.t, p.op, 0, n, 0, count, salt);
            for (auto [name, fn] : kReduces) {
              std::vector<std::byte> out(count * es, std::byte{0xee});
              fn(t.world, in.data(), out.data(), count, es, p.t, p.op, root);
              if (me == root)
                f.same_values(p.t, out.data(), expected.data(), count,
                              where(name, n, me, count, root) + what);
            }
            for (auto [name, fn] : kAllreduce) {
              std::vector<std::byte> out(count * es, std::byte{0xee});
              fn(t.world, in.data(), out.data(), count, es, p.t, p.op);
              f.same_values(p.t, out.data(), expected.data(), count,
                            where(name, n, me, count) + what);
            }
            for (bool exclusive : {false, true})
              for (auto [name, fn] : kScans) {
                std::vector<std::byte> out(count * es, std::byte{0xee});
                fn(t.world, in.data(), out.data(), count, es, p.t, p.op, exclusive);
                if (exclusive && me == 0) continue;  // rank 0's exscan output is undefined
                const int upto = exclusive ? me : me + 1;
                f.same_values(p.t, out.data(), reference(p.t, p.op, 0, upto, 0, count, salt).data(),
                              count,
                              where(name, n, me, count) + (exclusive ? " exscan" : " scan") + what);
              }
            // reduce_scatter_block: a block of `count` each.
            auto all = input(p.t, p.op, me, count * static_cast<std::size_t>(n), salt);
            const std::vector<std::size_t> blocks(static_cast<std::size_t>(n), count);
            for (auto [name, fn] : kReduceScatters) {
              std::vector<std::byte> out(count * es, std::byte{0xee});
              fn(t.world, all.data(), out.data(), blocks, es, p.t, p.op);
              f.same_values(
                  p.t, out.data(),
                  reference(p.t, p.op, 0, n, count * static_cast<std::size_t>(me), count, salt)
                      .data(),
                  count, where(name, n, me, count) + " reduce_scatter" + what);
            }
          }
      },
      {3, 4});
}

TEST(CollThreads, GatherScatter_EveryAlgorithmRankCountRootAndLayout) {
  SmallSegments small;
  for_rank_counts([&](ThreadRank& t, Failures& f) {
    const int n = t.world.size(), me = t.world.rank();
    std::uint64_t salt = 1000;
    for (int root : roots_for(n)) {
      // Uniform blocks (gather, scatter), with in place at the root every other time.
      for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, kSeg - 1, kSeg + 1}) {
        ++salt;
        const Layout all = Layout::uniform(bytes);
        const std::size_t total = bytes * static_cast<std::size_t>(n);
        for (int algo = 0; algo < 2; ++algo) {
          const char* name = algo ? "gather_linear" : "gather_binomial";
          std::vector<std::byte> out(total, std::byte{0xee});
          auto mine = pattern_block(me, bytes, salt);
          const bool inplace = me == root && salt % 2;
          if (inplace) copy_in(out.data() + me * bytes, mine.data(), bytes);
          const void* in = inplace ? nullptr : mine.data();
          if (algo) coll::gather_linear(t.world, in, bytes, out.data(), all, root);
          else coll::gather_binomial(t.world, in, bytes, out.data(), all, true, root);
          if (me == root)
            for (int r = 0; r < n; ++r)
              f.equal(out.data() + r * bytes, pattern_block(r, bytes, salt).data(), bytes,
                      where(name, n, me, bytes, root) + " block " + std::to_string(r));
          // scatter back what the root gathered
          const char* sname = algo ? "scatter_linear" : "scatter_binomial";
          std::vector<std::byte> sin(total);
          for (int r = 0; r < n; ++r)
            copy_in(sin.data() + r * bytes, pattern_block(r, bytes, salt + 7).data(), bytes);
          std::vector<std::byte> sout(bytes, std::byte{0xee});
          if (algo) coll::scatter_linear(t.world, sin.data(), all, sout.data(), bytes, root);
          else coll::scatter_binomial(t.world, sin.data(), all, sout.data(), bytes, true, root);
          f.equal(sout.data(), pattern_block(me, bytes, salt + 7).data(), bytes,
                  where(sname, n, me, bytes, root));
        }
      }
      // v-variants: counts known at the root only (zero counts, packed and scattered layouts).
      for (bool scattered : {false, true}) {
        ++salt;
        const std::vector<std::size_t> counts = v_counts(n, salt, 1);
        std::vector<std::size_t> displs;
        const std::size_t extent = v_displs(counts, scattered, displs);
        const Layout all = me == root ? Layout(counts, displs, 1) : Layout({}, {}, 1);
        const std::size_t mycount = counts[me];
        for (int algo = 0; algo < 2; ++algo) {
          const char* name = algo ? "gatherv_linear" : "gatherv_binomial";
          auto mine = pattern_block(me, mycount, salt);
          std::vector<std::byte> out(me == root ? extent : 0, std::byte{0xee});
          if (algo) coll::gather_linear(t.world, mine.data(), mycount, out.data(), all, root);
          else coll::gather_binomial(t.world, mine.data(), mycount, out.data(), all, false, root);
          if (me == root)
            for (int r = 0; r < n; ++r)
              f.equal(out.data() + displs[r], pattern_block(r, counts[r], salt).data(), counts[r],
                      where(name, n, me, counts[r], root) + " block " + std::to_string(r) +
                          (scattered ? " scattered" : ""));
          const char* sname = algo ? "scatterv_linear" : "scatterv_binomial";
          std::vector<std::byte> sin(me == root ? extent : 0);
          if (me == root)
            for (int r = 0; r < n; ++r)
              copy_in(sin.data() + displs[r], pattern_block(r, counts[r], salt + 3).data(),
                      counts[r]);
          std::vector<std::byte> sout(mycount, std::byte{0xee});
          if (algo) coll::scatter_linear(t.world, sin.data(), all, sout.data(), mycount, root);
          else coll::scatter_binomial(t.world, sin.data(), all, sout.data(), mycount, false, root);
          f.equal(sout.data(), pattern_block(me, mycount, salt + 3).data(), mycount,
                  where(sname, n, me, mycount, root) + (scattered ? " scattered" : ""));
        }
      }
    }
  });
}

namespace {
using AllgatherFn = void (*)(const CommImpl&, const void*, void*, const Layout&);
const std::pair<const char*, AllgatherFn> kAllgathers[] = {
    {"recursive_doubling", coll::allgather_recursive_doubling},
    {"bruck", coll::allgather_bruck},
    {"ring", coll::allgather_ring},
    {"shm", allgather_shm},
    {"shm_direct", allgather_shm_direct}};
}  // namespace

TEST(CollThreads, Allgather_EveryAlgorithmRankCountAndLayout) {
  SmallSegments small;
  const auto& algos = kAllgathers;
  for_rank_counts([&](ThreadRank& t, Failures& f) {
    const int n = t.world.size(), me = t.world.rank();
    std::uint64_t salt = 2000;
    for (auto [name, fn] : algos) {
      // 56 / 57: the most a flag line carries beside the flag and one more; kSeg: the largest
      // block of the small allgather (node_shared.cpp's kMaxBytes), kSeg + 1 the chunks'.
      for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{56},
                                std::size_t{57}, kSeg - 1, kSeg, kSeg + 1}) {
        ++salt;
        const std::size_t total = bytes * static_cast<std::size_t>(n);
        std::vector<std::byte> out(total, std::byte{0xee});
        auto mine = pattern_block(me, bytes, salt);
        const bool inplace = salt % 2;
        if (inplace) copy_in(out.data() + me * bytes, mine.data(), bytes);
        fn(t.world, inplace ? nullptr : mine.data(), out.data(), Layout::uniform(bytes));
        for (int r = 0; r < n; ++r)
          f.equal(out.data() + r * bytes, pattern_block(r, bytes, salt).data(), bytes,
                  where(name, n, me, bytes) + " block " + std::to_string(r) +
                      (inplace ? " in place" : ""));
      }
      // allgatherv: counts agree, displacements are each rank's own (odd ranks scatter).
      for (int layout = 0; layout < 2; ++layout) {
        ++salt;
        const std::vector<std::size_t> counts = v_counts(n, salt, 1);
        std::vector<std::size_t> displs;
        const std::size_t extent = v_displs(counts, (me + layout) % 2 == 1, displs);
        std::vector<std::byte> out(extent, std::byte{0xee});
        auto mine = pattern_block(me, counts[me], salt);
        fn(t.world, mine.data(), out.data(), Layout(counts, displs, 1));
        for (int r = 0; r < n; ++r)
          f.equal(out.data() + displs[r], pattern_block(r, counts[r], salt).data(), counts[r],
                  std::string(name) + "v" + where("", n, me, counts[r]) + " block " +
                      std::to_string(r));
      }
    }
  });
}

TEST(CollThreads, Alltoall_EveryAlgorithmRankCountAndLayout) {
  SmallSegments small;
  for_rank_counts([&](ThreadRank& t, Failures& f) {
    const int n = t.world.size(), me = t.world.rank();
    std::uint64_t salt = 3000;
    // Block from rank s to rank d: pattern of "rank" s·64 + d.
    auto blk = [](int s, int d, std::size_t len, std::uint64_t salt_) {
      return pattern_block(s * 64 + d, len, salt_);
    };
    for (int algo = 0; algo < 3; ++algo) {
      const char* name = algo == 2 ? "shm" : algo ? "bruck" : "pairwise";
      // 56 / n and 4096 / n (+ 1): where all of a rank's blocks stop fitting beside its flag
      // and in its small block (node_shared.cpp's small alltoall).
      const auto un = static_cast<std::size_t>(n);
      for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{9}, 56 / un,
                                56 / un + 1, kSeg / un, kSeg / un + 1, kSeg + 1}) {
        ++salt;
        const std::size_t total = bytes * static_cast<std::size_t>(n);
        std::vector<std::byte> in(total), out(total, std::byte{0xee});
        for (int d = 0; d < n; ++d)
          copy_in(in.data() + d * bytes, blk(me, d, bytes, salt).data(), bytes);
        const bool inplace = salt % 2;
        if (inplace) out = in;
        const Layout l = Layout::uniform(bytes);
        if (algo == 2) alltoall_shm(t.world, inplace ? nullptr : in.data(), out.data(), bytes);
        else if (algo)
          coll::alltoall_bruck(t.world, inplace ? nullptr : in.data(), l, out.data(), l, true);
        else coll::alltoall_pairwise(t.world, inplace ? nullptr : in.data(), l, out.data(), l);
        for (int s = 0; s < n; ++s)
          f.equal(out.data() + s * bytes, blk(s, me, bytes, salt).data(), bytes,
                  where(name, n, me, bytes) + " from " + std::to_string(s) +
                      (inplace ? " in place" : ""));
      }
      // alltoallv: size of the block s → d from a shared rule (zeros included). (Not shm:
      // alltoallv has none, its block sizes are not known to every rank.)
      for (bool scattered : {false, true}) {
        if (algo == 2) break;
        ++salt;
        auto len = [&](int s, int d) {
          const std::uint64_t x = h(s * 64 + d, 0, salt);
          return x % 4 == 0 ? std::size_t{0} : static_cast<std::size_t>(x % 23);
        };
        std::vector<std::size_t> sc(n), rc(n), sd, rd;
        for (int i = 0; i < n; ++i) sc[i] = len(me, i), rc[i] = len(i, me);
        const std::size_t sext = v_displs(sc, scattered, sd), rext = v_displs(rc, !scattered, rd);
        std::vector<std::byte> in(sext), out(rext, std::byte{0xee});
        for (int d = 0; d < n; ++d)
          copy_in(in.data() + sd[d], blk(me, d, sc[d], salt).data(), sc[d]);
        const Layout sl(sc, sd, 1), rl(rc, rd, 1);
        if (algo) coll::alltoall_bruck(t.world, in.data(), sl, out.data(), rl, false);
        else coll::alltoall_pairwise(t.world, in.data(), sl, out.data(), rl);
        for (int s = 0; s < n; ++s)
          f.equal(
              out.data() + rd[s], blk(s, me, rc[s], salt).data(), rc[s],
              std::string(name) + " v" + where("", n, me, rc[s]) + " from " + std::to_string(s));
      }
    }
  });
}

TEST(CollThreads, ReduceScatter_EveryAlgorithmRankCountAndCounts) {
  SmallSegments small;
  for_rank_counts([&](ThreadRank& t, Failures& f) {
    const int n = t.world.size(), me = t.world.rank();
    std::size_t k = sweep_start(n, 500);
    for (auto [name, fn] : kReduceScatters) {
      // Blocks of 0, 1 and the segment −1/0/+1 elements of the call's type
      // (reduce_scatter_block), then counts of every size (v_counts).
      for (std::size_t shape = 0; shape < 6; ++shape) {
        const auto [type, op] = pair_for(k++);
        const std::size_t es = esize_of(type);
        const std::size_t blocks[] = {0, 1, kSeg / es - 1, kSeg / es, kSeg / es + 1};
        const std::vector<std::size_t> counts =
            shape < 5 ? std::vector<std::size_t>(static_cast<std::size_t>(n), blocks[shape])
                      : v_counts(n, 77, es);
        const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
        std::size_t first = 0;
        for (int i = 0; i < me; ++i) first += counts[i];
        auto in = input(type, op, me, total, k);
        const bool inplace = k % 2 == 0;
        std::vector<std::byte> out =
            inplace ? in : std::vector<std::byte>(counts[me] * es, std::byte{0xee});
        fn(t.world, inplace ? nullptr : in.data(), out.data(), counts, es, type, op);
        f.same_values(type, out.data(), reference(type, op, 0, n, first, counts[me], k).data(),
                      counts[me],
                      where(name, n, me, counts[me]) + " " + coll::type_name(type) + " " +
                          coll::op_name(op) + (inplace ? " in place" : ""));
      }
    }
  });
}

TEST(CollThreads, ScanExscan_EveryAlgorithmRankCountAndSize) {
  SmallSegments small;
  for_rank_counts([&](ThreadRank& t, Failures& f) {
    const int n = t.world.size(), me = t.world.rank();
    std::size_t k = sweep_start(n, 700);
    for (auto [name, fn] : kScans)
      for (bool exclusive : {false, true})
        for (std::size_t edge = 0; edge < kCountEdges; ++edge) {
          const auto [type, op] = pair_for(k++);
          const std::size_t es = esize_of(type);
          const std::size_t count = counts_for(n, es)[edge];
          auto in = input(type, op, me, count, k);
          const bool inplace = k % 2 == 0;
          std::vector<std::byte> out =
              inplace ? in : std::vector<std::byte>(count * es, std::byte{0xee});
          const auto before = out;
          fn(t.world, inplace ? nullptr : in.data(), out.data(), count, es, type, op, exclusive);
          const std::string what = where(name, n, me, count) + (exclusive ? " exscan " : " scan ") +
                                   coll::type_name(type) + " " + coll::op_name(op) +
                                   (inplace ? " in place" : "");
          if (!exclusive)
            f.same_values(type, out.data(), reference(type, op, 0, me + 1, 0, count, k).data(),
                          count, what);
          else if (me > 0)
            f.same_values(type, out.data(), reference(type, op, 0, me, 0, count, k).data(), count,
                          what);
          else
            f.equal(out.data(), before.data(), count * es, what + " (rank 0 must stay untouched)");
        }
  });
}

// RMP_REDUCE_SCATTER_ALGO forces reduce_scatter whatever its counts, RMP_REDUCE_SCATTER_BLOCK_ALGO
// reduce_scatter_block: equal counts took the block's algorithm (here the node-shared one, which
// makes the communicator's segment: counted).
TEST(CollThreads, ReduceScatterOfEqualCounts_ItsOwnForcedAlgorithm) {
  ScopedEnv rs("RMP_REDUCE_SCATTER_ALGO", "ring");
  ScopedEnv rsb("RMP_REDUCE_SCATTER_BLOCK_ALGO", "shm");
  for_rank_counts(
      [&](ThreadRank& t, Failures& f) {
        const int n = t.world.size(), me = t.world.rank();
        const std::vector<std::size_t> counts(static_cast<std::size_t>(n), 3);
        auto in = input(Type::i32, Op::sum, me, 3 * static_cast<std::size_t>(n), 5);
        const rmp::rt::Counters& counters = t.ctx.counters();
        for (const bool block : {false, true}) {
          std::vector<std::byte> out(3 * 4);
          coll::reduce_scatter(t.world, in.data(), out.data(), counts, 4, Type::i32, Op::sum,
                               block);
          f.same_values(
              Type::i32, out.data(),
              reference(Type::i32, Op::sum, 0, n, 3 * static_cast<std::size_t>(me), 3, 5).data(), 3,
              where(block ? "reduce_scatter_block" : "reduce_scatter", n, me, 3));
          if (counters.coll_segments != (block ? 1u : 0u))
            f.add(std::string(block ? "reduce_scatter_block" : "reduce_scatter") + ": " +
                  std::to_string(counters.coll_segments) + " node segments made (ring forced: 0, " +
                  "shm forced: 1)");
        }
      },
      {2, 3});
}

// ---- Large messages at the default parameters ---------------------------------------------------

TEST(CollThreads, Large_EveryAlgorithmFamily_FewMiB) {
  for_rank_counts(
      [&](ThreadRank& t, Failures& f) {
        const int n = t.world.size(), me = t.world.rank();
        const std::size_t count = (3u << 20) / 4 + 5;  // 3 MiB + 20 B of floats
        for (auto [name, fn] : kAllreduce) {
          auto in = input(Type::f32, Op::sum, me, count, 9);
          std::vector<std::byte> out(count * 4);
          fn(t.world, in.data(), out.data(), count, 4, Type::f32, Op::sum);
          f.same_values(Type::f32, out.data(),
                        reference(Type::f32, Op::sum, 0, n, 0, count, 9).data(), count,
                        where(name, n, me, count));
        }
        const std::size_t bytes = (2u << 20) + 3;
        for (auto fn : {coll::bcast_binomial, coll::bcast_scatter_allgather, coll::bcast_pipeline,
                        bcast_shm, bcast_shm_direct}) {
          std::vector<std::byte> buf =
              me == 1 % n ? pattern_block(7, bytes, 4) : std::vector<std::byte>(bytes);
          fn(t.world, buf.data(), bytes, 1 % n);
          f.equal(buf.data(), pattern_block(7, bytes, 4).data(), bytes,
                  where("bcast", n, me, bytes));
        }
        {
          const std::size_t block = (1u << 20) / static_cast<std::size_t>(n) + 1;
          std::vector<std::byte> out(block * n);
          auto mine = pattern_block(me, block, 5);
          for (auto [name, fn] : kAllgathers) {
            std::fill(out.begin(), out.end(), std::byte{0xee});
            fn(t.world, mine.data(), out.data(), Layout::uniform(block));
            for (int r = 0; r < n; ++r)
              f.equal(out.data() + r * block, pattern_block(r, block, 5).data(), block,
                      where((std::string("allgather_") + name).c_str(), n, me, block));
          }
          std::vector<std::size_t> counts(n, block / 4);
          auto rin = input(Type::i32, Op::sum, me, block / 4 * n, 6);
          std::vector<std::byte> rout(block / 4 * 4);
          for (auto [name, fn] : kReduceScatters) {
            std::fill(rout.begin(), rout.end(), std::byte{0xee});
            fn(t.world, rin.data(), rout.data(), counts, 4, Type::i32, Op::sum);
            f.equal(rout.data(),
                    reference(Type::i32, Op::sum, 0, n, me * (block / 4), block / 4, 6).data(),
                    rout.size(),
                    where((std::string("reduce_scatter_") + name).c_str(), n, me, block / 4));
          }
          std::vector<std::byte> ain(block * n), aout(block * n);
          for (int d = 0; d < n; ++d)
            copy_in(ain.data() + d * block, pattern_block(me * 64 + d, block, 8).data(), block);
          coll::alltoall_pairwise(t.world, ain.data(), Layout::uniform(block), aout.data(),
                                  Layout::uniform(block));
          for (int s = 0; s < n; ++s)
            f.equal(aout.data() + s * block, pattern_block(s * 64 + me, block, 8).data(), block,
                    where("alltoall_pairwise", n, me, block));
          std::fill(aout.begin(), aout.end(), std::byte{0xee});
          alltoall_shm(t.world, ain.data(), aout.data(), block);
          for (int s = 0; s < n; ++s)
            f.equal(aout.data() + s * block, pattern_block(s * 64 + me, block, 8).data(), block,
                    where("alltoall_shm", n, me, block));
          std::fill(aout.begin(), aout.end(), std::byte{0xee});
          coll::alltoall_bruck(t.world, ain.data(), Layout::uniform(block), aout.data(),
                               Layout::uniform(block), true);
          for (int s = 0; s < n; ++s)
            f.equal(aout.data() + s * block, pattern_block(s * 64 + me, block, 8).data(), block,
                    where("alltoall_bruck", n, me, block));
          // gather and scatter, linear and binomial, to and from the last rank.
          const int root = n - 1;
          const Layout all = Layout::uniform(block);
          for (int algo = 0; algo < 2; ++algo) {
            std::fill(out.begin(), out.end(), std::byte{0xee});
            if (algo) coll::gather_linear(t.world, mine.data(), block, out.data(), all, root);
            else coll::gather_binomial(t.world, mine.data(), block, out.data(), all, true, root);
            if (me == root)
              for (int r = 0; r < n; ++r)
                f.equal(out.data() + r * block, pattern_block(r, block, 5).data(), block,
                        where(algo ? "gather_linear" : "gather_binomial", n, me, block));
            std::vector<std::byte> part(block, std::byte{0xee});
            if (algo) coll::scatter_linear(t.world, ain.data(), all, part.data(), block, root);
            else coll::scatter_binomial(t.world, ain.data(), all, part.data(), block, true, root);
            f.equal(part.data(), pattern_block(root * 64 + me, block, 8).data(), block,
                    where(algo ? "scatter_linear" : "scatter_binomial", n, me, block));
          }
        }
        {
          auto in = input(Type::f64, Op::max, me, count / 2, 10);
          std::vector<std::byte> out(count / 2 * 8);
          coll::scan_chain(t.world, in.data(), out.data(), count / 2, 8, Type::f64, Op::max, false);
          f.equal(out.data(), reference(Type::f64, Op::max, 0, me + 1, 0, count / 2, 10).data(),
                  out.size(), where("scan_chain", n, me, count / 2));
          coll::scan_recursive_doubling(t.world, in.data(), out.data(), count / 2, 8, Type::f64,
                                        Op::max, true);
          if (me > 0)
            f.equal(out.data(), reference(Type::f64, Op::max, 0, me, 0, count / 2, 10).data(),
                    out.size(), where("exscan_recursive_doubling", n, me, count / 2));
          for (auto [name, fn] : kReduces) {
            std::fill(out.begin(), out.end(), std::byte{0xee});
            fn(t.world, in.data(), out.data(), count / 2, 8, Type::f64, Op::max, n - 1);
            if (me == n - 1)
              f.equal(out.data(), reference(Type::f64, Op::max, 0, n, 0, count / 2, 10).data(),
                      out.size(), where((std::string("reduce_") + name).c_str(), n, me, count / 2));
          }
        }
      },
      {3, 8});
}

// ---- Through the dispatch: forced algorithms and the default selection --------------------------

namespace {

// Calls every collective through coll:: (the dispatch) once with a small and a larger size
// and checks the results; `only` limits it to one collective.
void every_collective(ThreadRank& t, Failures& f, std::optional<coll::Coll> only,
                      const std::string& label) {
  using coll::Coll;
  const int n = t.world.size(), me = t.world.rank();
  auto want = [&](Coll k) { return !only || *only == k; };
  for (std::size_t count : {std::size_t{3}, std::size_t{3000}}) {
    const std::string at = label + " n=" + std::to_string(n) + " rank=" + std::to_string(me) +
                           " count=" + std::to_string(count);
    const std::uint64_t salt = 40 + count;
    const std::size_t bytes = count * 4;
    if (want(Coll::barrier)) coll::barrier(t.world);
    if (want(Coll::bcast)) {
      auto buf = me == n - 1 ? pattern_block(1, bytes, salt) : std::vector<std::byte>(bytes);
      coll::bcast(t.world, buf.data(), bytes, n - 1);
      f.equal(buf.data(), pattern_block(1, bytes, salt).data(), bytes, at + " bcast");
    }
    if (want(Coll::reduce) || want(Coll::allreduce) || want(Coll::scan) || want(Coll::exscan)) {
      auto in = input(Type::i32, Op::sum, me, count, salt);
      std::vector<std::byte> out(bytes);
      if (want(Coll::reduce)) {
        coll::reduce(t.world, in.data(), out.data(), count, 4, Type::i32, Op::sum, 0);
        if (me == 0)
          f.equal(out.data(), reference(Type::i32, Op::sum, 0, n, 0, count, salt).data(), bytes,
                  at + " reduce");
      }
      if (want(Coll::allreduce)) {
        coll::allreduce(t.world, in.data(), out.data(), count, 4, Type::i32, Op::sum);
        f.equal(out.data(), reference(Type::i32, Op::sum, 0, n, 0, count, salt).data(), bytes,
                at + " allreduce");
      }
      if (want(Coll::scan)) {
        coll::scan(t.world, in.data(), out.data(), count, 4, Type::i32, Op::sum, false);
        f.equal(out.data(), reference(Type::i32, Op::sum, 0, me + 1, 0, count, salt).data(), bytes,
                at + " scan");
      }
      if (want(Coll::exscan)) {
        coll::scan(t.world, in.data(), out.data(), count, 4, Type::i32, Op::sum, true);
        if (me > 0)
          f.equal(out.data(), reference(Type::i32, Op::sum, 0, me, 0, count, salt).data(), bytes,
                  at + " exscan");
      }
    }
    const std::size_t total = bytes * static_cast<std::size_t>(n);
    std::vector<std::size_t> counts(n), displs(n);
    for (int i = 0; i < n; ++i)
      counts[i] = i % 3 == 1 ? 0 : bytes + static_cast<std::size_t>(i),
      displs[i] = i == 0 ? 0 : displs[i - 1] + counts[i - 1];
    const std::size_t vtotal = displs[n - 1] + counts[n - 1];
    if (want(Coll::gather) || want(Coll::allgather)) {
      auto mine = pattern_block(me, bytes, salt);
      std::vector<std::byte> out(total);
      if (want(Coll::gather)) {
        coll::gather(t.world, mine.data(), out.data(), bytes, 0);
        if (me == 0)
          for (int r = 0; r < n; ++r)
            f.equal(out.data() + r * bytes, pattern_block(r, bytes, salt).data(), bytes,
                    at + " gather");
      }
      if (want(Coll::allgather)) {
        coll::allgather(t.world, mine.data(), out.data(), bytes);
        for (int r = 0; r < n; ++r)
          f.equal(out.data() + r * bytes, pattern_block(r, bytes, salt).data(), bytes,
                  at + " allgather");
      }
    }
    if (want(Coll::gatherv) || want(Coll::allgatherv)) {
      auto mine = pattern_block(me, counts[me], salt);
      std::vector<std::byte> out(vtotal);
      if (want(Coll::gatherv)) {
        coll::gatherv(t.world, mine.data(), counts[me], out.data(), counts, displs, 1, n / 2);
        if (me == n / 2)
          for (int r = 0; r < n; ++r)
            f.equal(out.data() + displs[r], pattern_block(r, counts[r], salt).data(), counts[r],
                    at + " gatherv");
      }
      if (want(Coll::allgatherv)) {
        coll::allgatherv(t.world, mine.data(), counts[me], out.data(), counts, displs, 1);
        for (int r = 0; r < n; ++r)
          f.equal(out.data() + displs[r], pattern_block(r, counts[r], salt).data(), counts[r],
                  at + " allgatherv");
      }
    }
    if (want(Coll::scatter)) {
      std::vector<std::byte> in(total), out(bytes);
      for (int r = 0; r < n; ++r)
        copy_in(in.data() + r * bytes, pattern_block(r, bytes, salt + 1).data(), bytes);
      coll::scatter(t.world, in.data(), out.data(), bytes, 0);
      f.equal(out.data(), pattern_block(me, bytes, salt + 1).data(), bytes, at + " scatter");
    }
    if (want(Coll::scatterv)) {
      std::vector<std::byte> in(vtotal), out(counts[me]);
      for (int r = 0; r < n; ++r)
        copy_in(in.data() + displs[r], pattern_block(r, counts[r], salt + 2).data(), counts[r]);
      coll::scatterv(t.world, in.data(), counts, displs, out.data(), counts[me], 1, n - 1);
      f.equal(out.data(), pattern_block(me, counts[me], salt + 2).data(), counts[me],
              at + " scatterv");
    }
    if (want(Coll::alltoall) || want(Coll::alltoallv)) {
      std::vector<std::byte> in(total), out(total);
      for (int d = 0; d < n; ++d)
        copy_in(in.data() + d * bytes, pattern_block(me * 64 + d, bytes, salt).data(), bytes);
      if (want(Coll::alltoall)) {
        coll::alltoall(t.world, in.data(), out.data(), bytes);
        for (int s = 0; s < n; ++s)
          f.equal(out.data() + s * bytes, pattern_block(s * 64 + me, bytes, salt).data(), bytes,
                  at + " alltoall");
      }
      if (want(Coll::alltoallv)) {
        std::vector<std::size_t> c(n, bytes), d(n);
        for (int i = 0; i < n; ++i) d[i] = i * bytes;
        coll::alltoallv(t.world, in.data(), c, d, out.data(), c, d, 1);
        for (int s = 0; s < n; ++s)
          f.equal(out.data() + s * bytes, pattern_block(s * 64 + me, bytes, salt).data(), bytes,
                  at + " alltoallv");
      }
    }
    for (bool block : {false, true}) {
      if (!want(block ? Coll::reduce_scatter_block : Coll::reduce_scatter)) continue;
      std::vector<std::size_t> c(n, count);
      if (!block)
        for (int i = 0; i < n; ++i) c[i] = count + static_cast<std::size_t>(i % 2);
      const std::size_t tot = std::accumulate(c.begin(), c.end(), std::size_t{0});
      std::size_t first = 0;
      for (int i = 0; i < me; ++i) first += c[i];
      auto in = input(Type::i64, Op::bxor, me, tot, salt);
      std::vector<std::byte> out(c[me] * 8);
      coll::reduce_scatter(t.world, in.data(), out.data(), c, 8, Type::i64, Op::bxor, block);
      f.equal(out.data(), reference(Type::i64, Op::bxor, 0, n, first, c[me], salt).data(),
              out.size(), at + (block ? " reduce_scatter_block" : " reduce_scatter"));
    }
  }
}

}  // namespace

TEST(CollThreads, ForcedByEnvironment_EveryAlgorithmOfEveryCollective) {
  for (std::size_t i = 0; i < coll::kCollCount; ++i) {
    const auto k = static_cast<coll::Coll>(i);
    for (std::string_view name : coll::algo_names(k)) {
      ScopedEnv force(coll::algo_env_name(k), std::string(name));
      const std::string label = coll::algo_env_name(k) + "=" + std::string(name);
      for_rank_counts([&](ThreadRank& t, Failures& f) { every_collective(t, f, k, label); },
                      {1, 3, 4});
    }
  }
}

// The node-shared pool's rounds, with communicators from `make` (given a context id) and calls
// from `exercise`: a first communicator, three more of the same members once each before has
// ended everywhere (each reuses the state: no new segment), then one made while a member still
// holds the one before (a new segment).
void kept_state_rounds(ThreadRank& t, Failures& f,
                       const std::function<std::unique_ptr<CommImpl>(std::uint32_t)>& make,
                       const std::function<void(CommImpl&, const std::string&)>& exercise) {
  const int r = t.world.rank(), n = t.world.size();
  const rmp::rt::Counters& counters = t.ctx.counters();
  const std::string who = "rank " + std::to_string(r) + ": ";
  std::uint32_t context = 10;
  exercise(*make(context++), "first");
  coll::barrier_dissemination(t.world);  // every member has let its communicator go
  const std::uint64_t made = counters.coll_segments, reused = counters.coll_segments_reused;
  for (int round = 0; round < 3; ++round) {
    exercise(*make(context++), "reused, round " + std::to_string(round));
    coll::barrier_dissemination(t.world);
  }
  if (counters.coll_segments != made || counters.coll_segments_reused != reused + 3)
    f.add(who + std::to_string(counters.coll_segments - made) + " new segments and " +
          std::to_string(counters.coll_segments_reused - reused) +
          " reused for 3 communicators of the same members, want 0 and 3");
  std::unique_ptr<CommImpl> held = make(context++);
  exercise(*held, "held");
  if (r != n - 1) held.reset();
  coll::barrier_dissemination(t.world);
  const std::uint64_t made_before = counters.coll_segments;
  exercise(*make(context++), "beside a held one");
  if (counters.coll_segments != made_before + 1)
    f.add(who + std::to_string(counters.coll_segments - made_before) +
          " new segments beside a communicator a member still holds, want 1");
}

// A communicator's node-shared state (segment, measurements) outlives it in a pool and serves
// the next communicator of the same members once every member has let go of its own: a new
// segment cost a communicator's first collective ~0.6 ms here. The calls on the reused state
// must start from a clean slate (generations, rounds, slots): small, block-sized and chunked
// allreduces, a barrier and a chunked bcast check it. A member still holding its communicator
// makes the next one map a new segment.
TEST(CollThreads, EndedCommunicatorsNodeState_ServesTheNextOfTheSameMembers) {
  for (const int n : {2, 3, 4}) {
    Failures f;
    run_thread_ranks(n, [&](ThreadRank& t) {
      const int r = t.world.rank();
      auto exercise = [&](CommImpl& c, const std::string& what) {
        coll::NodeShared* ns = coll::node_shared(c);
        if (!ns) {
          f.add(what + ": no node-shared state");
          return;
        }
        for (const std::size_t count : {std::size_t{1}, std::size_t{300}, std::size_t{70000}}) {
          std::vector<double> in(count), out(count, -1.0);
          for (std::size_t i = 0; i < count; ++i) in[i] = r + 1 + static_cast<double>(i % 7);
          coll::shm_allreduce(c, *ns, in.data(), out.data(), count, sizeof(double), Type::f64,
                              Op::sum);
          for (std::size_t i = 0; i < count; ++i) {
            const double want = n * (n + 1) / 2 + n * static_cast<double>(i % 7);
            if (out[i] != want) {
              f.add(what + ": allreduce of " + std::to_string(count) + " element " +
                    std::to_string(i) + " = " + std::to_string(out[i]) + ", want " +
                    std::to_string(want));
              break;
            }
          }
        }
        coll::shm_barrier(c, *ns);
        std::vector<int> b(100000, r == 0 ? 42 : r);
        coll::shm_bcast(c, *ns, b.data(), b.size() * sizeof(int), 0);
        if (std::count(b.begin(), b.end(), 42) != static_cast<std::ptrdiff_t>(b.size()))
          f.add(what + ": bcast did not deliver rank 0's buffer");
      };
      kept_state_rounds(
          t, f, [&](std::uint32_t ctx) { return std::make_unique<CommImpl>(t.engine, ctx, r, n); },
          exercise);
    });
    SCOPED_TRACE("n=" + std::to_string(n));
    f.report();
  }
}

// A dup takes the kept state in its context-id agreement (api/comm.cpp: every member offers its
// newest kept state of the parent's members, coll::KeptState; they agree when all offered the
// same one) instead of three more message rounds at its first collective. Rank 0 clears the
// segment in the dup; the others' first call waits for that: here rank 0 sleeps 30 ms first, so
// they get there before it (without the wait they read the last communicator's flags: wrong
// sums or a hang). An offer not every member makes (a member still holds its communicator) is
// put back and a new segment serves.
TEST(CollThreads, DupAgreesOnKeptNodeState_OthersWaitForRankZerosClear) {
  coll::set_kept_clear_delay(std::chrono::milliseconds(30));
  for (const int n : {2, 3, 4}) {
    Failures f;
    run_thread_ranks(n, [&](ThreadRank& t) {
      const int r = t.world.rank();
      // The dup's agreement, as api/comm.cpp makes it.
      auto dup = [&](std::uint32_t context) {
        coll::KeptState kept(t.world);
        const std::uint64_t mine[2] = {kept.id(), ~kept.id()};
        std::uint64_t all[2] = {};
        coll::allreduce(t.world, mine, all, 2, 8, Type::u64, Op::max);
        auto d = std::make_unique<CommImpl>(t.engine, context, r, n);
        if (kept.id() != 0 && all[0] == kept.id() && ~all[1] == kept.id()) kept.adopt(*d);
        return d;
      };
      auto exercise = [&](CommImpl& c, const std::string& what) {
        for (const std::size_t count : {std::size_t{1}, std::size_t{300}, std::size_t{70000}}) {
          std::vector<double> in(count, r + 1.0), out(count, -1.0);
          coll::allreduce(c, in.data(), out.data(), count, sizeof(double), Type::f64, Op::sum);
          const double want = n * (n + 1) / 2;
          if (std::count(out.begin(), out.end(), want) != static_cast<std::ptrdiff_t>(count))
            f.add(what + ", rank " + std::to_string(r) + ": allreduce of " + std::to_string(count) +
                  " gave " + std::to_string(out[0]) + ", want " + std::to_string(want));
        }
        coll::barrier(c);
      };
      kept_state_rounds(t, f, dup, exercise);
    });
    SCOPED_TRACE("n=" + std::to_string(n));
    f.report();
  }
  coll::set_kept_clear_delay(std::chrono::milliseconds(0));
}

// A member that cannot map its communicator's node segment (here a fault hook in
// NodeSegment::open; in life a full address space or a lost /dev/shm entry) made every other
// member wait for it for ever in the segment's first barrier. Now every member hears of it:
// the failing rank throws its own error, the others one naming it, the segment's name is
// removed, and a later call maps a new one.
TEST(CollThreads, MemberCannotMapTheNodeSegment_EveryMemberThrowsNamingIt) {
  for (const int n : {2, 3, 4}) {
    for (const int bad : {1, n - 1}) {
      Failures f;
      std::string job;
      std::mutex m;
      rmp::rt::NodeSegment::set_open_fault([bad](const rmp::rt::Context& ctx) {
        if (ctx.rank() == bad)
          throw rmp::Error(rmp::Errc::transport, "test: this rank maps nothing");
      });
      run_thread_ranks(n, [&](ThreadRank& t) {
        {
          std::lock_guard<std::mutex> g(m);
          job = t.ctx.id().job_id;
        }
        try {
          coll::node_shared(t.world);
          f.add("rank " + std::to_string(t.world.rank()) + ": no error");
        } catch (const rmp::Error& e) {
          const std::string want = t.world.rank() == bad
                                       ? "test: this rank maps nothing"
                                       : "rank " + std::to_string(bad) +
                                             " of the communicator could not map the node segment";
          if (e.code() != rmp::Errc::transport || std::string(e.what()).find(want) == std::string::npos)
            f.add("rank " + std::to_string(t.world.rank()) + ": " + e.what());
        }
        // Every member waits for the others before the hook goes: the failure was agreed.
        coll::barrier_dissemination(t.world);
        if (t.world.rank() == 0) rmp::rt::NodeSegment::set_open_fault({});
        coll::barrier_dissemination(t.world);
        coll::NodeShared* ns = coll::node_shared(t.world);
        if (!ns) f.add("no node segment the second time");
        else coll::shm_barrier(t.world, *ns);
      });
      rmp::rt::NodeSegment::set_open_fault({});
      for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
        if (entry.path().filename().string().starts_with("rmp-" + job + "-"))
          f.add("left in /dev/shm: " + entry.path().string());
      SCOPED_TRACE("n=" + std::to_string(n) + " failing rank " + std::to_string(bad));
      f.report();
    }
  }
}


// Counts that disagree between ranks, which only the rank sending a block knows (the root of
// a scatterv, the sender of an alltoallv block): the receiver's block is longer than its
// count. That rank alone reports Errc::truncate naming the collective, once the collective
// has run everywhere; the others finish with their data (nothing waits for a rank that threw
// early), and nothing is written past the truncated block's place. Every algorithm, the
// truncated rank inside the binomial tree (relative rank 2 of 4 or more) as well as a leaf,
// blocks sent eager and by rendezvous (of which a truncated receive keeps nothing, so the
// truncated block's bytes are checked only at the small size).
TEST(CollThreads, BlockLongerThanItsCount_TruncateAtItsRankAlone_EveryRankFinishes) {
  constexpr std::size_t kGuard = 16;
  constexpr std::byte kUntouched{0xa5};
  for (const std::size_t block : {std::size_t{8}, std::size_t{1} << 20})
    for (const coll::Coll k : {coll::Coll::scatterv, coll::Coll::alltoallv}) {
      for (std::string_view name : coll::algo_names(k)) {
        ScopedEnv force(coll::algo_env_name(k), std::string(name));
        const std::string label =
            coll::algo_env_name(k) + "=" + std::string(name) + " block=" + std::to_string(block);
        const char* call = k == coll::Coll::scatterv ? "scatterv" : "alltoallv";
        for_rank_counts(
            [&](ThreadRank& t, Failures& f) {
              const int n = t.world.size(), me = t.world.rank();
              const int victim = n >= 4 ? 2 : n - 1;
              const std::string at = label + " n=" + std::to_string(n) +
                                     " rank=" + std::to_string(me) +
                                     " victim=" + std::to_string(victim);
              std::vector<std::size_t> sc(n, block), sd(n), rc(n, block), rd(n);
              // The sender's count for the victim's block is twice the victim's own count.
              if (k == coll::Coll::scatterv || me == 0) sc[victim] = 2 * block;
              for (int i = 1; i < n; ++i) sd[i] = sd[i - 1] + sc[i - 1];
              for (int i = 0; i < n; ++i) rd[i] = static_cast<std::size_t>(i) * block;
              std::vector<std::byte> in(sd[n - 1] + sc[n - 1]);
              for (int i = 0; i < n; ++i)
                copy_in(in.data() + sd[i], pattern_block(me * 64 + i, sc[i], 7).data(), sc[i]);
              const std::size_t out_bytes = k == coll::Coll::scatterv ? block : n * block;
              std::vector<std::byte> out(out_bytes + kGuard, kUntouched);
              bool truncated = false;
              try {
                if (k == coll::Coll::scatterv)
                  coll::scatterv(t.world, in.data(), sc, sd, out.data(), block, 1, 0);
                else coll::alltoallv(t.world, in.data(), sc, sd, out.data(), rc, rd, 1);
              } catch (const rmp::Error& e) {
                truncated = e.code() == rmp::Errc::truncate;
                if (!truncated || std::string(e.what()).find(call) != 0)
                  f.add(at + ": " + e.what());
              }
              if (truncated != (me == victim))
                f.add(at + (truncated ? ": truncate where the block fits" : ": no truncate"));
              for (std::size_t i = out_bytes; i < out.size(); ++i)
                if (out[i] != kUntouched) {
                  f.add(at + ": written past the receive buffer");
                  break;
                }
              // Every block; the truncated one's first bytes where they are kept.
              const bool kept = block <= 8;
              if (k == coll::Coll::scatterv) {
                if (me != victim || kept)
                  f.equal(out.data(), pattern_block(me, block, 7).data(), block, at);
              } else {
                for (int s = 0; s < n; ++s)
                  if (me != victim || s != 0 || kept)
                    f.equal(out.data() + rd[s], pattern_block(s * 64 + me, block, 7).data(), block,
                            at + " block from " + std::to_string(s));
              }
              // And the communicator goes on.
              std::uint64_t one = 1, sum = 0;
              coll::allreduce(t.world, &one, &sum, 1, 8, Type::u64, Op::sum);
              if (sum != static_cast<std::uint64_t>(n)) f.add(at + ": allreduce after it");
            },
            // 1 MiB blocks at two rank counts only: at all four they took 13 s of the
            // sanitizer build's time (the small blocks cover the tree's shapes).
            block <= 8 ? std::initializer_list<int>{2, 3, 4, 8} : std::initializer_list<int>{2, 4});
      }
    }
}

TEST(CollThreads, DefaultSelection_EveryCollective_OneToEightRanks) {
  for_rank_counts(
      [&](ThreadRank& t, Failures& f) { every_collective(t, f, std::nullopt, "default"); });
}
