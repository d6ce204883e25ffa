// Flow control under unexpected floods, rendezvous in both directions at once, and every
// rank talking to every other.
#include "harness.hpp"
#include "runtime/stats.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

using namespace itest;

constexpr std::size_t kFlood = 20000;

// An eager-copy size where that class exists, else inline, else (all thresholds 0) 64 B.
std::size_t flood_size() {
  const Knobs& k = knobs();
  if (k.eager_threshold > k.inline_threshold)
    return std::min(k.inline_threshold + 20, k.eager_threshold);
  if (k.inline_threshold >= 1) return std::min<std::size_t>(k.inline_threshold, 64);
  return 64;
}

// Runs one flood from rank 0 to rank 1: `count` messages of `s` bytes (tag 1), all issued
// before rank 1 posts any receive for them, then a last message with tag 2 that rank 1 takes
// first; `sync_last` sends that one with ssend (it cannot complete before rank 1 is there).
// Rank 1 then drains tag 1 and checks every message in order. Both ranks check the counters.
void flood(std::size_t count, std::size_t s, bool sync_last, std::uint64_t salt) {
  const rmp::Comm& w = rmp::world();
  const int r = rank();
  const Knobs& k = knobs();
  rmp::rt::Counters& c = rmp::rt::counters();
  const std::string what = std::to_string(count) + " unexpected " + proto_name(proto_of(s)) +
                           " messages of " + std::to_string(s) + " B (" + k.table + ")";
  if (r == 0) {
    const rmp::rt::Counters before = c;
    std::vector<std::byte> msgs(count * s);
    for (std::size_t j = 0; j < count; ++j) fill(msgs.data() + j * s, s, seed(0, 1, j, salt));
    std::vector<rmp::Request> reqs;
    reqs.reserve(count + 1);
    for (std::size_t j = 0; j < count; ++j) reqs.push_back(w.isend(msgs.data() + j * s, s, 1, 1));
    const std::uint64_t last = count;
    if (sync_last) w.ssend(&last, 1, 1, 2);
    else reqs.push_back(w.isend(&last, 1, 1, 2));
    rmp::wait_all(reqs);
    const std::uint64_t stalls = c.credit_stalls - before.credit_stalls;
    const std::uint64_t below = c.tune_rndv_below - before.tune_rndv_below;
    std::printf(
        "[rank 0] flood of %s: credit_stalls %llu, ring_full %llu, inline/eager/rndv "
        "sends %llu/%llu/%llu, rendezvous by the tuner's choice %llu\n",
        what.c_str(), (unsigned long long)stalls,
        (unsigned long long)(c.ring_full - before.ring_full),
        (unsigned long long)(c.msgs_inline - before.msgs_inline),
        (unsigned long long)(c.msgs_eager - before.msgs_eager),
        (unsigned long long)(c.msgs_rndv - before.msgs_rndv), (unsigned long long)below);
    // Eager credits are bytes: rq_depth slots of the largest eager message per peer (at least
    // the transport's eager buffer), each message charged at least its size. A flood whose payload
    // alone exceeds that must stall, leaving out what the adaptive tuner chose to send by
    // rendezvous (RMP_TUNE=adaptive: with eager_threshold at 112 KB it sent a flood of such
    // messages by rendezvous, all 596).
    const std::size_t budget = eager_credit_bytes();
    if (proto_of(s) != Proto::rndv && k.rq_depth > 0 && (count - below) * s > budget) {
      EXPECT_GT(stalls, 0u) << what << ": " << count * s << " payload bytes exceed the credit of "
                            << budget << " bytes (rq_depth=" << k.rq_depth
                            << " x largest eager message, at least the eager buffer), yet no "
                               "credit stall was counted";
    }
  } else if (r == 1) {
    c.unexpected_eager_bytes_peak = c.unexpected_eager_bytes;  // measure this flood only
    const rmp::rt::Counters before = c;
    std::uint64_t last = 0;
    const rmp::Status ls = w.recv(&last, 1, 0, 2);
    EXPECT_EQ(last, count);
    EXPECT_EQ(ls.tag, 2);
    std::vector<std::byte> buf(s + 8);
    std::size_t bad = 0;
    for (std::size_t j = 0; j < count; ++j) {
      const rmp::Status st = w.recv(buf.data(), s + 8, 0, 1);
      const bool ok = st.bytes == s && first_mismatch(buf.data(), s, seed(0, 1, j, salt)) == s;
      if (!ok && bad++ < 5)
        ADD_FAILURE() << what << ": message #" << j << " arrived as " << st.bytes << " B, payload "
                      << (matches(buf.data(), std::min(s, st.bytes), seed(0, 1, j, salt))
                              ? "intact"
                              : "not message #" + std::to_string(j));
    }
    EXPECT_EQ(bad, 0u) << what << ": messages out of order or corrupt";
    EXPECT_FALSE(w.iprobe(0, rmp::any_tag).has_value()) << what << ": extra messages";
    const std::uint64_t peak = c.unexpected_eager_bytes_peak;
    std::printf(
        "[rank 1] flood of %s: unexpected_msgs %llu, unexpected_peak %llu, "
        "unexpected_eager_bytes_peak %llu (bound: the eager credit, max(rq_depth x largest eager "
        "message, the eager buffer) = %llu)\n",
        what.c_str(), (unsigned long long)(c.unexpected_msgs - before.unexpected_msgs),
        (unsigned long long)c.unexpected_peak, (unsigned long long)peak,
        (unsigned long long)eager_credit_bytes());
    EXPECT_GT(k.rq_depth, 0u) << "rq_depth not readable from effective_params(\"shm\")";
    EXPECT_LE(peak, eager_credit_bytes())
        << what << ": unexpected eager payload exceeded the eager credit";
  }
}

// 20 000 small messages issued by rank 0 before rank 1 posts anything (rank 1 waits for a
// later ssend first): all arrive in order and intact; the eager payload buffered at rank 1
// stays within the eager credit (rq_depth × the largest eager message) and the sender counts
// credit stalls.
TEST(Flood, Unexpected20000Small_BoundedMemoryAndCreditStalls) {
  if (size() < 2) GTEST_SKIP() << "needs 2 ranks";
  flood(kFlood, flood_size(), /*sync_last=*/true, 0x10);
}

// Same flood at the smallest (inline) size with the receiver waiting for the last message
// (another tag, isend) before draining the rest: no deadlock, order kept.
TEST(Flood, ReceiverWaitsForLastMessageFirst_NoDeadlock) {
  if (size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const Knobs& k = knobs();
  const std::size_t s =
      k.inline_threshold >= 1 ? std::min<std::size_t>(16, k.inline_threshold) : 16;
  flood(kFlood, s, /*sync_last=*/false, 0x11);
}

// A flood of messages at the eager threshold itself (as many as fit in 64 MiB, at least
// rq_depth + 16): the buffered eager payload still stays within the eager credit.
TEST(Flood, UnexpectedEagerThresholdSized_BoundedMemory) {
  if (size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const Knobs& k = knobs();
  if (k.eager_threshold <= k.inline_threshold) GTEST_SKIP() << "no eager-copy sizes";
  const std::size_t s = k.eager_threshold;
  const std::size_t count =
      std::clamp<std::size_t>((std::size_t{64} << 20) / s, k.rq_depth + 16, kFlood);
  flood(count, s, /*sync_last=*/true, 0x12);
}

// ---- Rendezvous in both directions -----------------------------------------------------------

std::vector<std::size_t> large_sizes() {
  const Knobs& k = knobs();
  std::vector<std::size_t> v = {k.eager_threshold + 1, rndv_size(), (std::size_t{4} << 20) + 3};
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// isend large messages to `dst`, then blocking recv of the same sizes from `src`.
void isend_then_recv(int dst, int src, int tag0, std::uint64_t salt) {
  const rmp::Comm& w = rmp::world();
  const int r = rank();
  const auto sizes = large_sizes();
  std::vector<std::vector<std::byte>> msgs;
  std::vector<rmp::Request> reqs;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    msgs.push_back(make_message<std::byte>(sizes[i], seed(r, dst, i, salt)));
    reqs.push_back(w.isend(msgs.back().data(), sizes[i], dst, tag0 + int(i)));
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    std::vector<std::byte> buf(sizes[i]);
    const rmp::Status st = w.recv(buf.data(), sizes[i], src, tag0 + int(i));
    EXPECT_EQ(st.bytes, sizes[i]);
    EXPECT_TRUE(matches(buf.data(), sizes[i], seed(src, r, i, salt)))
        << sizes[i] << " B from " << who(src);
  }
  rmp::wait_all(reqs);
}

// Both ends of a pair isend rendezvous messages to each other at once, then receive; then
// the same around a ring (everyone sends right, receives from the left).
TEST(Rendezvous, BidirectionalSimultaneousIsendThenRecv_PairAndRing) {
  const int r = rank(), n = size();
  isend_then_recv(pair_partner(), pair_partner(), 1500, 0x20);
  isend_then_recv((r + 1) % n, (r - 1 + n) % n, 1510, 0x21);
}

// sendrecv with rendezvous sizes, with a partner (both directions at once) and around a ring.
TEST(Rendezvous, SendrecvLarge_PairAndRing) {
  const rmp::Comm& w = rmp::world();
  const int r = rank(), n = size();
  const int p = pair_partner();
  const int right = (r + 1) % n, left = (r - 1 + n) % n;
  std::uint64_t i = 0;
  for (std::size_t s : {knobs().eager_threshold + 1, (std::size_t{3} << 20) + 1}) {
    for (int ring = 0; ring < 2; ++ring, ++i) {
      const int dst = ring ? right : p, src = ring ? left : p;
      const auto msg = make_message<std::byte>(s, seed(r, dst, i, 0x22));
      std::vector<std::byte> buf(s);
      const rmp::Status st = w.sendrecv(msg.data(), s, dst, 1520, buf.data(), s, src, 1520);
      EXPECT_EQ(st.source, src);
      EXPECT_EQ(st.bytes, s);
      EXPECT_TRUE(matches(buf.data(), s, seed(src, r, i, 0x22)))
          << s << " B " << (ring ? "ring" : "pair") << " from " << who(src);
    }
  }
}

// 32 rendezvous sends and 32 receives outstanding in each direction of a pair, receives
// posted in reverse tag order, all completed with one wait_all.
TEST(Rendezvous, ManyOutstandingBothDirections) {
  const rmp::Comm& w = rmp::world();
  const int r = rank(), p = pair_partner();
  constexpr int K = 32;
  const Knobs& k = knobs();
  auto size_of = [&](int i) { return k.eager_threshold + 1 + 4099 * static_cast<std::size_t>(i); };
  std::vector<std::vector<std::byte>> out(K), in(K);
  std::vector<rmp::Request> reqs;
  for (int i = 0; i < K; ++i) {
    out[i] = make_message<std::byte>(size_of(i), seed(r, p, i, 0x23));
    reqs.push_back(w.isend(out[i].data(), out[i].size(), p, 1600 + i));
    const int j = K - 1 - i;
    in[j].resize(size_of(j));
    reqs.push_back(w.irecv(in[j].data(), in[j].size(), p, 1600 + j));
  }
  rmp::wait_all(reqs);
  for (int i = 0; i < K; ++i)
    EXPECT_TRUE(matches(in[i].data(), in[i].size(), seed(p, r, i, 0x23)))
        << "message " << i << " (" << in[i].size() << " B) from " << who(p);
}

// ---- Every rank with every other ---------------------------------------------------------

// Each rank exchanges messages around every threshold with every rank (itself included),
// all receives and sends outstanding at once.
TEST(ManyRanks, AllToAll_ThresholdSizes_EveryPair) {
  const rmp::Comm& w = rmp::world();
  const int r = rank(), n = size();
  const Knobs& k = knobs();
  std::vector<std::size_t> sizes = {0, k.inline_threshold + 1, k.eager_threshold + 1,
                                    rndv_size((std::size_t{2} << 20) + 1)};
  if (k.inline_threshold >= 1) sizes.push_back(k.inline_threshold);
  if (k.eager_threshold >= 1) sizes.push_back(k.eager_threshold);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  std::vector<std::vector<std::byte>> out, in;
  out.reserve(n * sizes.size());
  in.reserve(n * sizes.size());
  std::vector<rmp::Request> reqs;
  for (int q = 0; q < n; ++q)
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      in.emplace_back(sizes[i]);
      reqs.push_back(w.irecv(in.back().data(), sizes[i], q, 1700 + int(i)));
    }
  for (int d = 0; d < n; ++d) {
    const int q = (r + d) % n;  // stagger the destinations
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      out.push_back(make_message<std::byte>(sizes[i], seed(r, q, i, 0x24)));
      reqs.push_back(w.isend(out.back().data(), sizes[i], q, 1700 + int(i)));
    }
  }
  rmp::wait_all(reqs);
  for (int q = 0; q < n; ++q)
    for (std::size_t i = 0; i < sizes.size(); ++i)
      EXPECT_TRUE(matches(in[q * sizes.size() + i].data(), sizes[i], seed(q, r, i, 0x24)))
          << sizes[i] << " B from " << who(q);
}

}  // namespace
