// Bulk memory copy for the data paths: ring and chunk payloads, eager payloads into user
// buffers. glibc 2.36 copies blocks from a few KiB up with `rep movsb`, which on AMD Zen
// (this project's machines) drops from ~40 GB/s to ~1.8 GB/s when the destination lies a few
// bytes above the source modulo 4 KiB — exactly a page-aligned shared chunk copied into a
// malloc'd buffer at page + 16 (measured on this project's machine, one core, 128 KiB).
// Vector loads and stores have no such cliff, so large copies go through AVX2 loads and stores (memcpy on CPUs without AVX2);
// small ones stay with memcpy.
#pragma once

#include <cstddef>
#include <cstring>

namespace rmp::rt {

void copy_large(void* dst, const void* src, std::size_t n);

// A copy whose destination another core reads next: streaming (non-temporal) stores, ordered
// before anything the caller stores afterwards (no overlap).
void copy_streaming(void* dst, const void* src, std::size_t n);

// src into both a and b (no overlap among the three): one read of the source, as two copies
// would read it twice. b's stores are streaming ones when asked (as copy_streaming).
void copy_twice(void* a, void* b, const void* src, std::size_t n, bool streaming_b);

// memcpy for the data paths (no overlap).
inline void copy_bytes(void* dst, const void* src, std::size_t n) {
  if (n < 2048) {
    std::memcpy(dst, src, n);
  } else {
    copy_large(dst, src, n);
  }
}

}  // namespace rmp::rt
