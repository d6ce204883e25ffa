// fp16 / bf16 conversions of half.hpp.
#include "collectives/half.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include "collectives/reduce_ops.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define RMP_HAVE_F16C_PATH 1
#endif

namespace rmp::coll {

std::uint16_t float_to_fp16(float f) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t x = bits & 0x7fffffffu;
  if (x >= 0x7f800000u)  // Inf, or NaN kept quiet with the top of its payload (as F16C does)
    return static_cast<std::uint16_t>(sign | 0x7c00u |
                                      (x > 0x7f800000u ? 0x200u | ((x >> 13) & 0x3ffu) : 0u));
  if (x >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // ≥ 65520: Inf
  if (x < 0x38800000u) {  // below 2^-14: a subnormal fp16 (units of 2^-24) or zero
    if (x <= 0x33000000u) return sign;  // ≤ 2^-25 rounds to (even) zero
    const std::uint32_t m = (x & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - (x >> 23);  // 14 … 24
    std::uint32_t r = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t r = (x - 0x38000000u) >> 13;  // rebias the exponent (127 → 15), drop 13 bits
  const std::uint32_t rem = x & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;  // a carry moves into the exponent
  return static_cast<std::uint16_t>(sign | r);
}

float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {  // zero or subnormal: m × 2^-24, exact in a float
    const float v = static_cast<float>(m) * 0x1p-24f;
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(v) | sign);
  }
  if (e == 31) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
  return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
}

std::uint16_t float_to_bf16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float bf16_to_float(std::uint16_t h) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

namespace {

#ifdef RMP_HAVE_F16C_PATH
bool have_f16c() {
  static const bool yes = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return yes;
}

// Eight encoded values to out + i: a non-temporal store when `streaming` (out + i is then
// 16-byte aligned: the callers' loops start there).
__attribute__((target("avx"), always_inline)) inline void store_half8(std::uint16_t* out, __m128i v,
                                                                      bool streaming) {
  if (streaming) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(out), v);
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), v);
  }
}

// Elements before out + i is 16-byte aligned (streaming only): they take the scalar path.
std::size_t unaligned_head(const std::uint16_t* out, std::size_t n, bool streaming) {
  if (!streaming) return 0;
  const auto mis = reinterpret_cast<std::uintptr_t>(out) % 16;  // even: out holds uint16_t
  return std::min(n, mis == 0 ? 0 : (16 - mis) / 2);
}

__attribute__((target("avx,f16c"))) void fp16_encode_f16c(const float* in, std::uint16_t* out,
                                                          std::size_t n, bool streaming) {
  std::size_t i = unaligned_head(out, n, streaming);
  for (std::size_t j = 0; j < i; ++j) out[j] = float_to_fp16(in[j]);
  for (; i + 8 <= n; i += 8)
    store_half8(out + i, _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT),
                streaming);
  for (; i < n; ++i) out[i] = float_to_fp16(in[i]);
  if (streaming) _mm_sfence();
}

bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return yes;
}

// bf16 with AVX2: the scalar rounding (float_to_bf16) eight lanes at a time; NaNs quieted.
__attribute__((target("avx2"), always_inline)) inline __m128i bf16_round8(__m256 f) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  const __m256i x = _mm256_castps_si256(f);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(bias, odd)), 16);
  const __m256i quieted = _mm256_or_si256(_mm256_srli_epi32(x, 16), quiet);
  const __m256i v = _mm256_blendv_epi8(rounded, quieted, nan);
  // Pack 8 × 32 to 8 × 16 bits (per 128-bit lane), then gather the two lanes' halves.
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0b1000));
}

__attribute__((target("avx2"))) void bf16_encode_avx2(const float* in, std::uint16_t* out,
                                                      std::size_t n, bool streaming) {
  std::size_t i = unaligned_head(out, n, streaming);
  for (std::size_t j = 0; j < i; ++j) out[j] = float_to_bf16(in[j]);
  for (; i + 8 <= n; i += 8) store_half8(out + i, bf16_round8(_mm256_loadu_ps(in + i)), streaming);
  for (; i < n; ++i) out[i] = float_to_bf16(in[i]);
  if (streaming) _mm_sfence();
}

// Eight 16-bit values as floats, and back.
__attribute__((target("avx2,f16c"), always_inline)) inline __m256 decode8(Compression c,
                                                                          __m128i h) {
  if (c == Compression::fp16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
__attribute__((target("avx2,f16c"), always_inline)) inline __m256 load_half8(
    Compression c, const std::uint16_t* p) {
  return decode8(c, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
__attribute__((target("avx2,f16c"), always_inline)) inline __m128i encode8(Compression c,
                                                                           __m256 f) {
  if (c == Compression::fp16) return _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT);
  return bf16_round8(f);
}

__attribute__((target("avx2,f16c"))) void bf16_decode_avx2(const std::uint16_t* in, float* out,
                                                          std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, load_half8(Compression::bf16, in + i));
  for (; i < n; ++i) out[i] = bf16_to_float(in[i]);
}

// acc[i] = op(acc[i], decoded in[i]) for sum, min and max of floats or doubles.
enum class Kind { sum, min, max };

template <Kind K>
__attribute__((target("avx2,f16c"), always_inline)) inline __m256 combine(__m256 acc, __m256 v) {
  if constexpr (K == Kind::sum) return _mm256_add_ps(acc, v);
  if constexpr (K == Kind::min) return _mm256_min_ps(v, acc);
  return _mm256_max_ps(v, acc);
}
template <Kind K>
__attribute__((target("avx2,f16c"), always_inline)) inline __m256d combine(__m256d acc,
                                                                          __m256d v) {
  if constexpr (K == Kind::sum) return _mm256_add_pd(acc, v);
  if constexpr (K == Kind::min) return _mm256_min_pd(v, acc);
  return _mm256_max_pd(v, acc);
}

template <Kind K>
__attribute__((target("avx2,f16c"))) std::size_t reduce_half_vec(Compression c,
                                                                 const std::uint16_t* in,
                                                                 float* acc, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(acc + i, combine<K>(_mm256_loadu_ps(acc + i), load_half8(c, in + i)));
  return i;
}
template <Kind K>
__attribute__((target("avx2,f16c"))) std::size_t reduce_half_vec(Compression c,
                                                                 const std::uint16_t* in,
                                                                 double* acc, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = load_half8(c, in + i);
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    _mm256_storeu_pd(acc + i, combine<K>(_mm256_loadu_pd(acc + i), lo));
    _mm256_storeu_pd(acc + i + 4, combine<K>(_mm256_loadu_pd(acc + i + 4), hi));
  }
  return i;
}

// Elements done (a multiple of 8; the caller finishes the rest), or 0 where there is no
// vector path for this op.
template <class T>
std::size_t reduce_half_op(Compression c, Op op, const std::uint16_t* in, T* acc, std::size_t n) {
  switch (op) {
    case Op::sum:
      return reduce_half_vec<Kind::sum>(c, in, acc, n);
    case Op::min:
      return reduce_half_vec<Kind::min>(c, in, acc, n);
    case Op::max:
      return reduce_half_vec<Kind::max>(c, in, acc, n);
    default: return 0;
  }
}
std::size_t reduce_half_avx2(Compression c, detail::Type t, Op op, const std::uint16_t* in,
                             void* acc, std::size_t n) {
  if (t == detail::Type::f32) return reduce_half_op(c, op, in, static_cast<float*>(acc), n);
  return reduce_half_op(c, op, in, static_cast<double*>(acc), n);
}

// reduce_encode_half's pass over elements [from, to), to − from a multiple of 8: the same
// operations, in the same order, as reduce_half_vec, encode and decode one after the other.
template <Kind K>
__attribute__((target("avx2,f16c"))) void reduce_encode_vec(
    Compression c, const float* in, std::span<const std::uint16_t* const> others, float* out,
    std::uint16_t* wire, std::size_t from, std::size_t to, bool streaming) {
  for (std::size_t i = from; i < to; i += 8) {
    __m256 a = _mm256_loadu_ps(in + i);
    for (const std::uint16_t* o : others) a = combine<K>(a, load_half8(c, o + i));
    const __m128i h = encode8(c, a);
    store_half8(wire + i, h, streaming);
    _mm256_storeu_ps(out + i, decode8(c, h));
  }
}
template <Kind K>
__attribute__((target("avx2,f16c"))) void reduce_encode_vec(
    Compression c, const double* in, std::span<const std::uint16_t* const> others, double* out,
    std::uint16_t* wire, std::size_t from, std::size_t to, bool streaming) {
  for (std::size_t i = from; i < to; i += 8) {
    __m256d lo = _mm256_loadu_pd(in + i), hi = _mm256_loadu_pd(in + i + 4);
    for (const std::uint16_t* o : others) {
      const __m256 v = load_half8(c, o + i);
      lo = combine<K>(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
      hi = combine<K>(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    }
    // Through float as encode_half rounds a double (cvtpd2ps: cvtsd2ss lane by lane).
    const __m128i h = encode8(c, _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo)));
    store_half8(wire + i, h, streaming);
    const __m256 d = decode8(c, h);
    _mm256_storeu_pd(out + i, _mm256_cvtps_pd(_mm256_castps256_ps128(d)));
    _mm256_storeu_pd(out + i + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(d, 1)));
  }
}

// The end of what the vector pass did from `from` (whole groups of 8), or `from` where it has
// no path for this op.
template <class T>
std::size_t reduce_encode_op(Compression c, Op op, const T* in,
                             std::span<const std::uint16_t* const> others, T* out,
                             std::uint16_t* wire, std::size_t from, std::size_t n, bool streaming) {
  const std::size_t to = from + (n - from) / 8 * 8;
  switch (op) {
    case Op::sum:
      reduce_encode_vec<Kind::sum>(c, in, others, out, wire, from, to, streaming);
      break;
    case Op::min:
      reduce_encode_vec<Kind::min>(c, in, others, out, wire, from, to, streaming);
      break;
    case Op::max:
      reduce_encode_vec<Kind::max>(c, in, others, out, wire, from, to, streaming);
      break;
    default:
      return from;
  }
  if (streaming) _mm_sfence();
  return to;
}

__attribute__((target("avx,f16c"))) void fp16_decode_f16c(const std::uint16_t* in, float* out,
                                                         std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < n; ++i) out[i] = fp16_to_float(in[i]);
}
#endif

void encode_floats(Compression c, const float* in, std::uint16_t* out, std::size_t n,
                   bool streaming) {
  if (c == Compression::bf16) {
#ifdef RMP_HAVE_F16C_PATH
    if (have_avx2()) return bf16_encode_avx2(in, out, n, streaming);
#endif
    for (std::size_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
    return;
  }
#ifdef RMP_HAVE_F16C_PATH
  if (have_f16c()) return fp16_encode_f16c(in, out, n, streaming);
#endif
  (void)streaming;  // no vector path: plain stores
  for (std::size_t i = 0; i < n; ++i) out[i] = float_to_fp16(in[i]);
}

void decode_floats(Compression c, const std::uint16_t* in, float* out, std::size_t n) {
  if (c == Compression::bf16) {
#ifdef RMP_HAVE_F16C_PATH
    if (have_avx2()) return bf16_decode_avx2(in, out, n);
#endif
    for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
    return;
  }
#ifdef RMP_HAVE_F16C_PATH
  if (have_f16c()) return fp16_decode_f16c(in, out, n);
#endif
  for (std::size_t i = 0; i < n; ++i) out[i] = fp16_to_float(in[i]);
}

// Doubles pass through a small float buffer, a block at a time (stays in cache).
constexpr std::size_t kBlock = 1024;

}  // namespace

void encode_half(Compression c, detail::Type t, const void* in, std::uint16_t* out, std::size_t n,
                 bool streaming) {
  if (t == detail::Type::f32)
    return encode_floats(c, static_cast<const float*>(in), out, n, streaming);
  const auto* d = static_cast<const double*>(in);
  float tmp[kBlock];
  for (std::size_t i = 0; i < n; i += kBlock) {
    const std::size_t k = std::min(kBlock, n - i);
    for (std::size_t j = 0; j < k; ++j) tmp[j] = static_cast<float>(d[i + j]);
    encode_floats(c, tmp, out + i, k, streaming);
  }
}

void decode_half(Compression c, detail::Type t, const std::uint16_t* in, void* out,
                 std::size_t n) {
  if (t == detail::Type::f32) return decode_floats(c, in, static_cast<float*>(out), n);
  auto* d = static_cast<double*>(out);
  float tmp[kBlock];
  for (std::size_t i = 0; i < n; i += kBlock) {
    const std::size_t k = std::min(kBlock, n - i);
    decode_floats(c, in + i, tmp, k);
    for (std::size_t j = 0; j < k; ++j) d[i + j] = tmp[j];
  }
}

void reduce_encode_half(Compression c, detail::Type t, Op op, const void* in,
                        std::span<const std::uint16_t* const> others, void* out,
                        std::uint16_t* wire, std::size_t n, bool streaming) {
  const std::size_t esize = t == detail::Type::f32 ? 4 : 8;
  // Elements [lo, hi) step by step: the input copied to the output, each of the others
  // combined into it, the result encoded and decoded back.
  auto steps = [&](std::size_t lo, std::size_t hi) {
    if (hi <= lo) return;
    auto* o = static_cast<std::byte*>(out) + lo * esize;
    const auto* s = static_cast<const std::byte*>(in) + lo * esize;
    if (o != s) std::memcpy(o, s, (hi - lo) * esize);
    for (const std::uint16_t* q : others) reduce_half(c, t, op, q + lo, o, hi - lo);
    encode_half(c, t, o, wire + lo, hi - lo, streaming);
    decode_half(c, t, wire + lo, o, hi - lo);
  };
  std::size_t done = 0;
#ifdef RMP_HAVE_F16C_PATH
  if (have_avx2()) {
    // Up to the first 16-byte boundary of `wire` step by step when streaming (encode_half's
    // head), then eight at a time in one pass.
    done = unaligned_head(wire, n, streaming);
    steps(0, done);
    done = t == detail::Type::f32
               ? reduce_encode_op(c, op, static_cast<const float*>(in), others,
                                  static_cast<float*>(out), wire, done, n, streaming)
               : reduce_encode_op(c, op, static_cast<const double*>(in), others,
                                  static_cast<double*>(out), wire, done, n, streaming);
  }
#endif
  steps(done, n);
}

void reduce_half(Compression c, detail::Type t, Op op, const std::uint16_t* in, void* acc,
                 std::size_t n) {
  std::size_t done = 0;
#ifdef RMP_HAVE_F16C_PATH
  if (have_avx2()) done = reduce_half_avx2(c, t, op, in, acc, n);
#endif
  // The rest (or all, without a vector path) through a small buffer.
  const std::size_t esize = t == detail::Type::f32 ? 4 : 8;
  auto* rest = static_cast<std::byte*>(acc) + done * esize;
  alignas(32) std::byte tmp[kBlock * 8];
  for (std::size_t i = done; i < n; i += kBlock) {
    const std::size_t k = std::min(kBlock, n - i);
    decode_half(c, t, in + i, tmp, k);
    reduce_apply(op, t, tmp, rest + (i - done) * esize, k);
  }
}

}  // namespace rmp::coll
