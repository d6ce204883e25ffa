// Bulk memory copy for the data paths: ring and chunk payloads, eager payloads into user
// buffers. Large copies take `rep movsb` where this process found it about as fast as AVX2
// loads and stores, and the loop where the destination lies less than a line above the source
// modulo 4 KiB (the aliasing cliff of AMD Zen machines: ~40 GB/s down to ~1.8) or where
// another core has just written the source (copy_from_peer); copy.cpp says why. Small copies
// stay with memcpy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace rmp::rt {

void copy_large(void* dst, const void* src, std::size_t n);

// A copy out of memory another core has just written — a chunk or ring payload the peer
// produced — into this process's own: the vector loop from 2 KiB on, whichever kernel
// copy_large takes. (The node-shared collectives' exchanges read rounds that went to memory
// with streaming stores with copy_large_movsb instead: NodeShared::copy_out.) Loading lines that
// sit in the other core's cache, `rep movsb` ran slower and unevenly on the AMD EPYC of family 25:
// 1 MiB bandwidth windows (gets through 512 KiB chunks) at 35-39 GB/s with the loop as the consumer
// against 20-37 (10 interleaved pairs, mid placement); on family 26 the consumer's kernel made no
// difference.
void copy_from_peer(void* dst, const void* src, std::size_t n);

// The two kernels copy_large chooses between, each callable (tests run both on every
// machine), and which one this process chose.
void copy_large_vectors(void* dst, const void* src, std::size_t n);
void copy_large_movsb(void* dst, const void* src, std::size_t n);
bool copy_large_uses_movsb();
// Whether copy_large takes `rep movsb` for this destination and source: where it chose it,
// unless the destination lies 1-63 bytes above the source modulo 4 KiB.
bool copy_large_takes_movsb(const void* dst, const void* src);

// A copy whose destination another core reads next: streaming (non-temporal) stores, ordered
// before anything the caller stores afterwards (no overlap).
void copy_streaming(void* dst, const void* src, std::size_t n);

// src into both a and b (no overlap among the three): one read of the source with the loop,
// or two passes with `rep movsb` (cached stores where copy_large takes it, unless `one_pass`:
// copy.cpp says why). b's stores are streaming ones when asked (as copy_streaming).
void copy_twice(void* a, void* b, const void* src, std::size_t n, bool streaming_b,
                bool one_pass = false);
// Whether copy_twice's cached stores into a and b from src have the two kernels to choose
// from (`one_pass` matters): copy_large takes `rep movsb` for both.
bool copy_twice_has_passes(const void* a, const void* b, const void* src);

// The first and the last W bytes of n (W <= n <= 2W): together they cover all n, loaded
// before anything is stored.
template <std::size_t W>
inline void copy_ends(unsigned char* d, const unsigned char* s, std::size_t n) {
  unsigned char a[W], b[W];
  std::memcpy(a, s, W);
  std::memcpy(b, s + n - W, W);
  std::memcpy(d, a, W);
  std::memcpy(d + n - W, b, W);
}

// Up to 64 bytes without a call into libc (no overlap): the 8-byte message path copies a
// header and a payload each way, and a call to memcpy cost more than the copy (~25
// instructions for 8 bytes).
inline void copy_short(void* dst, const void* src, std::size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  if (n > 32) copy_ends<32>(d, s, n);
  else if (n >= 16) copy_ends<16>(d, s, n);
  else if (n >= 8) copy_ends<8>(d, s, n);
  else if (n >= 4) copy_ends<4>(d, s, n);
  else if (n >= 2) copy_ends<2>(d, s, n);
  else if (n == 1) *d = *s;
}
inline constexpr std::size_t kShortCopy = 64;
// From here on copies take the large kernels (copy_large, the vector loop, `rep movsb`);
// below, memcpy.
inline constexpr std::size_t kLargeCopy = 2048;

// memcpy for the data paths (no overlap).
inline void copy_bytes(void* dst, const void* src, std::size_t n) {
  if (n <= kShortCopy) {
    copy_short(dst, src, n);
  } else if (n < kLargeCopy) {
    std::memcpy(dst, src, n);
  } else {
    copy_large(dst, src, n);
  }
}

}  // namespace rmp::rt
