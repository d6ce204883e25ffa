// Process-wide state behind the public API: the default context, its engine and the world
// communicator (the one global of STYLE.md), plus argument checks shared by the API files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rmp/rmp.hpp>

#include "p2p/engine.hpp"

namespace rmp::api {

struct Process {
  std::unique_ptr<rt::Context> context;
  std::unique_ptr<detail::Engine> engine;
  Comm world;
  bool initialized = false;
  bool finalized = false;
  ThreadLevel provided = ThreadLevel::serialized;
};
extern Process g_process;
inline Process& process() { return g_process; }

// Validation (API.md §Errors): each error names the call, the argument and the value. The
// checks are inline, a compare and a branch; what throws is out of line and cold
// (environment.cpp). Out of line whole, with the messages' string building beside the
// checks, they took 15-25 instructions a call: ~180 of the ~1 000 a rank ran per 8-byte
// ping-pong iteration outside polling (callgrind).
[[noreturn, gnu::cold]] void throw_invalid_comm(const char* call, bool null_impl);
[[noreturn, gnu::cold]] void throw_total_overflow(const char* call, std::size_t count, int ranks,
                                                  std::size_t esize);
// Errc::invalid_argument: rmp::in_place<T> passed to `call` as `arg`, where it has no meaning
// (rmp.hpp; the point-to-point sends call it from their inline checks).
using detail::refuse_in_place;
[[noreturn, gnu::cold]] void throw_bytes_overflow(const char* call, const char* arg,
                                                  std::size_t count, std::size_t esize);
[[noreturn, gnu::cold]] void throw_null_buffer(const char* call, const char* arg,
                                               std::size_t count);
[[noreturn, gnu::cold]] void throw_bad_rank(const char* call, const char* arg, int rank, int size);
[[noreturn, gnu::cold]] void throw_bad_tag(const char* call, const char* arg, int tag);

// Throws invalid_comm for a null communicator, or before init / after finalize.
inline detail::CommImpl& comm_of(const Comm& c, const char* call) {
  detail::CommImpl* impl = c.impl();
  const Process& p = process();
  if (!impl || !p.initialized || p.finalized) [[unlikely]]
    throw_invalid_comm(call, impl == nullptr);
  return *impl;
}

// The most bytes a buffer may span: 2^56 - 1. No buffer is that large (x86-64 user space is
// 2^47 bytes, 2^56 with five-level page tables), and p2p's rendezvous header carries a
// message's size in 56 bits (p2p/wire.hpp).
inline constexpr std::size_t kMaxBufferBytes = (std::size_t{1} << 56) - 1;

// Whether count × esize (into `bytes`) passes kMaxBufferBytes.
inline bool bytes_overflow(std::size_t count, std::size_t esize, std::size_t& bytes) {
  return __builtin_mul_overflow(count, esize, &bytes) || bytes > kMaxBufferBytes;
}

// count × esize, or invalid_count when it passes kMaxBufferBytes.
inline std::size_t checked_bytes(const char* call, const char* arg, std::size_t count,
                                 std::size_t esize) {
  std::size_t bytes;
  if (bytes_overflow(count, esize, bytes)) [[unlikely]]
    throw_bytes_overflow(call, arg, count, esize);
  return bytes;
}

// count × esize bytes for each of `ranks` ranks (a gathered or scattered vector), or
// invalid_count naming the call and count: checked on every rank, so all of them throw alike.
inline std::size_t checked_total(const char* call, std::size_t count, int ranks,
                                 std::size_t esize) {
  std::size_t bytes;
  if (__builtin_mul_overflow(count, esize, &bytes) ||
      __builtin_mul_overflow(bytes, static_cast<std::size_t>(ranks), &bytes) ||
      bytes > kMaxBufferBytes) [[unlikely]]
    throw_total_overflow(call, count, ranks, esize);
  return bytes;
}

inline void check_buffer(const char* call, const char* arg, const void* buf, std::size_t count) {
  if (!buf && count != 0) [[unlikely]]
    throw_null_buffer(call, arg, count);
}

inline void check_rank(const char* call, const char* arg, int rank, int size, bool allow_any) {
  if (allow_any && rank == any_source) return;
  if (rank < 0 || rank >= size) [[unlikely]]
    throw_bad_rank(call, arg, rank, size);
}

inline void check_tag(const char* call, const char* arg, int tag, bool allow_any) {
  if (allow_any && tag == any_tag) return;
  if (tag < 0 || tag > tag_ub) [[unlikely]]
    throw_bad_tag(call, arg, tag);
}

// For tests: the context ids this rank may give to the next dup or split (api/comm.cpp): the
// next new one, and those of communicators that ended here (checked again before reuse).
// Sets them, returns those before.
struct ContextIds {
  std::uint32_t next = 0;
  std::vector<std::uint32_t> ended;
};
ContextIds exchange_context_ids(ContextIds ids);

}  // namespace rmp::api
