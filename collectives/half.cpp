// fp16 / bf16 conversions of half.hpp.
#include "collectives/half.hpp"

#include <algorithm>
#include <bit>

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

__attribute__((target("avx,f16c"))) void fp16_encode_f16c(const float* in, std::uint16_t* out,
                                                         std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) out[i] = float_to_fp16(in[i]);
}

__attribute__((target("avx,f16c"))) void fp16_decode_f16c(const std::uint16_t* in, float* out,
                                                         std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < n; ++i) out[i] = fp16_to_float(in[i]);
}
#endif

void encode_floats(Compression c, const float* in, std::uint16_t* out, std::size_t n) {
  if (c == Compression::bf16) {
    for (std::size_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
    return;
  }
#ifdef RMP_HAVE_F16C_PATH
  if (have_f16c()) return fp16_encode_f16c(in, out, n);
#endif
  for (std::size_t i = 0; i < n; ++i) out[i] = float_to_fp16(in[i]);
}

void decode_floats(Compression c, const std::uint16_t* in, float* out, std::size_t n) {
  if (c == Compression::bf16) {
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

void encode_half(Compression c, detail::Type t, const void* in, std::uint16_t* out,
                 std::size_t n) {
  if (t == detail::Type::f32) return encode_floats(c, static_cast<const float*>(in), out, n);
  const auto* d = static_cast<const double*>(in);
  float tmp[kBlock];
  for (std::size_t i = 0; i < n; i += kBlock) {
    const std::size_t k = std::min(kBlock, n - i);
    for (std::size_t j = 0; j < k; ++j) tmp[j] = static_cast<float>(d[i + j]);
    encode_floats(c, tmp, out + i, k);
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

}  // namespace rmp::coll
