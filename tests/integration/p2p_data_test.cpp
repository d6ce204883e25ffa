// Data integrity across every protocol edge and element type, the protocol the sender
// picks for each size, and messages to one's own rank.
#include "harness.hpp"
#include "runtime/stats.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace itest;

template <class T>
constexpr std::uint64_t type_salt() {
  if constexpr (std::is_same_v<T, char>) return 0x11;
  else if constexpr (std::is_same_v<T, int>) return 0x22;
  else if constexpr (std::is_same_v<T, double>) return 0x33;
  else if constexpr (std::is_same_v<T, std::complex<double>>) return 0x44;
  else if constexpr (std::is_same_v<T, std::byte>) return 0x55;
  else return 0x66;
}

// Element counts that put a message at (or straddling) `bytes`: exact for 1-byte types; the
// counts just below and above for wider ones (one count past 1 MiB, to bound run time).
template <class T>
std::vector<std::size_t> counts_for(std::size_t bytes) {
  const std::size_t lo = bytes / sizeof(T), hi = (bytes + sizeof(T) - 1) / sizeof(T);
  if (lo == hi || bytes > (std::size_t{1} << 20)) return {hi};
  return {lo, hi};
}

// Shift patterns: every ordered pair up to 4 ranks; a ring (±1) and the opposite rank beyond.
std::vector<int> shifts() {
  const int n = size();
  std::vector<int> s;
  if (n == 1) return {0};
  if (n <= 4) {
    for (int k = 1; k < n; ++k) s.push_back(k);
    return s;
  }
  return {1, n / 2, n - 1};
}

// Sends one message of `count` elements to dst while receiving the matching one from src,
// then checks status, payload and that the unused rest of the posted buffer is untouched.
template <class T>
void exchange_and_check(std::size_t count, std::size_t extra, int src, int dst, int tag,
                        std::uint64_t msgno, std::uint64_t salt) {
  const rmp::Comm& w = rmp::world();
  const int r = rank();
  constexpr std::size_t guard = 4;
  std::vector<T> rbuf(count + extra + guard, sentinel<T>());
  rmp::Request req = w.irecv(rbuf.data(), count + extra, src, tag);
  const std::vector<T> sbuf = make_message<T>(count, seed(r, dst, msgno, salt));
  w.send(sbuf.data(), count, dst, tag);
  const rmp::Status st = req.wait();
  const std::string ctx = "message " + std::to_string(msgno) + " of " + std::to_string(count) +
                          " elements (" + std::to_string(count * sizeof(T)) + " B, " +
                          proto_name(proto_of(count * sizeof(T))) + ") from " + who(src) + " to " +
                          who(r) + ", posted count " + std::to_string(count + extra);
  EXPECT_EQ(st.source, src) << ctx;
  EXPECT_EQ(st.tag, tag) << ctx;
  EXPECT_EQ(st.bytes, count * sizeof(T)) << ctx;
  EXPECT_EQ(st.count<T>(), count) << ctx;
  EXPECT_TRUE(matches(rbuf.data(), count, seed(src, r, msgno, salt))) << ctx;
  EXPECT_TRUE(untouched(rbuf.data() + count, extra + guard))
      << ctx << ": the part of the buffer past the message was written";
}

// The knobs every edge size below derives from are readable from effective_params("shm").
TEST(Params, ShmKnobsReadableFromEffectiveParams) {
  const Knobs& k = knobs();
  for (const std::string& p : k.problems) ADD_FAILURE() << p;
  EXPECT_GE(k.fragment_size, 64u);
  EXPECT_GE(k.pipeline_depth, 1u);
  EXPECT_GE(k.rq_depth, 1u);
  if (rank() == 0) std::printf("[rank 0] shm knobs: %s\n", k.table.c_str());
}

template <class T>
class Integrity : public ::testing::Test {};

using ElementTypes =
    ::testing::Types<char, int, double, std::complex<double>, std::byte, std::uint64_t>;

struct ElementTypeNames {
  template <class T>
  static std::string GetName(int) {
    if constexpr (std::is_same_v<T, char>) return "char";
    else if constexpr (std::is_same_v<T, int>) return "int";
    else if constexpr (std::is_same_v<T, double>) return "double";
    else if constexpr (std::is_same_v<T, std::complex<double>>) return "complex_double";
    else if constexpr (std::is_same_v<T, std::byte>) return "byte";
    else return "uint64";
  }
};

TYPED_TEST_SUITE(Integrity, ElementTypes, ElementTypeNames);

// Sizes 0, 1, 3, every threshold −1/0/+1, 1000003 and (for byte and double, first shift)
// 16 MiB travel intact between every ordered pair of ranks (ring shifts beyond 4 ranks), each
// message with its own tag, half of them into a posted buffer larger than the message.
TYPED_TEST(Integrity, EdgeSizes_ArriveIntact_EveryPairOrRing) {
  using T = TypeParam;
  const int r = rank(), n = size();
  const std::vector<int> sh = shifts();
  constexpr bool big_type = std::is_same_v<T, std::byte> || std::is_same_v<T, double>;
  std::uint64_t msgno = 0;
  for (std::size_t si = 0; si < sh.size(); ++si) {
    const int dst = (r + sh[si]) % n, src = (r - sh[si] + n) % n;
    const std::size_t cap = (big_type && si == 0) ? (std::size_t{16} << 20) : 1000003;
    for (std::size_t bytes : edge_sizes(cap)) {
      for (std::size_t count : counts_for<T>(bytes)) {
        const int tag = 100 + static_cast<int>(msgno);
        exchange_and_check<T>(count, msgno % 2 ? 5 : 0, src, dst, tag, msgno, type_salt<T>());
        ++msgno;
      }
    }
  }
}

// Fragment edges beyond the 16 MiB cap of the sweep above (up to 64 MiB + 1, where a variant
// sets fragment_size to its maximum): ranks 0 and 1 exchange (one rank: to itself).
TEST(Integrity, FragmentEdges_UpTo64MiB_ArriveIntact) {
  const int r = rank(), n = size();
  if (r > 1) return;
  const int peer = n == 1 ? 0 : 1 - r;
  const Knobs& k = knobs();
  const std::size_t cap = (std::size_t{64} << 20) + 1;
  const std::size_t fd = k.fragment_size * std::max<std::size_t>(k.pipeline_depth, 1);
  // The fragment edges themselves, and the first whole multiple of fragment_size that is a
  // rendezvous (where fragments are smaller than eager_threshold), each −1/0/+1.
  const std::size_t m = (k.eager_threshold + 1) / k.fragment_size + 1;
  std::vector<std::size_t> sizes;
  for (std::size_t e : {k.fragment_size, fd, m * k.fragment_size, m * k.fragment_size + fd})
    for (std::size_t s : {e - 1, e, e + 1})
      if (s <= cap && s > k.eager_threshold) sizes.push_back(s);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  std::uint64_t msgno = 0;
  for (std::size_t s : sizes) {
    exchange_and_check<std::byte>(s, 0, peer, peer, 300 + static_cast<int>(msgno), msgno, 0x77);
    ++msgno;
  }
}

// The sender picks inline up to inline_threshold, eager up to eager_threshold, rendezvous
// above (DESIGN §2), as counted by rmp::rt::counters(); eager sends turned into rendezvous
// for want of credits are allowed only as counted credit_stalls, and (RMP_TUNE=adaptive)
// choices of the tuner only as counted tune_eager_above / tune_rndv_below. Rendezvous gets
// use the copy path a variant forces (RMP_SHM_COPY=single|chunks, RMP_SHM_CMA=0).
TEST(Protocol, SelectionFollowsEffectiveThresholds) {
  const int r = rank(), n = size();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  const rmp::Comm& w = rmp::world();
  const Knobs& k = knobs();
  std::vector<std::size_t> sizes = {0, 1};
  for (std::size_t e : {k.inline_threshold, k.eager_threshold})
    for (std::size_t s : {e == 0 ? 0 : e - 1, e, e + 1}) sizes.push_back(s);
  sizes.push_back(rndv_size());
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());

  rmp::rt::Counters before = rmp::rt::counters();
  std::uint64_t exp_inline = 0, exp_eager = 0, exp_rndv = 0;
  if (r == 0) {
    int ready = 0;
    w.recv(&ready, 1, 1, 499);
    before = rmp::rt::counters();
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const auto msg = make_message<std::byte>(sizes[i], seed(0, 1, i, 0x88));
      w.send(msg.data(), msg.size(), 1, 500 + static_cast<int>(i));
      switch (proto_of(sizes[i])) {
        case Proto::inline_:
          ++exp_inline;
          break;
        case Proto::eager:
          ++exp_eager;
          break;
        case Proto::rndv:
          ++exp_rndv;
          break;
      }
    }
  } else if (r == 1) {
    std::vector<std::vector<std::byte>> bufs;
    std::vector<rmp::Request> reqs;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      bufs.emplace_back(sizes[i]);
      reqs.push_back(w.irecv(bufs.back().data(), sizes[i], 0, 500 + static_cast<int>(i)));
    }
    const int ready = 1;
    w.send(&ready, 1, 0, 499);
    rmp::wait_all(reqs);
    for (std::size_t i = 0; i < sizes.size(); ++i)
      EXPECT_TRUE(matches(bufs[i].data(), sizes[i], seed(0, 1, i, 0x88)))
          << sizes[i] << " B message";
  }
  const rmp::rt::Counters after = rmp::rt::counters();
  const std::uint64_t d_rndv = after.msgs_rndv - before.msgs_rndv;
  if (r == 0) {
    const std::uint64_t d_inline = after.msgs_inline - before.msgs_inline;
    const std::uint64_t d_eager = after.msgs_eager - before.msgs_eager;
    const std::uint64_t d_stall = after.credit_stalls - before.credit_stalls;
    const std::uint64_t d_above = after.tune_eager_above - before.tune_eager_above;
    const std::uint64_t d_below = after.tune_rndv_below - before.tune_rndv_below;
    const std::string ctx =
        "sizes sent 0→1 under " + k.table + "; counted inline/eager/rndv/" +
        "stalls/tuned-eager-above/tuned-rndv-below = " + std::to_string(d_inline) + "/" +
        std::to_string(d_eager) + "/" + std::to_string(d_rndv) + "/" + std::to_string(d_stall) +
        "/" + std::to_string(d_above) + "/" + std::to_string(d_below) + ", expected " +
        std::to_string(exp_inline) + "/" + std::to_string(exp_eager) + "/" +
        std::to_string(exp_rndv);
    EXPECT_EQ(d_inline + d_eager + d_rndv, sizes.size()) << ctx;
    EXPECT_EQ(d_rndv + d_above, exp_rndv + d_stall + d_below) << ctx;
    EXPECT_LE(d_inline, exp_inline) << ctx;
    EXPECT_LE(d_eager, exp_eager + d_above) << ctx;
    if (d_stall == 0) {
      EXPECT_EQ(d_inline, exp_inline) << ctx;
      EXPECT_EQ(d_eager + d_below, exp_eager + d_above) << ctx;
    }
    if (!env_is("RMP_TUNE", "adaptive")) {
      EXPECT_EQ(d_above, 0u) << ctx;
      EXPECT_EQ(d_below, 0u) << ctx;
    }
  }
  // Receiver side: at least one get fragment per rendezvous message rank 0 sent.
  const std::uint64_t frags =
      sum_over_ranks(r == 1 ? after.rndv_fragments - before.rndv_fragments : 0);
  const std::uint64_t rndv_msgs = sum_over_ranks(r == 0 ? d_rndv : 0);
  EXPECT_GE(frags, rndv_msgs) << "rndv_fragments counted on rank 1";
  // Which copy served the gets (counted on either side of the pair).
  const bool pair = r <= 1;
  const std::uint64_t single =
      sum_over_ranks(pair ? after.shm_gets_single - before.shm_gets_single : 0);
  const std::uint64_t chunks =
      sum_over_ranks(pair ? after.shm_gets_chunks - before.shm_gets_chunks : 0);
  const std::uint64_t split =
      sum_over_ranks(pair ? after.shm_gets_split - before.shm_gets_split : 0);
  const std::uint64_t streaming =
      sum_over_ranks(pair ? after.shm_gets_streaming - before.shm_gets_streaming : 0);
  const std::string copy_ctx = "shm_gets_single=" + std::to_string(single) +
                               " shm_gets_chunks=" + std::to_string(chunks) +
                               " shm_gets_split=" + std::to_string(split) +
                               " shm_gets_streaming=" + std::to_string(streaming) + " for " +
                               std::to_string(rndv_msgs) + " rendezvous messages";
  EXPECT_GE(single + chunks + split, 1u) << copy_ctx;
  if (env_is("RMP_SHM_COPY", "single")) {
    EXPECT_GE(single, 1u) << "RMP_SHM_COPY=single: " << copy_ctx;
    EXPECT_EQ(chunks + split, 0u) << "RMP_SHM_COPY=single: " << copy_ctx;
  }
  if (env_is("RMP_SHM_COPY", "split")) {
    EXPECT_GE(split, 1u) << "RMP_SHM_COPY=split: " << copy_ctx;
    EXPECT_EQ(chunks + single, 0u) << "RMP_SHM_COPY=split: " << copy_ctx;
  }
  if (env_is("RMP_SHM_COPY", "chunks") || env_is("RMP_SHM_COPY", "streaming") ||
      env_is("RMP_SHM_CMA", "0")) {
    EXPECT_EQ(single + split, 0u) << "chunks forced or CMA forbidden: " << copy_ctx;
    EXPECT_GE(chunks, 1u) << "chunks forced or CMA forbidden: " << copy_ctx;
  }
  if (env_is("RMP_SHM_COPY", "chunks")) {
    EXPECT_EQ(streaming, 0u) << copy_ctx;
  }
  if (env_is("RMP_SHM_COPY", "streaming")) {
    EXPECT_EQ(streaming, chunks) << copy_ctx;
  }
}

// Windows of rendezvous receives posted before the sends: many gets in flight at once, so that
// with RMP_SHM_COPY=auto the copy chooser's warm-up and exploration change the mechanism while
// gets of another are still running (the later ones wait until those end: shm_gets_waited).
// Every byte arrives, in every variant; a forced mechanism never waits.
TEST(Rendezvous, WindowsOfGets_MechanismChangesKeepEveryByte) {
  const int r = rank(), n = size();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  const rmp::Comm& w = rmp::world();
  const std::size_t bytes = std::max<std::size_t>(knobs().eager_threshold + 1, (192u << 10) + 5);
  constexpr int kWindow = 24, kRounds = 3;
  const int partner = r % 2 == 0 ? r + 1 : r - 1;
  const int sender = std::min(r, partner), receiver = std::max(r, partner);
  const rmp::rt::Counters before = rmp::rt::counters();
  if (partner < n) {
    for (int round = 0; round < kRounds; ++round) {
      std::vector<std::vector<std::byte>> bufs;
      std::vector<rmp::Request> reqs;
      for (int i = 0; i < kWindow; ++i) {
        const auto key =
            seed(sender, receiver, static_cast<std::uint64_t>(round * kWindow + i), 0x7e);
        if (r % 2 == 1) {
          bufs.emplace_back(bytes);
          reqs.push_back(w.irecv(bufs.back().data(), bytes, partner, 900 + i));
        } else {
          bufs.push_back(make_message<std::byte>(bytes, key));
        }
      }
      // The receiver posts its window first, then lets the sender go.
      int go = 0;
      if (r % 2 == 1) {
        w.send(&go, 1, partner, 899);
      } else {
        w.recv(&go, 1, partner, 899);
        for (int i = 0; i < kWindow; ++i)
          reqs.push_back(
              w.isend(bufs[static_cast<std::size_t>(i)].data(), bytes, partner, 900 + i));
      }
      rmp::wait_all(reqs);
      if (r % 2 == 1) {
        for (int i = 0; i < kWindow; ++i) {
          const auto key =
              seed(sender, receiver, static_cast<std::uint64_t>(round * kWindow + i), 0x7e);
          EXPECT_TRUE(matches(bufs[static_cast<std::size_t>(i)].data(), bytes, key))
              << "round " << round << ", message " << i << " of " << bytes << " B";
        }
      }
    }
  }
  const rmp::rt::Counters after = rmp::rt::counters();
  const std::uint64_t gets = (after.shm_gets_single - before.shm_gets_single) +
                             (after.shm_gets_chunks - before.shm_gets_chunks) +
                             (after.shm_gets_split - before.shm_gets_split);
  const std::uint64_t waited = after.shm_gets_waited - before.shm_gets_waited;
  EXPECT_LE(waited, gets) << "gets that waited vs gets started on rank " << r;
  if (env_is("RMP_SHM_COPY", "single") || env_is("RMP_SHM_COPY", "chunks") ||
      env_is("RMP_SHM_COPY", "split") || env_is("RMP_SHM_COPY", "streaming")) {
    EXPECT_EQ(waited, 0u) << "a forced mechanism never waits for another";
  }
  w.barrier();
}

// Split gets go in batches of up to 16 (shm_ring.hpp, SplitShared): the requester reads the
// first parts, the owner writes the second ones, and the requester copies whatever the owner
// does not come for. Windows of 40 gets of mixed sizes (one part only below 32 KiB, odd
// lengths, up to 1 MiB), first with the sender waiting in progress (it helps: with
// RMP_SHM_COPY=split, cross-memory attach and cores of their own it wrote some parts), then
// with the sender asleep for 30 ms after posting (the receiver copies the parts of every
// batch published meanwhile itself): every byte arrives, in every variant.
TEST(Rendezvous, SplitBatches_MixedSizesWithAndWithoutTheOwner_EveryByteArrives) {
  const int r = rank(), n = size();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  const rmp::Comm& w = rmp::world();
  const std::size_t eager = knobs().eager_threshold;
  const std::size_t sizes[] = {eager + 1,       (32u << 10) - 1,  32u << 10,     (32u << 10) + 1,
                               (64u << 10) + 7, (200u << 10) + 3, (1u << 20) + 5};
  constexpr int kWindow = 40;
  auto size_of = [&](int i) {
    return std::max(eager + 1, sizes[static_cast<std::size_t>(i) % std::size(sizes)]);
  };
  const int partner = r % 2 == 0 ? r + 1 : r - 1;
  const int sender = std::min(r, partner), receiver = std::max(r, partner);
  const rmp::rt::Counters before = rmp::rt::counters();
  if (partner < n) {
    for (const bool owner_sleeps : {false, true}) {
      std::vector<std::vector<std::byte>> bufs;
      std::vector<rmp::Request> reqs;
      auto key = [&](int i) {
        return seed(sender, receiver, static_cast<std::uint64_t>(i + (owner_sleeps ? kWindow : 0)),
                    0x5b);
      };
      for (int i = 0; i < kWindow; ++i) {
        if (r == receiver) {
          bufs.emplace_back(size_of(i), std::byte{0xee});
          reqs.push_back(w.irecv(bufs.back().data(), size_of(i), partner, 700 + i));
        } else {
          bufs.push_back(make_message<std::byte>(size_of(i), key(i)));
        }
      }
      int go = 0;
      if (r == receiver) {
        w.send(&go, 1, partner, 699);
      } else {
        w.recv(&go, 1, partner, 699);
        for (int i = 0; i < kWindow; ++i)
          reqs.push_back(
              w.isend(bufs[static_cast<std::size_t>(i)].data(), size_of(i), partner, 700 + i));
        if (owner_sleeps) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      }
      rmp::wait_all(reqs);
      if (r == receiver) {
        for (int i = 0; i < kWindow; ++i)
          EXPECT_TRUE(matches(bufs[static_cast<std::size_t>(i)].data(), size_of(i), key(i)))
              << "message " << i << " of " << size_of(i) << " B"
              << (owner_sleeps ? ", the sender asleep" : ", the sender helping");
      }
    }
  }
  const rmp::rt::Counters after = rmp::rt::counters();
  const bool split =
      env_is("RMP_SHM_COPY", "split") && cma_between_ranks(w) && partner < n && eager < (1u << 20);
  if (split && r == receiver) {
    EXPECT_GE(after.shm_gets_split - before.shm_gets_split, 2u) << "RMP_SHM_COPY=split";
  }
  if (split && r == sender && ranks_have_own_cores(n)) {
    EXPECT_GE(after.shm_split_helped - before.shm_split_helped, 1u)
        << "the sender, waiting in progress, wrote no part of a split get";
  }
  w.barrier();
}

// Windows of rendezvous messages both ways at once between pairs: every byte arrives, and with
// RMP_SHM_COPY=auto, gets started while this rank's own rendezvous sends are unread or the peer
// reads from it are chosen as traffic both ways (the copy chooser's own kind for them),
// counted as such.
TEST(Rendezvous, TrafficBothWays_EveryByteArrives_ChosenAsTrafficBothWays) {
  const int r = rank(), n = size();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  const rmp::Comm& w = rmp::world();
  const std::size_t bytes = std::max<std::size_t>(knobs().eager_threshold + 1, (256u << 10) + 3);
  constexpr int kWindow = 16, kRounds = 4;
  const int partner = r % 2 == 0 ? r + 1 : r - 1;
  const rmp::rt::Counters before = rmp::rt::counters();
  if (partner < n) {
    for (int round = 0; round < kRounds; ++round) {
      std::vector<std::vector<std::byte>> in(kWindow, std::vector<std::byte>(bytes)), out;
      std::vector<rmp::Request> reqs;
      for (int i = 0; i < kWindow; ++i)
        out.push_back(make_message<std::byte>(
            bytes, seed(r, partner, static_cast<std::uint64_t>(round * kWindow + i), 0x5b)));
      // Both windows of sends go out before either rank posts a receive: a get starts when a
      // receive matches, so the first rank to post its receives starts reading with all of its
      // own sends unread. With the receives posted first, a rank could read the other's whole
      // window before its own sends left (its request-to-send messages, if queued behind a
      // full ring, can reach the peer after its FINs: control passes queued data), and one run
      // (sanitizer build, RMP_SHM_CMA=0) counted no get started while traffic ran both ways.
      for (int i = 0; i < kWindow; ++i)
        reqs.push_back(w.isend(out[static_cast<std::size_t>(i)].data(), bytes, partner, 700 + i));
      int mine = 0, theirs = 0;  // behind the sends in order: they are all here once it is
      w.sendrecv(&mine, 1, partner, 699, &theirs, 1, partner, 699);
      for (int i = 0; i < kWindow; ++i)
        reqs.push_back(w.irecv(in[static_cast<std::size_t>(i)].data(), bytes, partner, 700 + i));
      rmp::wait_all(reqs);
      for (int i = 0; i < kWindow; ++i)
        EXPECT_TRUE(
            matches(in[static_cast<std::size_t>(i)].data(), bytes,
                    seed(partner, r, static_cast<std::uint64_t>(round * kWindow + i), 0x5b)))
            << "round " << round << ", message " << i << " of " << bytes << " B from " << partner;
    }
  }
  const rmp::rt::Counters after = rmp::rt::counters();
  const std::uint64_t gets = after.shm_gets_single - before.shm_gets_single +
                             after.shm_gets_chunks - before.shm_gets_chunks + after.shm_gets_split -
                             before.shm_gets_split;
  std::uint64_t both_ways = after.shm_gets_both_ways - before.shm_gets_both_ways;
  EXPECT_LE(both_ways, gets) << "gets counted both ways are gets, on rank " << r;
  std::uint64_t job = 0;
  w.allreduce(&both_ways, &job, 1, rmp::Op::sum);
  // Under RMP_TUNE=adaptive a size class straddling eager_threshold starts where the static
  // rule put its first send, which an earlier test may have sent eager: then these sends go
  // eager too (counted as tune_eager_above), and no get need start at all.
  std::uint64_t eager_above = after.tune_eager_above - before.tune_eager_above, job_eager = 0;
  w.allreduce(&eager_above, &job_eager, 1, rmp::Op::sum);
  const bool chooses = !std::getenv("RMP_SHM_COPY") || env_is("RMP_SHM_COPY", "auto");
  if (chooses && proto_of(bytes) == Proto::rndv && job_eager == 0) {
    EXPECT_GT(job, 0u) << "no get of " << kRounds * kWindow
                       << " per rank each way started while its peer read";
  } else if (!chooses) {
    EXPECT_EQ(both_ways, 0u) << "a forced mechanism";
  }
}

// An exchange of one rendezvous message each way (sendrecv, as a halo exchange does): a rank
// that reads its partner's message while its own is still unread in flight knows the traffic
// runs both ways (its rendezvous send has seen no FIN yet), whether or not the partner has
// started reading: with RMP_SHM_COPY=auto such a get is chosen as traffic both ways
// (sendrecv posts its send first, so that is every get in a steady exchange: 12 of 12 at 2-8
// ranks). Every byte arrives.
TEST(Rendezvous, SendrecvExchange_EveryByteArrives_ReadsAsTrafficBothWays) {
  const int r = rank(), n = size();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  const rmp::Comm& w = rmp::world();
  const std::size_t bytes = std::max<std::size_t>(knobs().eager_threshold + 1, (512u << 10) + 7);
  constexpr int kExchanges = 12;
  const int partner = r % 2 == 0 ? r + 1 : r - 1;
  const rmp::rt::Counters before = rmp::rt::counters();
  if (partner < n) {
    std::vector<std::byte> in(bytes);
    for (int i = 0; i < kExchanges; ++i) {
      const auto out =
          make_message<std::byte>(bytes, seed(r, partner, static_cast<std::uint64_t>(i), 0x6c));
      w.sendrecv(out.data(), bytes, partner, 40, in.data(), bytes, partner, 40);
      EXPECT_TRUE(matches(in.data(), bytes, seed(partner, r, static_cast<std::uint64_t>(i), 0x6c)))
          << "exchange " << i << " of " << bytes << " B from " << partner;
    }
  }
  const rmp::rt::Counters after = rmp::rt::counters();
  const std::uint64_t both_ways = after.shm_gets_both_ways - before.shm_gets_both_ways;
  const bool chooses = !std::getenv("RMP_SHM_COPY") || env_is("RMP_SHM_COPY", "auto");
  if (partner < n && chooses && proto_of(bytes) == Proto::rndv) {
    // (All of them unless the partner read this rank's message and its FIN came in before
    // this rank's receive matched: possible when a rank is descheduled at that moment.)
    EXPECT_GE(both_ways, static_cast<std::uint64_t>(kExchanges / 2))
        << "gets of an exchange read as traffic both ways, on rank " << r << " (single "
        << after.shm_gets_single - before.shm_gets_single << ", chunks "
        << after.shm_gets_chunks - before.shm_gets_chunks << ", split "
        << after.shm_gets_split - before.shm_gets_split << ")";
  } else if (!chooses) {
    EXPECT_EQ(both_ways, 0u) << "a forced mechanism";
  }
  w.barrier();
}

// Rendezvous buffers used again and again, their contents new each time: from a 2 MiB block's
// 16th use on the shm transport asks the kernel to put it on a huge page (RMP_SHM_HUGEPAGES,
// default 1; only with cross-memory attach; huge_pages.hpp), in place, while the peer may be
// reading other parts of it or writing into it. Ping-pongs, then windows of sends of one
// buffer each way at once (its pages pinned by the peer's reads for a window's length): every
// byte of every message arrives, and where the kernel collapses and nothing forbids it,
// blocks were collapsed on every rank with a partner (the ping-pongs' buffers, asked while
// nothing else reads them).
TEST(Rendezvous, ReusedLargeBuffers_OnHugePages_EveryByteArrives) {
  const int r = rank(), n = size();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  const rmp::Comm& w = rmp::world();
  const int partner = r % 2 == 0 ? r + 1 : r - 1;
  // Two whole 2 MiB blocks at least, wherever the allocation lands, and an odd length.
  const std::size_t bytes = (6u << 20) + 13;
  constexpr int kPingPongs = 20, kWindows = 3, kWindow = 4;
  const rmp::rt::Counters before = rmp::rt::counters();
  if (partner < n) {
    std::vector<std::byte> out(bytes), in(bytes);
    auto fill = [&](std::uint64_t k) {
      const auto m = make_message<std::byte>(bytes, seed(r, partner, k, 0x8d));
      std::copy(m.begin(), m.end(), out.begin());
    };
    for (int i = 0; i < kPingPongs; ++i) {
      fill(static_cast<std::uint64_t>(i));
      const bool first = r < partner;
      if (first) w.send(out.data(), bytes, partner, 60);
      w.recv(in.data(), bytes, partner, 60);
      if (!first) w.send(out.data(), bytes, partner, 60);
      EXPECT_TRUE(matches(in.data(), bytes, seed(partner, r, static_cast<std::uint64_t>(i), 0x8d)))
          << "ping-pong " << i << " of " << bytes << " B from " << partner;
    }
    // Windows: every send of a window reads the same buffer; the receives go to buffers of
    // their own (reused from window to window).
    std::vector<std::vector<std::byte>> ins(kWindow, std::vector<std::byte>(bytes));
    for (int k = 0; k < kWindows; ++k) {
      const auto key = static_cast<std::uint64_t>(100 + k);
      fill(key);
      std::vector<rmp::Request> reqs;
      for (int i = 0; i < kWindow; ++i)
        reqs.push_back(w.irecv(ins[static_cast<std::size_t>(i)].data(), bytes, partner, 61));
      for (int i = 0; i < kWindow; ++i) reqs.push_back(w.isend(out.data(), bytes, partner, 61));
      rmp::wait_all(reqs);
      for (int i = 0; i < kWindow; ++i)
        EXPECT_TRUE(
            matches(ins[static_cast<std::size_t>(i)].data(), bytes, seed(partner, r, key, 0x8d)))
            << "window " << k << ", message " << i << " of " << bytes << " B from " << partner;
    }
  }
  check_huge_blocks(
      before, partner < n && proto_of(bytes) == Proto::rndv,
      "2 MiB block of a buffer used " + std::to_string(kPingPongs + kWindows) + " times");
  w.barrier();
}

// A buffer that holds no whole 2 MiB block but three quarters of two (3 MiB from 0.5 MiB
// past a block's start): those blocks go onto huge pages too (huge_pages.hpp, blocks_used),
// and the memory around the buffer in them keeps its contents, bytes written and pages never
// touched (zeros) alike. Ping-pongs both ways, every byte checked. The test before spends some
// of the time budget for asking (huge_pages.hpp); a turn put off for it asks once the budget
// has time again (it refills at 5 % of the time that passes), within the ping-pongs unless
// the asks before took more than ~5 % of the ping-pongs' time (check_huge_blocks).
TEST(Rendezvous, BuffersHoldingHalfBlocks_OnHugePages_MemoryAroundKeepsItsContents) {
  const int r = rank(), n = size();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  const rmp::Comm& w = rmp::world();
  const int partner = r % 2 == 0 ? r + 1 : r - 1;
  constexpr std::size_t kBlock = 2u << 20, kEighth = kBlock / 8;
  const std::size_t bytes = 3 * kBlock / 2;
  constexpr int kPingPongs = 40;
  const rmp::rt::Counters before = rmp::rt::counters();
  if (partner < n) {
    // One mapping: blocks [0, 2) for the send buffer, [2, 4) for the receive buffer, each
    // buffer a quarter block into its first block, and slack for the alignment.
    const std::size_t len = 6 * kBlock;
    void* m = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(m, MAP_FAILED);
    auto* base = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(m) + kBlock - 1) &
                                              ~std::uintptr_t{kBlock - 1});
    std::byte* out = base + 2 * kEighth;
    std::byte* in = base + 2 * kBlock + 2 * kEighth;
    // Around each buffer, in its two blocks: the first eighth never touched, the second
    // written; the last quarter (after the buffer) written.
    const auto around = make_message<std::byte>(4 * kBlock, seed(r, r, 0, 0x51));
    auto written = [&](std::byte* pair, std::size_t from, std::size_t to) {
      const auto at = static_cast<std::ptrdiff_t>(pair - base);
      return std::span(around).subspan(static_cast<std::size_t>(at) + from, to - from);
    };
    const std::size_t after = 2 * kBlock - 2 * kEighth;
    for (std::byte* pair : {base, base + 2 * kBlock}) {
      std::ranges::copy(written(pair, kEighth, 2 * kEighth), pair + kEighth);
      std::ranges::copy(written(pair, after, 2 * kBlock), pair + after);
    }
    for (int i = 0; i < kPingPongs; ++i) {
      const auto k = static_cast<std::uint64_t>(i);
      const auto msg = make_message<std::byte>(bytes, seed(r, partner, k, 0x52));
      std::ranges::copy(msg, out);
      const bool first = r < partner;
      if (first) w.send(out, bytes, partner, 62);
      w.recv(in, bytes, partner, 62);
      if (!first) w.send(out, bytes, partner, 62);
      EXPECT_TRUE(matches(in, bytes, seed(partner, r, k, 0x52)))
          << "ping-pong " << i << " of " << bytes << " B from " << partner;
    }
    for (std::byte* pair : {base, base + 2 * kBlock}) {
      const auto at = pair - base;
      EXPECT_TRUE(std::all_of(pair, pair + kEighth, [](std::byte b) { return b == std::byte{}; }))
          << "untouched memory before a buffer, " << at << " B into the mapping";
      EXPECT_TRUE(std::ranges::equal(written(pair, kEighth, 2 * kEighth),
                                     std::span(pair + kEighth, kEighth)))
          << "memory written before a buffer, " << at << " B into the mapping";
      EXPECT_TRUE(std::ranges::equal(written(pair, after, 2 * kBlock),
                                     std::span(pair + after, 2 * kBlock - after)))
          << "memory written after a buffer, " << at << " B into the mapping";
    }
    ::munmap(m, len);
  }
  check_huge_blocks(
      before, partner < n && proto_of(bytes) == Proto::rndv,
      "block three quarters inside a buffer used " + std::to_string(kPingPongs) + " times");
  w.barrier();
}

// Eager payloads of at least 8 KiB go into the byte ring with cached or streaming stores, as
// measured (RMP_SHM_COPY=auto: both are tried in the warm-up of every size class), or as a
// variant forces (streaming: every one; chunks, single, split: none). Ping-pong and windows
// each way, every byte checked; the sizes straddle the 8 KiB edge and reach eager_threshold.
TEST(Eager, StoreModes_EveryByteArrives) {
  const int r = rank(), n = size();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  const rmp::Comm& w = rmp::world();
  std::vector<std::size_t> sizes;
  for (std::size_t s : {std::size_t{8191}, std::size_t{8192}, std::size_t{8193}, std::size_t{12001},
                        knobs().eager_threshold})
    if (proto_of(s) == Proto::eager) sizes.push_back(s);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  if (sizes.empty())
    GTEST_SKIP() << "no eager size of 8 KiB or more under " << knobs().table << " (eager_threshold "
                 << knobs().eager_threshold << ")";
  constexpr int kPingPongs = 24, kWindows = 3;
  const int partner = r % 2 == 0 ? r + 1 : r - 1;
  const rmp::rt::Counters before = rmp::rt::counters();
  std::uint64_t pickable = 0;  // sends of 8 KiB or more by this rank (EagerStores::kMinBytes)
  if (partner < n) {
    for (std::size_t si = 0; si < sizes.size(); ++si) {
      const std::size_t bytes = sizes[si];
      const std::uint64_t big = bytes >= 8192 ? 1 : 0;
      // Windows of up to 32 messages, at most 4 MiB each way (eager_threshold may be 1 MiB).
      const int kWindow = static_cast<int>(std::clamp<std::size_t>((4u << 20) / bytes, 4, 32));
      std::vector<std::byte> in(bytes);
      for (int i = 0; i < kPingPongs; ++i) {
        const auto key = seed(std::min(r, partner), std::max(r, partner), si * 1000 + i, 0xea);
        const auto out = make_message<std::byte>(bytes, key);
        if (r % 2 == 0) {
          w.send(out.data(), bytes, partner, 950);
          w.recv(in.data(), bytes, partner, 951);
        } else {
          w.recv(in.data(), bytes, partner, 950);
          w.send(out.data(), bytes, partner, 951);
        }
        pickable += big;
        EXPECT_TRUE(matches(in.data(), bytes, key)) << "ping-pong " << i << " of " << bytes << " B";
      }
      for (int round = 0; round < kWindows; ++round) {
        // Both ranks stream a window to each other at once.
        std::vector<std::vector<std::byte>> outs, ins;
        std::vector<rmp::Request> reqs;
        for (int i = 0; i < kWindow; ++i) {
          ins.emplace_back(bytes);
          reqs.push_back(w.irecv(ins.back().data(), bytes, partner, 952));
        }
        for (int i = 0; i < kWindow; ++i) {
          outs.push_back(
              make_message<std::byte>(bytes, seed(r, partner, si * 1000 + round * 100 + i, 0xeb)));
          reqs.push_back(w.isend(outs.back().data(), bytes, partner, 952));
          pickable += big;
        }
        rmp::wait_all(reqs);
        for (int i = 0; i < kWindow; ++i)
          EXPECT_TRUE(matches(ins[static_cast<std::size_t>(i)].data(), bytes,
                              seed(partner, r, si * 1000 + round * 100 + i, 0xeb)))
              << "window " << round << ", message " << i << " of " << bytes << " B";
      }
    }
  }
  const rmp::rt::Counters after = rmp::rt::counters();
  const std::uint64_t streamed = after.shm_eager_streamed - before.shm_eager_streamed;
  const std::uint64_t timed = after.shm_eager_timed - before.shm_eager_timed;
  const std::uint64_t diverted = (after.credit_stalls - before.credit_stalls) +
                                 (after.tune_rndv_below - before.tune_rndv_below);
  const std::string ctx =
      "rank " + std::to_string(r) + ": shm_eager_streamed=" + std::to_string(streamed) +
      " shm_eager_timed=" + std::to_string(timed) + " of " + std::to_string(pickable) +
      " sends of 8 KiB or more, " + std::to_string(diverted) + " sent by rendezvous instead";
  EXPECT_LE(streamed, pickable) << ctx;
  EXPECT_LE(timed, pickable) << ctx;
  if (env_is("RMP_SHM_COPY", "streaming")) {
    EXPECT_GE(streamed + diverted, pickable) << ctx;
    EXPECT_EQ(timed, 0u) << "a forced store mode is not measured; " << ctx;
  } else if (env_is("RMP_SHM_COPY", "chunks") || env_is("RMP_SHM_COPY", "single") ||
             env_is("RMP_SHM_COPY", "split")) {
    EXPECT_EQ(streamed, 0u) << ctx;
    EXPECT_EQ(timed, 0u) << "a forced store mode is not measured; " << ctx;
  } else if (diverted == 0) {
    // At least one payload in 32 of each size class is timed, whatever the chooser's state.
    EXPECT_GE(timed, pickable / 64) << ctx;
  }
  w.barrier();
}

// ---- Self ------------------------------------------------------------------------------------

// Every protocol size to one's own rank with the receive posted first; counted as msgs_self.
TEST(Self, AllProtocolSizes_IrecvThenSend) {
  const int r = rank();
  const rmp::Comm& w = rmp::world();
  const rmp::rt::Counters before = rmp::rt::counters();
  std::uint64_t sends = 0, sent = 0;
  for (std::size_t bytes : edge_sizes(std::size_t{16} << 20)) {
    exchange_and_check<std::byte>(bytes, sends % 2 ? 3 : 0, r, r, 700 + static_cast<int>(sends),
                                  sends, 0x99);
    ++sends;
    sent += bytes;
  }
  for (std::size_t bytes : edge_sizes(1000003)) {
    exchange_and_check<int>((bytes + 3) / 4, 0, r, r, 700 + static_cast<int>(sends), sends, 0x9a);
    ++sends;
    sent += (bytes + 3) / 4 * sizeof(int);
  }
  (void)w;
  EXPECT_EQ(rmp::rt::counters().msgs_self - before.msgs_self, sends) << "msgs_self counter";
  EXPECT_EQ(rmp::rt::counters().bytes_self - before.bytes_self, sent) << "bytes_self counter";
}

// Every protocol size to one's own rank with the send started first (isend, then recv).
TEST(Self, AllProtocolSizes_IsendThenRecv) {
  const int r = rank();
  const rmp::Comm& w = rmp::world();
  std::uint64_t msgno = 0;
  for (std::size_t bytes : edge_sizes(std::size_t{16} << 20)) {
    const auto msg = make_message<std::byte>(bytes, seed(r, r, msgno, 0xab));
    rmp::Request s = w.isend(msg.data(), bytes, r, 800);
    std::vector<std::byte> buf(bytes + 4, sentinel<std::byte>());
    const rmp::Status st = w.recv(buf.data(), bytes, r, 800);
    s.wait();
    EXPECT_EQ(st.source, r);
    EXPECT_EQ(st.tag, 800);
    EXPECT_EQ(st.bytes, bytes);
    EXPECT_TRUE(matches(buf.data(), bytes, seed(r, r, msgno, 0xab))) << bytes << " B to self";
    EXPECT_TRUE(untouched(buf.data() + bytes, 4)) << bytes << " B to self";
    ++msgno;
  }
}

// A blocking send to one's own rank that cannot be buffered, with no receive posted, would
// wait forever (no other call can post the receive meanwhile): it throws, naming the call,
// the size and the way out, and leaves nothing behind. Buffered ones (eager within the credit)
// still complete without a receive. Then the same with the receive posted: it completes.
TEST(Self, BlockingSendThatCouldNeverComplete_InvalidArgument) {
  const int r = rank();
  const rmp::Comm& w = rmp::world();
  const std::size_t buffered = std::max(knobs().inline_threshold, knobs().eager_threshold);
  const std::size_t big = buffered + 1;  // rendezvous in every variant
  std::vector<char> msg(big, 'x'), buf(big);
  expect_error([&] { w.send(msg.data(), big, r, 820); }, rmp::Errc::invalid_argument,
               {"send", "to this rank itself", std::to_string(big) + " bytes", "would wait forever",
                "irecv"},
               "blocking rendezvous send to self");
  expect_error([&] { w.ssend(msg.data(), 1, r, 821); }, rmp::Errc::invalid_argument,
               {"ssend", "synchronous", "would wait forever"}, "ssend to self");
  // Nothing was sent: a probe finds no message.
  EXPECT_FALSE(w.iprobe(r, rmp::any_tag).has_value());
  // Posted first, both complete.
  rmp::Request rq = w.irecv(buf.data(), big, r, 820);
  w.send(msg.data(), big, r, 820);
  EXPECT_EQ(rq.wait().bytes, big);
  rq = w.irecv(buf.data(), 1, rmp::any_source, rmp::any_tag);
  w.ssend(msg.data(), 1, r, 821);
  EXPECT_EQ(rq.wait().tag, 821);
  // A buffered one needs no receive (when eager sends exist in this variant).
  if (buffered > 0) {
    w.send(msg.data(), 1, r, 822);
    EXPECT_EQ(w.recv(buf.data(), 1, r, 822).bytes, 1u);
  }
}

// Blocking sends to one's own rank are buffered until the eager credit runs out (then the
// next one is refused, as above); once every one of them was received, the credit is back
// and as many are buffered again (the receives' credit was owed to this rank itself, and a
// send refused it while it had not come back through progress).
TEST(Self, CreditSpentThenEveryMessageReceived_BufferedAgain) {
  const int r = rank();
  const rmp::Comm& w = rmp::world();
  // The largest message that is buffered: the credit runs out after some rq_depth of them.
  const std::size_t bytes = std::max(knobs().inline_threshold, knobs().eager_threshold);
  if (bytes == 0) GTEST_SKIP() << "no eager sends in this variant: nothing is buffered";
  std::vector<char> msg(bytes, 's'), buf(bytes);
  constexpr int kMost = 1 << 16;
  auto fill = [&](int tag) {
    for (int k = 0; k < kMost; ++k) {
      try {
        w.send(msg.data(), bytes, r, tag);
      } catch (const rmp::Error& e) {
        EXPECT_EQ(e.code(), rmp::Errc::invalid_argument) << e.what();
        return k;
      }
    }
    ADD_FAILURE() << "the credit never ran out in " << kMost << " sends of " << bytes << " B";
    return kMost;
  };
  const int first = fill(830);
  ASSERT_GT(first, 0);
  for (int i = 0; i < first; ++i) w.recv(buf.data(), bytes, r, 830);
  EXPECT_EQ(fill(831), first);
  for (int i = 0; i < first; ++i) w.recv(buf.data(), bytes, r, 831);
  EXPECT_FALSE(w.iprobe(r, rmp::any_tag).has_value());
}

// sendrecv with one's own rank as both destination and source, at every protocol size.
TEST(Self, SendrecvWithSelf_AllProtocolSizes) {
  const int r = rank();
  const rmp::Comm& w = rmp::world();
  std::uint64_t msgno = 0;
  for (std::size_t bytes : edge_sizes(4u << 20)) {
    const std::size_t count = (bytes + 7) / 8;
    const auto msg = make_message<double>(count, seed(r, r, msgno, 0xac));
    std::vector<double> buf(count);
    const rmp::Status st = w.sendrecv(msg.data(), count, r, 810, buf.data(), count, r, 810);
    EXPECT_EQ(st.source, r);
    EXPECT_EQ(st.tag, 810);
    EXPECT_EQ(st.bytes, count * 8);
    EXPECT_TRUE(matches(buf.data(), count, seed(r, r, msgno, 0xac))) << count * 8 << " B";
    ++msgno;
  }
}

}  // namespace
