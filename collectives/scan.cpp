// Scan and exscan: recursive doubling (Hillis–Steele: ⌈log2 p⌉ rounds in which rank r passes
// its running value to r + 2^k; small vectors) and a segmented chain (rank r passes the
// prefix of ranks 0..r to r + 1 segment by segment: large vectors). Lower ranks are always the
// left operand, as in the sequential prefix.
#include <utility>

#include "collectives/algorithms.hpp"
#include "collectives/reduce_ops.hpp"

namespace rmp::coll {

void scan_recursive_doubling(const CommImpl& c, const void* in, void* out, std::size_t count,
                             std::size_t esize, Type t, Op op, bool exclusive) {
  const int n = c.size(), r = c.rank();
  const std::size_t bytes = count * esize;
  if (bytes == 0) return;
  // `partial`: the reduction of ranks (r − 2^k, r]; `result` (exscan): of (r − 2^k, r).
  // Buffers swap roles instead of being copied back.
  Scratch a(bytes), b(bytes), x(exclusive ? bytes : 0), y(exclusive ? bytes : 0);
  std::byte* partial = a.data();
  std::byte* incoming = b.data();
  std::byte* result = nullptr;  // exscan: none before the first receive
  copy_bytes(partial, in ? in : out, bytes);
  for (int d = 1; d < n; d <<= 1) {
    const bool to = r + d < n, from = r - d >= 0;
    exchange(c, partial, to ? bytes : 0, r + d, incoming, from ? bytes : 0, r - d, kScan);
    if (!from) continue;
    if (exclusive) {  // result = incoming op result
      std::byte* next = result == x.data() ? y.data() : x.data();
      copy_bytes(next, incoming, bytes);
      if (result) reduce_apply(op, t, result, next, count);
      result = next;
    }
    reduce_apply(op, t, partial, incoming, count);  // partial = incoming op partial
    std::swap(partial, incoming);
  }
  if (!exclusive) copy_bytes(out, partial, bytes);
  else if (r > 0) copy_bytes(out, result, bytes);  // rank 0's exscan result is undefined: untouched
}

void scan_chain(const CommImpl& c, const void* in, void* out, std::size_t count, std::size_t esize,
                Type t, Op op, bool exclusive) {
  const int n = c.size(), r = c.rank();
  if (count == 0) return;
  const std::byte* mine = static_cast<const std::byte*>(in ? in : out);
  std::byte* res = static_cast<std::byte*>(out);
  const std::size_t seg = std::max<std::size_t>(1, segment_bytes(c) / esize);  // elements
  const std::size_t depth = segments_in_flight(c), nseg = (count + seg - 1) / seg;
  auto len = [&](std::size_t k) { return std::min(seg, count - k * seg); };
  const bool has_next = r + 1 < n;
  Requests sends(c), recvs(c);
  // At most `depth` segments unacknowledged downstream (waiting on the oldest is safe: the
  // last rank only receives, so the chain drains from its end).
  auto forward = [&](const std::byte* p, std::size_t k) {
    if (sends.pending() >= depth) sends.wait_front();
    sends.add(isend(c, p, len(k) * esize, r + 1, kScan));
  };
  if (r == 0) {
    if (!exclusive) copy_bytes(res, mine, count * esize);
    for (std::size_t k = 0; has_next && k < nseg; ++k)
      forward((exclusive ? mine : res) + k * seg * esize, k);
    sends.wait_all();
    return;
  }
  // Receive slots, reused round-robin; exscan also needs `depth` slots for what it forwards
  // (prefix op mine), which must stay intact until their sends complete.
  const std::size_t slot = std::min(seg, count) * esize;
  Scratch rslots(depth * slot), fslots(exclusive && has_next ? depth * slot : 0);
  std::size_t posted = 0;
  auto post_more = [&](std::size_t done) {
    for (; posted < nseg && posted < done + depth; ++posted)
      recvs.add(
          irecv(c, rslots.data() + (posted % depth) * slot, len(posted) * esize, r - 1, kScan));
  };
  post_more(0);
  for (std::size_t k = 0; k < nseg; ++k) {
    recvs.wait_front();
    std::byte* prefix = rslots.data() + (k % depth) * slot;  // ranks 0 .. r − 1
    const std::size_t off = k * seg * esize, bytes = len(k) * esize;
    if (!exclusive) {
      reduce_apply(op, t, mine + off, prefix, len(k));  // prefix op mine
      copy_bytes(res + off, prefix, bytes);
      if (has_next) forward(res + off, k);
    } else {
      if (has_next) {
        std::byte* fwd = fslots.data() + (k % depth) * slot;
        if (sends.pending() >= depth) sends.wait_front();  // fwd's previous send
        copy_bytes(fwd, prefix, bytes);
        reduce_apply(op, t, mine + off, fwd, len(k));
        forward(fwd, k);
      }
      copy_bytes(res + off, prefix, bytes);  // after `mine` was read: in place they are the same
    }
    sends.reap();
    post_more(k + 1);
  }
  sends.wait_all();
}

}  // namespace rmp::coll
