// Shared-memory paths for communicators whose ranks all run on this node, through the
// runtime's node-local shared segment: a flag barrier, a small-message allreduce (one cache
// line per rank carries both the arrival flag and up to 56 bytes of data, so a 2-rank barrier
// or 8-byte allreduce costs one line transfer each way), and chunked allreduce, bcast,
// allgather and alltoall of any size (every rank copies into and out of its own chunk buffers, all
// cores at once, round by round; docs/algorithms.md).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <rmp/rmp.hpp>

#include "collectives/exchange.hpp"
#include "collectives/select.hpp"
#include "p2p/engine.hpp"

namespace rmp::coll {

class NodeShared;

// The communicator's node-shared state, created collectively at its first use; nullptr when
// shared memory cannot serve it (ranks on several nodes, a single rank). A state kept from an
// ended communicator of the same members serves it when every member has let go of that one
// (its first use agrees on it with rank 0, or its dup did: KeptState).
NodeShared* node_shared(const detail::CommImpl& c);

// A dup's or split's offer of node-shared state: the newest this process keeps from an ended
// communicator of the new one's members, taken out of its pool while the members agree
// (api/comm.cpp: in the context-id allreduce, which then says whether every member offered the
// same one: each has then let go of that communicator). Without it a reused state is agreed on
// at the first collective, three more message rounds. Goes back to the pool unless adopted.
class KeptState {
public:
  explicit KeptState(const detail::CommImpl& parent);
  // For a communicator of these members (world ranks, in rank order): a split's group.
  KeptState(detail::Engine& e, std::vector<int> members);
  ~KeptState();
  KeptState(const KeptState&) = delete;
  KeptState& operator=(const KeptState&) = delete;
  // What this member offers: 0 for nothing.
  std::uint64_t id() const { return id_; }
  // Every member offered id(): it serves `fresh`, the dup (rank 0 clears it here; the others'
  // first call on it waits for that).
  void adopt(const detail::CommImpl& fresh);

private:
  std::uint64_t id_ = 0;
  std::shared_ptr<NodeShared> ns_;  // back to the pool when released (node_shared.cpp: pooled)
};
// The bytes a copy at get_bw moves in the time a cross-memory-attach call costs before it
// copies anything (the calibrated rndv_setup_us: 1.6 us here, 44 KB at 27 GB/s; a single
// 32 KiB read took 4.3 us in all, 4 MiB in 32 KiB reads 553 us against 381 in 1 MiB ones).
// Below it a direct path's calls cost more than the copies they spare; the direct paths cut
// their work to fit it. From rank 0's parameters (coll_params), so that all ranks agree.
std::size_t direct_call_bytes(const rt::Params& p);

// Test hook: rank 0 of a dup that adopts kept state sleeps this long before clearing it, so
// that the others reach their first call first.
void set_kept_clear_delay(std::chrono::milliseconds d);

// Which path a bcast, reduce, allgather(v), alltoall or allreduce takes when the node-shared
// one was selected: that one, or the point-to-point algorithm the formulas pick, or the direct
// path (reduce, allgather(v), alltoall, allreduce, bcast; a bcast whose ranks have cores of
// their own and whose direct path works has that path instead of the chunks, and chooses
// between it and point-to-point above 4 KiB). An allreduce, and a reduce of floating or
// complex values, choose between their two node-shared paths only: they combine in the same
// order, point-to-point in another, and two equal calls must give equal bits. The node-shared
// paths move data twice, through shared chunks; the direct paths once, with cross-memory
// attach; point-to-point once above eager_threshold (a rendezvous get), and below it twice but
// with both cores copying at once. Which is faster depends on the machine (how dear a cache
// line moved between cores is) more than on the message. So above eager_threshold (an allgather(v)
// or alltoall above 4 KiB: their direct paths move every block once), ranks that have cores
// of their own let one rank measure: `decider` (the root of a reduce, the rank after the
// root of a bcast, rank 0 of an allreduce, allgather or alltoall: a rank whose call lasts until
// its data is in) times its calls of each path (runtime/measured_choice.hpp) and tells the
// others its choice through a small bcast (with ranks sharing cores, and for a bcast, once for
// a run of calls of a size class: MeasuredChoice::choose_run). With ranks sharing cores (every
// rendezvous handshake then waits for a process switch) only the alltoall and the bcast
// choose, between their node-shared and direct paths, above eager_threshold. Not when
// RMP_<COLL>_ALGO forces an algorithm.
class PathChoice {
public:
  // `ns`: the communicator's node-shared state when the call selected that path, else nullptr
  // (then nothing is chosen: p2p() is false).
  // `exact`: a reduce of an exact type (a floating one chooses between its node-shared paths
  // only, which combine in the same order).
  PathChoice(const detail::CommImpl& c, NodeShared* ns, Coll k, std::size_t bytes, int decider,
             bool exact = true);
  ~PathChoice();  // the decider's time for the call
  PathChoice(const PathChoice&) = delete;
  PathChoice& operator=(const PathChoice&) = delete;
  // Whether this call takes the point-to-point algorithm instead of the node-shared path.
  bool p2p() const { return path_ == 1; }
  // Whether the call takes its collective's direct node-shared path.
  bool direct() const { return path_ == 2; }

private:
  NodeShared* timed_ = nullptr;   // set at the decider
  NodeShared* stores_ = nullptr;  // set where the path sets the chunks' kind of store
  int outer_store_ = -1;          // the setting it replaced (NodeShared::force_store)
  std::size_t index_;            // NodeShared::path_index
  std::size_t bytes_;
  int path_ = 0;       // NodeShared::kShmPath, kP2pPath, kDirectPath or kStreamPath
  int unwinding_ = 0;  // std::uncaught_exceptions() at construction
  std::chrono::steady_clock::time_point t0_{};
};

// What a collective with node-shared state was called with, which must be the same on every
// rank (MPI: an erroneous program otherwise). The node-shared paths would trust it: ranks that
// pass different counts take different paths and wait for each other for ever, or move
// different bytes and return wrong data (a direct path would even write past another rank's
// buffer). So each call records it in the rank's record line, tags its flags, slots and
// rounds with a 16-bit hash of it, and compares the tags of the ranks it waits for once they
// have arrived (the cache lines it loads anyway); a wait that idles long enough for the
// thread's StallTest compares the other ranks' records (CallScope). What differs throws
// rmp::Error naming the call, the argument, the rank and both values, on every rank that
// waits for the one that differs; after it the communicator's node-shared state is out of
// step, and every later call on it throws Errc::invalid_comm (free it). RMP_COLL_CHECK=1
// compares every call's arguments before it runs, on every path.
struct CallSig {
  Coll kind;
  std::uint64_t bytes = 0;   // the size the call is selected by
  std::uint32_t esize = 0;   // bytes per element: 0 where the call has no element type
  int root = -1;             // rooted calls
  int type = -1;             // detail::Type of reductions
  int op = -1;               // reductions: Op
  int comp = 0;              // allreduce: Compression
  std::uint64_t counts = 0;  // allgatherv, reduce_scatter: their counts, weighted by entry
};

// For the length of a collective call on a communicator with node-shared state (`ns`; nothing
// without it): the call's CallSig recorded in the state. The node-shared waits compare the
// other ranks' records (node_shared.cpp: NodeShared::stalled) once a wait has gone on kGrace
// since its 256th poll: a correct call whose waits are short (ranks that share cores wait for
// a switch of processes, some µs) reads no other rank's record, whose owner would have to take
// its line back at its next call. A call that takes a point-to-point algorithm sets
// the thread's StallTest to do the same in its waits (watch_p2p: not on the node-shared paths,
// where reading the thread-local pointer of a shared library twice a call cost ~5 % of an 8-byte
// allreduce). Throws Errc::invalid_comm at once when an earlier call left the state out of step.
class CallScope final : detail::StallTest {
public:
  CallScope(const detail::CommImpl& c, NodeShared* ns, const CallSig& s);
  // The communicator's node-shared state where the call may use it (may_use_node_shared).
  CallScope(const detail::CommImpl& c, const CallSig& s);
  ~CallScope() {
    if (watching_) detail::t_stall_test = outer_;
  }
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;
  // The node-shared state the call records itself in (nullptr: none).
  NodeShared* ns() const { return ns_; }
  // The call takes a point-to-point algorithm: its waits test for stalls too.
  void watch_p2p();
  static constexpr auto kGrace = std::chrono::milliseconds(1);

private:
  void operator()() override;
  const detail::CommImpl& c_;
  NodeShared* ns_;
  bool watching_ = false;
  detail::StallTest* outer_ = nullptr;
};

// The rank that chooses a bcast's path (PathChoice's `decider`): the root where ranks share
// cores, the rank after it otherwise. Where ranks share cores a reader's call says little of
// what a path costs the others: through the chunks it often found them written already
// (1.4-1.6 us calls among 20-60 us ones, 4 ranks on 2 cores, 64 KiB), where a direct read
// costs at least one cross-memory copy, and it chose the chunks at 138 calls of 146 though a
// round of bcast and barrier took 17.6 us with them and 11.9 direct. The root times a call
// until every rank has its data, by either path (through the chunks it waits for the
// readers in the calls it times).
int bcast_decider(const detail::CommImpl& c, NodeShared* ns, int root);

void shm_barrier(const detail::CommImpl& c, NodeShared& ns);
// `in` == nullptr: in place. Up to 4 KiB through the flag lines, beyond in chunks.
void shm_allreduce(const detail::CommImpl& c, NodeShared& ns, const void* in, void* out,
                   std::size_t count, std::size_t esize, detail::Type t, Op op);
// The same, each rank reducing its slice of the vector from the others' inputs and writing
// the result into their outputs with cross-memory attach: one copy each way instead of two
// through the chunks, one round. Combines in rank order like shm_allreduce (the same bits).
// Where cross-memory attach does not work between the members, shm_allreduce.
void shm_allreduce_direct(const detail::CommImpl& c, NodeShared& ns, const void* in, void* out,
                          std::size_t count, std::size_t esize, detail::Type t, Op op);
// As shm_allreduce for float/double, with the values in the shared chunks as 16-bit floats
// (Compression fp16 or bf16, not none; allreduce_compressed.cpp's error bounds).
void shm_allreduce_compressed(const detail::CommImpl& c, NodeShared& ns, const void* in,
                              void* out, std::size_t count, std::size_t esize, detail::Type t,
                              Op op, Compression comp);
// As shm_allreduce, the result at `root` only (`out` is not touched elsewhere; `in` ==
// nullptr: in place at the root, the input in `out` elsewhere).
void shm_reduce(const detail::CommImpl& c, NodeShared& ns, const void* in, void* out,
                std::size_t count, std::size_t esize, detail::Type t, Op op, int root);
// The same, block by block in one round, combined at the root in rank order (the same bits
// as shm_reduce), moved once with cross-memory attach instead of twice through the chunks:
// the root reads short vectors from the others' inputs; the others write long ones into the
// root's scratch space while it combines the blocks before. Where cross-memory attach does
// not work between the members, shm_reduce.
void shm_reduce_direct(const detail::CommImpl& c, NodeShared& ns, const void* in, void* out,
                       std::size_t count, std::size_t esize, detail::Type t, Op op, int root);
void shm_bcast(const detail::CommImpl& c, NodeShared& ns, void* buf, std::size_t bytes, int root);
// The same, the others reading straight from the root's buffer with cross-memory attach (one
// copy instead of two through the root's chunks); the root leaves once all have read. Where
// ranks have cores of their own and the message is long enough, the root writes the first
// 1/n of it into every other rank's buffer meanwhile. Up to 4 KiB, or where cross-memory
// attach does not work between the members, shm_bcast.
void shm_bcast_direct(const detail::CommImpl& c, NodeShared& ns, void* buf, std::size_t bytes,
                      int root);
// reduce_scatter(_block): block q (counts[q] elements) of the reduction to rank q; `in` ==
// nullptr: in place (the input in `out`).
void shm_reduce_scatter(const detail::CommImpl& c, NodeShared& ns, const void* in, void* out,
                        std::span<const std::size_t> counts, std::size_t esize, detail::Type t,
                        Op op);
// `l`: every rank's block in `out`; `in` == nullptr: in place.
void shm_allgather(const detail::CommImpl& c, NodeShared& ns, const void* in, void* out,
                   const Layout& l);
// The same, each rank reading the others' blocks straight from where they are with
// cross-memory attach (one copy instead of two through the chunks, one round). Where
// cross-memory attach does not work between the members, shm_allgather.
void shm_allgather_direct(const detail::CommImpl& c, NodeShared& ns, const void* in, void* out,
                          const Layout& l);
// Blocks of `bytes` for every rank (`in` == nullptr: in place). Each round moves a piece of
// every block, all p of them in one chunk: only when a piece is at least a cache line.
bool shm_alltoall_fits(const detail::CommImpl& c, const NodeShared& ns);
void shm_alltoall(const detail::CommImpl& c, NodeShared& ns, const void* in, void* out,
                  std::size_t bytes);
// The same, each rank reading its blocks straight from the others' inputs with cross-memory
// attach (one copy instead of two through the chunks): every rank publishes where its input
// is, reads, and leaves once all have read its own. In place anywhere, or where cross-memory
// attach does not work between the members, it is shm_alltoall (decided alike on every rank).
void shm_alltoall_direct(const detail::CommImpl& c, NodeShared& ns, const void* in, void* out,
                         std::size_t bytes);

}  // namespace rmp::coll
