// Bulk memory copy for the data paths: ring and chunk payloads, eager payloads into user
// buffers. glibc 2.36 copies blocks from a few KiB up with `rep movsb`, which on AMD Zen
// (this project's machines) drops from ~40 GB/s to ~1.8 GB/s when the destination lies a few
// bytes above the source modulo 4 KiB — exactly a page-aligned shared chunk copied into a
// malloc'd buffer at page + 16 (measured on this project's machine, one core, 128 KiB).
// Vector loads and stores have no such cliff, so large copies go through AVX2 loads and stores (memcpy on CPUs without AVX2);
// small ones stay with memcpy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace rmp::rt {

void copy_large(void* dst, const void* src, std::size_t n);

// A copy whose destination another core reads next: streaming (non-temporal) stores, ordered
// before anything the caller stores afterwards (no overlap).
void copy_streaming(void* dst, const void* src, std::size_t n);

// src into both a and b (no overlap among the three): one read of the source, as two copies
// would read it twice. b's stores are streaming ones when asked (as copy_streaming).
void copy_twice(void* a, void* b, const void* src, std::size_t n, bool streaming_b);

// Up to 64 bytes without a call into libc (no overlap): the 8-byte message path copies a
// header and a payload each way, and a call to memcpy cost more than the copy (~25
// instructions for 8 bytes). Two possibly overlapping moves cover every length in a class.
inline void copy_short(void* dst, const void* src, std::size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  if (n > 32) {
    unsigned char a[32], b[32];
    std::memcpy(a, s, 32);
    std::memcpy(b, s + n - 32, 32);
    std::memcpy(d, a, 32);
    std::memcpy(d + n - 32, b, 32);
  } else if (n >= 16) {
    unsigned char a[16], b[16];
    std::memcpy(a, s, 16);
    std::memcpy(b, s + n - 16, 16);
    std::memcpy(d, a, 16);
    std::memcpy(d + n - 16, b, 16);
  } else if (n >= 8) {
    std::uint64_t a, b;
    std::memcpy(&a, s, 8);
    std::memcpy(&b, s + n - 8, 8);
    std::memcpy(d, &a, 8);
    std::memcpy(d + n - 8, &b, 8);
  } else if (n >= 4) {
    std::uint32_t a, b;
    std::memcpy(&a, s, 4);
    std::memcpy(&b, s + n - 4, 4);
    std::memcpy(d, &a, 4);
    std::memcpy(d + n - 4, &b, 4);
  } else if (n >= 2) {
    std::uint16_t a, b;
    std::memcpy(&a, s, 2);
    std::memcpy(&b, s + n - 2, 2);
    std::memcpy(d, &a, 2);
    std::memcpy(d + n - 2, &b, 2);
  } else if (n == 1) {
    *d = *s;
  }
}
inline constexpr std::size_t kShortCopy = 64;

// memcpy for the data paths (no overlap).
inline void copy_bytes(void* dst, const void* src, std::size_t n) {
  if (n <= kShortCopy) {
    copy_short(dst, src, n);
  } else if (n < 2048) {
    std::memcpy(dst, src, n);
  } else {
    copy_large(dst, src, n);
  }
}

}  // namespace rmp::rt
