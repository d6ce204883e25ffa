// The mixed-precision allreduce (collectives/allreduce_compressed.cpp) and its 16-bit
// conversions (collectives/half.hpp). Conversions: every fp16 and bf16 value round-trips,
// floats round to the nearest 16-bit value with ties to even, and the vector path (F16C where
// the CPU has it) gives the scalar path's bits. Allreduce: 1–8 thread-ranks over the real shm
// transport, sizes with empty and uneven blocks and several ring segments; error against the
// exact sum within n × 2^-10 (fp16) and n × 2^-7 (bf16) for inputs in [−1, 1], min and max
// within one rounding, and the same bits on every rank.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <vector>

#include "collectives/collectives.hpp"
#include "collectives/half.hpp"
#include "collectives/reduce_ops.hpp"
#include "tests/unit/coll_env.hpp"
#include "tests/unit/thread_ranks.hpp"

namespace {

using rmp::Compression;
using rmp::Op;
using rmp::detail::Type;
using rmp::testing::ScopedEnv;
using rmp::testing::ThreadRank;
using rmp::testing::run_thread_ranks;
namespace coll = rmp::coll;

bool is_nan16(std::uint16_t h, Compression c) {
  return c == Compression::fp16 ? (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)
                                : (h & 0x7f80u) == 0x7f80u && (h & 0x7fu);
}
float to_float(Compression c, std::uint16_t h) {
  return c == Compression::fp16 ? coll::fp16_to_float(h) : coll::bf16_to_float(h);
}
std::uint16_t to_half(Compression c, float f) {
  return c == Compression::fp16 ? coll::float_to_fp16(f) : coll::float_to_bf16(f);
}

class Formats : public ::testing::TestWithParam<Compression> {};

TEST_P(Formats, EveryValue_RoundTrips) {
  const Compression c = GetParam();
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const auto v = static_cast<std::uint16_t>(h);
    if (is_nan16(v, c)) {
      EXPECT_TRUE(std::isnan(to_float(c, v)));
      continue;
    }
    ASSERT_EQ(to_half(c, to_float(c, v)), v) << std::hex << h;
  }
}

// Between two neighbouring 16-bit values a and a+1 (same sign, finite): below the midpoint
// rounds to a, above to a+1, the midpoint to the even one.
TEST_P(Formats, Floats_RoundToNearestTiesToEven) {
  const Compression c = GetParam();
  const std::uint16_t last = c == Compression::fp16 ? 0x7bffu : 0x7f7fu;  // largest finite
  for (std::uint16_t a = 0; a < last; a = static_cast<std::uint16_t>(a + 7)) {
    const double lo = to_float(c, a), hi = to_float(c, static_cast<std::uint16_t>(a + 1));
    const double mid = (lo + hi) / 2;
    const auto even = (a & 1u) ? static_cast<std::uint16_t>(a + 1) : a;
    const float below = std::nextafter(static_cast<float>(mid), -1.0f);
    const float above =
        std::nextafter(static_cast<float>(mid), std::numeric_limits<float>::infinity());
    if (static_cast<double>(static_cast<float>(mid)) == mid) {
      EXPECT_EQ(to_half(c, static_cast<float>(mid)), even) << "tie above " << std::hex << a;
      EXPECT_EQ(to_half(c, -static_cast<float>(mid)), even | 0x8000u);
    }
    EXPECT_EQ(to_half(c, below), a) << std::hex << a;
    EXPECT_EQ(to_half(c, above), static_cast<std::uint16_t>(a + 1)) << std::hex << a;
  }
}

TEST_P(Formats, OverflowInfinityNaN) {
  const Compression c = GetParam();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isinf(to_float(c, to_half(c, inf))));
  EXPECT_TRUE(std::isinf(to_float(c, to_half(c, -inf))));
  EXPECT_TRUE(std::isnan(to_float(c, to_half(c, std::numeric_limits<float>::quiet_NaN()))));
  if (c == Compression::fp16) {
    EXPECT_EQ(coll::float_to_fp16(65504.0f), 0x7bffu);
    EXPECT_EQ(coll::float_to_fp16(65519.0f), 0x7bffu);  // below the midpoint to 65536
    EXPECT_EQ(coll::float_to_fp16(65520.0f), 0x7c00u);  // the midpoint rounds to even: inf
    EXPECT_EQ(coll::float_to_fp16(0x1p-25f), 0x0000u);  // half the smallest subnormal: to 0
    EXPECT_EQ(coll::float_to_fp16(0x1.000002p-25f), 0x0001u);
  }
}

// The array conversions (vectorised where the CPU allows) agree with the scalar ones, for
// float and double inputs, including lengths that leave a remainder.
TEST_P(Formats, ArrayPath_SameBitsAsScalar) {
  const Compression c = GetParam();
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> uni(-70000.0f, 70000.0f);
  std::vector<float> f(1003);
  for (std::size_t i = 0; i < f.size(); ++i)
    f[i] = i % 3 == 0 ? uni(gen) : std::ldexp(uni(gen), -static_cast<int>(i % 40));
  f[0] = 0, f[1] = -0.0f, f[2] = std::numeric_limits<float>::infinity();
  std::vector<std::uint16_t> h(f.size());
  coll::encode_half(c, Type::f32, f.data(), h.data(), f.size());
  std::vector<float> back(f.size());
  coll::decode_half(c, Type::f32, h.data(), back.data(), h.size());
  std::vector<double> d(f.begin(), f.end()), dback(f.size());
  std::vector<std::uint16_t> hd(f.size());
  coll::encode_half(c, Type::f64, d.data(), hd.data(), d.size());
  coll::decode_half(c, Type::f64, hd.data(), dback.data(), hd.size());
  for (std::size_t i = 0; i < f.size(); ++i) {
    ASSERT_EQ(h[i], to_half(c, f[i])) << i << ": " << f[i];
    ASSERT_EQ(std::bit_cast<std::uint32_t>(back[i]), std::bit_cast<std::uint32_t>(to_float(c, h[i])));
    ASSERT_EQ(hd[i], h[i]) << i;  // a double holding a float converts the same
    ASSERT_EQ(dback[i], static_cast<double>(back[i]));
  }
}

// Encoding with streaming stores (into a node-shared chunk another core reads next) gives the
// same bits at every alignment of the output (a head of up to 7 values before the first
// 16-byte boundary) and every length around the vector width, and writes nothing outside
// [out, out + n), floats and doubles alike.
TEST_P(Formats, StreamingEncode_SameBitsAtEveryAlignment) {
  const Compression c = GetParam();
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> uni(-3.0f, 3.0f);
  constexpr std::uint16_t kGuard = 0xabcd;
  for (std::size_t shift = 0; shift < 8; ++shift) {
    for (std::size_t n : {0u, 1u, 6u, 7u, 8u, 9u, 15u, 16u, 17u, 100u, 1003u}) {
      std::vector<float> f(n);
      for (float& v : f) v = uni(gen);
      std::vector<double> d(f.begin(), f.end());
      alignas(16) std::uint16_t plain[1024 + 16], streamed[1024 + 16], from_d[1024 + 16];
      std::fill(std::begin(streamed), std::end(streamed), kGuard);
      std::fill(std::begin(from_d), std::end(from_d), kGuard);
      coll::encode_half(c, Type::f32, f.data(), plain, n);
      coll::encode_half(c, Type::f32, f.data(), streamed + shift, n, true);
      coll::encode_half(c, Type::f64, d.data(), from_d + shift, n, true);
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(streamed[shift + i], plain[i]) << "shift " << shift << ", n " << n << ", i " << i;
        ASSERT_EQ(from_d[shift + i], plain[i]) << "doubles, shift " << shift << ", n " << n;
      }
      for (std::size_t i = 0; i < std::size(streamed); ++i) {
        if (i >= shift && i < shift + n) continue;
        ASSERT_EQ(streamed[i], kGuard) << "wrote outside: shift " << shift << ", n " << n;
        ASSERT_EQ(from_d[i], kGuard) << "wrote outside (doubles): shift " << shift;
      }
    }
  }
}

// reduce_half (decode and combine in one pass, vectorised where the CPU allows) gives the bits
// of decode_half followed by reduce_apply, every length around the vector width.
TEST_P(Formats, ReduceHalf_SameBitsAsDecodeThenReduce) {
  const Compression c = GetParam();
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
  for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 15u, 16u, 17u, 1000u, 4099u}) {
    std::vector<float> src(n);
    for (float& f : src) f = uni(gen);
    std::vector<std::uint16_t> h(n);
    coll::encode_half(c, Type::f32, src.data(), h.data(), n);
    for (Op op : {Op::sum, Op::min, Op::max}) {
      std::vector<float> acc(n), want(n), dec(n);
      for (float& f : acc) f = uni(gen);
      want = acc;
      coll::decode_half(c, Type::f32, h.data(), dec.data(), n);
      coll::reduce_apply(op, Type::f32, dec.data(), want.data(), n);
      coll::reduce_half(c, Type::f32, op, h.data(), acc.data(), n);
      ASSERT_TRUE(n == 0 || std::memcmp(acc.data(), want.data(), n * sizeof(float)) == 0)
          << "float n=" << n;
      std::vector<double> dacc(acc.begin(), acc.end()), dwant(dacc), ddec(n);
      coll::decode_half(c, Type::f64, h.data(), ddec.data(), n);
      coll::reduce_apply(op, Type::f64, ddec.data(), dwant.data(), n);
      coll::reduce_half(c, Type::f64, op, h.data(), dacc.data(), n);
      ASSERT_TRUE(n == 0 || std::memcmp(dacc.data(), dwant.data(), n * sizeof(double)) == 0)
          << "double n=" << n;
    }
  }
}

// reduce_encode_half (one rank's share of the compressed allreduce in one pass) gives the
// bits of its steps one after the other — the input copied out, each other's values combined
// in order, the result encoded and decoded back — in the output and on the wire: floats and
// doubles, ops with a vector path and one without (prod), 1-3 others, every length around
// the vector width, every alignment of the wire, streaming stores or not, in place or not.
TEST_P(Formats, ReduceEncode_SameBitsAsItsSteps) {
  const Compression c = GetParam();
  std::mt19937 gen(13);
  std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
  auto check = [&](auto zero, Type t, Op op, std::size_t n, std::size_t others_n, std::size_t shift,
                   bool streaming, bool in_place) {
    using T = decltype(zero);
    std::vector<T> in(n);
    for (T& v : in) v = static_cast<T>(uni(gen));
    std::vector<std::vector<std::uint16_t>> wires(others_n, std::vector<std::uint16_t>(n));
    std::vector<const std::uint16_t*> others;
    for (auto& w : wires) {
      std::vector<float> f(n);
      for (float& v : f) v = uni(gen);
      coll::encode_half(c, Type::f32, f.data(), w.data(), n);
      others.push_back(w.data());
    }
    // The steps.
    std::vector<T> want(in);
    for (const std::uint16_t* o : others) coll::reduce_half(c, t, op, o, want.data(), n);
    std::vector<std::uint16_t> want_wire(n);
    coll::encode_half(c, t, want.data(), want_wire.data(), n);
    coll::decode_half(c, t, want_wire.data(), want.data(), n);
    // One pass.
    std::vector<T> out(in_place ? in : std::vector<T>(n));
    alignas(16) std::uint16_t wire[1100 + 8];
    coll::reduce_encode_half(c, t, op, in_place ? out.data() : in.data(), others, out.data(),
                             wire + shift, n, streaming);
    const std::string what = std::string(sizeof(T) == 4 ? "float" : "double") + " op " +
                             std::to_string(static_cast<int>(op)) + " n " + std::to_string(n) +
                             " others " + std::to_string(others_n) + " shift " +
                             std::to_string(shift) + (streaming ? " streaming" : "") +
                             (in_place ? " in place" : "");
    ASSERT_TRUE(n == 0 || std::memcmp(out.data(), want.data(), n * sizeof(T)) == 0) << what;
    ASSERT_TRUE(n == 0 || std::memcmp(wire + shift, want_wire.data(), n * 2) == 0) << what;
  };
  for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 17u, 1003u})
    for (Op op : {Op::sum, Op::min, Op::max, Op::prod})
      for (std::size_t others_n : {1u, 3u})
        for (std::size_t shift : {0u, 3u})
          for (bool streaming : {false, true})
            for (bool in_place : {false, true}) {
              check(float{}, Type::f32, op, n, others_n, shift, streaming, in_place);
              check(double{}, Type::f64, op, n, others_n, shift, streaming, in_place);
            }
}

INSTANTIATE_TEST_SUITE_P(Fp16AndBf16, Formats,
                         ::testing::Values(Compression::fp16, Compression::bf16),
                         [](const auto& info) {
                           return std::string(info.param == Compression::fp16 ? "fp16" : "bf16");
                         });

// ---- The allreduce ----------------------------------------------------------------------------

double input(int rank, std::size_t i) {
  std::uint64_t x = (static_cast<std::uint64_t>(rank) + 1) * 0x9E3779B97F4A7C15ULL + i * 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBULL;
  x ^= x >> 29;
  return static_cast<double>(x >> 11) * 0x1p-52 - 1.0;  // [−1, 1)
}

// Runs one compressed allreduce on n thread-ranks (in place when asked); returns every rank's
// result.
template <class T>
std::vector<std::vector<T>> run(int n, std::size_t count, Op op, Compression c,
                                bool in_place = false) {
  std::vector<std::vector<T>> out(static_cast<std::size_t>(n));
  run_thread_ranks(n, [&](ThreadRank& t) {
    const int r = t.world.rank();
    std::vector<T> in(count), res(count, T(-9));
    for (std::size_t i = 0; i < count; ++i) in[i] = static_cast<T>(input(r, i));
    if (in_place) res = in;
    coll::allreduce(t.world, in_place ? nullptr : in.data(), res.data(), count, sizeof(T),
                    sizeof(T) == 4 ? Type::f32 : Type::f64, op, c);
    out[static_cast<std::size_t>(r)] = std::move(res);
  });
  return out;
}

template <class T>
void check_sum(int n, std::size_t count, Compression c, bool in_place = false) {
  const auto results = run<T>(n, count, Op::sum, c, in_place);
  const double bound = n * (c == Compression::fp16 ? 0x1p-10 : 0x1p-7);
  double worst = 0;
  for (std::size_t i = 0; i < count; ++i) {
    long double exact = 0;
    for (int r = 0; r < n; ++r) exact += static_cast<T>(input(r, i));
    worst = std::max(worst, static_cast<double>(std::fabs(results[0][i] - exact)));
  }
  const char* what = c == Compression::fp16 ? "fp16" : "bf16";
  EXPECT_LE(worst, bound) << what << " " << n << " ranks, " << count << " elements";
  for (int r = 1; r < n && count > 0; ++r)  // count 0: empty vectors, nothing to compare
    EXPECT_EQ(std::memcmp(results[0].data(), results[static_cast<std::size_t>(r)].data(),
                          count * sizeof(T)),
              0)
        << what << ": rank " << r << " ended with other bits than rank 0 (" << n << " ranks)";
}

// Both algorithms: through the node-shared chunks (the default here: the thread-ranks share
// a node) and point to point (RMP_ALLREDUCE_ALGO forces a p2p algorithm, which rules the
// node-shared paths out).
TEST(CompressedAllreduceThreads, Sum_OneToEightRanks_WithinBound_BitIdentical) {
  // Small segments: several ring segments (and chunk rounds) per block without large buffers.
  ScopedEnv frag("RMP_FRAGMENT_SIZE", "4096");
  for (const char* algo : {"", "ring"}) {
    std::optional<ScopedEnv> forced;
    if (*algo) forced.emplace("RMP_ALLREDUCE_ALGO", algo);
    SCOPED_TRACE(*algo ? "point to point" : "node-shared");
    for (int n = 1; n <= 8; ++n)
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{20011}}) {
        check_sum<float>(n, count, Compression::fp16);
        check_sum<double>(n, count, Compression::bf16);
      }
    check_sum<double>(5, 20011, Compression::fp16);
    check_sum<float>(6, 20011, Compression::bf16);
    check_sum<float>(3, 20011, Compression::fp16, true);
    check_sum<double>(4, 7, Compression::bf16, true);
  }
}

TEST(CompressedAllreduceThreads, MinMax_ExactExtremeRoundedOnce) {
  for (const char* algo : {"", "ring"}) {
  std::optional<ScopedEnv> forced;
  if (*algo) forced.emplace("RMP_ALLREDUCE_ALGO", algo);
  for (int n : {2, 5}) {
    for (Op op : {Op::min, Op::max}) {
      const auto results = run<float>(n, 3001, op, Compression::fp16);
      for (std::size_t i = 0; i < 3001; ++i) {
        float want = static_cast<float>(input(0, i));
        for (int r = 1; r < n; ++r) {
          const float v = static_cast<float>(input(r, i));
          want = op == Op::min ? std::min(want, v) : std::max(want, v);
        }
        ASSERT_EQ(results[0][i], coll::fp16_to_float(coll::float_to_fp16(want)))
            << (op == Op::min ? "min" : "max") << " element " << i << ", " << n << " ranks";
      }
    }
  }
  }
}

}  // namespace
