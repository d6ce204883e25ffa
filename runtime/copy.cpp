#include "runtime/copy.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>

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

// Twice: the same source also into `also` (unaligned stores), each loaded vector stored to
// both; the alignment and the streaming stores are d's.
template <bool Streaming, bool Twice>
__attribute__((target("avx2"))) void copy_vectors(std::byte* d, std::byte* also, const std::byte* s,
                                                  std::size_t n) {
  const __m256i head = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
  const __m256i tail = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + n - 32));
  const std::size_t total = n;
  auto ends = [&](std::byte * to) __attribute__((target("avx2"), always_inline)) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(to), head);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + total - 32), tail);
  };
  std::byte* const d_first = d;
  std::byte* const also_first = also;
  const std::size_t skip = 32 - (reinterpret_cast<std::uintptr_t>(d) & 31);
  d += skip;
  s += skip;
  n -= skip;
  if constexpr (Twice) also += skip;
  for (; n >= 128; d += 128, s += 128, n -= 128) {
    const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32));
    const __m256i v2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 64));
    const __m256i v3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 96));
    store<Streaming>(d, v0);
    store<Streaming>(d + 32, v1);
    store<Streaming>(d + 64, v2);
    store<Streaming>(d + 96, v3);
    if constexpr (Twice) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(also), v0);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(also + 32), v1);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(also + 64), v2);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(also + 96), v3);
      also += 128;
    }
  }
  for (; n >= 32; d += 32, s += 32, n -= 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    store<Streaming>(d, v);
    if constexpr (Twice) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(also), v);
      also += 32;
    }
  }
  if constexpr (Streaming) _mm_sfence();
  ends(d_first);
  if constexpr (Twice) ends(also_first);
}

// Without AVX2 (older than every machine this is tuned on) glibc's memcpy it is.
const bool kAvx2 = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0;
}();

void copy_movsb(void* dst, const void* src, std::size_t n) {
  asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n)::"memory");
}

// `rep movsb` stores whole lines without reading them for ownership first. Where the
// destination's lines sit in another core's cache — a ring or chunk the peer has just read —
// the vector loop's stores each wait for that core to give its line up: on an AMD EPYC of
// family 26 (cores ~230 ns apart), a pipelined copy through 64 KiB chunks ran at 6.5 GB/s
// with the vector loop as the producer and at 22-25 with `rep movsb`. So copy_large takes
// `rep movsb` where this process finds it about as fast as the loop (a local copy of 32 KiB,
// best of eight tries each, interleaved: ~10 us), except at the distances of the 4 KiB
// aliasing cliff (kAliasBytes).
// Not under AddressSanitizer, which sees no access inside an asm statement: the sanitizer
// build keeps the loop, whose loads and stores it checks (tests/unit runs both kernels).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif

// The cliff: `rep movsb` with the destination less than a line above the source modulo 4 KiB.
// On an AMD EPYC of family 25 (Zen 4) a 32 KiB copy took 16-28x the loop's time 1 or 8 bytes
// above, 1.3-1.7x at 16, 1.1-1.6x at 48 and 63, 0.94-1.05x at 0 and at 64 to 4032, and
// 1.05-1.12x at 4080 and 4095 (just below); earlier Zen machines fell to ~1.8 GB/s a few bytes
// above (a page-aligned chunk copied into a malloc'd buffer at page + 16). Before, each process
// timed the two kernels at 16 bytes above and took `rep movsb` where it kept 0.8 of the loop's
// speed: on family 25 that came out either way from one process to the next (19 `rep movsb`
// of 30), so each rank of one run took one kernel or the other. Now every copy looks at its
// distance, and the timing is done where no cliff lies. (The cliff's width, a line, is
// family 25's; a machine whose cliff reached further would lose there unseen.)
constexpr std::uintptr_t kAliasBytes = 64;

bool in_alias_cliff(const void* dst, const void* src) {
  const std::uintptr_t d =
      (reinterpret_cast<std::uintptr_t>(dst) - reinterpret_cast<std::uintptr_t>(src)) & 4095;
  return d != 0 && d < kAliasBytes;
}

bool movsb_as_fast() {
  if (kAddressSanitizer || !kAvx2) return false;
  constexpr std::size_t kBytes = 32 << 10, kPage = 4096, kTries = 8;
  void* mem = std::aligned_alloc(kPage, 2 * kBytes + 2 * kPage);
  if (mem == nullptr) return false;
  auto* src = static_cast<std::byte*>(mem);
  std::byte* dst = src + kBytes + kPage + kAliasBytes;  // the nearest distance it serves
  std::memset(src, 1, 2 * kBytes + 2 * kPage);
  using Clock = std::chrono::steady_clock;
  Clock::duration best_movsb = Clock::duration::max(), best_vector = best_movsb;
  for (std::size_t i = 0; i < kTries; ++i) {
    Clock::time_point t0 = Clock::now();
    copy_movsb(dst, src, kBytes);
    Clock::time_point t1 = Clock::now();
    copy_vectors<false, false>(dst, nullptr, src, kBytes);
    Clock::time_point t2 = Clock::now();
    best_movsb = std::min(best_movsb, t1 - t0);
    best_vector = std::min(best_vector, t2 - t1);
  }
  std::free(mem);
  return best_movsb * 4 <= best_vector * 5;  // at least 0.8 of the loop's speed
}

const bool kMovsb = movsb_as_fast();
#endif
}  // namespace

void copy_large(void* dst, const void* src, std::size_t n) {
#if defined(__x86_64__)
  if (copy_large_takes_movsb(dst, src)) {
    copy_movsb(dst, src, n);
    return;
  }
#endif
  copy_large_vectors(dst, src, n);
}

bool copy_large_takes_movsb(const void* dst, const void* src) {
#if defined(__x86_64__)
  return kMovsb && !in_alias_cliff(dst, src);
#else
  (void)dst;
  (void)src;
  return false;
#endif
}

void copy_from_peer(void* dst, const void* src, std::size_t n) {
  if (n < kLargeCopy) copy_bytes(dst, src, n);
  else copy_large_vectors(dst, src, n);
}

void copy_large_vectors(void* dst, const void* src, std::size_t n) {
#if defined(__x86_64__)
  if (kAvx2 && n >= 64) {
    copy_vectors<false, false>(static_cast<std::byte*>(dst), nullptr,
                               static_cast<const std::byte*>(src), n);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

void copy_large_movsb(void* dst, const void* src, std::size_t n) {
#if defined(__x86_64__)
  copy_movsb(dst, src, n);
#else
  std::memcpy(dst, src, n);
#endif
}

bool copy_large_uses_movsb() {
#if defined(__x86_64__)
  return kMovsb;
#else
  return false;
#endif
}

void copy_streaming(void* dst, const void* src, std::size_t n) {
#if defined(__x86_64__)
  if (kAvx2 && n >= kLargeCopy) {
    copy_vectors<true, false>(static_cast<std::byte*>(dst), nullptr,
                              static_cast<const std::byte*>(src), n);
    return;
  }
#endif
  copy_bytes(dst, src, n);
}

bool copy_twice_has_passes(const void* a, const void* b, const void* src) {
  return copy_large_takes_movsb(a, src) && copy_large_takes_movsb(b, src);
}

void copy_twice(void* a, void* b, const void* src, std::size_t n, bool streaming_b, bool one_pass) {
#if defined(__x86_64__)
  // Cached stores with `rep movsb`, two passes over the source (from L1 or L2 the second
  // time) rather than one pass with the loop's stores, which into a chunk the peer core has
  // just read each wait for that core (copy_movsb): 2-rank allgather, the chunks forced
  // where copy_twice serves, cached stores 134-141 us a 1 MiB call against streaming 57;
  // chosen, interleaved with one pass, 8 rounds far: 256 KiB 0.70, 1 MiB 0.61, 4 MiB 0.63
  // of the time, 16 and 64 KiB 0.94 and 1.07; 4 ranks 0.95-1.08 (AMD EPYC, family 26). On
  // family 25 one pass was the faster from 1 MiB on (2 ranks, 10 pairs, mid: 1 and 4 MiB 0.88
  // of the time, 256 KiB 1.07): the caller may ask for it (NodeShared measures both).
  if (!one_pass && !streaming_b && n >= kLargeCopy && copy_twice_has_passes(a, b, src)) {
    copy_movsb(a, src, n);
    copy_movsb(b, src, n);
    return;
  }
  if (kAvx2 && n >= kLargeCopy) {
    auto* pa = static_cast<std::byte*>(a);
    auto* pb = static_cast<std::byte*>(b);
    const auto* ps = static_cast<const std::byte*>(src);
    if (streaming_b) copy_vectors<true, true>(pb, pa, ps, n);
    else copy_vectors<false, true>(pb, pa, ps, n);
    return;
  }
#endif
  copy_bytes(a, src, n);
  if (streaming_b) copy_streaming(b, src, n);
  else copy_bytes(b, src, n);
}

}  // namespace rmp::rt
