#include "runtime/copy.hpp"

#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace rmp::rt {
namespace {

#if defined(__x86_64__)
// Copies n ≥ 64 bytes: one unaligned head and tail vector (loaded first, stored last,
// covering whatever the aligned loop leaves at either end), aligned stores in between.
// Streaming: the aligned stores are non-temporal — the destination lines go to memory
// without being read for ownership and leave every cache, so a consumer on another core
// reads them from memory instead of pulling them line by line out of this core's cache —
// fenced before the head and tail (and whatever the caller stores next, e.g. a flag).
template <bool Streaming>
__attribute__((target("avx2"), always_inline)) inline void store(std::byte* to, __m256i v) {
  if constexpr (Streaming) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(to), v);
  } else {
    _mm256_store_si256(reinterpret_cast<__m256i*>(to), v);
  }
}

template <bool Streaming>
__attribute__((target("avx2"))) void copy_vectors(std::byte* d, const std::byte* s, std::size_t n) {
  const __m256i head = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
  const __m256i tail = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + n - 32));
  std::byte* const first = d;
  std::byte* const last = d + n - 32;
  const std::size_t skip = 32 - (reinterpret_cast<std::uintptr_t>(d) & 31);
  d += skip;
  s += skip;
  n -= skip;
  for (; n >= 128; d += 128, s += 128, n -= 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 64));
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 96));
    store<Streaming>(d, a);
    store<Streaming>(d + 32, b);
    store<Streaming>(d + 64, c);
    store<Streaming>(d + 96, e);
  }
  for (; n >= 32; d += 32, s += 32, n -= 32)
    store<Streaming>(d, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
  if constexpr (Streaming) _mm_sfence();
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(first), head);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(last), tail);
}

// The same source into two destinations at once, each loaded vector stored twice: `b` aligned
// (and streaming if asked), `a` unaligned.
template <bool Streaming>
__attribute__((target("avx2"))) void copy_vectors_twice(std::byte* a, std::byte* b,
                                                        const std::byte* s, std::size_t n) {
  const __m256i head = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
  const __m256i tail = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + n - 32));
  std::byte* const a_first = a;
  std::byte* const b_first = b;
  std::byte* const a_last = a + n - 32;
  std::byte* const b_last = b + n - 32;
  const std::size_t skip = 32 - (reinterpret_cast<std::uintptr_t>(b) & 31);
  a += skip;
  b += skip;
  s += skip;
  n -= skip;
  for (; n >= 128; a += 128, b += 128, s += 128, n -= 128) {
    const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32));
    const __m256i v2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 64));
    const __m256i v3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 96));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(a), v0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(a + 32), v1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(a + 64), v2);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(a + 96), v3);
    store<Streaming>(b, v0);
    store<Streaming>(b + 32, v1);
    store<Streaming>(b + 64, v2);
    store<Streaming>(b + 96, v3);
  }
  for (; n >= 32; a += 32, b += 32, s += 32, n -= 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(a), v);
    store<Streaming>(b, v);
  }
  if constexpr (Streaming) _mm_sfence();
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(a_first), head);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(a_last), tail);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(b_first), head);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(b_last), tail);
}

// Without AVX2 (older than every machine this is tuned on) glibc's memcpy it is.
const bool kAvx2 = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0;
}();
#endif

}  // namespace

void copy_large(void* dst, const void* src, std::size_t n) {
#if defined(__x86_64__)
  if (kAvx2) {
    copy_vectors<false>(static_cast<std::byte*>(dst), static_cast<const std::byte*>(src), n);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

void copy_streaming(void* dst, const void* src, std::size_t n) {
#if defined(__x86_64__)
  if (kAvx2 && n >= 2048) {
    copy_vectors<true>(static_cast<std::byte*>(dst), static_cast<const std::byte*>(src), n);
    return;
  }
#endif
  copy_bytes(dst, src, n);
}

void copy_twice(void* a, void* b, const void* src, std::size_t n, bool streaming_b) {
#if defined(__x86_64__)
  if (kAvx2 && n >= 2048) {
    auto* pa = static_cast<std::byte*>(a);
    auto* pb = static_cast<std::byte*>(b);
    const auto* ps = static_cast<const std::byte*>(src);
    if (streaming_b) copy_vectors_twice<true>(pa, pb, ps, n);
    else copy_vectors_twice<false>(pa, pb, ps, n);
    return;
  }
#endif
  copy_bytes(a, src, n);
  if (streaming_b) copy_streaming(b, src, n);
  else copy_bytes(b, src, n);
}

}  // namespace rmp::rt
