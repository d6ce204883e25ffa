// What every collective algorithm needs and nothing more: point-to-point on a communicator's
// collective channel (through p2p's Engine only), request sets that are always waited for,
// per-call scratch memory, byte arithmetic on buffers, per-rank block layouts, and the
// pairing that folds a non-power-of-two rank count onto a power of two.
// Internal to collectives/.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/collectives.hpp"
#include "runtime/copy.hpp"

namespace rmp::coll {

using detail::RequestState;

// Tags on the collective channel. Collectives run in the same order on every rank and a pair's
// messages never overtake, so a fixed tag per collective matches correctly; distinct tags keep
// ranks that (erroneously) call different collectives from exchanging each other's data.
// (node_shared.cpp and nonblocking.cpp use tags from 2^23 up.)
enum Tag : int {
  kBarrier = 1,
  kBcast,
  kReduce,
  kAllreduce,
  kGather,
  kScatter,
  kAllgather,
  kAlltoall,
  kReduceScatter,
  kScan,
  kSizes,  // block-size headers of the v-variants whose receivers do not know the counts
};

// ---- Point to point --------------------------------------------------------------------------

inline RequestState* isend(const CommImpl& c, const void* buf, std::size_t bytes, int dest,
                           int tag) {
  return c.engine().isend(c, p2p::Channel::collective, buf, bytes, dest, tag, false);
}
inline RequestState* irecv(const CommImpl& c, void* buf, std::size_t bytes, int src, int tag) {
  return c.engine().irecv(c, p2p::Channel::collective, buf, bytes, src, tag);
}
// Blocking standard send: a small message leaves without a request (p2p's fast path).
inline void send(const CommImpl& c, const void* buf, std::size_t bytes, int dest, int tag) {
  c.engine().send(c, p2p::Channel::collective, buf, bytes, dest, tag);
}
inline void recv(const CommImpl& c, void* buf, std::size_t bytes, int src, int tag) {
  c.engine().wait(irecv(c, buf, bytes, src, tag));
}

// Requests of one algorithm step, waited for in the order they were added. The first few
// live inline, so a small collective allocates nothing. The destructor (reached only when a
// wait threw) cancels or completes whatever is left, so that no transfer outlives the
// scratch buffers it points into.
class Requests {
public:
  explicit Requests(const CommImpl& c) : e_(c.engine()) {}
  Requests(const Requests&) = delete;
  Requests& operator=(const Requests&) = delete;
  ~Requests() {
    for (; head_ < size_; ++head_) {
      RequestState* r = at(head_);
      e_.cancel(r);
      try {
        e_.wait(r);
      } catch (...) {  // already failing: the first error is the one being reported
      }
    }
  }

  void add(RequestState* r) {
    if (size_ < kInline) small_[size_] = r;
    else heap_.push_back(r);
    ++size_;
  }
  std::size_t pending() const { return size_ - head_; }
  // Waits for the oldest request.
  Status wait_front() { return e_.wait(pop()); }
  void wait_all() {
    while (pending()) wait_front();
  }
  // Releases the oldest requests that have already completed (bounds the set of a long
  // pipeline without blocking on a send).
  void reap() {
    while (pending()) {
      std::optional<Status> done;
      try {
        done = e_.test(at(head_));
      } catch (...) {  // test() released the failed request
        pop();
        throw;
      }
      if (!done) return;
      pop();
    }
  }

private:
  static constexpr std::size_t kInline = 8;
  RequestState* at(std::size_t i) const { return i < kInline ? small_[i] : heap_[i - kInline]; }
  RequestState* pop() {
    RequestState* r = at(head_++);
    if (head_ == size_) head_ = size_ = 0, heap_.clear();
    return r;
  }

  detail::Engine& e_;
  RequestState* small_[kInline];
  std::vector<RequestState*> heap_;
  std::size_t head_ = 0, size_ = 0;
};

// Posts the receive first so that two ranks exchanging with each other never wait on each
// other's rendezvous.
inline void sendrecv(const CommImpl& c, const void* sbuf, std::size_t sbytes, int dest, void* rbuf,
                     std::size_t rbytes, int src, int tag) {
  Requests rs(c);
  rs.add(irecv(c, rbuf, rbytes, src, tag));
  rs.add(isend(c, sbuf, sbytes, dest, tag));
  rs.wait_all();
}

// Where a block came from: "the block from rank 3", or for `ranks` > 1 blocks that a tree's
// subtree brings together, "the blocks from rank 3's subtree of 2 ranks".
inline std::string block_source(int from, int ranks = 1) {
  if (ranks <= 1) return "the block from rank " + std::to_string(from);
  return "the blocks from rank " + std::to_string(from) + "'s subtree of " + std::to_string(ranks) +
         " ranks";
}

// A block from rank `from` longer than this rank's count for it allows (`room` bytes): counts
// that disagree between ranks, which only the block's sender knows (scatterv's root, an
// alltoallv sender). `detail` says how long it was (a truncated receive's own message).
inline Error block_too_long(const char* call, int from, std::size_t room, const std::string& detail,
                            int ranks = 1) {
  return Error(Errc::truncate, std::string(call) + ": " + block_source(from, ranks) +
                                   " is longer than the receive count " + "allows (" +
                                   std::to_string(room) + " bytes): " + detail);
}

// A block from rank `from` shorter than this rank's count for it (`expected` bytes): counts
// that disagree, as block_too_long, but no message was too long for its receive.
inline Error block_too_short(const char* call, int from, std::size_t expected, std::size_t got,
                             int ranks = 1) {
  return Error(Errc::invalid_count, std::string(call) + ": counts: " + block_source(from, ranks) +
                                        " has " + std::to_string(got) +
                                        " bytes where this rank's count says " +
                                        std::to_string(expected) + " (did the ranks call " + call +
                                        " with different counts? RMP_COLL_CHECK=1 compares every "
                                        "call's)");
}

// The first error of a v-variant's blocks that disagree with this rank's counts, kept until
// every block has moved: the other ranks wait for this one's, and a message left unreceived
// would match a later call's receive. `got` is a finished receive's size, or a truncate the
// receive threw (its message consumed, as in MPI).
class BlockCheck {
public:
  explicit BlockCheck(const char* call) : call_(call) {}
  // A block whose size this rank knows without receiving it (its own, or one a header
  // announced), against this rank's count for it. `ranks`: the blocks of that many ranks, in
  // one message (a tree's subtree).
  void arrived(int from, std::size_t expected, std::size_t got, int ranks = 1) {
    if (got > expected)
      return too_long(from, expected, "it has " + std::to_string(got) + " bytes", ranks);
    if (got < expected && !first_) first_ = block_too_short(call_, from, expected, got, ranks);
  }
  // A receive that threw truncate (`detail`: its message).
  void too_long(int from, std::size_t room, const std::string& detail, int ranks = 1) {
    if (!first_) first_ = block_too_long(call_, from, room, detail, ranks);
  }
  // Waits for the oldest of rs, a receive of `expected` bytes from `from`.
  void wait_front(Requests& rs, int from, std::size_t expected, int ranks = 1) {
    try {
      arrived(from, expected, rs.wait_front().bytes, ranks);
    } catch (const Error& err) {
      if (err.code() != Errc::truncate) throw;
      too_long(from, expected, err.what(), ranks);
    }
  }
  void throw_first() const {
    if (first_) throw *first_;
  }

private:
  const char* call_;
  std::optional<Error> first_;
};

// sendrecv where a side whose size is 0 is left out: for algorithms whose block sizes both
// ends compute (so they agree on which messages exist), an empty block costs no message.
// Where each end takes the size from its own counts (the v-variants), empty blocks go as
// messages too (sendrecv_counted): counts that disagree are then found, where a missing
// message left the other end's receive waiting for ever, or a message nobody received
// matched a later call's receive and put its data there.
inline void exchange(const CommImpl& c, const void* sbuf, std::size_t sbytes, int dest, void* rbuf,
                     std::size_t rbytes, int src, int tag) {
  if (sbytes && rbytes) return sendrecv(c, sbuf, sbytes, dest, rbuf, rbytes, src, tag);
  if (sbytes) send(c, sbuf, sbytes, dest, tag);
  if (rbytes) recv(c, rbuf, rbytes, src, tag);
}
inline void sendrecv_counted(const CommImpl& c, const void* sbuf, std::size_t sbytes, int dest,
                             void* rbuf, std::size_t rbytes, int src, int tag, BlockCheck& check) {
  Requests rs(c);
  rs.add(irecv(c, rbuf, rbytes, src, tag));
  rs.add(isend(c, sbuf, sbytes, dest, tag));
  check.wait_front(rs, src, rbytes);
  rs.wait_all();
}

// ---- Memory ----------------------------------------------------------------------------------

inline std::byte* at(void* p, std::size_t off) { return static_cast<std::byte*>(p) + off; }
inline const std::byte* at(const void* p, std::size_t off) {
  return static_cast<const std::byte*>(p) + off;
}
// Overlapping ranges (in-place shuffles) take memmove; the rest the runtime's bulk copy,
// which avoids glibc's slow `rep movsb` case between page-aligned chunks and user buffers.
inline void copy_bytes(void* dst, const void* src, std::size_t n) {
  if (!n || dst == src) return;
  const auto d = reinterpret_cast<std::uintptr_t>(dst), s = reinterpret_cast<std::uintptr_t>(src);
  if (d < s + n && s < d + n) {
    std::memmove(dst, src, n);
  } else {
    rt::copy_bytes(dst, src, n);
  }
}

// Scratch memory of one call: small sizes live on the stack, so the latency path of a small
// collective allocates nothing. Aligned for every element type.
class Scratch {
public:
  explicit Scratch(std::size_t bytes) {
    if (bytes > sizeof small_) heap_ = std::make_unique_for_overwrite<std::byte[]>(bytes);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  std::byte* data() { return heap_ ? heap_.get() : small_; }

private:
  alignas(std::max_align_t) std::byte small_[256];
  std::unique_ptr<std::byte[]> heap_;
};

// Segment size (bytes) and segments in flight of the pipelined algorithms: fragment_size and
// pipeline_depth (DESIGN §5), the same on every rank.
inline std::size_t segment_bytes(const CommImpl& c) {
  return std::max<std::size_t>(1, c.engine().context().coll_params().fragment_size);
}
inline std::size_t segments_in_flight(const CommImpl& c) {
  return std::max<std::size_t>(1, c.engine().context().coll_params().pipeline_depth);
}

// ---- Ranks -----------------------------------------------------------------------------------

inline int ceil_log2(int n) { return n <= 1 ? 0 : std::bit_width(static_cast<unsigned>(n - 1)); }
inline int floor_pow2(int n) { return static_cast<int>(std::bit_floor(static_cast<unsigned>(n))); }
inline int lowbit(int v) { return v & -v; }
// Rank relative to a root, and back.
inline int rel(int r, int root, int n) { return (r - root + n) % n; }
inline int abs_rank(int vr, int root, int n) { return (vr + root) % n; }

// Binomial-tree subtree of relative rank vr: [vr, vr + subtree_size(vr)).
inline int subtree_size(int vr, int n) { return vr == 0 ? n : std::min(lowbit(vr), n - vr); }

// Folding n ranks onto P = 2^floor(log2 n) for recursive doubling / halving: the first
// 2·(n − P) ranks pair up (2i, 2i+1); the even one hands its data to the odd one and sits
// out. New rank i stands for the originals {2i, 2i+1} when i < n − P, else {i + n − P}, so a
// range of new ranks is a contiguous range of original ranks (and of their blocks).
struct Fold {
  int n, p2, extra;
  explicit Fold(int size) : n(size), p2(floor_pow2(size)), extra(size - floor_pow2(size)) {}
  bool folded(int r) const { return r < 2 * extra; }                  // takes part in the fold
  bool sits_out(int r) const { return folded(r) && r % 2 == 0; }      // even of a pair
  int newrank(int r) const { return folded(r) ? r / 2 : r - extra; }  // (of a survivor)
  int first_original(int nr) const { return nr < extra ? 2 * nr : nr + extra; }  // nr ≤ p2
  int survivor(int nr) const { return nr < extra ? 2 * nr + 1 : nr + extra; }
};

// ---- Block layouts ---------------------------------------------------------------------------

// Block i of a count split as evenly as possible into n: the first count % n blocks get one
// more element. Every rank computes the same split.
inline std::size_t even_offset(std::size_t count, int n, int i) {
  const auto ni = static_cast<std::size_t>(n), ii = static_cast<std::size_t>(i);
  return ii * (count / ni) + std::min(ii, count % ni);
}

// Per-rank blocks in bytes: uniform (block i at i × size) or from counts and displacements in
// elements (the v-variants).
class Layout {
public:
  static Layout uniform(std::size_t block_bytes) { return Layout(block_bytes); }
  // (A v-variant's non-root may pass empty spans: its layout is then never read.)
  Layout(sizes counts, sizes displs, std::size_t esize)
      : counts_(counts), displs_(displs), esize_(esize) {}

  bool is_uniform() const { return uniform_; }
  std::size_t size(int i) const {
    return uniform_ ? block_ : counts_[static_cast<std::size_t>(i)] * esize_;
  }
  std::size_t offset(int i) const {
    return uniform_ ? block_ * static_cast<std::size_t>(i)
                    : displs_[static_cast<std::size_t>(i)] * esize_;
  }
  // Bytes of blocks [a, b).
  std::size_t bytes(int a, int b) const {
    if (uniform_) return block_ * static_cast<std::size_t>(b - a);
    std::size_t s = 0;
    for (int i = a; i < b; ++i) s += size(i);
    return s;
  }
  // Blocks [a, b) follow each other in the buffer, so they move as one piece.
  bool contiguous(int a, int b) const {
    if (uniform_) return true;
    for (int i = a; i + 1 < b; ++i)
      if (offset(i) + size(i) != offset(i + 1)) return false;
    return true;
  }

private:
  explicit Layout(std::size_t block) : uniform_(true), block_(block) {}
  bool uniform_ = false;
  sizes counts_, displs_;
  std::size_t esize_ = 1;
  std::size_t block_ = 0;
};

// Copies blocks [a, b) between a buffer laid out by `l` and a packed buffer (rank order).
inline void pack(const Layout& l, const void* buf, int a, int b, std::byte* packed) {
  for (int i = a; i < b; ++i) {
    copy_bytes(packed, at(buf, l.offset(i)), l.size(i));
    packed += l.size(i);
  }
}
inline void unpack(const Layout& l, void* buf, int a, int b, const std::byte* packed) {
  for (int i = a; i < b; ++i) {
    copy_bytes(at(buf, l.offset(i)), packed, l.size(i));
    packed += l.size(i);
  }
}

}  // namespace rmp::coll
