// Single-producer single-consumer message ring of cache lines, plus a byte ring for larger
// payloads, living in a shared segment. One direction of a shm pair.
//
// A message starts on a line whose first word is a sequence number derived from its position
// (the lap), written last with release order: an 8-byte message touches one line, sequence
// and payload together. Larger inline messages continue on the following lines (never across
// the ring's end: a pad message skips to the start). Payloads sent "by copy" go to the byte
// ring; the line then carries their position. The consumer clears the sequence word of every
// continuation line it consumed, so stale payload bytes can never pass for a header a lap later.
// A byte-ring payload may be stored with streaming stores and may be timed (eager_stores.hpp):
// the time the sender began to copy it then rides in the message line and the consumer says
// what the payload cost once delivered. Every line also carries its writer's position as
// consumer of the other direction (the echo): a rank learns how far its own messages were
// consumed from the traffic coming back, without reading the other side's tail.
//
// Hot lines: while messages alternate with the other side's (a ping-pong) and the echoes say
// the consumer has taken every message before the one being written, a message that would
// leave the first kHotLines lines of the ring for the next ones carries a jump: the next one
// starts the next lap, on lines written a few messages ago; and a payload going by copy of up
// to kMaxRestartBytes starts the byte ring over. Lines the two cores touched recently move between
// them faster: with the cores far apart, an 8-byte ping-pong through two rings of 64 lines took 341
// ns one way, through rings of 4-8 lines 314-320. A smaller ring instead cost a window of small
// sends 10-14 % of its rate, so the ring keeps its size. Interleaved against the ring without
// jumps, cores far apart: 8-byte latency 0.95-0.97x, 1 KiB 0.85-0.88x, 4 KiB 1.0; hot
// windows of 2 and 4 lines gained less (1.00, 0.98) and cost near cores 6-9 %.
// Laps then advance up to once every few messages, so the sequence word is 64 bits wide.
#pragma once

#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>

#include "runtime/copy.hpp"
#include "runtime/transport/transport.hpp"

namespace rmp::rt::shm {

inline constexpr std::size_t kLine = 64;
inline constexpr AmId kAmPad = 31;
// seq (8), echo (4), payload_len (4), am, hdr_len, flags, nlines
inline constexpr std::size_t kLineHeader = 20;
inline constexpr std::size_t kMaxMessageLines = 18;  // 20 + 63 header + 1024 inline payload
inline constexpr std::size_t kHotLines = 8;          // lines an idle ring keeps reusing
inline constexpr std::uint8_t kFlagDataRing = 1;
inline constexpr std::uint8_t kFlagStreamed = 2;  // the byte-ring payload had streaming stores
inline constexpr std::uint8_t kFlagTimed = 4;     // the sender's start time follows its position
inline constexpr std::uint8_t kFlagJump = 8;      // the next message starts the next lap

// How the producer stores one byte-ring payload of at least kMinPickedBytes (below that,
// cached stores and no stamp): its caller's pick (eager_stores.hpp chooses).
inline constexpr std::size_t kMinPickedBytes = 8192;
// The largest payload that starts the byte ring over while messages alternate (push()). Larger
// ones go on round the ring: starting over, the producer stores into the very lines the
// consumer has just read and still holds, each store waiting for its core, and past 8 KiB
// that cost more than the hot lines saved. Ping-pongs, cores near, 5 interleaved pairs: 12,
// 16, 32, 48 KiB one way 1.59, 2.27, 3.88, 5.39 us starting over against 0.96, 1.07, 1.88,
// 2.51 going round (and faster than rendezvous, 1.56 us at 16 KiB); 4 and 8 KiB alike;
// windows of 24 and 48 KiB 2.1x and 1.8x the bandwidth. Far apart 32 KiB 0.89 of the time,
// 64 KiB alike.
inline constexpr std::size_t kMaxRestartBytes = 8192;
struct StorePick {
  bool streaming = false;
  bool timed = false;  // stamp the payload: the consumer says what it cost
};

// What a timed payload cost, as the consumer saw it: when it found the payload waiting behind
// another it had just delivered, its own delivery (it is the bottleneck, the sender's copy was
// hidden); otherwise from the sender's first store to the end of its delivery. The latter
// counts what the two copies alone miss: after streaming stores the sender's sequence word
// becomes visible only once the payload has reached memory (cores near: copy 130 ns, delivery
// 410, but 660 ns more from the copy's end until the consumer saw the message, against 150
// after cached stores).
struct TimedDelivery {
  bool streamed;
  std::size_t bytes;
  std::uint64_t ns;
};

struct alignas(kLine) Line {
  std::atomic<std::uint64_t> seq;
  std::uint32_t echo;  // low 32 bits of the writer's consumer position in the other direction
  std::uint32_t payload_len;
  std::uint8_t am;
  std::uint8_t hdr_len;
  std::uint8_t flags;
  std::uint8_t nlines;
  std::byte body[kLine - kLineHeader];
};
static_assert(sizeof(Line) == kLine);
static_assert(offsetof(Line, body) == kLineHeader);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

// Written by the consumer only; read by the producer when it believes the ring is full.
struct alignas(kLine) RingShared {
  std::atomic<std::uint64_t> line_tail{0};
  std::atomic<std::uint64_t> data_tail{0};
};

struct RingLayout {
  RingShared* shared = nullptr;
  Line* lines = nullptr;
  std::size_t nlines = 0;  // power of two, ≥ 2 × kMaxMessageLines
  std::byte* data = nullptr;
  std::size_t data_bytes = 0;  // power of two
};

// The first position of a lap at or after `pos` (lap: a power of two): where a jump lands in
// the line ring (producer and consumer alike) and where an idle byte ring starts over.
inline std::uint64_t lap_start_from(std::uint64_t pos, std::size_t lap) {
  return (pos + lap - 1) & ~static_cast<std::uint64_t>(lap - 1);
}

inline std::uint64_t lap_seq(std::uint64_t pos, unsigned lap_shift) {
  return (pos >> lap_shift) + 1;  // never 0: 0 marks a cleared line
}

// Stamps: one clock for every process of a node.
inline std::int64_t stamp_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Defaults of push() and poll(): cached stores, nobody told of timed payloads.
inline constexpr auto kCachedStores = [](std::size_t) { return StorePick{}; };
inline constexpr auto kUntimed = [](const TimedDelivery&) {};

// Largest inline message (header + payload) the ring carries in one message.
inline constexpr std::size_t max_inline_bytes() { return kMaxMessageLines * kLine - kLineHeader; }

class RingProducer {
public:
  RingProducer() = default;
  explicit RingProducer(const RingLayout& l)
      : l_(l), shift_(static_cast<unsigned>(std::countr_zero(l.nlines))) {}

  // Largest payload push() accepts by copy.
  std::size_t max_payload() const { return l_.data_bytes; }

  // The consumer of the other direction, whose position every line echoes (pair_rings).
  void echo_position_of(const std::uint64_t* consumer_pos) { echo_of_ = consumer_pos; }
  // A line of the other direction echoed `echo`: this ring's consumer has reached it. Only
  // the low 32 bits travel: the position comes out wrong only if this side pushed 2^32 lines
  // between the other side's writing that line and this side's reading it, never polling in
  // between (eager credit alone stops a sender far sooner).
  void note_echo(std::uint32_t echo) {
    const std::uint64_t t =
        head_ - static_cast<std::uint32_t>(static_cast<std::uint32_t>(head_) - echo);
    if (t > tail_) tail_ = t;
  }

  // Appends a message; retry when the ring (or byte ring) has no room now. A byte-ring payload
  // of at least kMinPickedBytes is stored as pick(bytes) says, asked once there is room.
  template <class Pick = const decltype(kCachedStores)&>
  TStatus push(AmId am, std::span<const std::byte> hdr, std::span<const std::byte> payload,
               bool inline_payload, Pick&& pick = kCachedStores) {
    const std::size_t plen = payload.size();
    const bool inl = inline_payload || plen == 0;
    const bool pickable = !inl && plen >= kMinPickedBytes;
    const std::size_t body = inl ? hdr.size() + plen : (pickable ? 16 : 8) + hdr.size();
    const std::size_t need = (kLineHeader + body + kLine - 1) / kLine;
    if (need > kMaxMessageLines || hdr.size() > 255 || plen > l_.data_bytes)
      return TStatus::error;
    const std::size_t mask = l_.nlines - 1;
    std::uint64_t pos = head_;
    // The consumer has taken every message sent before this one.
    const bool idle = tail_ == pos;
    std::size_t idx = pos & mask;
    const std::size_t pad = idx + need > l_.nlines ? l_.nlines - idx : 0;
    if (!room(pos, pos + pad + need)) {
      tail_ = l_.shared->line_tail.load(std::memory_order_acquire);
      if (!room(pos, pos + pad + need)) return TStatus::retry;
    }
    std::uint64_t dpos = 0;
    if (!inl) {
      const std::size_t dmask = l_.data_bytes - 1;
      // Every payload went with a message that was consumed: the byte ring is empty, and
      // starts over while messages alternate (hot lines, above; a window of sends keeps
      // going round: interleaved, 1-4 KiB windows lost 8-14 % of their rate to starting
      // over at every window), for payloads up to kMaxRestartBytes. Nothing lies in the rest
      // of its lap.
      if (idle && idle_before_ && plen <= kMaxRestartBytes)
        dhead_ = dtail_ = lap_start_from(dhead_, l_.data_bytes);
      dpos = dhead_;
      const std::size_t off = dpos & dmask;
      if (off + plen > l_.data_bytes) dpos += l_.data_bytes - off;  // keep payloads contiguous
      if (dpos + plen - dtail_ > l_.data_bytes) {
        dtail_ = l_.shared->data_tail.load(std::memory_order_acquire);
        if (dpos + plen - dtail_ > l_.data_bytes) return TStatus::retry;
      }
    }
    if (pad) {
      Line& p = l_.lines[idx];
      p.am = kAmPad;
      p.nlines = static_cast<std::uint8_t>(pad);
      p.flags = 0;
      p.hdr_len = 0;
      p.payload_len = 0;
      p.echo = echo();
      p.seq.store(lap_seq(pos, shift_), std::memory_order_release);
      pos += pad;
      idx = 0;
    }
    Line& m = l_.lines[idx];
    std::byte* b = m.body;
    std::uint8_t flags = inl ? 0 : kFlagDataRing;
    if (!inl) {
      std::memcpy(b, &dpos, 8);
      b += 8;
      std::byte* to = l_.data + (dpos & (l_.data_bytes - 1));
      const StorePick how = pickable ? pick(plen) : StorePick{};
      if (how.timed) {
        const std::int64_t start = stamp_now_ns();
        std::memcpy(b, &start, 8);
        b += 8;
      }
      if (how.streaming) {
        copy_streaming(to, payload.data(), plen);  // fenced before the sequence word
      } else {
        copy_bytes(to, payload.data(), plen);
      }
      flags |= (how.streaming ? kFlagStreamed : 0) | (how.timed ? kFlagTimed : 0);
      dhead_ = dpos + plen;
    }
    copy_bytes(b, hdr.data(), hdr.size());
    if (inl) copy_bytes(b + hdr.size(), payload.data(), plen);
    const std::uint64_t next = pos + need;
    // Only while messages alternate with the other side's (this one and the one before found
    // the ring idle): the lines up to the jump's own are all the next lap can use until the
    // consumer has read it, which a window of sends would fill at once.
    const bool jump = idle && idle_before_ && (next & mask) >= kHotLines;
    idle_before_ = idle;
    m.am = am;
    m.hdr_len = static_cast<std::uint8_t>(hdr.size());
    m.flags = flags | (jump ? kFlagJump : 0);
    m.nlines = static_cast<std::uint8_t>(need);
    m.payload_len = static_cast<std::uint32_t>(plen);
    m.echo = echo();
    m.seq.store(lap_seq(pos, shift_), std::memory_order_release);
    head_ = next;
    if (jump) {
      skip_from_ = next;
      head_ = skip_to_ = lap_start_from(next, l_.nlines);
    }
    return TStatus::ok;
  }

private:
  // Whether positions [from, to) may be written: the positions a lap earlier, whose lines they
  // reuse, were consumed, or were skipped by the last jump (nothing was written there). The
  // jump does not shrink the ring: a window of sends after it may use all the other lines.
  bool room(std::uint64_t from, std::uint64_t to) const {
    return to - tail_ <= l_.nlines ||
           (from >= skip_from_ + l_.nlines && to <= skip_to_ + l_.nlines);
  }

  std::uint32_t echo() const { return echo_of_ ? static_cast<std::uint32_t>(*echo_of_) : 0; }

  RingLayout l_;
  unsigned shift_ = 0;
  std::uint64_t head_ = 0, dhead_ = 0;  // private producer positions
  std::uint64_t tail_ = 0, dtail_ = 0;  // cached consumer positions
  std::uint64_t skip_from_ = 0, skip_to_ = 0;  // positions the last jump skipped
  bool idle_before_ = false;                   // the previous message found the ring idle
  const std::uint64_t* echo_of_ = nullptr;
};

class RingConsumer {
public:
  RingConsumer() = default;
  explicit RingConsumer(const RingLayout& l)
      : l_(l), shift_(static_cast<unsigned>(std::countr_zero(l.nlines))) {}

  // The producer of the other direction: told the echo of every line read here (pair_rings).
  void report_echoes_to(RingProducer* reverse) { reverse_ = reverse; }
  const std::uint64_t* position() const { return &pos_; }

  // True when a message is waiting (one acquire load).
  bool ready() const {
    return l_.lines[pos_ & (l_.nlines - 1)].seq.load(std::memory_order_acquire) ==
           lap_seq(pos_, shift_);
  }

  // Delivers at most `budget` messages to deliver(am, header, payload); returns how many.
  // After a timed payload's delivery, timed(TimedDelivery) is told what it cost.
  template <class Deliver, class Timed = const decltype(kUntimed)&>
  int poll(Deliver&& deliver, int budget, Timed&& timed = kUntimed) {
    int n = 0;
    const std::size_t mask = l_.nlines - 1;
    while (n < budget) {
      Line& m = l_.lines[pos_ & mask];
      if (m.seq.load(std::memory_order_acquire) != lap_seq(pos_, shift_)) break;
      const std::size_t nl = m.nlines;
      const bool jump = m.flags & kFlagJump;
      if (reverse_) reverse_->note_echo(m.echo);  // before delivery: its replies may use it
      std::uint64_t data_end = 0;
      if (m.am != kAmPad) {
        const std::byte* b = m.body;
        std::span<const std::byte> payload;
        std::int64_t start = 0;
        if (m.flags & kFlagDataRing) {
          std::uint64_t dpos;
          std::memcpy(&dpos, b, 8);
          b += 8;
          if (m.flags & kFlagTimed) {
            std::memcpy(&start, b, 8);
            b += 8;
          }
          payload = {l_.data + (dpos & (l_.data_bytes - 1)), m.payload_len};
          data_end = dpos + m.payload_len;
        } else {
          payload = {b + m.hdr_len, m.payload_len};
        }
        if (m.flags & kFlagTimed) {
          const std::int64_t t0 = stamp_now_ns();
          deliver(m.am, std::span<const std::byte>(b, m.hdr_len), payload);
          const std::int64_t t1 = stamp_now_ns();
          // The delivery alone when the payload waited behind the message delivered just
          // before (n > 0), or had waited long before this poll (the consumer was busy
          // elsewhere or had no core: up to kMaxWait x the delivery plus kWaitSlackNs is still
          // copy and visibility), or the clocks disagree.
          const bool waited =
              n > 0 || start > t0 || t0 - start > kMaxWait * (t1 - t0) + kWaitSlackNs;
          const std::int64_t from = waited ? t0 : start;
          timed(TimedDelivery{(m.flags & kFlagStreamed) != 0, payload.size(),
                              static_cast<std::uint64_t>(t1 - from)});
        } else {
          deliver(m.am, std::span<const std::byte>(b, m.hdr_len), payload);
        }
        ++n;
      }
      for (std::size_t i = 1; i < nl; ++i)
        l_.lines[(pos_ + i) & mask].seq.store(0, std::memory_order_relaxed);
      pos_ += nl;
      if (jump) pos_ = lap_start_from(pos_, l_.nlines);
      if (data_end) l_.shared->data_tail.store(data_end, std::memory_order_release);
      l_.shared->line_tail.store(pos_, std::memory_order_release);
    }
    return n;
  }

private:
  static constexpr std::int64_t kMaxWait = 8, kWaitSlackNs = 2000;
  RingLayout l_;
  unsigned shift_ = 0;
  std::uint64_t pos_ = 0;
  RingProducer* reverse_ = nullptr;
};

// The two directions of a pair, as one side holds them: `out`'s lines echo where `in` has
// read to, and `in` tells `out` what the other side echoed. Neither may move afterwards.
inline void pair_rings(RingProducer& out, RingConsumer& in) {
  out.echo_position_of(in.position());
  in.report_echoes_to(&out);
}

// Chunk area of the pipelined copy, used as a byte ring: the owner of the data appends while
// the requester drains, both copying at once. Positions count bytes.
struct alignas(kLine) ChunkShared {
  std::atomic<std::uint64_t> produced{0};
  alignas(kLine) std::atomic<std::uint64_t> consumed{0};
};

// The split single copy, in batches: the requester publishes up to kSplitBatch gets at once
// here (in its own direction's area), each cut in two parts at `cut` (the second empty for a
// get too short to share). Piece p < count is get p's first part, piece count + p its second.
// The requester claims pieces from the front, the owner, told by a message, from the back;
// each copies all it claimed with one cross-memory call, and pieces the owner does not come
// for are copied by the requester. One word holds generation (which batch), front and back,
// so a claim is one compare-and-swap and a stale claim on a finished batch fails.
inline constexpr std::size_t kSplitBatch = 16;
// A batch holds more gets only while their bytes stay within this, so that a call copying a
// batch's first parts (progress polls no ring meanwhile) takes ~0.1-0.2 ms at most: 16 gets
// of 64 or 256 KiB, 4 of 1 MiB, 4 MiB gets one at a time as before batches. Interleaved
// against batches without a bound, 6 rounds: 0.93-1.10 from 64 KiB to 4 MiB (1 MiB bound:
// 256 KiB and larger 0.91-0.94).
inline constexpr std::size_t kSplitBatchBytes = 4 << 20;
struct alignas(kLine) SplitShared {
  std::atomic<std::uint64_t> word{0};                       // generation << 32 | front << 16 | back
  std::atomic<std::uint32_t> count{0};                      // gets in the batch
  alignas(kLine) std::atomic<std::uint32_t> owner_done{0};  // pieces the owner copied
  // Pieces [redo_first, redo_end) the owner claimed but could not copy.
  std::atomic<std::uint32_t> redo_first{0}, redo_end{0};
  struct Get {
    std::atomic<std::uint64_t> src{0}, dst{0}, len{0}, cut{0};
  };
  alignas(kLine) Get gets[kSplitBatch];
};
// Piece p of a batch of k gets as bytes [first, second) of get p % k, cut at `cut` of `len`:
// its first part for p < k, its second for the others.
inline std::pair<std::size_t, std::size_t> split_piece_bytes(std::uint32_t p, std::uint32_t k,
                                                             std::size_t cut, std::size_t len) {
  return p < k ? std::pair<std::size_t, std::size_t>{0, cut}
               : std::pair<std::size_t, std::size_t>{cut, len};
}
inline constexpr std::size_t kSplitMinPiece = 16 << 10;

struct ChunkLayout {
  ChunkShared* shared = nullptr;
  std::byte* chunks = nullptr;
  std::size_t nchunks = 0;
  std::size_t chunk_bytes = 0;
  SplitShared* split = nullptr;
};

}  // namespace rmp::rt::shm
