#include "collectives/node_shared.hpp"

#include <sched.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collectives/algorithms.hpp"
#include "collectives/half.hpp"
#include "collectives/reduce_ops.hpp"
#include "runtime/copy.hpp"
#include "runtime/cpu_place.hpp"
#include "runtime/fast_clock.hpp"
#include "runtime/huge_pages.hpp"
#include "runtime/measured_choice.hpp"
#include "runtime/node_segment.hpp"
#include "runtime/spin.hpp"

namespace rmp::coll {

std::size_t direct_call_bytes(const rt::Params& p) {
  return static_cast<std::size_t>(p.rndv_setup_us * 1e-6 * p.get_bw);
}

namespace {

constexpr std::size_t kLine = 64;
constexpr std::size_t kInline = kLine - sizeof(std::uint64_t);  // data beside the flag
constexpr std::size_t kMaxBytes = 4096;                         // per rank and parity
// Small bcasts go through a ring of kBcastSlots slots of kBcastSlot bytes in the root's small
// area, so that a root runs up to kBcastSlots calls ahead of the slowest receiver (the chunk
// path lets it run pipeline_depth rounds ahead, 2 by default: with more ranks than cores,
// every wait of the root for a receiver that has no core is a process switch).
constexpr std::size_t kBcastSlot = 1024;
constexpr std::size_t kBcastSlots = 16;
// Small reduces likewise go through a ring of slots in each contributor's small area, so that
// a rank that does not get the result leaves as soon as its contribution is in (the root
// alone waits), up to kReduceSlots calls ahead of the slowest root.
constexpr std::size_t kReduceSlot = 1024;
constexpr std::size_t kReduceSlots = 16;
// A path choice holds for at most kMaxRun calls of a size class before the decider announces
// it anew (PathChoice): the choice follows a change of the fastest path within that many calls.
constexpr std::uint64_t kMaxRun = 32;
constexpr int kSetupTag = 1 << 23;  // collective channel, clear of the algorithms' tags
constexpr int kMappedTag = kSetupTag + 1;
constexpr int kReuseTag = kSetupTag + 2;

struct alignas(kLine) FlagLine {
  std::atomic<std::uint64_t> gen;
  std::byte data[kInline];
};
static_assert(sizeof(FlagLine) == kLine);
// Small area per rank: two flag lines (one per call parity), the round line of the chunked
// paths, a decision line (rank 0's: the kind of store, see Call), a CPU line (where the rank
// runs, see where_awaited), the small-bcast lines (published as root, consumed), the
// small-reduce lines (contributed, consumed as root), then two data blocks, the small-bcast
// slots and the small-reduce slots.
constexpr std::size_t kSmallStride =
    4096 + 2 * kMaxBytes + kBcastSlots * kBcastSlot + kReduceSlots * kReduceSlot;
// Then the lines of the direct paths: a rank's pid, the address of a word of its memory
// for the probe (NodeShared::probe_direct), the probe's outcome, where its input is, where its
// result goes (shm_allreduce_direct, the root of shm_reduce_direct), and the last round in
// which it could not deliver its part into another rank's memory.
// Rank 0's cleared line counts the times its segment was cleared for a new communicator
// (NodeShared::reuse); the clear keeps it and the pid lines.
// Then the record of the rank's current call (CallScope, RecordLine).
// Then the tags of the small bcasts this rank published and of the small reduces it contributed
// to (CountLine).
constexpr std::size_t kPidLine = 9, kProbeLine = 10, kProbeResultLine = 11, kSourceLine = 12,
                      kResultLine = 13, kPushFailedLine = 14, kClearedLine = 15, kRecordLine = 16,
                      kPublishedTagsLine = 17, kContributedTagsLine = 18;
static_assert((kContributedTagsLine + 1) * sizeof(FlagLine) <= 4096);

// Call tags (CallSig): 16 bits of a hash of what the call was called with. A flag line's word
// holds the generation above them; the round line (TagLine) holds a tag per round (round mod
// kRoundTags) beside its count, and the small bcasts' and reduces' tag lines (TagLine) one per
// slot beside their published and contributed lines (CountLine, below, whose count holds the
// latest number's tag), each written before the count that says the round or slot is ready;
// those are mixed with the round's or slot's number (NodeShared::tag_for).
constexpr unsigned kTagBits = 16;
constexpr std::uint64_t kTagMask = (std::uint64_t{1} << kTagBits) - 1;
constexpr std::size_t kRoundTags = 16;
struct alignas(kLine) TagLine {
  std::atomic<std::uint64_t> gen;
  std::atomic<std::uint16_t> tag[(kLine - sizeof(std::uint64_t)) / sizeof(std::uint16_t)];
};
static_assert(sizeof(TagLine) == kLine && kRoundTags <= std::size(TagLine{}.tag));
// The small bcasts' published line and the small reduces' contributed lines: the latest
// number above its tag, and a bcast or a contribution of up to kSlotInline bytes beside it, so
// that a reader that finds it the latest reads one line moved from the writer's core, not two
// (the slot's too). Every number's tag also goes into a TagLine of its own, per slot, for a
// reader that finds a later number there (published_tags, contributed_tags), so that the
// count's line has room for 56 bytes (with the tags beside the count it had 24: a bcast of 32
// bytes, two cores near, took 1.13x OpenMPI's time; 0.84x with 56). The count and the data are a
// sequence lock: before writing the data of number b the writer sets the count to b - 1 with
// kBusyTag (below b's, above any earlier number's), so that a reader that read data of a later
// one sees the count changed and copies the slot instead. (Small bcasts are numbered on every
// rank, so b - 1 may be a bcast of another root: the line's count only grows all the same.)
constexpr std::size_t kSlotInline = 56;
struct alignas(kLine) CountLine {
  std::atomic<std::uint64_t> gen;
  std::atomic<std::uint64_t> data[kSlotInline / sizeof(std::uint64_t)];
};
static_assert(sizeof(CountLine) == kLine && kReduceSlots == kBcastSlots &&
              kBcastSlots <= std::size(TagLine{}.tag) &&
              offsetof(CountLine, data) == sizeof(std::uint64_t) &&
              sizeof(CountLine::data) == kLine - offsetof(CountLine, data));
constexpr std::uint64_t kBusyTag = kTagMask;

// Publishes number b with tag `tag` (its slot written already; the tag also into `tags`, for
// readers that find a later number), its data beside the count when `bytes` fit.
void publish_count(CountLine& l, TagLine& tags, std::uint64_t b, std::uint16_t tag, const void* buf,
                   std::size_t bytes) {
  tags.tag[b % kBcastSlots].store(tag, std::memory_order_relaxed);
  if (bytes <= kSlotInline) {
    // (The busy count released too: a reader of any earlier number that reads it must see
    // that one's slot and tag, written before.)
    std::uint64_t words[kSlotInline / 8] = {};
    if (bytes) std::memcpy(words, buf, bytes);
    l.gen.store((b - 1) << kTagBits | kBusyTag, std::memory_order_release);
    std::atomic_thread_fence(std::memory_order_release);  // the count before the data
    for (std::size_t i = 0; i < (bytes + 7) / 8; ++i)
      l.data[i].store(words[i], std::memory_order_relaxed);
  }
  l.gen.store(b << kTagBits | tag, std::memory_order_release);
}
// Whether count `seen` (read with acquire, not busy) is there with its data beside it: then
// the data is copied to `to`.
bool read_inline(const CountLine& l, std::uint64_t seen, void* to, std::size_t bytes) {
  if (bytes > kSlotInline) return false;
  std::uint64_t words[kSlotInline / 8];
  for (std::size_t i = 0; i < (bytes + 7) / 8; ++i)
    words[i] = l.data[i].load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (l.gen.load(std::memory_order_relaxed) != seen) return false;
  if (bytes) std::memcpy(to, words, bytes);
  return true;
}
// Whether a count read is number b itself (not a later one, not a busy one).
bool count_is(std::uint64_t seen, std::uint64_t b) {
  return seen >> kTagBits == b && (seen & kTagMask) != kBusyTag;
}
// The tag of number b as a reader that read count `seen` (b's or a later one, with acquire)
// finds it: beside the count while that is b itself, else in the slot tags.
std::uint64_t number_tag(std::uint64_t seen, const TagLine& tags, std::uint64_t b) {
  return count_is(seen, b) ? seen & kTagMask
                           : tags.tag[b % kBcastSlots].load(std::memory_order_relaxed);
}
// A rank's record of its current call, written as a sequence lock: `begun` first, then the
// fields, then `call` (a reader whose `begun` differs from the `call` it read saw a write
// under way). `what` packs the collective, the element type + 1, the op + 1, the compression
// and the root + 1; `out_of_step` is 1 once the state is out of step at this rank
// (NodeShared::mark_out_of_step), the call's fields kept, so that the others can still say
// how it differed.
struct alignas(kLine) RecordLine {
  std::atomic<std::uint64_t> call, begun, what, bytes, counts, esize, out_of_step;
};
static_assert(sizeof(RecordLine) == kLine);

// Chunk geometry of the chunked paths, from the job's parameters (the same on every rank):
// rounds of fragment_size bytes, pipeline_depth buffers per rank (at least two, so that a
// round's copies overlap the next round's), clamped like the shm transport's chunks so that
// a communicator's segment stays modest at the knobs' extremes.
std::size_t chunk_bytes(const rt::Params& p) {
  const std::size_t c = std::clamp<std::size_t>(p.fragment_size, 4096, std::size_t(1) << 20);
  return c / kLine * kLine;
}
constexpr std::size_t kMaxChunks = 16;
std::size_t chunk_count(const rt::Params& p) {
  return std::clamp<std::size_t>(p.pipeline_depth, 2, kMaxChunks);
}
// Blocks of the direct allreduce and reduce. Every block a rank reads from or writes into
// another rank's memory is a cross-memory-attach call: a block is long enough that its fixed
// cost stays under an eighth of its copy at get_bw (direct_call_bytes), and at least a quarter
// chunk (then its three scratch blocks and the result block take the cache one chunk of the
// chunked paths takes), at most 1 MiB (scratch of 4 MiB a rank). Two ranks, doubles, reduce
// of 4 MiB (medians of interleaved runs): 32 KiB blocks (a quarter chunk, as before; pushed)
// 1854 us far, 636-642 near; 512 KiB, sliced, 264-313 far, 270-316 near (OpenMPI 383-406 far,
// 388-442 near).
std::size_t direct_block_bytes(const rt::Params& p) {
  const std::size_t b = std::max(chunk_bytes(p) / 4, 8 * direct_call_bytes(p));
  return std::min(b, std::size_t(1) << 20) / kLine * kLine;
}
// The tag of round number N is written again under number N + kRoundTags (as a round's first
// or last number), and whoever writes it has first waited for every rank's end of a number
// of at least N (wait_chunk_free: number + kRoundTags − chunks, or the round before): no rank
// still checks N's tag then.
static_assert(kMaxChunks <= kRoundTags);

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finaliser
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A rank's record of a call (RecordLine), as read.
struct Record {
  std::uint64_t call = 0, what = 0, bytes = 0, counts = 0, esize = 0;
  bool out_of_step = false;
  Coll kind() const { return static_cast<Coll>(what & 0xff); }
  int type() const { return static_cast<int>(what >> 8 & 0xff) - 1; }
  int op() const { return static_cast<int>(what >> 16 & 0xff) - 1; }
  int comp() const { return static_cast<int>(what >> 24 & 0xff); }
  int root() const { return static_cast<int>(what >> 32) - 1; }
  bool same_call(const Record& o) const {
    return what == o.what && bytes == o.bytes && counts == o.counts && esize == o.esize;
  }
};

Record record_of(std::uint64_t call, const CallSig& s) {
  const auto byte = [](int v) { return static_cast<std::uint64_t>(v) & 0xff; };
  return {call,
          static_cast<std::uint64_t>(s.kind) | byte(s.type + 1) << 8 | byte(s.op + 1) << 16 |
              byte(s.comp) << 24 | static_cast<std::uint64_t>(s.root + 1) << 32,
          s.bytes,
          s.counts,
          s.esize,
          false};
}

std::uint16_t tag_of(const Record& r) {
  const std::uint64_t h = mix(r.what ^ mix(r.bytes ^ mix(r.counts ^ mix(r.esize))));
  return static_cast<std::uint16_t>(h ^ h >> 16 ^ h >> 32 ^ h >> 48);
}

// The error of a call that waits for rank q, whose state is out of step after a collective
// that failed there (for another rank's difference, in this call or an earlier one).
Error failed_there_error(const Record& mine, int q) {
  return Error(Errc::invalid_comm, std::string(coll_name(mine.kind())) + ": rank " +
                                       std::to_string(q) +
                                       " can no longer take part: an earlier collective on "
                                       "this communicator failed there (its error says why)");
}

// The error of a call whose rank q was called differently: what differs when q's record of
// the same call is known (`theirs`), else that it differs; `left`: q has gone on to later
// calls without what this rank waits for from it in this one. A record of the same call that
// does not differ and is out of step: q failed for another rank's difference.
Error mismatch_error(const Record& mine, int q, const Record* theirs, bool left) {
  const std::string call = coll_name(mine.kind()), rank = "rank " + std::to_string(q);
  const char* const hint =
      " (every rank must make the same collective calls in the same order, with the same "
      "count, root, element type and op; RMP_COLL_CHECK=1 compares them before each call)";
  if (theirs && theirs->out_of_step && theirs->same_call(mine)) return failed_there_error(mine, q);
  auto fail = [&](Errc code, const std::string& what) {
    return Error(code, call + ": " + what + hint);
  };
  if (!theirs)
    return fail(Errc::invalid_argument,
                rank + (left ? " left this call without what this rank waits for from it: it "
                               "was called differently there"
                             : " was called differently (another collective, or another "
                               "count, root, element type or op)"));
  const Record& o = *theirs;
  const std::string nth =
      " as its collective number " + std::to_string(mine.call) + " on this communicator";
  if (o.kind() != mine.kind())
    return fail(Errc::invalid_argument,
                rank + " called " + coll_name(o.kind()) + nth + ", this rank " + call);
  if (o.root() != mine.root())
    return fail(Errc::invalid_rank, "root: " + rank + " passed " + std::to_string(o.root()) +
                                        ", this rank " + std::to_string(mine.root()));
  if (o.type() != mine.type() && o.type() >= 0 && mine.type() >= 0)
    return fail(Errc::invalid_argument, "element type: " + rank + " passed " +
                                            type_name(static_cast<detail::Type>(o.type())) +
                                            ", this rank " +
                                            type_name(static_cast<detail::Type>(mine.type())));
  if (o.op() != mine.op() && o.op() >= 0 && mine.op() >= 0)
    return fail(Errc::invalid_argument, "op: " + rank + " passed " +
                                            op_name(static_cast<Op>(o.op())) + ", this rank " +
                                            op_name(static_cast<Op>(mine.op())));
  if (o.comp() != mine.comp())
    return fail(Errc::invalid_argument,
                "compression: " + rank + " passed " + std::to_string(o.comp()) + ", this rank " +
                    std::to_string(mine.comp()) + " (0 none, 1 fp16, 2 bf16)");
  const bool arrays = mine.kind() == Coll::allgatherv || mine.kind() == Coll::reduce_scatter;
  auto amount = [](const Record& r) {
    return r.esize && r.bytes % r.esize == 0
               ? std::to_string(r.bytes / r.esize) + " (" + std::to_string(r.bytes) + " bytes)"
               : std::to_string(r.bytes) + " bytes";
  };
  if (o.bytes != mine.bytes)
    return fail(Errc::invalid_count,
                arrays ? "counts: " + rank + "'s add up to " + amount(o) + ", this rank's to " +
                             amount(mine)
                       : "count: " + rank + " passed " + amount(o) + ", this rank " + amount(mine));
  return fail(Errc::invalid_count,
              (arrays ? "counts: " : "count: ") + rank + "'s differ from this rank's");
}

}  // namespace

// Generations and rounds. Every member makes the same calls in the same order, so each
// counts the same generations (barrier, small allreduce) and rounds (chunked paths).
//  - Small paths: generation g lives in parity g & 1; a rank that has seen everyone arrive
//    at g − 1 knows nobody still reads g − 2, whose buffers g reuses.
//  - Chunked paths: round R uses chunk R mod D of each rank. A rank's round line holds
//    3R + phase for the latest round it reached: 1 = its chunk holds its input, 2 = its chunk
//    holds its share of the result (allreduce), 3 = it is done reading round R's chunks.
//    Before writing its chunk for round R a rank waits until everyone is done with round
//    R − D, the last one that used it. A call that fits all D chunks runs in one round over
//    several of them, numbered first..last (NodeShared::Round): its phases 1 and 2 count as
//    first's, its end as last's, and numbers it skips are nobody's; a later round then waits
//    for the end of R − D or, when that number was skipped, of the round before.
//
// Stores into chunks. A chunk written with ordinary stores stays in the writer's cache, and
// the readers pull it from there line by line; when the two cores sit far apart (this VM's
// vCPUs change placement every few tens of seconds) that traffic collapses to 4-5 GB/s, and
// the writer's next stores into the same lines must first take them back from the readers.
// Streaming stores send the lines to memory instead: slower when the cores are near (a
// 1 MiB bcast between two ranks: 33 us cached, 65-100 us streaming), much faster when they
// are far (200-290 us cached). So the kind of store is chosen per collective and size class
// from the times calls took (runtime/measured_choice.hpp): as one of the paths where a call
// chooses its path (PathChoice, force_store), else by the call's own store choice (Call);
// RMP_COLL_STORE forces one. Any reader copies any chunk correctly; an exchange's readers
// take the faster copy kernel for the call's kind of store (copy_out).
class NodeShared {
public:
  enum class Use : std::uint8_t {
    allreduce,
    reduce,
    bcast,
    allgather,
    alltoall,
    reduce_scatter,
    allreduce_compressed
  };
  static constexpr std::size_t kUses = 7;
  static constexpr int kCached = 0, kStreaming = 1;
  using Clock = std::chrono::steady_clock;

  // `track_cpus`: waits give the core away (wait mode yield or block, as where ranks outnumber
  // cores), so they ask where the awaited ranks run (where_awaited), and arrivals publish where
  // this one runs. `p2p_paths`: calls may take point-to-point instead of the node-shared path, as
  // measured (PathChoice: not when ranks share cores).
  NodeShared(std::unique_ptr<rt::NodeSegment> seg, std::size_t chunk, std::size_t nchunks,
             std::size_t direct_block, unsigned store_modes, bool track_cpus, bool p2p_paths)
      : seg_(std::move(seg)),
        chunk_(chunk),
        nchunks_(nchunks),
        direct_block_(direct_block),
        stride_(kSmallStride + nchunks * chunk),
        track_cpus_(track_cpus) {
    // A burst of 2 calls in about 64 (after 32 to 95) re-measures the other kind of store:
    // its first call pays for lines the last one left in the wrong place, the second shows
    // its speed (averaged in: one sample is too few for a median). Cached stores stay unless
    // streaming ones are clearly faster: the choosing rank times its own
    // call, which does not see all of what streaming costs the readers (with the cores near,
    // allgather of 64 KiB: 10.5 us chosen without the margin, 8.8 us cached; far apart
    // streaming wins by 1.5-2x).
    for (auto& c : store_choice_)
      c = StoreChoice(store_modes, {.period = 64, .burst = 2, .favour = kCached, .margin = 0.15});
    own_cores_ = p2p_paths;
    store_modes_ = store_modes;
    for (std::size_t i = 0; i < path_times_.size(); ++i)
      set_paths(i, p2p_paths ? 1u << kShmPath | 1u << kP2pPath : 1u << kShmPath);
    // Not an allreduce nor a floating reduce: point-to-point combines floating values in
    // another order, and two equal calls must give equal bits. They choose between their
    // node-shared paths alone.
    set_paths(path_index(Coll::allreduce), 1u << kShmPath);
    set_paths(path_index(Coll::reduce, false), 1u << kShmPath);
  }

  NodeShared(const NodeShared&) = delete;
  NodeShared& operator=(const NodeShared&) = delete;

  // A communicator's node-shared state outlives it in a pool (NodeSharedPool) and serves a later
  // communicator of the same members, its segment and what it measured (the paths' and stores'
  // times, whether the direct paths work) kept; what belongs to the calls of the one before goes.
  // By every member once it knows that all have let go of the old communicator (no call of it
  // can still use the segment): its counts of calls, rounds and slots from zero, as the
  // segment's; rank 0 clears every rank's small area but its pid line (the same processes) and
  // its own cleared line, to zeros as in a new segment, and then counts the reuse in its
  // cleared line. `told`: this member hears that the clear is done by message (node_shared's
  // agreement); else (a dup's, KeptState) its first call on the state waits for that count.
  // The chunks' contents do not matter.
  void reuse(const CommImpl& c, bool told) {
    restart();
    ++reuses_;
    adopted_ = !told;
    if (c.rank() != 0) return;
    if (!told) [[unlikely]]
      if (const int ms = clear_delay_ms_.load(std::memory_order_relaxed))
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    for (int r = 0; r < c.size(); ++r) {
      std::byte* b = base(r);
      std::memset(b, 0, kPidLine * kLine);
      std::memset(b + (kPidLine + 1) * kLine, 0, (kClearedLine - kPidLine - 1) * kLine);
      std::memset(b + (kClearedLine + 1) * kLine, 0, kSmallStride - (kClearedLine + 1) * kLine);
    }
    line(0, kClearedLine).gen.store(reuses_, std::memory_order_release);
  }
  // Whether the state was adopted by a dup and serves its first call now (first_call).
  bool adopted() const { return adopted_; }
  // The first call on an adopted state counts its reuse (where the call uses it: a dup whose
  // calls all take point-to-point algorithms does not count) and, but at rank 0, waits for
  // rank 0's clear.
  void first_call(const CommImpl& c) {
    if (c.rank() != 0)
      wait_one(
          c, [&](int q) -> std::atomic<std::uint64_t>& { return line(q, kClearedLine).gen; }, 0,
          reuses_);
    adopted_ = false;  // (after the wait: one ended by an error is waited for again)
    rt::count_shared(c.engine().context().counters().coll_segments_reused, 1);
    rt::count_shared(c.engine().context().counters().coll_segments_adopted, 1);
  }
  // set_kept_clear_delay (node_shared.hpp)
  static void set_clear_delay(std::chrono::milliseconds d) {
    clear_delay_ms_.store(static_cast<int>(d.count()), std::memory_order_relaxed);
  }

  std::size_t segment_bytes() const { return seg_->size(); }
  static std::size_t bytes_for(int ranks, std::size_t chunk, std::size_t nchunks) {
    return static_cast<std::size_t>(ranks) * (kSmallStride + nchunks * chunk);
  }

  FlagLine& flag(int rank, std::uint64_t gen) { return line(rank, gen & 1); }
  std::byte* block(int rank, std::uint64_t gen) {
    return base(rank) + 4096 + (gen & 1) * kMaxBytes;
  }
  // Where a small call of generation `gen` puts rank `rank`'s data: beside its flag when the
  // call's data fits there (`inline_data`, at most kInline bytes a rank), else in its block.
  std::byte* small_slot(int rank, std::uint64_t gen, bool inline_data) {
    return inline_data ? flag(rank, gen).data : block(rank, gen);
  }
  std::uint64_t next_gen() { return ++gen_; }

  // Flags hold the generation above the call's tag. A rank that has arrived has its flag of
  // this parity at generation g (none is written again before all arrive at g + 1) and its
  // tag, compared with this call's in the load that saw it arrive. (A second pass over the
  // flags once all had arrived cost ~10 % of a 2-rank barrier or 8-byte allreduce, cores far
  // apart, 12 interleaved rounds.)
  void arrive_and_wait(const CommImpl& c, std::uint64_t g) {
    if (track_cpus_) publish_cpu(c);
    flag(c.rank(), g).gen.store(g << kTagBits | tag_, std::memory_order_release);
    int differs = -1;
    wait_all_until(c, [&](int q) {
      const std::uint64_t f = flag(q, g).gen.load(std::memory_order_acquire);
      if (f < g << kTagBits) return true;
      if ((f & kTagMask) != tag_ && differs < 0) [[unlikely]]
        differs = q;
      return false;
    });
    if (differs >= 0) [[unlikely]]
      mismatch(c, differs);
  }

  // This call's tag for round, slot or small call number n: a tag left in a ring by a call
  // kRoundTags (or kBcastSlots, kReduceSlots) numbers before, with the same arguments, does
  // not pass for this one's (a rank that is no root now still holds the tags of the bcasts it
  // was root of).
  std::uint16_t tag_for(std::uint64_t n) const {
    return static_cast<std::uint16_t>(tag_ ^ n * 0x9E37u);
  }

  // ---- Call records (CallScope) ----
  // Records this rank's call `s` and makes it the one its tags name; throws when an earlier
  // call left the state out of step (its record, kept, says so and how that call differed).
  void begin_call(const CommImpl& c, const CallSig& s) {
    const Record r = record_of(++calls_, s);
    if (out_of_step_) [[unlikely]] {
      throw Error(Errc::invalid_comm,
                  std::string(coll_name(s.kind)) +
                      ": this communicator is out of step after an earlier collective on it "
                      "failed here (its ranks were called differently: that error says how); "
                      "free it and use another");
    }
    idle_since_ = {};
    if (r.same_call(cur_)) {  // the call before's fields and tag: only its number changes
      cur_.call = r.call;
      write_call_number(c, r.call);
      return;
    }
    write_record(c, r);
    cur_ = r;
    tag_ = tag_of(r);
  }
  // Every 256 polls of a wait in the call: stalled() once the wait (a point-to-point path's
  // call: CallScope::watch_p2p) has gone on kGrace since its first tick. Not
  // before the state's first call (call 0): the waits of its creation, and a dup's first wait
  // for rank 0 to clear a kept state, whose records are still the last communicator's.
  void stall_tick(const CommImpl& c) {
    if (cur_.call == 0) return;
    const rt::FastClock::time_point now = rt::FastClock::now();
    if (idle_since_ == rt::FastClock::time_point{}) idle_since_ = now;
    if (now - idle_since_ >= CallScope::kGrace) stalled(c);
  }
  // The thread's StallTest while a call waits (CallScope): throws when a rank was called
  // differently in this call (its record holds the same call number with another CallSig),
  // when a rank this call waits for has gone on to later calls, or when the state is out of
  // step at a rank.
  // (A rank called differently is named before one that failed for another's difference.)
  void stalled(const CommImpl& c) {
    int left = -1, failed = -1;
    for (int q = 0; q < c.size(); ++q) {
      if (q == c.rank()) continue;
      Record o;
      if (!read_record(q, o)) continue;  // being written: next time
      if (o.call == cur_.call && !o.same_call(cur_)) {
        mark_out_of_step(c);
        throw mismatch_error(cur_, q, &o, false);
      }
      if (failed < 0 && o.out_of_step) failed = q;
      if (left < 0 && o.call > cur_.call && awaiting_ && awaiting_->awaits(q)) left = q;
    }
    if (left < 0 && failed < 0) return;
    mark_out_of_step(c);
    if (failed < 0) throw mismatch_error(cur_, left, nullptr, true);
    throw failed_there_error(cur_, failed);  // whichever call it failed in
  }

  // ---- Small bcasts ----
  // Small bcast number b (counted alike on every rank) uses slot b mod kBcastSlots of its
  // root. The root publishes b (above the call's tag) in its published line once the slot
  // holds the data; a rank that copied it out (the root: once it wrote it) sets its consumed
  // line to b. Before writing slot b the root waits until every rank consumed bcast b -
  // kBcastSlots, the last one that may have used that slot (ranks consume small bcasts in order).
  static constexpr std::size_t small_bcast_max() { return kBcastSlot; }
  std::uint64_t next_small_bcast() { return ++small_bcast_; }
  std::byte* bcast_slot(int rank, std::uint64_t b) {
    return base(rank) + 4096 + 2 * kMaxBytes + (b % kBcastSlots) * kBcastSlot;
  }
  void small_bcast_root(const CommImpl& c, const void* buf, std::size_t bytes, std::uint64_t b) {
    if (b > kBcastSlots) {
      wait_all(
          c, [this](int q) -> std::atomic<std::uint64_t>& { return consumed_line(q); },
          b - kBcastSlots);
    }
    copy_bytes(bcast_slot(c.rank(), b), buf, bytes);
    if (track_cpus_) publish_cpu(c);
    publish_count(published_line(c.rank()), published_tags(c.rank()), b, tag_for(b), buf, bytes);
    consumed_line(c.rank()).store(b, std::memory_order_release);
  }
  void small_bcast_receive(const CommImpl& c, void* buf, std::size_t bytes, int root,
                           std::uint64_t b) {
    // The published line holds the latest bcast's number above its tag: this one's tag there,
    // or in the root's slot tags when it has published later ones since or is writing a later
    // one's data (busy). Still the latest, it may have its data beside the count (read_inline),
    // else the slot serves.
    CountLine& pl = published_line(root);
    std::uint64_t seen = 0;
    wait_one_until(c, root, [&](int q) {
      seen = published_line(q).gen.load(std::memory_order_acquire);
      return seen < b << kTagBits;
    });
    if (number_tag(seen, published_tags(root), b) != tag_for(b)) [[unlikely]]
      mismatch(c, root);
    const bool copied = count_is(seen, b) && read_inline(pl, seen, buf, bytes);
    if (!copied) rt::copy_from_peer(buf, bcast_slot(root, b), bytes);
    if (track_cpus_) publish_cpu(c);
    consumed_line(c.rank()).store(b, std::memory_order_release);
  }

  // ---- Small reduces ----
  // Small reduce number b (counted alike on every rank) uses slot b mod kReduceSlots of every
  // rank. A rank copies its contribution there and sets its contributed line to b (above the
  // call's tag); the root waits until every rank contributed b, reduces the slots in rank
  // order and sets its consumed line to b. Before writing slot b a rank waits until the root of
  // reduce b - kReduceSlots (every rank remembers the last kReduceSlots roots) consumed it.
  static constexpr std::size_t small_reduce_max() { return kReduceSlot; }
  std::uint64_t next_small_reduce() { return ++small_reduce_; }
  std::byte* reduce_slot(int rank, std::uint64_t b) {
    return base(rank) + 4096 + 2 * kMaxBytes + kBcastSlots * kBcastSlot +
           (b % kReduceSlots) * kReduceSlot;
  }
  void small_reduce_contribute(const CommImpl& c, const void* in, std::size_t bytes, int root,
                               std::uint64_t b) {
    int& slot_root = reduce_roots_[b % kReduceSlots];
    if (b > kReduceSlots) {
      wait_one(
          c, [this](int q) -> std::atomic<std::uint64_t>& { return reduce_consumed_line(q); },
          slot_root, b - kReduceSlots);
    }
    slot_root = root;
    if (bytes) copy_bytes(reduce_slot(c.rank(), b), in, bytes);
    if (track_cpus_) publish_cpu(c);
    publish_count(contributed_line(c.rank()), contributed_tags(c.rank()), b, tag_for(b), in, bytes);
  }
  // At the root, once every rank contributed b: rank q's contribution, from beside its count
  // while that is still b (into `scratch`, kSlotInline bytes), else from its slot.
  const std::byte* contribution(int q, std::uint64_t b, std::size_t bytes, std::byte* scratch) {
    if (bytes > kSlotInline) return reduce_slot(q, b);
    CountLine& l = contributed_line(q);
    const std::uint64_t seen = l.gen.load(std::memory_order_acquire);
    return count_is(seen, b) && read_inline(l, seen, scratch, bytes) ? scratch : reduce_slot(q, b);
  }
  // At the root, after its own contribution: waits for everyone's, and compares their tags
  // (as small_bcast_receive: in the contributed line, or in the slot tags of a rank that has
  // contributed to later reduces since).
  void small_reduce_wait_all(const CommImpl& c, std::uint64_t b) {
    int differs = -1;
    wait_all_until(c, [&](int q) {
      const std::uint64_t v = contributed_line(q).gen.load(std::memory_order_acquire);
      if (v < b << kTagBits) return true;
      if (number_tag(v, contributed_tags(q), b) != tag_for(b) && differs < 0) [[unlikely]]
        differs = q;
      return false;
    });
    if (differs >= 0) [[unlikely]]
      mismatch(c, differs);
  }
  void small_reduce_consumed(const CommImpl& c, std::uint64_t b) {
    reduce_consumed_line(c.rank()).store(b, std::memory_order_release);
  }

  // ---- Path choice (PathChoice) ----
  // The chunks with cached stores (kShmPath) and with streaming ones (kStreamPath) are two paths
  // of one choice, where the kinds of store are both allowed (RMP_COLL_STORE=auto) and there is a
  // choice of paths at all: a call that takes either has its kind of store set by the path
  // (force_store) and does not ask the store's own choice. Nested, the path's choice judged the
  // chunks on whichever kind of store the store's choice was trying: far apart, its warm-up of
  // cached stores (500-900 us a call, allgather of 1 MiB, 2 ranks, against 80-95 with streaming
  // ones) put the chunks 5x behind, and they were not measured again within a run (chosen 110.8
  // us a call, the chunks forced 78.8).
  static constexpr int kShmPath = 0, kP2pPath = 1, kDirectPath = 2, kStreamPath = 3;
  using PathTimes = rt::MeasuredChoice<4>;
  static bool chunks_path(int path) { return path == kShmPath || path == kStreamPath; }
  // The paths open to calls of index i (path_index; bit m for path m): a choice needs two.
  unsigned paths(std::size_t i) { return path_enabled_[i]; }
  PathTimes& path_times(std::size_t i) { return path_times_[i]; }
  // The run of calls of index i and size class `bucket` (PathTimes::bucket_of) the last
  // announced path still has to serve, kept alike on every rank (PathChoice).
  struct PathRun {
    std::uint8_t path = 0;
    std::uint32_t left = 0;
  };
  PathRun& path_run(std::size_t i, std::size_t bucket) { return path_runs_[i][bucket]; }
  // `exact`: a reduction of an exact type (a floating one has its own choice, without
  // point-to-point: see PathChoice).
  static std::size_t path_index(Coll k, bool exact = true) {
    switch (k) {
      case Coll::bcast:
        return 0;
      case Coll::reduce:
        return exact ? 1 : 5;
      case Coll::alltoall:
        return 2;
      case Coll::allreduce:
        return 4;
      default:
        return 3;  // allgather(v)
    }
  }

  // ---- The direct paths (shm_*_direct: bcast, reduce, allreduce, allgather, alltoall) ----
  bool direct_ok() const { return direct_ok_; }
  bool own_cores() const { return own_cores_; }
  // Set by PathChoice at a bcast's root where it times the call: shm_bcast's root then waits
  // until every rank has read its chunks (bcast_decider).
  bool root_waits() const { return root_waits_; }
  void set_root_waits(bool w) { root_waits_ = w; }
  // Publishes `in` (`bytes` long) for the other ranks to read with cross-memory attach. A
  // buffer published again and again has its 2 MiB blocks moved onto huge pages, which that
  // reads ~2x faster here (runtime/huge_pages.hpp; bcast of 4 MiB with the benchmark's
  // buffers on huge pages: 74 us against 116-190).
  void set_source(const CommImpl& c, const void* in, std::size_t bytes) {
    on_huge_pages(c, in, bytes);
    publish(c, kSourceLine, in, bytes);
  }
  const void* source(int rank) { return published(rank, kSourceLine); }
  // Publishes `out` (`bytes` long) for the other ranks to write into (as set_source).
  void set_result(const CommImpl& c, void* out, std::size_t bytes) {
    on_huge_pages(c, out, bytes);
    publish(c, kResultLine, out, bytes);
  }
  void set_huge_pages(rt::HugePages* h) { huge_ = h; }
  std::byte* result(int rank) {
    return static_cast<std::byte*>(const_cast<void*>(published(rank, kResultLine)));
  }
  // Copies n bytes at `remote` in rank `rank`'s process to `local`. A failure is kept for
  // direct_done() and skips the copies after it: a rank that threw here, before its last
  // marks, would leave the others waiting for them, or still writing into its buffers after
  // the caller let go of them. Only within the buffer the rank published (set_source): ranks
  // called with different counts whose tags agree by chance (check_round) read no further.
  void read_direct(int rank, const void* remote, void* local, std::size_t n) {
    if (direct_err_) return;
    if (!within(rank, kSourceLine, remote, n)) [[unlikely]]
      return note_error(rank, kOverrun);
    note_error(rank, rt::read_member_memory(pid_of(rank), remote, local, n));
  }
  // Copies n bytes at `local` to `remote` in rank `rank`'s process (as read_direct), within
  // the buffer it published (set_result): never past another rank's buffer.
  void write_direct(int rank, const void* local, void* remote, std::size_t n) {
    if (direct_err_) return;
    if (!within(rank, kResultLine, remote, n)) [[unlikely]]
      return note_error(rank, kOverrun);
    note_error(rank, rt::write_member_memory(pid_of(rank), local, remote, n));
  }
  bool direct_failed() const { return direct_err_ != 0; }
  // At the end of a direct path, once this rank's last mark is set and waited for: throws
  // rmp::Error for the first copy that failed in this call.
  void direct_done() {
    if (!direct_err_) return;
    const int err = direct_err_, rank = direct_err_rank_;
    direct_err_ = 0;
    if (err == kOverrun)
      throw Error(Errc::invalid_count,
                  std::string(coll_name(cur_.kind())) + ": count: rank " + std::to_string(rank) +
                      "'s buffer is shorter than this rank's count says (the ranks were called "
                      "with different counts; RMP_COLL_CHECK=1 compares them before each call)");
    throw Error(Errc::transport, "collectives: cross-memory attach with rank " +
                                     std::to_string(rank) + " failed: " + std::strerror(err));
  }
  // The round of the last direct call in which this rank could not write (or read) its part
  // into another rank's memory: a direct reduce's non-root, a split bcast's root.
  void set_push_failed(const CommImpl& c, std::uint64_t round) {
    set_line(c, kPushFailedLine, round);
  }
  std::uint64_t push_failed(int rank) {
    return line(rank, kPushFailedLine).gen.load(std::memory_order_acquire);
  }
  // This rank's scratch space for the direct paths, at least `bytes` of it.
  std::byte* scratch(std::size_t bytes) {
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    return scratch_.data();
  }
  // Collective, once, right after construction: every member publishes its pid, reads a
  // word of the next member's memory with cross-memory attach and writes it back. The direct
  // paths are open only when `allowed` (RMP_SHM_CMA) and every member's read and write worked
  // (ptrace rules may forbid them); then the path choices of alltoall, and where ranks have
  // cores of their own of reduce, allreduce, allgather and bcast, have them too. (The bcast's
  // only there, in place of its chunks: its decider, a receiver, does not see the root wait
  // for every read; with 4 ranks on 2 cores the choice took the direct bcast and ran
  // 1.24-1.32 x slower than the chunks. With cores of their own a root waiting is idle, and
  // the next call's late start shows in the receiver's time.)
  void probe_direct(const CommImpl& c, bool allowed) {
    const int n = c.size(), r = c.rank();
    probe_word_ = kProbeMagic;
    line(r, kPidLine).gen.store(static_cast<std::uint64_t>(::getpid()), std::memory_order_relaxed);
    line(r, kProbeLine)
        .gen.store(reinterpret_cast<std::uint64_t>(&probe_word_), std::memory_order_relaxed);
    arrive_and_wait(c, next_gen());
    bool ok = allowed;
    if (ok) {
      const int q = (r + 1) % n;
      std::uint64_t v = 0;
      const auto* remote =
          reinterpret_cast<const void*>(line(q, kProbeLine).gen.load(std::memory_order_relaxed));
      const auto pid = static_cast<int>(line(q, kPidLine).gen.load(std::memory_order_relaxed));
      // Both ways: the allreduce writes into the others' results.
      ok = rt::read_member_memory(pid, remote, &v, sizeof v) == 0 && v == kProbeMagic &&
           rt::write_member_memory(pid, &v, const_cast<void*>(remote), sizeof v) == 0;
    }
    line(r, kProbeResultLine).gen.store(ok ? 1 : 2, std::memory_order_relaxed);
    arrive_and_wait(c, next_gen());
    for (int q = 0; q < n; ++q)
      if (line(q, kProbeResultLine).gen.load(std::memory_order_relaxed) != 1) return;
    direct_ok_ = true;
    // The alltoall's direct path with ranks sharing cores too; the others' only where ranks
    // have cores of their own. With ranks sharing cores every extra synchronisation is a
    // process switch, and the choice added one a call (the decider's small bcast, before it
    // was told once a run): 4 ranks on 2 cores, interleaved with the choice-less paths of
    // before, 6 pairs, 64 KiB / 1 MiB: reduce 1.57 / 1.20, allreduce 1.24 / 1.18, allgather
    // 1.13 / 1.08 of their time. The alltoall's direct path wins back more than that
    // (0.64-0.82). Forced, the direct reduce, allreduce and allgather there still ran 1.1-2.6x
    // the node-shared paths' time (3 runs each at 64 KiB and 1 MiB).
    for (const std::size_t a :
         {path_index(Coll::alltoall), path_index(Coll::allreduce), path_index(Coll::allgather),
          path_index(Coll::reduce), path_index(Coll::reduce, false)}) {
      if (!own_cores_ && a != path_index(Coll::alltoall)) continue;
      set_paths(a, path_enabled_[a] | 1u << kDirectPath);
    }
    // The bcast's direct path takes the place of its chunks where ranks have cores of their
    // own: it was the faster of the two at every size measured (2 ranks, both forced, in
    // interleaved runs: 8 KiB 1.0-1.2 against 1.7 us, 64 KiB 3.5-3.6 against 10, 1 MiB 30
    // against 62-88), so a choice among three paths would only have paid for tries of the
    // chunks. With ranks sharing cores it is chosen between it and the chunks: neither wins
    // everywhere (4 ranks on 2 cores, where a system call costs 0.06 us, both forced, 4
    // interleaved rounds: direct at 0.83 / 0.65 / 1.12 / 1.15 / 0.60 of the chunks' time at
    // 16 / 64 / 256 KiB / 1 / 4 MiB; the choice 0.99 / 0.91 / 0.79 / 0.98 / 0.71). (Where a
    // system call cost ~1 us, the choice took the direct path there and ran 1.24-1.32x
    // slower than the chunks: the decider, a reader, does not see the root wait for every
    // read.)
    const std::size_t a = path_index(Coll::bcast);
    set_paths(a, (own_cores_ ? path_enabled_[a] & ~(1u << kShmPath) : path_enabled_[a]) |
                     1u << kDirectPath);
  }

  // ---- Chunked paths ----
  std::size_t chunk() const { return chunk_; }
  std::size_t chunks() const { return nchunks_; }
  std::size_t direct_block() const { return direct_block_; }
  static std::uint64_t mark(std::uint64_t round, int phase) { return 3 * round + phase; }
  // A round over `span` chunks of every rank side by side (1 to chunks()): it takes the
  // numbers first..last, after any it skips so that its chunks do not wrap around. Its
  // phases 1 and 2 are marked under `first`, its end (3) under `last`. Before it writes, it
  // waits for the end of number last − chunks(), or of the round before when that number was
  // skipped (`reuses`): a rank's line reaches that mark once it has ended the round holding
  // the number or begun a later one, so every earlier round that used one of these chunks has
  // ended there. (A round of one chunk skips nothing: it waits for number first − chunks().)
  struct Round {
    std::uint64_t first = 0, last = 0, reuses = 0;  // first 0: none yet; reuses 0: none
    std::uint64_t mark(int phase) const {
      return NodeShared::mark(phase < 3 ? first : last, phase);
    }
  };
  // The chunks each round of a call that moves `bytes` a rank spans: all it needs when the
  // call fits this rank's chunks (one round), else one. The chunks bound the segment's memory;
  // rounds beyond that only add waits (docs/performance.md, runs of 2026-12-06 09:37: 2 ranks,
  // 1 MiB through the two default chunks, allreduce 55 us against 60 in two rounds, allgather
  // 68 against 73; 2 MiB through 8 chunks, 122 against 140 and 181 against 194).
  std::size_t span_for(std::size_t bytes) const {
    const std::size_t need = (bytes + chunk_ - 1) / chunk_;
    return need >= 1 && need <= nchunks_ ? need : 1;
  }
  Round next_round(std::size_t span = 1) {
    const std::uint64_t before = round_;
    std::uint64_t first = before + 1;
    if (first % nchunks_ + span > nchunks_) first += nchunks_ - first % nchunks_;
    round_ = first + span - 1;
    return {first, round_, round_ > nchunks_ ? std::min(round_ - nchunks_, before) : 0};
  }
  std::byte* chunk_of(int rank, const Round& r) {
    return base(rank) + kSmallStride + (r.first % nchunks_) * chunk_;
  }
  // With the round's tag (for check_round), every rank's, the bcast's readers' too: a rank
  // that a reader takes for the root by mistake then shows this call's tag, not one it left
  // as root of a bcast before.
  void set_mark(const CommImpl& c, std::uint64_t v) {
    if (track_cpus_) publish_cpu(c);
    const std::uint64_t round = (v - 1) / 3;  // (phases 1-3)
    tag_line(c.rank(), kRoundLine)
        .tag[round % kRoundTags]
        .store(tag_for(round), std::memory_order_relaxed);
    round_line(c.rank()).store(v, std::memory_order_release);
  }
  // Waits until rank `who` (every rank when -1) has reached mark v.
  void wait_mark(const CommImpl& c, std::uint64_t v, int who = -1) {
    auto line_of = [this](int q) -> std::atomic<std::uint64_t>& { return round_line(q); };
    if (who >= 0) return wait_one(c, line_of, who, v);
    wait_all(c, line_of, v);
  }
  // Before writing this rank's chunks for `r`: everyone is done with their last use.
  void wait_chunk_free(const CommImpl& c, const Round& r) {
    if (r.reuses) wait_mark(c, mark(r.reuses, 3));
  }
  // Once rank `who` (every rank when -1) has marked phase 1 of `r` (the call's first round:
  // the same CallSig means the same rounds): its tag of the round is this call's.
  void check_round(const CommImpl& c, const Round& r, int who = -1) {
    const int from = who < 0 ? 0 : who, to = who < 0 ? c.size() : who + 1;
    for (int q = from; q < to; ++q)
      if (q != c.rank() &&
          tag_line(q, kRoundLine).tag[r.first % kRoundTags].load(std::memory_order_relaxed) !=
              tag_for(r.first)) [[unlikely]]
        mismatch(c, q);
  }

  // One call of a chunked path that moves `bytes`: picks the kind of store for put() and
  // records how long the call took. Only the root stores into chunks in a bcast, so it
  // chooses alone. In the others every rank stores and every rank's time depends on how the
  // others stored, so ranks choosing each for itself can settle where none gains by changing
  // alone although all would gain by changing together: rank 0 chooses from its times and
  // publishes the choice in its decision line, which the others read when their call starts
  // (one that starts before rank 0 published keeps the previous choice: mixed kinds of
  // stores are correct, only slower).
  class Call {
  public:
    Call(NodeShared& ns, const CommImpl& c, Use use, std::size_t bytes)
        : ns_(ns), use_(use), bytes_(bytes), chooses_(use == Use::bcast || c.rank() == 0) {
      if (ns_.forced_store_ >= 0) {  // by the call's path (force_store)
        ns_.store_mode_ = ns_.forced_store_;
        chooses_ = false;
      } else if (chooses_) {
        ns_.store_mode_ = ns_.choice(use_).choose(bytes_);
        if (use != Use::bcast)
          ns_.decision_line().store(static_cast<std::uint64_t>(ns_.store_mode_),
                                    std::memory_order_relaxed);
        t0_ = Clock::now();
      } else {
        ns_.store_mode_ = ns_.decision_line().load(std::memory_order_relaxed) == kStreaming
                              ? kStreaming
                              : kCached;
      }
    }
    ~Call() {
      if (!chooses_) return;
      const double s = std::chrono::duration<double>(Clock::now() - t0_).count();
      ns_.choice(use_).record(ns_.store_mode_, bytes_, s);
    }
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

  private:
    NodeShared& ns_;
    Use use_;
    std::size_t bytes_;
    bool chooses_;
    Clock::time_point t0_{};
  };
  // A copy into one of this rank's chunks (within a Call).
  void put(void* chunk, const void* src, std::size_t n) const {
    if (store_mode_ == kStreaming) {
      rt::copy_streaming(chunk, src, n);
    } else {
      copy_bytes(chunk, src, n);
    }
  }
  // The same, while copying src to `also`. With cached stores where copy_twice has two
  // kernels, this rank times the copy and takes the faster (each rank for itself: what lands
  // in the chunk is the same either way). Which one wins differs by machine and size: one
  // pass of the loop against two of `rep movsb` (2 ranks' allgather, 10 interleaved pairs,
  // mid placement, AMD EPYC of family 25): 256 KiB 1.07, 1 and 4 MiB 0.88 of the time.
  void put_and_copy(void* chunk, void* also, const void* src, std::size_t n) {
    if (store_mode_ == kStreaming || n < kTwiceChoiceBytes ||
        !rt::copy_twice_has_passes(also, chunk, src)) {
      rt::copy_twice(also, chunk, src, n, store_mode_ == kStreaming);
      return;
    }
    const int k = twice_choice_.choose(n);
    const rt::FastClock::time_point t0 = rt::FastClock::now();
    rt::copy_twice(also, chunk, src, n, false, k == kOnePass);
    twice_choice_.record(k, n, std::chrono::duration<double>(rt::FastClock::now() - t0).count());
  }
  // A copy out of another rank's chunk once that rank has published the whole round (an
  // exchange: allgather(v), alltoall, the gather of combined slices of an allreduce and of a
  // reduce's root). Where the call stores with streaming stores the round's lines are in
  // memory, and `rep movsb` reads them faster than the vector loop: copy_large, which takes it
  // where it is as fast here (from kLargeCopy on). The kind of store is this rank's view of the
  // call's (Call: rank 0's choice, or the previous one where this rank started first), so a round
  // may be read with the kernel of the other kind: correct, only slower. AMD EPYC of family 26,
  // interleaved against the loop, cores far apart: 2 ranks (10 pairs, 32 KiB-4 MiB) allgather
  // 0.89-0.97 of the time, alltoall 0.92-1.01, allreduce 0.99-1.04 (no gain there, kept with the
  // others); 4 ranks on 2 cores (6 pairs, 64 KiB-1 MiB) allgather 0.85-0.89, alltoall and
  // allreduce 0.99-1.01. At mid distance `rep movsb` in every such copy: 2 ranks' allgather
  // 0.88-1.03, alltoall 0.92-0.96. With cached stores the lines sit in the other core's
  // cache, where the loop is the better consumer (copy_from_peer; `rep movsb` there took
  // 1.12x the allgather's time at 256 KiB, the same from 1 MiB, far apart). Not a bcast's
  // chunks either, which the root fills while the others copy out the one before (`rep
  // movsb` at 0.80-0.97 of the loop's speed at 4 MiB). Not measured on family 25, where `rep
  // movsb` was the slower consumer of point-to-point gets out of the other core's cache
  // (copy.hpp).
  void copy_out(void* dst, const void* src, std::size_t n) const {
    if (streaming() && n >= rt::kLargeCopy) {
      rt::copy_large(dst, src, n);
    } else {
      rt::copy_from_peer(dst, src, n);
    }
  }
  // Whether this call stores into chunks with streaming stores (for stores of its own, as
  // the compressed allreduce's encoding).
  bool streaming() const { return store_mode_ == kStreaming; }
  // The kind of store of this rank's calls through the chunks until set back, set alike on
  // every rank by a path announced to all (kShmPath, kStreamPath); -1: chosen per call.
  // Returns the setting it replaces.
  int force_store(int mode) { return std::exchange(forced_store_, mode); }
  // Whether calls of path index i choose between the two kinds of store as paths.
  bool stores_are_paths(std::size_t i) const { return (path_enabled_[i] >> kStreamPath & 1) != 0; }

private:
  void set_line(const CommImpl& c, std::size_t i, std::uint64_t v) {
    if (track_cpus_) publish_cpu(c);
    line(c.rank(), i).gen.store(v, std::memory_order_release);
  }
  int pid_of(int rank) {
    return static_cast<int>(line(rank, kPidLine).gen.load(std::memory_order_relaxed));
  }
  // reuse(): the counts of the calls of the communicator before go.
  void restart() {
    gen_ = round_ = small_bcast_ = small_reduce_ = calls_ = 0;
    cur_ = Record{};
    tag_ = tag_of(cur_);
    out_of_step_ = false;
    reduce_roots_.fill(0);
    for (auto& runs : path_runs_) runs.fill(PathRun{});
    root_waits_ = false;
    forced_store_ = -1;
    direct_err_ = 0;
    direct_err_rank_ = -1;
  }
  // A published buffer (set_source, set_result): its address and length.
  struct alignas(kLine) PublishedLine {
    std::atomic<std::uint64_t> at, bytes;
  };
  static constexpr int kOverrun = -1;  // direct_err_: a copy beyond a published buffer
  void publish(const CommImpl& c, std::size_t i, const void* p, std::size_t bytes) {
    auto& l = reinterpret_cast<PublishedLine*>(base(c.rank()))[i];
    l.bytes.store(bytes, std::memory_order_relaxed);
    l.at.store(reinterpret_cast<std::uint64_t>(p), std::memory_order_relaxed);
  }
  const void* published(int rank, std::size_t i) {
    return reinterpret_cast<const void*>(
        reinterpret_cast<PublishedLine*>(base(rank))[i].at.load(std::memory_order_relaxed));
  }
  // Whether [p, p + n) lies in the buffer rank `rank` published in line i.
  bool within(int rank, std::size_t i, const void* p, std::size_t n) {
    const auto& l = reinterpret_cast<PublishedLine*>(base(rank))[i];
    const std::uint64_t at = l.at.load(std::memory_order_relaxed),
                        len = l.bytes.load(std::memory_order_relaxed),
                        q = reinterpret_cast<std::uint64_t>(p);
    return q >= at && q - at <= len && n <= len - (q - at);
  }
  void note_error(int rank, int err) {
    direct_err_ = err;
    direct_err_rank_ = rank;
  }
  std::byte* base(int rank) { return seg_->data() + static_cast<std::size_t>(rank) * stride_; }
  FlagLine& line(int rank, std::size_t i) { return reinterpret_cast<FlagLine*>(base(rank))[i]; }
  static constexpr std::size_t kRoundLine = 2, kPublished = 5, kContributed = 7;
  std::atomic<std::uint64_t>& round_line(int rank) { return line(rank, kRoundLine).gen; }
  std::atomic<std::uint64_t>& decision_line() { return line(0, 3).gen; }  // rank 0's

  std::atomic<std::uint64_t>& cpu_line(int rank) { return line(rank, 4).gen; }
  CountLine& published_line(int rank) {
    return reinterpret_cast<CountLine*>(base(rank))[kPublished];
  }
  std::atomic<std::uint64_t>& consumed_line(int rank) { return line(rank, 6).gen; }
  CountLine& contributed_line(int rank) {
    return reinterpret_cast<CountLine*>(base(rank))[kContributed];
  }
  std::atomic<std::uint64_t>& reduce_consumed_line(int rank) { return line(rank, 8).gen; }
  TagLine& published_tags(int rank) { return tag_line(rank, kPublishedTagsLine); }
  TagLine& contributed_tags(int rank) { return tag_line(rank, kContributedTagsLine); }
  TagLine& tag_line(int rank, std::size_t i) { return reinterpret_cast<TagLine*>(base(rank))[i]; }
  RecordLine& record_line(int rank) {
    return reinterpret_cast<RecordLine*>(base(rank))[kRecordLine];
  }

  // Call records (RecordLine: a sequence lock).
  void write_record(const CommImpl& c, const Record& r) {
    RecordLine& l = record_line(c.rank());
    l.begun.store(r.call, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    l.what.store(r.what, std::memory_order_relaxed);
    l.bytes.store(r.bytes, std::memory_order_relaxed);
    l.counts.store(r.counts, std::memory_order_relaxed);
    l.esize.store(r.esize, std::memory_order_relaxed);
    l.out_of_step.store(r.out_of_step, std::memory_order_relaxed);
    l.call.store(r.call, std::memory_order_release);
  }
  // The same with only the call number new (the fields are the record's already). (Writing
  // the whole record and hashing its tag every call cost a 2-rank barrier ~9 %: 20 interleaved
  // rounds.)
  void write_call_number(const CommImpl& c, std::uint64_t call) {
    RecordLine& l = record_line(c.rank());
    l.begun.store(call, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    l.call.store(call, std::memory_order_release);
  }
  // Rank q's record, unless it is being written.
  bool read_record(int q, Record& r) {
    RecordLine& l = record_line(q);
    r.call = l.call.load(std::memory_order_acquire);
    r.what = l.what.load(std::memory_order_relaxed);
    r.bytes = l.bytes.load(std::memory_order_relaxed);
    r.counts = l.counts.load(std::memory_order_relaxed);
    r.esize = l.esize.load(std::memory_order_relaxed);
    r.out_of_step = l.out_of_step.load(std::memory_order_relaxed) != 0;
    std::atomic_thread_fence(std::memory_order_acquire);
    return l.begun.load(std::memory_order_relaxed) == r.call;
  }
  // After a call whose ranks were called differently this rank's state is out of step with
  // theirs (generations, rounds and slots counted differently): every later call on it throws
  // (begin_call), and its record says so to the ranks that wait for it (stalled).
  void mark_out_of_step(const CommImpl& c) {
    out_of_step_ = true;
    Record r = cur_;
    r.out_of_step = true;
    write_record(c, r);
  }
  // Rank q's tag differs from this call's: throws the error its record explains, if it still
  // holds this call.
  [[noreturn]] void mismatch(const CommImpl& c, int q) {
    Record o;
    const bool same = read_record(q, o) && o.call == cur_.call;
    mark_out_of_step(c);
    throw mismatch_error(cur_, q, same ? &o : nullptr, false);
  }

  // What a wait that gave up polling alone waits for (stalled): the ranks in [from, to) whose
  // line is pending.
  struct Awaiting {
    int from, to;
    const void* pending;
    bool (*test)(const void* pending, int q);
    bool awaits(int q) const { return q >= from && q < to && test(pending, q); }
  };
  const Awaiting* awaiting_ = nullptr;

  // Waits until rank `who`'s line (of `which`) holds at least v.
  template <class Which>
  void wait_one(const CommImpl& c, Which&& which, int who, std::uint64_t v) {
    wait_one_until(c, who, [&](int q) { return which(q).load(std::memory_order_acquire) < v; });
  }
  // Waits until pending(who) is false.
  template <class Pending>
  void wait_one_until(const CommImpl& c, int who, const Pending& pending) {
    wait(
        c, [&] { return !pending(who); }, [&] { return where_awaited(c, who, who + 1, pending); },
        who, who + 1, pending);
  }
  // Waits until every rank's line (of `which`) holds at least v.
  template <class Which>
  void wait_all(const CommImpl& c, Which&& which, std::uint64_t v) {
    wait_all_until(c, [&](int q) { return which(q).load(std::memory_order_acquire) < v; });
  }
  // Waits until pending(q) is false for every rank q.
  template <class Pending>
  void wait_all_until(const CommImpl& c, const Pending& pending) {
    const int n = c.size();
    int seen = 0;
    wait(
        c,
        [&] {
          while (seen < n && !pending(seen)) ++seen;
          return seen == n;
        },
        [&] { return where_awaited(c, seen, n, pending); }, 0, n, pending);
  }

  // Progress keeps running while we wait: a peer may need this rank's rendezvous data to get
  // here. When ranks outnumber cores, waiting normally spins spin_us and then gives the core
  // away on every idle poll; `awaited` says where the awaited ranks are (where_awaited).
  // Ranks that wait without giving their core away (wait mode poll: they have cores of
  // their own) first poll the flags alone, kQuickPolls times (~0.6 us here, a pause taking
  // ~18 ns; ~1.5 us where it takes 140 cycles): a flag written while a progress pass ran
  // (polling the transports' rings) was seen only after it, and the awaited flag mostly
  // comes within that time. Interleaved against progress from the start, 2 ranks, cores far
  // apart, 10 rounds: barrier 0.81x, allreduce 1 KiB 0.85-0.88x, reduce 8 B 0.88x, bcast 8 B
  // 0.92x; 64 KiB - 1 MiB unchanged (0.96-1.05). A peer that needs this rank's progress
  // waits that much longer, once.
  // The ranks in [from, to) whose line is `pending` are what the wait is for (Awaiting).
  template <class Done, class Where, class Pending>
  void wait(const CommImpl& c, Done&& done, Where&& awaited, int from, int to,
            const Pending& pending) {
    if (done()) return;
    if (!track_cpus_)
      for (int i = 0; i < kQuickPolls; ++i) {
        rt::cpu_relax();
        if (done()) return;
      }
    const Awaiting a{from, to, &pending,
                     [](const void* p, int q) { return (*static_cast<const Pending*>(p))(q); }};
    const Awaiting* const outer = std::exchange(awaiting_, &a);
    idle_since_ = {};  // the grace runs from this wait's first stall_tick
    std::uint32_t polls = 0;
    auto done_or_stalled = [&] {
      if (done()) return true;
      if ((++polls & 255) == 0) stall_tick(c);
      return false;
    };
    try {
      c.engine().progress_until(done_or_stalled, awaited);
    } catch (...) {
      awaiting_ = outer;
      throw;
    }
    awaiting_ = outer;
  }
  static constexpr int kQuickPolls = 32;

  // Where ranks run, for oversubscribed waits. Each rank publishes the CPU it runs on (+1;
  // 0 = unknown) when it arrives or marks progress (only when ranks outnumber cores: nothing
  // reads it otherwise) and whenever a wait asks. A rank waiting for others keeps its core
  // while every rank it waits for was last seen on another CPU:
  // those are running there, or queued behind ranks that will give that core away when they
  // wait in turn; yielding here would only hand this core to a rank that waits as well. A
  // rank it waits for that was last seen on this CPU is queued behind this one: yield to it
  // at once, without spinning first. (Measured with a bare 4-process flag barrier on 2
  // cores: 3.8 -> 2.7 us pinned, 4.0 -> 3.4 unpinned, yields per rank and barrier 0.8 -> 0.5.)
  // A rank not seen yet (a new or cleared segment: its line 0) may be queued anywhere: the
  // wait spins spin_us and then yields. Judged elsewhere, the first call on a communicator kept
  // its core for the whole window (100 us): 4 ranks on 2 cores, dup + 8-byte allreduce 115-150 us
  // a call, ~40 with it unknown.
  std::uint64_t publish_cpu(const CommImpl& c) {
    const int cpu = sched_getcpu();
    const std::uint64_t v = cpu < 0 ? 0 : static_cast<std::uint64_t>(cpu) + 1;
    std::atomic<std::uint64_t>& mine = cpu_line(c.rank());
    if (mine.load(std::memory_order_relaxed) != v) mine.store(v, std::memory_order_relaxed);
    return v;
  }
  using Awaited = rt::Context::Idle::Awaited;
  template <class Pending>
  Awaited where_awaited(const CommImpl& c, int from, int to, Pending&& pending) {
    std::uint64_t here = publish_cpu(c);
    if (here == 0) return Awaited::unknown;
    if ((++waits_unchecked_ & (kSpreadClockEvery - 1)) == 0) here = spread_if_crowded(c, here);
    bool unseen = false;
    for (int q = from; q < to; ++q) {
      if (!pending(q)) continue;
      const std::uint64_t there = cpu_line(q).load(std::memory_order_relaxed);
      if (there == here) return Awaited::behind_us;
      unseen |= there == 0;
    }
    return unseen ? Awaited::unknown : Awaited::elsewhere;
  }

  // Ranks that outnumber the cores and are not bound sit where the scheduler puts them, and it
  // leaves them crowded now and then: 4 ranks on 2 cores, three of them on one CPU, take
  // three switches of that CPU a collective instead of one (allreduce of 8 B at 15 us a call
  // instead of 6-7, in 3 runs of 16 of a benchmark's ~8 ms, and for stretches of longer runs;
  // bound round-robin, never). Every kSpreadCheck of waiting a rank looks at where all were
  // last seen (the clock read once in kSpreadClockEvery asks where the awaited ranks run,
  // which come at every poll of a spinning wait: looking every 64 asks cost collectives 3-4 %);
  // crowded two looks in a row (the scheduler's own moves pass), the highest rank on the
  // crowded CPU moves to the least crowded one it may use (rt::less_crowded_cpu), unbound as
  // before. Returns where it runs.
  static constexpr std::uint32_t kSpreadClockEvery = 64;
  static constexpr auto kSpreadCheck = std::chrono::microseconds(500);
  std::uint64_t spread_if_crowded(const CommImpl& c, std::uint64_t here) {
    const rt::FastClock::time_point now = rt::FastClock::now();
    if (now - last_spread_check_ < kSpreadCheck) return here;
    last_spread_check_ = now;
    // The CPUs it may use, asked again now and then (an application may change them).
    if (spread_checks_++ % 64 == 0) allowed_cpus_ = rt::allowed_cpu_list();
    if (allowed_cpus_.size() < 2) return here;  // bound to one CPU: nowhere to go
    cpus_seen_.resize(static_cast<std::size_t>(c.size()));
    for (int q = 0; q < c.size(); ++q)
      cpus_seen_[static_cast<std::size_t>(q)] =
          static_cast<int>(cpu_line(q).load(std::memory_order_relaxed)) - 1;
    const int to = rt::less_crowded_cpu(cpus_seen_, c.rank(), allowed_cpus_);
    const bool again = crowded_before_;
    crowded_before_ = to >= 0;
    if (to < 0 || !again || !rt::move_to_cpu(to)) return here;
    crowded_before_ = false;
    ++c.engine().context().counters().cpu_moves;
    return publish_cpu(c);
  }
  std::uint32_t waits_unchecked_ = 0;
  rt::FastClock::time_point last_spread_check_{};
  std::uint64_t spread_checks_ = 0;
  std::vector<int> allowed_cpus_;  // the CPUs this rank may use, as last asked
  bool crowded_before_ = false;
  std::vector<int> cpus_seen_;

  using StoreChoice = rt::MeasuredChoice<2>;
  StoreChoice& choice(Use u) { return store_choice_[static_cast<std::size_t>(u)]; }
  // put_and_copy's kernels (rt::copy_twice): two passes of `rep movsb`, one of the loop; from
  // kTwiceChoiceBytes on (below, where a copy takes ~60-500 ns, the two clock reads would add
  // a tenth or more to it).
  static constexpr int kTwoPasses = 0, kOnePass = 1;
  static constexpr std::size_t kTwiceChoiceBytes = 16 << 10;
  rt::MeasuredChoice<2> twice_choice_{0b11, {.period = 64, .burst = 2, .hysteresis = 0.05}};

  std::unique_ptr<rt::NodeSegment> seg_;
  std::size_t chunk_, nchunks_, direct_block_, stride_;  // direct_block_bytes
  bool track_cpus_;
  std::uint64_t gen_ = 0, round_ = 0, small_bcast_ = 0, small_reduce_ = 0;
  std::uint64_t calls_ = 0;           // begun on this state (begin_call): the records' call numbers
  Record cur_;                        // of this rank's current call
  std::uint16_t tag_ = tag_of(cur_);  // its tag
  bool out_of_step_ = false;          // mark_out_of_step
  rt::FastClock::time_point idle_since_{};  // the wait's (call's) first stall_tick
  std::array<int, kReduceSlots> reduce_roots_{};
  std::array<StoreChoice, kUses> store_choice_;
  // bcast, reduce (exact), alltoall, allgather(v), allreduce, reduce (floating)
  std::array<PathTimes, 6> path_times_;
  std::array<std::array<PathRun, PathTimes::kBuckets>, 6> path_runs_{};
  std::array<unsigned, 6> path_enabled_{};
  bool direct_ok_ = false;
  rt::HugePages* huge_ = nullptr;  // the process's (RMP_SHM_HUGEPAGES), or null: off
  void on_huge_pages(const CommImpl& c, const void* p, std::size_t bytes) {
    if (huge_ && p) rt::count_huge(c.engine().context().counters(), huge_->use(p, bytes));
  }
  bool own_cores_ = true;  // every rank has a core of its own (p2p_paths)
  bool root_waits_ = false;
  int direct_err_ = 0, direct_err_rank_ = -1;  // the first failed copy of this call
  std::uint64_t reuses_ = 0;                   // by communicators after the first (reuse)
  bool adopted_ = false;                       // by a dup, not yet called (first_call)
  static inline std::atomic<int> clear_delay_ms_{0};
  std::vector<std::byte> scratch_;
  std::uint64_t probe_word_ = 0;  // read by the previous member in probe_direct
  static constexpr std::uint64_t kProbeMagic = 0x726d70'64697265ULL;
  // A burst of 4 calls (3 timed: the first pays for what the other path left in the caches) every
  // 64 or so; one path far behind only every 8th turn. Where point-to-point is among the paths
  // (`enabled`), a path known from its warm-up alone is measured again soon after it
  // (rejudge_warmup): point-to-point's first calls are slower than its steady speed while its own
  // copy chooser warms up (bcast of 4 MiB, two ranks: 560-790 us a call against 200-250 later).
  // So are the chunks' (a new segment's pages and cold caches: allgather of 256 KiB, two ranks,
  // judged on its warm-up the direct path held at 25 us a call against the chunks' 16), not the
  // direct path, a cross-memory copy of buffers already touched (rejudge_modes): re-measured
  // soon, its burst cost the allgather of 1 MiB 2 % of a benchmark's time (8 interleaved pairs,
  // 70.6 against 71.9 us; alltoall and reduce of 64 KiB - 4 MiB 0.93-1.02, noise). Nor
  // point-to-point where it competes with the favoured chunks (below): its early burst there
  // never took over and was dear, its calls slower than in its warm-up as its buffers went onto
  // huge pages (allgather, 2 ranks far: 1 MiB 209-515 us a call against the chunks' 80-100,
  // 4 MiB 1.7-2.3 ms against 350-400), and with the chunks' two kinds of store warming up as
  // paths it fell among a benchmark's timed calls (1 MiB far: 100-119 us a call against 78-85
  // with the chunks forced; without it 82-101).
  // Where ranks have cores of their own and the choice is among node-shared paths alone (an
  // allreduce's, a floating reduce's), a path's first calls say what it costs, and each call of a
  // slow path is dear: a size class warms up the path its neighbour holds alone
  // (warm_from_neighbour), and without an early re-measure. A path the class has not measured
  // counts as far behind (far_bursts 0): it is first measured on its 8th turn, some 500 calls in.
  // (With a burst at its first turn instead, far_bursts 1, the first class that chooses, 64 KiB
  // here, took 1.05x the time.) A benchmark runs 50-150 calls a size: the direct allreduce, 1.7-3x
  // the chunks' time at 64 KiB and 1.2-1.6x at 1-16 MiB on this project's VMs, took 8 of 146 calls
  // at 64 KiB, and its warm-up made the allreduce 4-12 % slower than the chunks forced (2 ranks
  // far, 6 interleaved rounds, 64 KiB - 16 MiB: 0.92-0.96 of the time before with this pace, the
  // chunks forced 0.88-0.955). (With ranks sharing cores the direct alltoall's and bcast's standing
  // changes with the size: 0.60-1.15 of the chunks' time from 16 KiB to 4 MiB.)
  // Where ranks have cores of their own and point-to-point is among the paths, the chunks are
  // favoured: another path takes over only if its rate beats theirs by more than 15 % (held, by
  // 1.15 x 1.05 with the hysteresis: ~17 % less time). A burst of the chunks shows all they
  // cost; one of point-to-point does not. (The chunks with cached stores only: Pace::favour is
  // one mode, and it also keeps cached stores unless streaming ones are clearly faster, as the
  // store choice did. Streaming chunks and point-to-point are judged at face value.)
  // Held, point-to-point's rendezvous buffers and the direct path's published ones go onto huge
  // pages from a block's 16th use (runtime/huge_pages.hpp: calls of 0.6-1.4 ms in traces of
  // point-to-point's calls, none with RMP_SHM_HUGEPAGES=0), and point-to-point's copy chooser
  // explores its mechanisms (calls of 100-195 us before it settles at 63-65). An
  // allgather of 1 MiB, 2 ranks, cores near, traced call by call: point-to-point ran at 55-62 us
  // in its burst against the chunks' 62-74 and took over in 4 runs of 6; its next calls took
  // 95-150 us, with one or two of 0.6-4.7 ms among them, and the benchmark's 50 timed calls
  // averaged 71-105 us. Favoured, the chunks held in 6 runs of 6 (57-63 us). Interleaved, 8
  // rounds: favoured 54-65 us in every round; without, 55-60 in six and 100 and 122 in two.
  // Allgather, alltoall and reduce of 64 KiB - 4 MiB took 0.97-1.04 of the time without it near
  // (medians of 8 rounds) and 0.90-1.12 far, noise: far the paths taken are the same.
  // Between the chunks and the direct path alone (an allreduce, a floating reduce) nothing is
  // favoured: the direct reduce of 128 KiB, 2 ranks near, ran at 12.7-13.0 us against the
  // chunks' 14.5-15.2 (OpenMPI 12.4), and the favour held the chunks.
  // Where the chunks are favoured, the cached chunks are re-measured soon only if their warm-up
  // came within 1.3x of the best path's rate (not 2x, Pace::warmup_behind's default). Far apart
  // the streaming chunks hold, and the cached ones' warm-up was not slower than their steady
  // speed but faster (allgather of 1 MiB, 2 ranks: 97-129 us a call against the streaming
  // chunks' 61, and 205-227 in the burst soon after it, 4 calls among the benchmark's 50 timed
  // ones: 74-78 us a call with the burst, 68-72 without). Interleaved, 10 pairs far: allgather
  // 256 KiB 0.79, 1 MiB 0.87 of the time before (64 KiB, 4 MiB and the alltoall's 0.95-1.05).
  // Not measured with the cores near, where the cached chunks may be the faster: there a warm-up
  // of theirs 1.3-2x behind now waits for its turn, 32-96 calls on.
  static constexpr double kChunksWarmupBehind = 1.3;
  PathTimes::Pace path_pace(unsigned enabled) const {
    const bool nodeshared_only = own_cores_ && !(enabled >> kP2pPath & 1);
    const bool favour_chunks =
        own_cores_ && (enabled >> kShmPath & 1) != 0 && (enabled >> kP2pPath & 1) != 0;
    return {.period = 64,
            .burst = 4,
            .favour = favour_chunks ? kShmPath : -1,
            .margin = favour_chunks ? 0.15 : 0.0,
            .hysteresis = 0.05,
            .rejudge_warmup = !nodeshared_only,
            .rejudge_modes = 1u << kShmPath | (favour_chunks ? 0u : 1u << kP2pPath),
            .warmup_behind = favour_chunks ? kChunksWarmupBehind : PathTimes::Pace{}.warmup_behind,
            .warm_from_neighbour = nodeshared_only};
  }
  // The paths open to calls of index i: `enabled`, and kStreamPath beside kShmPath where both
  // kinds of store are allowed and there is a choice of paths besides.
  void set_paths(std::size_t i, unsigned enabled) {
    enabled &= ~(1u << kStreamPath);
    if ((enabled >> kShmPath & 1) != 0 && std::popcount(enabled) >= 2 &&
        store_modes_ == (1u << kCached | 1u << kStreaming))
      enabled |= 1u << kStreamPath;
    path_enabled_[i] = enabled;
    path_times_[i] = PathTimes(enabled, path_pace(enabled));
  }
  int store_mode_ = kCached;
  int forced_store_ = -1;     // force_store
  unsigned store_modes_ = 0;  // the kinds of store allowed (bit kCached, bit kStreaming)
};

namespace {

// Node-shared state of ended communicators, kept by each process for a later communicator of the
// same members (NodeShared::reuse): a new one cost a communicator's first collective
// 0.6 ms here (the segment created, its pages reserved, mapped and touched, the direct paths
// probed, 170 KB of state allocated; unmapped at the end): dup + 8-byte allreduce, 2 ranks,
// 620-655 us against OpenMPI's 6.6. Codes that dup or split a communicator per solve paid it
// every time. Thread-safe.
class NodeSharedPool {
public:
  // Kept: the newest two, at most 64 MiB of segments (their pages stay reserved in /dev/shm
  // while kept; a container's is often 64 MiB). Two serve a code that alternates between two
  // communicators of the same members, or dups one per call.
  static constexpr std::size_t kKept = 2;
  static constexpr std::size_t kKeptBytes = std::size_t{64} << 20;

  // Keeps `ns` as the newest (or, `newest` false, as the oldest: the first to go, for a state a
  // proposal failed to reuse, which some member may have let go of for good).
  void put(std::uint64_t id, std::vector<int> members, std::unique_ptr<NodeShared> ns,
           bool newest = true) {
    std::vector<std::unique_ptr<NodeShared>> dropped;  // unmapped outside the lock
    std::lock_guard<std::mutex> g(mu_);
    const std::size_t bytes = ns->segment_bytes();
    if (bytes > kKeptBytes) {
      dropped.push_back(std::move(ns));
      return;
    }
    std::size_t kept = bytes;
    for (const Entry& e : entries_) kept += e.ns->segment_bytes();
    const auto full = [&] { return entries_.size() >= kKept || kept > kKeptBytes; };
    if (!newest && full()) {  // the oldest of a full pool goes at once
      dropped.push_back(std::move(ns));
      return;
    }
    while (!entries_.empty() && full()) {
      kept -= entries_.front().ns->segment_bytes();
      dropped.push_back(std::move(entries_.front().ns));
      entries_.erase(entries_.begin());
    }
    Entry e{id, std::move(members), std::move(ns)};
    if (newest) entries_.push_back(std::move(e));
    else entries_.insert(entries_.begin(), std::move(e));
  }
  // The id of kept state of exactly these members and chunk geometry (0: none); it stays kept
  // until take().
  std::uint64_t find(const std::vector<int>& members, std::size_t chunk,
                     std::size_t nchunks) const {
    std::lock_guard<std::mutex> g(mu_);
    for (auto it = entries_.rbegin(); it != entries_.rend(); ++it)
      if (it->members == members && it->ns->chunk() == chunk && it->ns->chunks() == nchunks)
        return it->id;
    return 0;
  }
  // A number for the next segment this process makes as rank 0 (node_shared's ids).
  std::uint64_t next_serial() { return ++serial_; }
  // The kept state `id` (null if this process keeps none by that id).
  std::unique_ptr<NodeShared> take(std::uint64_t id) {
    std::lock_guard<std::mutex> g(mu_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->id != id) continue;
      std::unique_ptr<NodeShared> ns = std::move(it->ns);
      entries_.erase(it);
      return ns;
    }
    return nullptr;
  }

private:
  struct Entry {
    std::uint64_t id;
    std::vector<int> members;
    std::unique_ptr<NodeShared> ns;
  };
  mutable std::mutex mu_;
  std::vector<Entry> entries_;  // oldest first
  std::atomic<std::uint64_t> serial_{0};
};

// A communicator's node-shared state, which goes back to the pool when the communicator ends
// (or is deleted when the pool has gone with the engine: a handle kept past finalize).
std::shared_ptr<NodeShared> pooled(std::unique_ptr<NodeShared> ns,
                                   const std::shared_ptr<NodeSharedPool>& pool, std::uint64_t id,
                                   std::vector<int> members) {
  std::weak_ptr<NodeSharedPool> weak = pool;
  return std::shared_ptr<NodeShared>(ns.release(),
                                     [weak, id, members = std::move(members)](NodeShared* p) {
                                       std::unique_ptr<NodeShared> owned(p);
                                       if (auto pool = weak.lock()) {
                                         try {
                                           pool->put(id, members, std::move(owned));
                                         } catch (...) {  // no memory to keep it: it goes
                                         }
                                       }
                                     });
}

// The members' world ranks, which name a kept state's communicator.
std::vector<int> members_of(const CommImpl& c) {
  std::vector<int> m(static_cast<std::size_t>(c.size()));
  for (int r = 0; r < c.size(); ++r) m[static_cast<std::size_t>(r)] = c.world_rank(r);
  return m;
}

std::shared_ptr<NodeSharedPool> pool_of(detail::Engine& e) {
  return std::static_pointer_cast<NodeSharedPool>(
      e.collective_state([] { return std::make_shared<NodeSharedPool>(); }));
}

// Whether node-shared state can serve communicators of `ranks` ranks in this job.
bool node_local(detail::Engine& e, int ranks) {
  const rt::Context& ctx = e.context();
  // One-node jobs only for now: then every communicator is node-local. (With several nodes
  // the members' node ids must be compared first: the multi-node work adds that.)
  return ranks >= 2 && ctx.id().local_size == ctx.id().size;
}
bool node_local(const CommImpl& c) { return node_local(c.engine(), c.size()); }

}  // namespace

KeptState::KeptState(const CommImpl& parent) : KeptState(parent.engine(), members_of(parent)) {}

KeptState::KeptState(detail::Engine& e, std::vector<int> members) {
  if (!node_local(e, static_cast<int>(members.size()))) return;
  const rt::Params& p = e.context().coll_params();
  auto pool = pool_of(e);
  const std::uint64_t id = pool->find(members, chunk_bytes(p), chunk_count(p));
  if (!id) return;
  std::unique_ptr<NodeShared> ns = pool->take(id);
  if (!ns) return;
  // Wrapped now, so that adopt() cannot fail: a member that failed there after the others
  // adopted would put the state back with its reuses counted one short, and the next
  // communicator to take it would wait for a count rank 0 never writes. Not adopted, it goes
  // back to the pool as it came.
  ns_ = pooled(std::move(ns), pool, id, std::move(members));
  id_ = id;
}

KeptState::~KeptState() = default;

void set_kept_clear_delay(std::chrono::milliseconds d) { NodeShared::set_clear_delay(d); }

void KeptState::adopt(const CommImpl& fresh) {
  if (!ns_) return;
  ns_->reuse(fresh, false);
  fresh.collective_state() = std::move(ns_);
}

NodeShared* node_shared(const CommImpl& c) {
  auto& state = c.collective_state();
  if (state) {
    auto* ns = static_cast<NodeShared*>(state.get());
    if (ns->adopted()) [[unlikely]]
      ns->first_call(c);
    return ns;
  }
  if (!node_local(c)) return nullptr;
  const rt::Context& ctx = c.engine().context();
  const std::size_t chunk = chunk_bytes(ctx.coll_params()),
                    nchunks = chunk_count(ctx.coll_params());
  const std::size_t bytes = NodeShared::bytes_for(c.size(), chunk, nchunks);
  detail::Engine& e = c.engine();
  std::vector<int> members = members_of(c);
  const auto pool = pool_of(e);
  auto to_members = [&](const void* msg, std::size_t n, int tag) {
    std::vector<detail::RequestState*> rs;
    for (int r = 1; r < c.size(); ++r)
      rs.push_back(e.isend(c, p2p::Channel::collective, msg, n, r, tag, false));
    for (auto* r : rs) e.wait(r);
  };
  // At rank 0: every other member's yes (1) or no (0); the lowest member that said no, or -1.
  auto first_no = [&](int tag) {
    std::int32_t no = -1;
    for (int r = 1; r < c.size(); ++r) {
      std::uint8_t yes = 0;
      e.wait(e.irecv(c, p2p::Channel::collective, &yes, 1, r, tag));
      if (!yes && no < 0) no = r;
    }
    return no;
  };
  // At the others: this member's yes or no to rank 0, then rank 0's verdict.
  auto tell_and_hear = [&](std::uint8_t yes, void* verdict, std::size_t n, int tag) {
    e.wait(e.isend(c, p2p::Channel::collective, &yes, 1, 0, tag, false));
    e.wait(e.irecv(c, p2p::Channel::collective, verdict, n, 0, tag));
  };

  // Rank 0 proposes the kept state of an ended communicator of these members when it has some;
  // every member says whether it has let go of that one too (its communicator gone, so no call
  // of it can still use the segment), and when all have, rank 0 clears the segment and the
  // state serves this communicator.
  std::uint64_t reuse = 0;
  if (c.rank() == 0) {
    reuse = pool->find(members, chunk, nchunks);
    to_members(&reuse, sizeof reuse, kSetupTag);
  } else {
    e.wait(e.irecv(c, p2p::Channel::collective, &reuse, sizeof reuse, 0, kSetupTag));
  }
  if (reuse) {
    std::unique_ptr<NodeShared> kept = pool->take(reuse);
    std::uint8_t all = kept != nullptr;
    if (c.rank() == 0) {
      all = all && first_no(kReuseTag) < 0;
      if (all) kept->reuse(c, true);
      to_members(&all, 1, kReuseTag);
    } else {
      tell_and_hear(all, &all, 1, kReuseTag);
      if (all) kept->reuse(c, true);
    }
    if (all) {
      rt::count_shared(e.context().counters().coll_segments_reused, 1);
      auto ns = pooled(std::move(kept), pool, reuse, std::move(members));
      state = ns;
      return ns.get();
    }
    if (kept) pool->put(reuse, members, std::move(kept), false);  // still this member's
  }

  // A new segment: rank 0 creates it and tells the others whether they can map it; then every
  // member tells rank 0 whether its mapping worked, and hears which member's did not: a member
  // that could not map it would leave the others waiting for it in the segment's first barrier.
  // (Pages are reserved when it is created, and each member's are touched as its paths use them.)
  // Its id, which names it and its state in the pools, is rank 0's world rank and how many it
  // made (context ids are reused, and the groups of one split share one); 0: none made.
  std::unique_ptr<rt::NodeSegment> seg;
  std::uint8_t ok = 1;
  std::string why;
  std::uint64_t id = 0;
  auto key_of = [](std::uint64_t i) {
    return "s" + std::to_string((i >> 40) - 1) + "-" + std::to_string(i & ((1ull << 40) - 1));
  };
  if (c.rank() == 0) {
    id = (static_cast<std::uint64_t>(c.world_rank(0)) + 1) << 40 | pool->next_serial();
    try {
      seg = rt::NodeSegment::create(ctx, key_of(id), bytes, c.size());
    } catch (const Error& err) {
      ok = 0;
      why = err.what();
    }
    const std::uint64_t told = ok ? id : 0;
    to_members(&told, sizeof told, kSetupTag);
    if (!ok) throw Error(Errc::transport, "collectives: " + why);
  } else {
    e.wait(e.irecv(c, p2p::Channel::collective, &id, sizeof id, 0, kSetupTag));
    if (!id)
      throw Error(Errc::transport,
                  "collectives: rank 0 could not create the communicator's node segment");
    try {
      seg = rt::NodeSegment::open(ctx, key_of(id), c.size());
    } catch (const Error& err) {
      ok = 0;
      why = err.what();
    }
  }
  std::int32_t unmapped = -1;  // the lowest rank that could not map it (rank 0 created it)
  if (c.rank() == 0) {
    unmapped = first_no(kMappedTag);
    to_members(&unmapped, sizeof unmapped, kMappedTag);
    // Nobody will map it now: its name goes (the last mapping would have removed it).
    if (unmapped >= 0) rt::NodeSegment::remove(ctx, key_of(id));
  } else {
    tell_and_hear(ok, &unmapped, sizeof unmapped, kMappedTag);
  }
  if (!ok) throw Error(Errc::transport, "collectives: " + why);
  if (unmapped >= 0)
    throw Error(Errc::transport, "collectives: rank " + std::to_string(unmapped) +
                                     " of the communicator could not map the node segment " +
                                     key_of(id) + " (its own error says why)");
  const rt::CollStore store = ctx.settings().coll_store;
  const unsigned store_modes = store == rt::CollStore::cached      ? 1u << NodeShared::kCached
                               : store == rt::CollStore::streaming ? 1u << NodeShared::kStreaming
                                                                   : 0b11u;
  // Whether ranks have cores of their own: rank 0's judgement, as every collective's shape
  // (with each rank's own, ranks launched with different core counts could take different
  // paths and wait for each other for ever).
  auto fresh = std::make_unique<NodeShared>(
      std::move(seg), chunk, nchunks, direct_block_bytes(ctx.coll_params()), store_modes,
      ctx.params().wait_mode != rt::WaitMode::poll, ctx.coll_ranks_per_core() <= 1);
  rt::count_shared(e.context().counters().coll_segments, 1);
  fresh->probe_direct(c, ctx.settings().shm_cma);
  fresh->set_huge_pages(c.engine().context().huge_pages());
  // Pooled once whole: a state whose probe failed part-way is not offered again.
  auto ns = pooled(std::move(fresh), pool, id, std::move(members));
  state = ns;
  return ns.get();
}

PathChoice::PathChoice(const CommImpl& c, NodeShared* ns, Coll k, std::size_t bytes, int decider,
                       bool exact)
    : index_(NodeShared::path_index(k, exact)), bytes_(bytes) {
  if (!ns) return;
  rt::Context& ctx = c.engine().context();
  // The node-shared path of a call that does not choose: the chunks, or the direct path
  // where that has taken their place (a bcast whose ranks have cores of their own), unless
  // RMP_<COLL>_ALGO forces the chunks (rank 0's setting: every rank agrees).
  const bool chunks = ns->paths(index_) >> NodeShared::kShmPath & 1;
  if (!chunks && forced(k, c) < 0) path_ = NodeShared::kDirectPath;
  // The size first: the cheapest test, and it ends small calls (an 8-byte bcast) at once.
  // (Not at or below kMaxBytes either: there the direct allreduce and reduce are the
  // node-shared path's small forms, and their time would be recorded as the direct path's.)
  // Above eager_threshold, where point-to-point moves data once. An allgather(v) or alltoall
  // whose ranks have cores of their own from kMaxBytes on: their direct paths move every
  // block once at any size (2 ranks, 8-32 KiB, 8 interleaved pairs, announced every call:
  // allgather 0.68-1.0 of the time with the choice from eager_threshold, alltoall 0.82-1.0).
  // So does a bcast choosing between its direct path and point-to-point (2 ranks, 6
  // interleaved runs against the chunks and the choice from eager_threshold: 8 KiB 0.66
  // against 1.08 of OpenMPI's time, 16 KiB 0.81 against 1.93). Not the others: a bcast with
  // chunks, a reduce or an allreduce of 8 KiB took 1.1-1.25 of the time, the announcement and
  // the tries of the slower paths costing more than the choice won. An allreduce or a floating
  // reduce, which choose between the chunks and the direct path alone, above direct_call_bytes,
  // where the direct path's copy outweighs its calls' cost (2 ranks near, both forced, reduce:
  // 32 KiB 4.4-4.5 us direct against 4.1-4.2 through the chunks, 48 KiB 5.8-6.4 against
  // 4.4-6.0, 64 KiB 7.0-7.1 against 8.0-8.3; far, 16 KiB 3.8 against 4.9, 64 KiB 7.5-7.7
  // against 17.5-19). From eager_threshold, as before, the choice came and went with its
  // calibration (30-68 KB here): a far 64 KiB reduce took the chunks' 19 us in some runs.
  const rt::Params& p = ctx.coll_params();
  const bool from_small = ns->own_cores() && (k == Coll::allgather || k == Coll::allgatherv ||
                                              k == Coll::alltoall || !chunks);
  const bool chunks_or_direct = k == Coll::allreduce || (k == Coll::reduce && !exact);
  const std::size_t least = from_small         ? kMaxBytes
                            : chunks_or_direct ? std::max(direct_call_bytes(p), kMaxBytes)
                                               : std::max(p.eager_threshold, kMaxBytes);
  if (bytes <= least || std::popcount(ns->paths(index_)) < 2 || forced(k, c) >= 0) return;
  if (c.rank() == decider) {
    t0_ = std::chrono::steady_clock::now();
    timed_ = ns;
    unwinding_ = std::uncaught_exceptions();
    ns->set_root_waits(k == Coll::bcast && !ns->own_cores());
  }
  // The decider announces a run of calls of this size class at once: what its choice would be for
  // each of them while it records nothing new, up to kMaxRun, and every rank counts the run's calls
  // down alike. With ranks sharing cores a small bcast per call cost a process switch a call (4
  // ranks on 2 cores, alltoall of 64 KiB: 51.0 us a call against 45.6 with the path forced). With
  // cores of their own a direct path is announced every call: the bcast costs a cache line each
  // way, and it starts the ranks together, which the direct allreduce needs (2 ranks, 1 MiB,
  // interleaved: 111 us announced every call, 156 with runs of 32, 171 with the path forced). The
  // other paths do not need it, and there it only costs (2 ranks near, 20000 calls a size,
  // interleaved: allreduce through the chunks 0.974x at 64 KiB, 0.990x at 256 KiB with runs;
  // allgather 0.98x, alltoall 0.96x at 16 KiB; the rest 0.99-1.01x). A bcast's announcement goes
  // from a receiver to the root, against the data, a round trip before the root can start (2 ranks,
  // 8 / 16 / 64 KiB: 1.17 / 1.67 / 4.60 us a call with runs, 2.03 / 2.53 / 4.83 every call): runs
  // for every path.
  NodeShared::PathRun& run = ns->path_run(index_, NodeShared::PathTimes::bucket_of(bytes));
  if (run.left == 0) {
    std::uint32_t announced[2] = {};
    const std::uint64_t b = ns->next_small_bcast();
    if (c.rank() == decider) {
      const bool sync_direct = ns->own_cores() && k != Coll::bcast;
      const auto [mode, uses] = ns->path_times(index_).choose_run(
          bytes, [&](int m) { return sync_direct && m == NodeShared::kDirectPath ? 1 : kMaxRun; });
      announced[0] = static_cast<std::uint32_t>(mode);
      announced[1] = static_cast<std::uint32_t>(uses);
      ns->small_bcast_root(c, announced, sizeof announced, b);
    } else {
      ns->small_bcast_receive(c, announced, sizeof announced, decider, b);
    }
    run.path = static_cast<std::uint8_t>(announced[0]);
    run.left = announced[1];
  }
  --run.left;
  path_ = run.path;
  if (NodeShared::chunks_path(path_) && ns->stores_are_paths(index_)) {
    stores_ = ns;
    outer_store_ = ns->force_store(path_ == NodeShared::kStreamPath ? NodeShared::kStreaming
                                                                    : NodeShared::kCached);
  }
  rt::Counters& n = ctx.counters();
  ++(path_ == NodeShared::kP2pPath      ? n.coll_p2p_path
     : path_ == NodeShared::kDirectPath ? n.coll_direct_path
                                        : n.coll_shm_path);
}

CallScope::CallScope(const CommImpl& c, NodeShared* ns, const CallSig& s) : c_(c), ns_(ns) {
  if (ns_) ns_->begin_call(c, s);
}

CallScope::CallScope(const CommImpl& c, const CallSig& s)
    : CallScope(c, may_use_node_shared(s.kind, c) ? node_shared(c) : nullptr, s) {}

void CallScope::watch_p2p() {
  if (!ns_ || watching_) return;
  detail::StallTest* const self = this;
  outer_ = std::exchange(detail::t_stall_test, self);
  watching_ = true;
}

void CallScope::operator()() { ns_->stall_tick(c_); }

int bcast_decider(const CommImpl& c, NodeShared* ns, int root) {
  return ns && !ns->own_cores() ? root : (root + 1) % c.size();
}

PathChoice::~PathChoice() {
  if (stores_) stores_->force_store(outer_store_);
  if (timed_) timed_->set_root_waits(false);
  if (!timed_ || std::uncaught_exceptions() > unwinding_) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  timed_->path_times(index_).record(path_, bytes_, s);
}

void shm_barrier(const CommImpl& c, NodeShared& ns) { ns.arrive_and_wait(c, ns.next_gen()); }

namespace {

// out = part(0) op part(1) op … op part(n − 1): the ranks' contributions combined in rank
// order, as every node-shared reduction does (one rank combines each element, so all paths
// give the same bits).
template <class Part>
void combine_in_rank_order(Op op, Type t, int n, Part&& part, void* out, std::size_t count) {
  reduce_into(op, t, part(0), part(1), out, count);
  for (int q = 2; q < n; ++q) reduce_apply(op, t, part(q), out, count);
}

// root < 0: every rank gets the result (allreduce); else only the root (reduce).
void small_reduce(const CommImpl& c, NodeShared& ns, const void* in, void* out, std::size_t count,
                  std::size_t esize, Type t, Op op, int root) {
  const std::uint64_t g = ns.next_gen();
  const std::size_t bytes = count * esize;
  const bool inl = bytes <= kInline;
  auto slot = [&](int r) { return ns.small_slot(r, g, inl); };
  if (bytes) copy_bytes(slot(c.rank()), in ? in : out, bytes);
  // Everyone waits for everyone, the non-roots of a reduce too: a rank writes this parity's
  // slot again two calls later, only once it has seen the root come back from reading it.
  ns.arrive_and_wait(c, g);
  // Every rank that gets the result reduces all contributions in rank order: the same bits.
  // Its own contribution comes from its input, not from its slot: the last rank to arrive
  // would read its flag line while the others are pulling it over to their cores (2 ranks,
  // 8 B: reduce_into took ~60 ns a call at the last arriver, ~3 at the other, and the
  // allreduce 0.47 us against the allgather's 0.34, which copies only the others' slots;
  // interleaved, 14 rounds: allreduce 8 B 0.82, 1 KiB 0.86 of the time before).
  auto part = [&](int q) -> const void* { return q == c.rank() && in ? in : slot(q); };
  if (bytes && (root < 0 || c.rank() == root))
    combine_in_rank_order(op, t, c.size(), part, out, count);
}

// root < 0: allreduce; else reduce to root.
void chunked_reduce(const CommImpl& c, NodeShared& ns, const void* in, void* out, std::size_t count,
                    std::size_t esize, Type t, Op op, int root) {
  // Round by round over `per` elements: every rank copies the slices the others reduce into
  // its chunk; rank q reduces slice q of all chunks in rank order (each element is combined
  // at one rank only, so every rank gets the same bits) and leaves the result in its chunk
  // where another rank copies it out (not a reduce's root: nobody else gets the result);
  // every rank that gets the result copies the others' slices out. (A reduce combined at its
  // root, at_root: the root's slice is the whole round.)
  NodeShared::Call call(ns, c, root < 0 ? NodeShared::Use::allreduce : NodeShared::Use::reduce,
                        count * esize);
  const int n = c.size(), r = c.rank();
  const bool gets_result = root < 0 || r == root;
  // This rank's own slice is read straight from its input, unless the result goes into that
  // very buffer (in place at a rank that gets the result): then it goes through the chunk.
  const bool own_direct = in != nullptr || !gets_result;
  // A reduce of two ranks, or of ranks sharing cores, is combined at its root alone: the
  // others put their whole part of a round into their chunks, the root combines all of it
  // into its output, and nothing is gathered back. Reduce-scatter and gather (the others'
  // rounds) took three steps a round at the root, each waiting for the one before on another
  // rank: its share of the others' slices put, its slice combined, the others' combined
  // slices copied out. (A call that fits the chunks is one round; a longer one's rounds of a
  // chunk let the others put the next round while the root combines this one.) The chunks
  // forced, 6 interleaved pairs, cores far apart, against reduce-scatter and gather: 2 ranks
  // 64 KiB 0.83 of the time, 256 KiB 0.84, 1 MiB 0.81, 4 MiB 0.58; 3 ranks on 2 cores
  // 0.48-0.74, 4 ranks 0.73-0.90 (5 pairs). Rounds shorter than a chunk, one chunk each, were
  // no faster: 2 ranks, rounds of 128 / 32 KiB took 1.07 / 1.22 of the time at 256 KiB (far),
  // 0.99 / 1.04 at 1 MiB and 1.15 / 1.20 at 4 MiB (mid). Ranks with cores of their own beyond
  // two keep reduce-scatter and gather: the root's combine grows with the ranks, their slices
  // do not (not measured here: this machine has two cores).
  const bool at_root = root >= 0 && (n == 2 || !ns.own_cores());
  const std::size_t span = ns.span_for(count * esize);
  const std::size_t per = span * ns.chunk() / esize;
  const std::byte* src = static_cast<const std::byte*>(in ? in : out);
  std::byte* dst = static_cast<std::byte*>(out);
  for (std::size_t first = 0; first < count; first += per) {
    const std::size_t cnt = std::min(per, count - first);
    // Where rank q's slice of the round starts (bytes): combined at the root, the root's
    // slice is all of it.
    auto off = [&](int q) {
      return (at_root ? (q <= root ? 0 : cnt) : even_offset(cnt, n, q)) * esize;
    };
    const std::size_t mine_at = off(r), mine_len = off(r + 1) - off(r);
    const NodeShared::Round round = ns.next_round(span);
    std::byte* chunk = ns.chunk_of(r, round);
    const std::byte* from = src + first * esize;
    ns.wait_chunk_free(c, round);
    ns.put(chunk, from, own_direct ? mine_at : off(r + 1));
    ns.put(chunk + off(r + 1), from + off(r + 1), off(n) - off(r + 1));
    ns.set_mark(c, round.mark(1));
    ns.wait_mark(c, round.mark(1));
    if (first == 0) ns.check_round(c, round);
    if (mine_len) {
      auto part = [&](int q) -> const std::byte* {
        return q == r && own_direct ? from + mine_at : ns.chunk_of(q, round) + mine_at;
      };
      // A rank that gets the result reduces into its output and publishes a copy where
      // others get it too (an allreduce; nobody reads a reduce's root's combined slice).
      // The others reduce into their chunk's own slice, which does not hold their
      // contribution (that comes from their input): straight into it with cached stores; with
      // streaming ones into scratch first, then put. Combined straight into the chunk, the
      // slice went with cached stores whatever the call's store: with the cores far apart the
      // root pulled every line of it from the other core's cache (2 ranks far, when two ranks
      // still went this way, the chunks forced, 6 interleaved pairs: cached stores 26.7 us a call
      // at 256 KiB, 99.2 at 1 MiB, 474 at 4 MiB; streaming ones, through scratch, 17.0, 61.1 and
      // 271; OpenMPI 15.8, 70.5 and 315).
      const bool aside = !gets_result && ns.streaming();
      std::byte* acc = gets_result ? dst + first * esize + mine_at
                       : aside     ? ns.scratch(mine_len)
                                   : chunk + mine_at;
      combine_in_rank_order(op, t, n, part, acc, mine_len / esize);
      if ((gets_result && root < 0) || aside) ns.put(chunk + mine_at, acc, mine_len);
    }
    ns.set_mark(c, round.mark(2));
    if (gets_result) {
      ns.wait_mark(c, round.mark(2));
      for (int q = 0; q < n; ++q)
        if (q != r)
          ns.copy_out(dst + first * esize + off(q), ns.chunk_of(q, round) + off(q),
                      off(q + 1) - off(q));
    }
    ns.set_mark(c, round.mark(3));
  }
}

}  // namespace

void shm_allreduce(const CommImpl& c, NodeShared& ns, const void* in, void* out, std::size_t count,
                   std::size_t esize, Type t, Op op) {
  if (count * esize <= kMaxBytes) return small_reduce(c, ns, in, out, count, esize, t, op, -1);
  chunked_reduce(c, ns, in, out, count, esize, t, op, -1);
}

void shm_reduce(const CommImpl& c, NodeShared& ns, const void* in, void* out, std::size_t count,
                std::size_t esize, Type t, Op op, int root) {
  const std::size_t bytes = count * esize;
  if (bytes <= NodeShared::small_reduce_max()) {
    // Through the slot ring: only the root waits. Every rank reduces nothing but the root,
    // which combines the slots in rank order (the same bits as the other paths).
    const std::uint64_t b = ns.next_small_reduce();
    ns.small_reduce_contribute(c, in ? in : out, bytes, root, b);
    if (c.rank() != root) return;
    ns.small_reduce_wait_all(c, b);
    if (bytes) {
      // The others' contributions from beside their counts where they still are (two scratch
      // blocks: the first two parts are read together).
      alignas(8) std::byte scratch[2][kSlotInline];
      combine_in_rank_order(
          op, t, c.size(),
          [&](int q) {
            return q == root ? ns.reduce_slot(q, b) : ns.contribution(q, b, bytes, scratch[q & 1]);
          },
          out, count);
    }
    ns.small_reduce_consumed(c, b);
    return;
  }
  if (bytes <= kMaxBytes) return small_reduce(c, ns, in, out, count, esize, t, op, root);
  chunked_reduce(c, ns, in, out, count, esize, t, op, root);
}

void shm_allreduce_compressed(const CommImpl& c, NodeShared& ns, const void* in, void* out,
                              std::size_t count, std::size_t esize, Type t, Op op,
                              Compression comp) {
  // chunked_reduce with 16-bit values in the chunks (as allreduce_compressed.cpp, whose error
  // analysis holds here too): every rank encodes the slices the others reduce into its
  // chunk; rank q combines its own slice in full precision with the decoded slices of all
  // the others, encodes the result into its chunk and decodes it back, as every other rank
  // decodes it: each element is rounded once as an input and once as a result, and all ranks
  // end with the same bits. The chunks carry half the bytes of float data, a quarter of
  // double.
  // The values are encoded straight into the chunks, with streaming stores where the call's
  // store choice has them (NodeShared::Call). Encoded with cached stores always, with the
  // cores far apart they ran into the lines the other rank had just read, and 2 ranks took
  // 1.4-1.8x the time of the uncompressed path, whose chunks got streaming stores there.
  if (count == 0) return;
  const int n = c.size(), r = c.rank();
  const auto* const src = static_cast<const std::byte*>(in ? in : out);
  const std::size_t per = ns.chunk() / sizeof(std::uint16_t);
  NodeShared::Call call(ns, c, NodeShared::Use::allreduce_compressed, count * esize);
  const bool streaming = ns.streaming();
  std::vector<const std::uint16_t*> others;  // the others' encoded pieces of this rank's slice
  others.reserve(static_cast<std::size_t>(n));
  auto* const dst = static_cast<std::byte*>(out);
  auto half = [&](int q, const NodeShared::Round& round) {
    return reinterpret_cast<std::uint16_t*>(ns.chunk_of(q, round));
  };
  for (std::size_t first = 0; first < count; first += per) {
    const std::size_t cnt = std::min(per, count - first);
    auto off = [&](int q) { return even_offset(cnt, n, q); };  // elements, within the round
    const NodeShared::Round round = ns.next_round();
    std::byte* const base = dst + first * esize;
    const std::byte* const from = src + first * esize;
    ns.wait_chunk_free(c, round);
    encode_half(comp, t, from, half(r, round), off(r), streaming);
    encode_half(comp, t, from + off(r + 1) * esize, half(r, round) + off(r + 1), cnt - off(r + 1),
                streaming);
    ns.set_mark(c, round.mark(1));
    ns.wait_mark(c, round.mark(1));
    if (first == 0) ns.check_round(c, round);
    if (const std::size_t mine = off(r + 1) - off(r)) {
      // This rank's input first, then the others' in rank order; in one pass (the input
      // copied out, each other combined, encoded and decoded one after the other took 1.2-1.3x
      // the uncompressed path's time at 2 ranks).
      others.clear();
      for (int q = 0; q < n; ++q)
        if (q != r) others.push_back(half(q, round) + off(r));
      reduce_encode_half(comp, t, op, from + off(r) * esize, others, base + off(r) * esize,
                         half(r, round) + off(r), mine, streaming);
    }
    ns.set_mark(c, round.mark(2));
    ns.wait_mark(c, round.mark(2));
    for (int q = 0; q < n; ++q)
      if (q != r)
        decode_half(comp, t, half(q, round) + off(q), base + off(q) * esize, off(q + 1) - off(q));
    ns.set_mark(c, round.mark(3));
  }
}

void shm_reduce_scatter(const CommImpl& c, NodeShared& ns, const void* in, void* out,
                        std::span<const std::size_t> counts, std::size_t esize, Type t, Op op) {
  // Rank q gets block q (counts[q] elements) of the element-wise reduction; only rank q
  // combines block q, in rank order, so nobody else needs its result.
  const int n = c.size(), r = c.rank();
  std::size_t before = 0, total = 0;  // elements of the blocks before this rank's, of all
  for (int q = 0; q < n; ++q) {
    if (q == r) before = total;
    total += counts[static_cast<std::size_t>(q)];
  }
  const std::size_t mine = counts[static_cast<std::size_t>(r)];
  if (total * esize <= kMaxBytes) {
    // Every rank deposits its whole vector in its small block (in place too: the result is
    // written only after); everyone waits for everyone (a block is written again two calls
    // later, once all have left the next call's wait).
    const std::uint64_t g = ns.next_gen();
    if (total) copy_bytes(ns.block(r, g), in ? in : out, total * esize);
    ns.arrive_and_wait(c, g);
    if (mine) {
      combine_in_rank_order(
          op, t, n, [&](int q) { return ns.block(q, g) + before * esize; }, out, mine);
    }
    return;
  }
  std::vector<std::size_t> displ(static_cast<std::size_t>(n) + 1, 0);
  for (int q = 0; q < n; ++q) displ[q + 1] = displ[q] + counts[static_cast<std::size_t>(q)];
  // In place the input is `out`, whose front the result overwrites: work from a copy.
  std::vector<std::byte> copy;
  if (!in) {
    const auto* o = static_cast<const std::byte*>(out);
    copy.assign(o, o + total * esize);
  }
  const auto* src = static_cast<const std::byte*>(in ? in : copy.data());
  // Rounds over the blocks' elements, s a round: a rank's chunk holds, at q·s, its piece of
  // block q for rank q (its own piece it reads from its input); rank q combines the p pieces.
  std::size_t longest = 0;
  for (int q = 0; q < n; ++q) longest = std::max(longest, counts[static_cast<std::size_t>(q)]);
  const std::size_t s = ns.chunk() / static_cast<std::size_t>(n) / kLine * kLine / esize;
  // Chunks too small for a line per rank (many ranks, tiny fragment_size): every rank sees
  // the same s and takes the ring instead.
  if (s == 0) return reduce_scatter_ring(c, in, out, counts, esize, t, op);
  NodeShared::Call call(ns, c, NodeShared::Use::reduce_scatter, total * esize);
  auto piece = [&](int q, std::size_t first) {
    const std::size_t cq = counts[static_cast<std::size_t>(q)];
    return cq > first ? std::min(s, cq - first) : 0;
  };
  for (std::size_t first = 0; first < longest; first += s) {
    const NodeShared::Round round = ns.next_round();
    std::byte* chunk = ns.chunk_of(r, round);
    ns.wait_chunk_free(c, round);
    for (int q = 0; q < n; ++q)
      if (q != r && piece(q, first))
        ns.put(chunk + q * s * esize, src + (displ[q] + first) * esize, piece(q, first) * esize);
    ns.set_mark(c, round.mark(1));
    ns.wait_mark(c, round.mark(1));
    if (first == 0) ns.check_round(c, round);
    if (const std::size_t len = piece(r, first)) {
      auto part = [&](int q) -> const std::byte* {
        return q == r ? src + (displ[r] + first) * esize : ns.chunk_of(q, round) + r * s * esize;
      };
      combine_in_rank_order(op, t, n, part, static_cast<std::byte*>(out) + first * esize, len);
    }
    ns.set_mark(c, round.mark(3));
  }
}

void shm_bcast(const CommImpl& c, NodeShared& ns, void* buf, std::size_t bytes, int root) {
  const bool is_root = c.rank() == root;
  if (bytes <= NodeShared::small_bcast_max()) {
    const std::uint64_t b = ns.next_small_bcast();
    if (is_root) {
      ns.small_bcast_root(c, buf, bytes, b);
    } else {
      ns.small_bcast_receive(c, buf, bytes, root, b);
    }
    return;
  }
  // The root copies each round into its chunk; the others copy it out, up to D rounds behind.
  std::optional<NodeShared::Call> call;  // only the root stores into chunks
  if (is_root) call.emplace(ns, c, NodeShared::Use::bcast, bytes);
  NodeShared::Round round;
  for (std::size_t first = 0; first < bytes; first += ns.chunk()) {
    const std::size_t len = std::min(ns.chunk(), bytes - first);
    round = ns.next_round();
    std::byte* chunk = ns.chunk_of(root, round);
    if (is_root) {
      ns.wait_chunk_free(c, round);
      ns.put(chunk, at(buf, first), len);
    } else {
      ns.wait_mark(c, round.mark(1), root);
      if (first == 0) ns.check_round(c, round, root);
      rt::copy_from_peer(at(buf, first), chunk, len);
    }
    ns.set_mark(c, round.mark(3));
  }
  if (is_root && ns.root_waits() && round.first > 0) ns.wait_mark(c, round.mark(3));
}

namespace {

// An allgather whose blocks all fit a small slot (kMaxBytes): as small_reduce, each rank
// writes its block beside its arrival flag (up to kInline bytes) or in its small block of
// this parity, and copies the others' out once all have arrived: one wait, and for blocks of
// up to 56 bytes one cache line a rank. (Through the chunks it took two marks and a line
// for the flag and another for the data: 2 ranks, 8 B, 0.58 us against OpenMPI's 0.62.)
void small_allgather(const CommImpl& c, NodeShared& ns, const void* in, void* out, const Layout& l,
                     std::size_t longest) {
  const int n = c.size(), r = c.rank();
  const std::uint64_t g = ns.next_gen();
  const bool inl = longest <= kInline;
  auto slot = [&](int q) { return ns.small_slot(q, g, inl); };
  if (const std::size_t len = l.size(r)) {
    const void* mine = in ? in : at(out, l.offset(r));
    copy_bytes(slot(r), mine, len);
    if (in) copy_bytes(at(out, l.offset(r)), in, len);
  }
  // A rank writes this parity's slot again two calls later, only once every rank has
  // arrived at the call between: each has copied this call's slots out by then.
  ns.arrive_and_wait(c, g);
  for (int q = 0; q < n; ++q)
    if (q != r && l.size(q)) rt::copy_from_peer(at(out, l.offset(q)), slot(q), l.size(q));
}

}  // namespace

void shm_allgather(const CommImpl& c, NodeShared& ns, const void* in, void* out, const Layout& l) {
  // Round k moves bytes [k·chunk, (k + 1)·chunk) of every rank's block. Not in place, this
  // rank's own piece goes into its chunk and its place in `out` in one call (put_and_copy:
  // one pass over `in` or two, whichever this rank measured faster).
  const int n = c.size(), r = c.rank();
  std::size_t longest = 0, total = 0;
  for (int q = 0; q < n; ++q) longest = std::max(longest, l.size(q)), total += l.size(q);
  if (longest <= kMaxBytes) return small_allgather(c, ns, in, out, l, longest);
  const void* mine = in ? in : at(out, l.offset(r));
  NodeShared::Call call(ns, c, NodeShared::Use::allgather, total);
  const std::size_t span = ns.span_for(longest), per = span * ns.chunk();
  auto piece = [&](int q, std::size_t first) {
    return l.size(q) > first ? std::min(per, l.size(q) - first) : 0;
  };
  for (std::size_t first = 0; first < longest; first += per) {
    const NodeShared::Round round = ns.next_round(span);
    ns.wait_chunk_free(c, round);
    if (const std::size_t len = piece(r, first)) {
      std::byte* chunk = ns.chunk_of(r, round);
      if (in) {
        ns.put_and_copy(chunk, at(out, l.offset(r) + first), at(in, first), len);
      } else {
        ns.put(chunk, at(mine, first), len);
      }
    }
    ns.set_mark(c, round.mark(1));
    ns.wait_mark(c, round.mark(1));
    if (first == 0) ns.check_round(c, round);
    for (int q = 0; q < n; ++q)
      if (q != r && piece(q, first))
        ns.copy_out(at(out, l.offset(q) + first), ns.chunk_of(q, round), piece(q, first));
    ns.set_mark(c, round.mark(3));
  }
}

}  // namespace rmp::coll

namespace rmp::coll {

bool shm_alltoall_fits(const CommImpl& c, const NodeShared& ns) {
  return ns.chunk() / static_cast<std::size_t>(c.size()) >= kLine;
}

namespace {

// An alltoall whose blocks for all ranks fit a small slot together (kMaxBytes): as
// small_allgather, rank r writes its block for rank q at q·bytes beside its arrival flag (up
// to kInline bytes in all) or in its small block of this parity, arrives once, and copies
// block r of every other rank's slot out. In place, the blocks are in the slot before any
// rank arrives, and `out` is written only after.
void small_alltoall(const CommImpl& c, NodeShared& ns, const void* in, void* out,
                    std::size_t bytes) {
  const int n = c.size(), r = c.rank();
  const std::uint64_t g = ns.next_gen();
  const bool inl = bytes * static_cast<std::size_t>(n) <= kInline;
  auto slot = [&](int q) { return ns.small_slot(q, g, inl); };
  const void* src = in ? in : out;
  for (int q = 0; q < n; ++q)
    if (q != r) copy_bytes(slot(r) + q * bytes, at(src, q * bytes), bytes);
  if (in) copy_bytes(at(out, r * bytes), at(in, r * bytes), bytes);
  ns.arrive_and_wait(c, g);  // (a slot is written again two calls later: small_allgather)
  for (int q = 0; q < n; ++q)
    if (q != r) rt::copy_from_peer(at(out, q * bytes), slot(q) + r * bytes, bytes);
}

}  // namespace

void shm_alltoall(const CommImpl& c, NodeShared& ns, const void* in, void* out, std::size_t bytes) {
  // Round k moves bytes [k·s, (k + 1)·s) of every block: rank r's chunk holds, at q·s, its
  // piece for rank q; rank q copies it out. In place, a piece is overwritten only after this
  // round copied it into the chunk, and later rounds read later bytes.
  const int n = c.size(), r = c.rank();
  const auto un = static_cast<std::size_t>(n);
  if (bytes == 0) return;
  if (bytes * un <= kMaxBytes) return small_alltoall(c, ns, in, out, bytes);
  const std::size_t s = ns.chunk() / un / kLine * kLine;
  NodeShared::Call call(ns, c, NodeShared::Use::alltoall, bytes * un);
  if (in) copy_bytes(at(out, r * bytes), at(in, r * bytes), bytes);
  const void* src = in ? in : out;
  for (std::size_t first = 0; first < bytes; first += s) {
    const std::size_t len = std::min(s, bytes - first);
    const NodeShared::Round round = ns.next_round();
    std::byte* chunk = ns.chunk_of(r, round);
    ns.wait_chunk_free(c, round);
    for (int q = 0; q < n; ++q)
      if (q != r) ns.put(chunk + q * s, at(src, q * bytes + first), len);
    ns.set_mark(c, round.mark(1));
    ns.wait_mark(c, round.mark(1));
    if (first == 0) ns.check_round(c, round);
    for (int q = 0; q < n; ++q)
      if (q != r) ns.copy_out(at(out, q * bytes + first), ns.chunk_of(q, round) + r * s, len);
    ns.set_mark(c, round.mark(3));
  }
}

namespace {

// A reader of the direct bcast copies `len` bytes from the root's `src` into its `dst`, from
// its own even share of them on (line-aligned), wrapping around: the readers start on
// different pages of the root's buffer, whose pinning by each cross-memory copy otherwise
// contends on the same pages (4 ranks on 2 cores, 4 interleaved rounds against every reader
// starting at the front: 256 KiB 0.77, 1 MiB 0.60 of the time; 64 KiB 0.99).
void read_from_root(const CommImpl& c, NodeShared& ns, int root, const void* src, void* dst,
                    std::size_t len) {
  const int n = c.size();
  const std::size_t from = even_offset(len / kLine, n - 1, (c.rank() - root + n) % n - 1) * kLine;
  if (from < len) ns.read_direct(root, at(src, from), at(dst, from), len - from);
  if (from > 0) ns.read_direct(root, src, dst, from);
}

}  // namespace

void shm_bcast_direct(const CommImpl& c, NodeShared& ns, void* buf, std::size_t bytes, int root) {
  if (!ns.direct_ok() || bytes <= kMaxBytes) return shm_bcast(c, ns, buf, bytes, root);
  const int n = c.size();
  const NodeShared::Round round = ns.next_round();
  // Split, where ranks have cores of their own and the root's share takes longer to copy
  // than a copy takes to start: every rank publishes its buffer; the root writes the first
  // 1/n of the message into every other rank's buffer while each of them reads the rest from
  // the root's, so that the root's core copies as much as each other's. 2 ranks, 8
  // interleaved runs against the others all reading: 32 KiB 2.33 against 2.76 us, 64 KiB 3.49
  // against 4.32, 256 KiB 8.75 against 14.5, 1 MiB 30.5 against 82.4; at 8 and 16 KiB the
  // extra wait and copy made it slower (1.57 against 1.03 us, 1.85 against 1.30).
  const rt::Params& p = c.engine().context().coll_params();  // rank 0's: all split alike
  const std::size_t share = even_offset(bytes / kLine, n, 1) * kLine;
  if (ns.own_cores() && share > 0 && share >= direct_call_bytes(p)) {
    ns.wait_chunk_free(c, round);
    if (c.rank() == root) {
      ns.set_source(c, buf, bytes);
    } else {
      ns.set_result(c, buf, bytes);
    }
    ns.set_mark(c, round.mark(1));
    ns.wait_mark(c, round.mark(1));
    ns.check_round(c, round);  // before the root writes into the others' buffers
    if (c.rank() == root) {
      for (int s = 1; s < n; ++s) {
        const int q = (root + s) % n;
        ns.write_direct(q, buf, ns.result(q), share);
      }
    } else {
      read_from_root(c, ns, root, at(ns.source(root), share), at(buf, share), bytes - share);
    }
    if (c.rank() == root && ns.direct_failed()) ns.set_push_failed(c, round.first);
    ns.set_mark(c, round.mark(3));
    ns.wait_mark(c, round.mark(3));  // all copies are done
    ns.direct_done();  // this rank's own failure first (and cleared for the next call)
    if (c.rank() != root && ns.push_failed(root) == round.first)
      throw Error(Errc::transport, "collectives: bcast: root " + std::to_string(root) +
                                       " could not write its share into this rank's buffer");
    return;
  }
  // One round: the root publishes its buffer's address; the others read it and say so.
  if (c.rank() == root) {
    ns.wait_chunk_free(c, round);
    ns.set_source(c, buf, bytes);
    ns.set_mark(c, round.mark(3));   // its own part: nothing to read
    ns.wait_mark(c, round.mark(3));  // all have read its buffer
  } else {
    ns.wait_mark(c, round.mark(3), root);
    ns.check_round(c, round, root);
    read_from_root(c, ns, root, ns.source(root), buf, bytes);
    ns.set_mark(c, round.mark(3));
    ns.direct_done();
  }
}

void shm_alltoall_direct(const CommImpl& c, NodeShared& ns, const void* in, void* out,
                         std::size_t bytes) {
  if (!ns.direct_ok()) return shm_alltoall(c, ns, in, out, bytes);
  const int n = c.size(), r = c.rank();
  // One round: every rank publishes its input's address (null in place) and waits for all.
  const NodeShared::Round round = ns.next_round();
  ns.wait_chunk_free(c, round);
  ns.set_source(c, in, static_cast<std::size_t>(n) * bytes);
  ns.set_mark(c, round.mark(1));
  ns.wait_mark(c, round.mark(1));
  ns.check_round(c, round);
  bool everyone = true;  // every rank's input is readable: the same answer on every rank
  for (int q = 0; q < n; ++q) everyone = everyone && ns.source(q) != nullptr;
  if (everyone) {
    copy_bytes(at(out, r * bytes), at(in, r * bytes), bytes);
    for (int q = 1; q < n; ++q) {  // from r + 1 on, so that not all read one rank at once
      const int from = (r + q) % n;
      ns.read_direct(from, at(ns.source(from), r * bytes), at(out, from * bytes), bytes);
    }
  }
  ns.set_mark(c, round.mark(3));
  if (!everyone) return shm_alltoall(c, ns, in, out, bytes);
  ns.wait_mark(c, round.mark(3));  // all have read this rank's input
  ns.direct_done();
}

void shm_allgather_direct(const CommImpl& c, NodeShared& ns, const void* in, void* out,
                          const Layout& l) {
  if (!ns.direct_ok()) return shm_allgather(c, ns, in, out, l);
  // One round: every rank publishes where its block is (its input, or its place in its output
  // in place), copies its own block and reads every other rank's block from there with
  // cross-memory attach, then leaves once all have read its own.
  const int n = c.size(), r = c.rank();
  const NodeShared::Round round = ns.next_round();
  ns.wait_chunk_free(c, round);
  ns.set_source(c, in ? in : at(out, l.offset(r)), l.size(r));
  ns.set_mark(c, round.mark(1));
  ns.wait_mark(c, round.mark(1));
  ns.check_round(c, round);
  if (in && l.size(r)) copy_bytes(at(out, l.offset(r)), in, l.size(r));
  for (int s = 1; s < n; ++s) {  // from r + 1 on, so that not all read one rank at once
    const int q = (r + s) % n;
    if (l.size(q)) ns.read_direct(q, ns.source(q), at(out, l.offset(q)), l.size(q));
  }
  ns.set_mark(c, round.mark(3));
  ns.wait_mark(c, round.mark(3));  // all have read this rank's block
  ns.direct_done();
}

namespace {

// One block of the direct reductions: acc = part(0) op part(1) op … op part(n − 1) over the
// `cnt` elements at byte `pos` of every rank's published input, in rank order (the same bits
// as combine_in_rank_order). This rank's part comes from `in` + pos, or, in place (`in`
// null), from `acc` itself, copied aside first; the others' are read with cross-memory
// attach into `tmp` (three blocks of `block` bytes).
void combine_direct(NodeShared& ns, int n, int r, const std::byte* in, std::size_t pos,
                    std::size_t cnt, std::size_t esize, Type t, Op op, std::byte* tmp,
                    std::size_t block, std::byte* acc) {
  const std::size_t len = cnt * esize;
  const std::byte* own =
      in ? in + pos : static_cast<const std::byte*>(std::memcpy(tmp + 2 * block, acc, len));
  auto part = [&](int q, std::byte* into) -> const std::byte* {
    if (q == r) return own;
    ns.read_direct(q, static_cast<const std::byte*>(ns.source(q)) + pos, into, len);
    return into;
  };
  const std::byte* p0 = part(0, tmp);
  reduce_into(op, t, p0, part(1, tmp + block), acc, cnt);
  for (int q = 2; q < n; ++q) reduce_apply(op, t, part(q, tmp), acc, cnt);
}

// Once every rank is done with a direct reduce (at its root) or allreduce: throws for a rank
// that could not deliver its part into this rank's memory in this round (`what`: the call
// and where it writes).
void throw_if_push_failed(NodeShared& ns, int n, std::uint64_t round, const char* what) {
  for (int q = 0; q < n; ++q)
    if (ns.push_failed(q) == round)
      throw Error(Errc::transport, std::string("collectives: ") + what + ": rank " +
                                       std::to_string(q) +
                                       " could not deliver its part (cross-memory attach failed)");
}

}  // namespace

void shm_reduce_direct(const CommImpl& c, NodeShared& ns, const void* in, void* out,
                       std::size_t count, std::size_t esize, Type t, Op op, int root) {
  if (!ns.direct_ok() || count * esize <= kMaxBytes)
    return shm_reduce(c, ns, in, out, count, esize, t, op, root);
  // One round, the vector in blocks (direct_block_bytes), combined in rank order (the same
  // bits as shm_reduce). A vector of up to a quarter chunk is pulled: the root reads every
  // other rank's input with cross-memory attach and combines it, one call per rank, and the
  // others leave once it has. A longer one is sliced as the direct allreduce is: rank q reads
  // slice q of every input, combines it and writes it into the root's output, so that every
  // core reads and combines a share (sliced against pulled, 2 ranks: 256 KiB 22.5 us against
  // 29.8).
  // Slices cost a second call and a wait per rank: at 16 and 64 KiB (one block) they ran at
  // 1.17 and 1.09 of the pulled time (2 ranks, 6 interleaved runs; 3.81 against 4.34 us,
  // 9.50 against 10.45). Four ranks on two cores (forced): sliced against pulled 64 KiB 21.7
  // against 26.3 us, 1 MiB 300 against 585, 4 MiB 1184 against 2293.
  // Long vectors were once pushed where ranks have cores of their own (every other rank
  // wrote its blocks into the root's scratch while the root combined the blocks before):
  // with blocks long enough for the calls' fixed cost, slicing beat it at every size, and the
  // push wrote into lines the root had just read, which far apart cost twice the chunks'
  // time. Two ranks, doubles, medians of interleaved runs (512 KiB blocks; near / far):
  // sliced 4 MiB 316 / 313 us, pushed 318 / 269; 16 MiB sliced 2190 far, pushed 6961.
  const int n = c.size(), r = c.rank();
  const auto* src = static_cast<const std::byte*>(in ? in : out);
  auto* dst = static_cast<std::byte*>(out);
  const std::size_t per = std::max<std::size_t>(ns.direct_block() / esize, 1), block = per * esize;
  const std::size_t len = count * esize;
  // Pulled up to a quarter chunk (the blocks' length when these figures were taken), sliced
  // above: the root alone reads and combines a pulled vector.
  const bool pull = len <= std::max(ns.chunk() / 4, esize);
  // Pulled with up to 8 ranks (scratch of the vector per rank): the root reads every other input
  // before it combines any, and says so, so that the others leave once their input is read
  // rather than once it is combined too. 2 ranks, 6 interleaved runs: 16 / 64 / 128 KiB
  // 3.21 / 7.27 / 11.99 us a call (the ranks' mean, as OSU times it) against 3.41 / 8.12 /
  // 14.28 reading and combining in turn.
  const bool read_first = pull && n <= 8;
  // Scratch, taken before anything is published. At the root: pulled reading first, the
  // vector's length per rank; else three blocks for combine_direct and one more. Elsewhere
  // only a slice's: three blocks and one for the result.
  const std::size_t scratch = r == root && read_first ? static_cast<std::size_t>(n) * len
                              : r == root || !pull    ? 4 * block
                                                      : 0;
  std::byte* tmp = scratch ? ns.scratch(scratch) : nullptr;
  const NodeShared::Round round = ns.next_round();
  ns.wait_chunk_free(c, round);
  ns.set_source(c, src, len);                 // the root, or every rank, reads its slice of it
  if (r == root) ns.set_result(c, dst, len);  // the others write into it
  ns.set_mark(c, round.mark(1));
  // Every rank waits for all to publish, the others too: with ranks sharing cores a rank
  // waiting for the root alone kept its core while the root waited for a rank queued behind
  // it on that core (where_awaited saw only the root, running elsewhere): 3 ms a call, a
  // time slice, at 4 ranks on 2 cores. Waiting for all, it yields to the rank behind it.
  ns.wait_mark(c, round.mark(1));
  ns.check_round(c, round);  // before anyone reads or writes another rank's memory
  if (pull) {
    if (r != root) {
      ns.wait_mark(c, round.mark(3), root);  // the root has read this input
      ns.set_mark(c, round.mark(3));
      return;
    }
    if (read_first) {
      auto slot = [&](int q) { return tmp + static_cast<std::size_t>(q) * len; };
      auto part = [&](int q) -> const std::byte* { return q == r && in ? src : slot(q); };
      if (!in) std::memcpy(slot(r), dst, len);  // in place: its own part, aside
      for (int q = 0; q < n; ++q)
        if (q != r) ns.read_direct(q, ns.source(q), slot(q), len);
      ns.set_mark(c, round.mark(3));  // every input is read
      if (!ns.direct_failed()) combine_in_rank_order(op, t, n, part, dst, count);
      ns.direct_done();
      return;
    }
    combine_direct(ns, n, r, in ? src : nullptr, 0, count, esize, t, op, tmp, block, dst);
    ns.set_mark(c, round.mark(3));  // (the others' marks follow: nothing to wait for)
    ns.direct_done();
    return;
  }
  // In place, slice q of the root's output is read by rank q alone, before rank q writes it.
  // A rank whose write failed says so in its failure line; the root throws.
  std::byte* into = r == root ? dst : ns.result(root);
  const std::size_t end = even_offset(count, n, r + 1);
  for (std::size_t first = even_offset(count, n, r); first < end; first += per) {
    const std::size_t cnt = std::min(per, end - first), pos = first * esize;
    std::byte* acc = r == root ? dst + pos : tmp + 3 * block;
    combine_direct(ns, n, r, in ? src : nullptr, pos, cnt, esize, t, op, tmp, block, acc);
    if (r != root) ns.write_direct(root, acc, into + pos, cnt * esize);
  }
  if (r != root && ns.direct_failed()) ns.set_push_failed(c, round.first);
  ns.set_mark(c, round.mark(3));
  ns.wait_mark(c, round.mark(3));  // all slices are in, nobody reads an input
  ns.direct_done();  // this rank's own failure first (and cleared for the next call)
  if (r == root) throw_if_push_failed(ns, n, round.first, "reduce");
}

void shm_allreduce_direct(const CommImpl& c, NodeShared& ns, const void* in, void* out,
                          std::size_t count, std::size_t esize, Type t, Op op) {
  if (!ns.direct_ok() || count * esize <= kMaxBytes)
    return shm_allreduce(c, ns, in, out, count, esize, t, op);
  // One round: every rank publishes its input and its output, reduces its slice of the
  // vector block by block (reading the others' parts of the block, combining in rank order
  // as every node-shared reduction does, then writing the result into the others' outputs
  // while it is still in this core's cache), and leaves once all have written theirs. Rank q
  // reads slice q of every input and writes slice q of every output; in place, slice q of a
  // rank's buffer is read by rank q alone, before rank q writes it.
  const int n = c.size(), r = c.rank();
  const auto* src = static_cast<const std::byte*>(in ? in : out);
  auto* dst = static_cast<std::byte*>(out);
  const std::size_t per = std::max<std::size_t>(ns.direct_block() / esize, 1), block = per * esize;
  std::byte* tmp = ns.scratch(3 * block);  // before anything is published
  const NodeShared::Round round = ns.next_round();
  ns.wait_chunk_free(c, round);
  ns.set_source(c, src, count * esize);
  ns.set_result(c, dst, count * esize);
  ns.set_mark(c, round.mark(1));
  ns.wait_mark(c, round.mark(1));
  ns.check_round(c, round);  // before anyone writes into another rank's output
  const std::size_t end = even_offset(count, n, r + 1);
  for (std::size_t first = even_offset(count, n, r); first < end; first += per) {
    const std::size_t cnt = std::min(per, end - first), pos = first * esize, len = cnt * esize;
    std::byte* acc = dst + pos;
    combine_direct(ns, n, r, in ? src : nullptr, pos, cnt, esize, t, op, tmp, block, acc);
    for (int s = 1; s < n; ++s) {
      const int q = (r + s) % n;
      ns.write_direct(q, acc, ns.result(q) + pos, len);
    }
  }
  // A rank that could not read a part or write its slice says so: the others' outputs lack
  // that slice (they would otherwise return with it stale).
  if (ns.direct_failed()) ns.set_push_failed(c, round.first);
  ns.set_mark(c, round.mark(3));
  ns.wait_mark(c, round.mark(3));  // all results are in, nobody reads this input
  ns.direct_done();  // this rank's own failure first (and cleared for the next call)
  throw_if_push_failed(ns, n, round.first, "allreduce");
}

}  // namespace rmp::coll
