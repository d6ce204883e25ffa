// Tuning-model behaviour across ranks (DESIGN §5): connect=eager|lazy, and the mixed-precision
// allreduce (Compression argument and RMP_ALLREDUCE_COMPRESS) — error bounds against the exact
// sum, bit-identical results on every rank, and the ops it refuses.
#include "harness.hpp"
#include "runtime/stats.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace itest;

// endpoints counted before the first test sends anything (set when RUN_ALL_TESTS starts).
std::uint64_t g_endpoints_at_start = ~std::uint64_t{0};

class RecordStartCounters : public ::testing::Environment {
public:
  void SetUp() override { g_endpoints_at_start = rmp::rt::counters().endpoints; }
};
[[maybe_unused]] ::testing::Environment* const kRecord =
    ::testing::AddGlobalTestEnvironment(new RecordStartCounters);

std::string param(const char* name) {
  for (const rmp::ParamInfo& p : rmp::effective_params("shm"))
    if (p.name == name) return p.value;
  return "";
}

// ---- connect ---------------------------------------------------------------------------------

TEST(Connect, EndpointsRightAfterInit_AllPeersWhenEagerNoneWhenLazy) {
  const bool eager = param("connect") == "eager";
  const std::uint64_t want = eager ? static_cast<std::uint64_t>(size() - 1) : 0;
  EXPECT_EQ(g_endpoints_at_start, want)
      << "connect=" << param("connect") << " at " << size() << " ranks";
}

// Every rank sends to every other one at each protocol size; all arrive intact, and then
// every peer is connected whatever the mode.
TEST(Connect, EveryPairExchanges_AtEveryProtocolSize) {
  const rmp::Comm& w = rmp::world();
  const int me = rank(), n = size();
  std::uint64_t salt = 0x7700;
  for (const ClassSize& cs : class_sizes()) {
    ++salt;
    std::vector<std::vector<std::byte>> in(static_cast<std::size_t>(n)), out(in.size());
    std::vector<rmp::Request> reqs;
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      in[p].assign(cs.bytes, std::byte{0});
      out[p] = make_message<std::byte>(cs.bytes, seed(me, p, 0, salt));
      reqs.push_back(w.irecv(in[p].data(), cs.bytes, p, 4));
    }
    for (int p = 0; p < n; ++p)
      if (p != me) reqs.push_back(w.isend(out[p].data(), cs.bytes, p, 4));
    rmp::wait_all(reqs);
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      EXPECT_TRUE(matches(in[p].data(), cs.bytes, seed(p, me, 0, salt)))
          << proto_name(cs.proto) << " message of " << cs.bytes << " B from rank " << p;
    }
  }
  EXPECT_EQ(rmp::rt::counters().endpoints, static_cast<std::uint64_t>(n - 1));
}

// ---- compressed allreduce ----------------------------------------------------------------------

// Input element i of rank r, in [−1, 1] and not a short binary fraction (so it rounds).
double input(int r, std::size_t i) {
  const std::uint64_t h = mix64(seed(r, 0, i, 0xC0FFEE));
  return static_cast<double>(h >> 11) * 0x1p-52 - 1.0;  // [−1, 1)
}

// Checks one compressed allreduce of `count` T: error against the exact sum (long double,
// from every rank's inputs, which each rank can compute), and the same bits on every rank.
template <class T>
void check_sum(rmp::Compression comp, std::size_t count, double unit_bound) {
  const int n = size();
  std::vector<T> in(count), out(count, T(-7));
  for (std::size_t i = 0; i < count; ++i) in[i] = static_cast<T>(input(rank(), i));
  rmp::world().allreduce(in.data(), out.data(), count, rmp::Op::sum, comp);
  const double bound = n * unit_bound;
  double worst = 0;
  std::size_t worst_at = 0;
  std::uint64_t hash = 0;
  for (std::size_t i = 0; i < count; ++i) {
    long double exact = 0;
    for (int r = 0; r < n; ++r) exact += static_cast<T>(input(r, i));
    const double err = std::fabs(static_cast<double>(out[i] - exact));
    if (!(err <= worst)) worst = err, worst_at = i;
    std::uint64_t bits = 0;
    std::memcpy(&bits, &out[i], sizeof(T));
    hash = mix64(hash ^ bits);
  }
  const char* what = comp == rmp::Compression::fp16 ? "fp16" : "bf16";
  EXPECT_LE(worst, bound) << what << " " << (sizeof(T) == 4 ? "float" : "double") << " x "
                          << count << ": error " << worst << " at element " << worst_at
                          << " exceeds " << n << " x 2^" << std::log2(unit_bound);
  // Bit-identical: the smallest and largest hash over the ranks agree.
  std::uint64_t lo = 0, hi = 0;
  rmp::world().allreduce(&hash, &lo, 1, rmp::Op::min);
  rmp::world().allreduce(&hash, &hi, 1, rmp::Op::max);
  EXPECT_EQ(lo, hi) << what << ": ranks ended with different bits";
}

constexpr double kFp16Unit = 0x1p-10, kBf16Unit = 0x1p-7;

TEST(CompressedAllreduce, SumWithinBound_BitIdentical_Fp16AndBf16_FloatAndDouble) {
  // count < ranks (empty blocks), an odd count, and one of several ring segments.
  for (std::size_t count : {std::size_t{3}, std::size_t{1001}, std::size_t{300007}}) {
    check_sum<float>(rmp::Compression::fp16, count, kFp16Unit);
    check_sum<double>(rmp::Compression::fp16, count, kFp16Unit);
    check_sum<float>(rmp::Compression::bf16, count, kBf16Unit);
    check_sum<double>(rmp::Compression::bf16, count, kBf16Unit);
  }
}

TEST(CompressedAllreduce, MinMax_OneRoundingOfTheExactExtreme) {
  constexpr std::size_t kCount = 5000;
  std::vector<float> in(kCount), lo(kCount), hi(kCount);
  for (std::size_t i = 0; i < kCount; ++i) in[i] = static_cast<float>(input(rank(), i));
  rmp::world().allreduce(in.data(), lo.data(), kCount, rmp::Op::min, rmp::Compression::bf16);
  rmp::world().allreduce(in.data(), hi.data(), kCount, rmp::Op::max, rmp::Compression::bf16);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < kCount; ++i) {
    float want_lo = 2, want_hi = -2;
    for (int r = 0; r < size(); ++r) {
      want_lo = std::min(want_lo, static_cast<float>(input(r, i)));
      want_hi = std::max(want_hi, static_cast<float>(input(r, i)));
    }
    // One rounding to 8 significant bits when more than one rank took part.
    const float tol = size() > 1 ? 0x1p-8f : 0.0f;
    bad += std::fabs(lo[i] - want_lo) > std::fabs(want_lo) * tol ||
           std::fabs(hi[i] - want_hi) > std::fabs(want_hi) * tol;
  }
  EXPECT_EQ(bad, 0u) << "elements whose min or max is more than one bf16 rounding off";
}

TEST(CompressedAllreduce, OtherOpsAndTypes_InvalidArgumentNamingThem) {
  const rmp::Comm& w = rmp::world();
  float f[2] = {1, 2}, g[2];
  int i[2] = {1, 2}, j[2];
  expect_error([&] { w.allreduce(f, g, 2, rmp::Op::prod, rmp::Compression::fp16); },
               rmp::Errc::invalid_argument, {"allreduce", "'compression'", "fp16", "prod"},
               "allreduce(prod, fp16)");
  expect_error([&] { w.allreduce(i, j, 2, rmp::Op::sum, rmp::Compression::bf16); },
               rmp::Errc::invalid_argument, {"allreduce", "'compression'", "bf16", "sum", "int32"},
               "allreduce(int, bf16)");
}

// RMP_ALLREDUCE_COMPRESS applies to allreduce called without a Compression argument; an
// explicit Compression::none still runs in full precision. Every rank contributes 1 + 2^-12,
// which no 16-bit format holds: compressed, the sum of n ≥ 2 ranks rounds to n.
TEST(CompressedAllreduce, EnvironmentKnob_AppliesToThePlainCall) {
  const std::string knob = param("allreduce_compress");
  const float one_plus = 1.0f + 0x1p-12f;
  float sum = 0, exact = 0;
  rmp::world().allreduce(&one_plus, &sum, 1, rmp::Op::sum);
  rmp::world().allreduce(&one_plus, &exact, 1, rmp::Op::sum, rmp::Compression::none);
  EXPECT_NE(exact, static_cast<float>(size())) << "full precision keeps the 2^-12 parts";
  if (knob != "none" && size() > 1)
    EXPECT_EQ(sum, static_cast<float>(size())) << "allreduce_compress=" << knob;
  else
    EXPECT_EQ(sum, exact) << "allreduce_compress=" << knob;
}

}  // namespace
