// Huge pages under the buffers that cross-memory attach reads and writes (RMP_SHM_HUGEPAGES).
//
// process_vm_readv / process_vm_writev pin the other process's pages one 4 KiB page at a time
// and copy page by page: ~180 ns a page on this project's VMs (a process reading its own 4 MiB
// with process_vm_readv ran at 9-19 GB/s where memcpy ran at 43; on 2 MiB pages at 35-37).
// Buffers an application sends from or receives into again and again (a halo buffer, a
// benchmark's) are worth moving onto huge pages: the kernel's MADV_COLLAPSE (Linux 6.1) does
// it in place, same contents, same addresses. But it costs: 0.35-0.6 ms a 2 MiB block here,
// 4-6 ms when the kernel compacts memory first, against ~50-90 us a use saves. So:
//  - only 2 MiB blocks the buffer covers at least half of (blocks_used). Memory of the block
//    outside the buffer is populated too, so this populates at most 1 MiB at each end of a
//    buffer that was not (as THP "always" would once it is touched); contents stay as they
//    were. Whole blocks alone left most pages of a buffer small: a 4 MiB buffer holds one
//    whole block (two only where 2 MiB-aligned), a 1 MiB one none, and a 4 MiB ping-pong's
//    split gets took 64-121 us from one run to the next (cores far apart), with where the
//    allocator put the buffers. With half blocks too, 4 MiB ping-pongs took 0.60 of the time,
//    1 MiB 0.89 (8 interleaved runs, cores far apart), and bandwidth windows ran 1.5 and 1.3
//    times as fast. Neighbouring buffers now share a block's uses: packed 1 MiB buffers of a
//    pool each used 8 times bring their block to 16. A huge page never crosses a mapping: a
//    block that reaches into another one is refused (an ineligible mapping: not asked again,
//    and such refusals of blocks at a buffer's end say nothing of the kernel, below), left as
//    it is with the call succeeding (two eligible mappings meeting inside it: counted in
//    shm_huge_blocks all the same), or refused for now (part of it unmapped: asked again at
//    its next turns);
//  - only from a block's kFirstTry-th use on (a buffer pool cycled through, each buffer used a
//    few times, is not worth it: with the second use, cold 4 MiB windows ran at 3 GB/s instead
//    of 15);
//  - at most kBudget of the time, with a burst of kBurst seconds at most (a token bucket:
//    a budget counted from a run's start let a 16 MiB allreduce late in a benchmark's run
//    spend it at once, 2.1 ms a call against 1.5). A turn that finds the budget spent is put
//    off to the block's next use with time in it, not to its next turn: asks just before for
//    another buffer's blocks (tens of ms to seconds a rank on a loaded machine: a CI build
//    beside the tests) left a 3 MiB ping-pong's blocks waiting past 40 round trips, their
//    turns at 16, 17, 32 and 33 uses all spent;
//  - it may fail without harm: pages another process has pinned (its cross-memory attach
//    running) are left as they are, and the block asks again later (due). A block the kernel
//    will not collapse (not anonymous or shmem, MADV_NOHUGEPAGE) does not ask again, and four
//    such refusals of whole blocks before any success (a kernel without MADV_COLLAPSE) end
//    the asking.
// One per process (rt::Context owns it): the shm transport asks for its rendezvous buffers,
// the node-shared collectives' direct paths for the buffers they publish to the other ranks;
// a mutex, as a progress thread may run the one while the application runs the other.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "runtime/stats.hpp"

namespace rmp::rt {

class HugePages {
public:
  static constexpr std::uintptr_t kBlock = std::uintptr_t{2} << 20;
  // Blocks remembered at most (each 2 MiB of buffer): past that, new blocks are not asked.
  static constexpr std::size_t kMaxBlocks = 1 << 14;
  static constexpr std::uint32_t kFirstTry = 16;
  static constexpr std::uint32_t kLastTry = std::uint32_t{1} << 20;
  static constexpr double kBudget = 0.05;
  static constexpr double kBurst = 4e-3;

  // The 2 MiB-aligned blocks wholly inside [p, p + n): [first, end) in steps of kBlock
  // (first == end: none).
  struct Blocks {
    std::uintptr_t first, end;
  };
  static Blocks blocks_within(const void* p, std::size_t n) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    const std::uintptr_t first = (a + kBlock - 1) & ~(kBlock - 1);
    const std::uintptr_t end = (a + n) & ~(kBlock - 1);
    return first < end ? Blocks{first, end} : Blocks{first, first};
  }
  // The 2 MiB-aligned blocks at least half of which lie inside [p, p + n): the whole ones and
  // the one at each end whose part in the buffer is kBlock / 2 or more.
  static Blocks blocks_used(const void* p, std::size_t n) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    if (n < kBlock / 2) return {a, a};
    const std::uintptr_t e = a + n;
    std::uintptr_t first = a & ~(kBlock - 1);
    std::uintptr_t end = (e + kBlock - 1) & ~(kBlock - 1);
    auto in_buffer = [&](std::uintptr_t block) {
      return std::min(e, block + kBlock) - std::max(a, block);
    };
    if (in_buffer(first) < kBlock / 2) first += kBlock;
    if (first < end && in_buffer(end - kBlock) < kBlock / 2) end -= kBlock;
    return first < end ? Blocks{first, end} : Blocks{first, first};
  }

  // Whether a block asks at its `uses`-th use: at 2^k and 2^k + 1 uses from kFirstTry to
  // kLastTry. A window of sends of one buffer (64 in flight) has the peer reading it the whole
  // window long, and its pinned pages make the kernel refuse; the next window's first send
  // finds them free, at 2^k + 1 uses for any window of up to 2^k sends. A turn put off for the
  // time budget is the exception: it asks at the first use with time in the budget, mid-window
  // maybe, and if refused as busy there, waits for the block's next turn like any other. (The
  // kernel sees pinned pages in its first pass over the block, before it allocates a huge page,
  // so such a refusal is cheap.)
  static bool due(std::uint32_t uses) {
    return uses >= kFirstTry && uses <= kLastTry + 1 &&
           (std::has_single_bit(uses) || std::has_single_bit(uses - 1));
  }

  // What asking the kernel did: collapsed, refused for now (ask again later), or refused for
  // good (this block).
  enum class Outcome : std::uint8_t { collapsed, busy, never };
  // The kernel call and the clock (seconds), replaceable for tests.
  using Collapse = Outcome (*)(std::uintptr_t block);
  using Clock = double (*)();
  static Outcome madvise_collapse(std::uintptr_t block) {
#ifndef MADV_COLLAPSE
    constexpr int MADV_COLLAPSE = 25;  // Linux 6.1; older C library headers lack it
#endif
    if (::madvise(reinterpret_cast<void*>(block), kBlock, MADV_COLLAPSE) == 0)
      return Outcome::collapsed;
    // EAGAIN: pages pinned or locked for now; ENOMEM: no huge page free. EINVAL (memory the
    // kernel will not collapse, or a kernel without MADV_COLLAPSE) and the rest: for good.
    return errno == EAGAIN || errno == ENOMEM ? Outcome::busy : Outcome::never;
  }
  static double steady_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  explicit HugePages(bool enabled, Collapse collapse = &madvise_collapse,
                     Clock clock = &steady_seconds)
      : on_(enabled), collapse_(collapse), clock_(clock) {}

  HugePages(const HugePages&) = delete;
  HugePages& operator=(const HugePages&) = delete;

  // What one use did: blocks collapsed, asks the kernel refused (for now or for good), and
  // turns put off for the time budget (such a block asks at its next use that finds time in it).
  struct Asked {
    int collapsed = 0, refused = 0, deferred = 0;
    double seconds = 0;  // spent in the kernel
  };
  // A buffer another process is about to read or write by cross-memory attach.
  [[nodiscard]] Asked use(const void* p, std::size_t n) {
    Asked done;
    if (!on_ || n < kBlock / 2) return done;
    std::lock_guard g(mu_);
    const Blocks b = blocks_used(p, n);
    const Blocks whole = blocks_within(p, n);
    for (std::uintptr_t a = b.first; a < b.end && on_; a += kBlock) {
      auto it = blocks_.find(a);
      if (it == blocks_.end()) {
        if (blocks_.size() < kMaxBlocks) blocks_.emplace(a, Block{});
        continue;
      }
      Block& blk = it->second;
      std::uint32_t& uses = blk.uses;
      if (uses == kSettled) continue;
      ++uses;
      if (!blk.put_off && !due(uses)) continue;
      const double now = clock_();
      if (last_ == 0) last_ = now;
      tokens_ = refilled(now);
      last_ = now;
      // The collapse's own time refills the bucket too (last_ is taken before the call), a
      // twentieth of it: the budget counts the whole time that passes.
      if (tokens_ <= 0) {  // asks at its next use that finds time in the budget
        if (!blk.put_off) ++done.deferred;
        blk.put_off = true;
        last_turn_put_off_ = true;
        continue;
      }
      blk.put_off = false;
      last_turn_put_off_ = false;
      const Outcome o = collapse_(a);
      const double cost = clock_() - now;
      tokens_ -= cost;
      done.seconds += cost;
      switch (o) {
        case Outcome::collapsed:
          uses = kSettled;
          ++done.collapsed;
          ever_collapsed_ = true;
          break;
        case Outcome::busy:
          ++done.refused;
          if (uses > kLastTry) uses = kSettled;
          break;
        case Outcome::never:
          ++done.refused;
          uses = kSettled;
          // Whole blocks refused for good again and again before anything collapsed: most
          // likely a kernel without MADV_COLLAPSE (or THP off entirely), so stop asking. (A
          // block at a buffer's end may reach into another mapping.)
          if (a >= whole.first && a < whole.end && !ever_collapsed_ &&
              ++refused_ >= kRefusedBeforeOff)
            on_ = false;
          break;
      }
    }
    return done;
  }

  bool enabled() const { return on_; }
  // Whether the time budget is spent now (a block's turn would be put off).
  bool budget_spent() const {
    std::lock_guard g(mu_);
    return last_ != 0 && refilled(clock_()) <= 0;
  }
  // Whether the latest turn (due or put off before) found the budget spent: the budget may
  // have time again now, but no use came since that could have asked.
  bool last_turn_put_off() const {
    std::lock_guard g(mu_);
    return last_turn_put_off_;
  }

private:
  // The bucket's seconds at `now`: what it held at last_, plus kBudget of the time since.
  double refilled(double now) const { return std::min(kBurst, tokens_ + kBudget * (now - last_)); }
  static constexpr std::uint32_t kSettled = UINT32_MAX;  // collapsed, or no longer asked
  static constexpr int kRefusedBeforeOff = 4;
  mutable std::mutex mu_;
  std::atomic<bool> on_;
  bool ever_collapsed_ = false;
  int refused_ = 0;
  Collapse collapse_;
  Clock clock_;
  double tokens_ = kBurst;  // seconds of asking the kernel may take now
  double last_ = 0;         // when tokens_ was last filled (clock_; 0: never)
  bool last_turn_put_off_ = false;  // last_turn_put_off()
  struct Block {
    std::uint32_t uses = 1;
    bool put_off = false;  // its turn came with the budget spent: asks at its next use
  };
  std::unordered_map<std::uintptr_t, Block> blocks_;
};

// Counts what a use did (RMP_STATS: shm_huge_blocks, shm_huge_refused, shm_huge_deferred,
// shm_huge_us). Returns the blocks collapsed.
inline int count_huge(Counters& c, const HugePages::Asked& a) {
  if (a.seconds > 0)
    count_shared(c.shm_huge_us, static_cast<std::uint64_t>(std::llround(a.seconds * 1e6)));
  if (a.collapsed) count_shared(c.shm_huge_blocks, static_cast<std::uint64_t>(a.collapsed));
  if (a.refused) count_shared(c.shm_huge_refused, static_cast<std::uint64_t>(a.refused));
  if (a.deferred) count_shared(c.shm_huge_deferred, static_cast<std::uint64_t>(a.deferred));
  return a.collapsed;
}

}  // namespace rmp::rt
