// Calibration of the shared-memory transport (shm_calibration.hpp). Local rank 0 of node 0
// ("owner") creates a segment; local rank 1 ("partner") joins it by switching its state from
// waiting to joined. Whoever is late loses: after arrival_wait the owner switches waiting to
// abandoned (one compare-exchange decides the race) and the partner's open times out, so
// neither waits longer than that. Once both are there every loop runs against a deadline of
// the measurement budget: a try cut short by a descheduled partner (8 ranks on 2 cores) is
// tried again, up to kPairTries in all, so it costs at most that many budgets, and then the
// job falls back to declared figures.
#include "runtime/transport/shm/shm_calibration.hpp"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <span>
#include <thread>
#include <vector>

#include <rmp/rmp.hpp>

#include "runtime/copy.hpp"
#include "runtime/cpu_place.hpp"
#include "runtime/shared_memory.hpp"
#include "runtime/spin.hpp"

namespace rmp::rt {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint32_t kMagic = 0x524d5043;
constexpr std::size_t kPage = 4096;
constexpr std::size_t kLine = 64;
// The pipelined copy: pieces of kChunk, kSlots in flight; a first untimed pass faults the
// pages in on both sides, then kTimedChunks (256 KiB, ~25-100 us) are timed; with cached
// stores, then (when the transport may use them) with streaming ones.
constexpr std::size_t kChunk = 16 * 1024;
constexpr std::uint64_t kSlots = 4;
constexpr std::uint64_t kWarmChunks = 4;
constexpr std::uint64_t kTimedChunks = 16;
// Round trips are timed in batches (a clock read is ~20 ns, a shared-line trip ~100-500 ns);
// the median batch ignores one the partner was descheduled in.
constexpr int kTripsPerBatch = 8;
constexpr int kRttBatches = 12;
constexpr int kCopyRepeats = 8;
constexpr int kSetupRepeats = 16;
constexpr std::size_t kSetupBytes = 64;
// The single copy of a rendezvous get: kGetBytes the partner has written, read with
// process_vm_readv kGetRepeats times after an untimed first read.
constexpr std::size_t kGetBytes = 64 * 1024;
constexpr int kGetRepeats = 8;
constexpr int kPasses = 3;
// The split copy's get: kSplitBytes of the same area (which holds that much), cut in halves as
// the transport cuts it. (At 64 KiB its two system calls and the partner's reaction made it
// no faster than the single copy, 17-27 GB/s against 21-25, cores far apart; the transport
// splits gets of 32 KiB and more, and chooses it mostly from 256 KiB on.)
constexpr std::size_t kSplitBytes = 256 * 1024;
constexpr std::size_t kSplitCut = kSplitBytes / 2;
constexpr std::size_t kGetArea = std::max(kGetBytes, kSplitBytes);
// Tries of the pair's measurement, each within the budget: a try that a descheduled vCPU cut
// short is tried again (seen on a VM where the pair measures in ~150 us: one run in three or
// so ran out of 500 us, and the job then ran on declared figures, eager_threshold 60000
// instead of ~10-20 KB measured).
constexpr int kPairTries = 3;
// With ranks outnumbering cores (ShmCalibrationOptions::wait_for_cores) the owner first waits
// for the other ranks' start-up to be over (they then sleep in the bootstrap's get until the
// figures come), and moves off the partner's CPU if it shares it (runtime/cpu_place.hpp): two
// ranks queued on one CPU never measure anything together. 8 ranks on 2 cores, 10 runs each:
// measured 3 times before, 9 with the move alone, 10 with both (then 15 of 15 at 8, 4 and 3
// ranks).
constexpr auto kQuietPoll = std::chrono::microseconds(50);

// At most this long in all, before the tries (a busy host never looks quiet).
constexpr auto kQuietMax = std::chrono::milliseconds(5);

// Sleeps until at most as many tasks are runnable as this process has CPUs (this one and the
// partner, spinning, among them), or until `until`. The count is the whole machine's: where
// the process may use only some of its CPUs (a cpuset, taskset) it says nothing of those,
// and the wait is skipped.
void wait_for_cores(Clock::time_point until) {
  const int cpus = usable_cpus();
  if (cpus <= 0 || cpus < static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN))) return;
  for (int n = runnable_tasks(); n > cpus && Clock::now() < until; n = runnable_tasks())
    std::this_thread::sleep_for(kQuietPoll);
}

constexpr auto kShareTimeout = std::chrono::seconds(120);

enum State : std::uint32_t { kWaiting = 0, kJoined = 1, kAbandoned = 2, kDone = 3 };

struct Shared {
  std::atomic<std::uint32_t> ready;
  std::atomic<std::uint32_t> state;
  std::uint32_t magic;
  std::uint64_t total;
  alignas(64) std::atomic<std::uint64_t> ping;
  alignas(64) std::atomic<std::uint64_t> pong;
  alignas(64) std::atomic<std::uint64_t> produced;
  alignas(64) std::atomic<std::uint64_t> consumed;
  alignas(64) std::atomic<std::uint64_t> fill_req;    // owner: write the get area with this byte
  alignas(64) std::atomic<std::uint64_t> filled;      // partner: done
  alignas(64) std::atomic<std::int32_t> partner_cpu;  // where the partner last ran, -1 unknown
  // The split copy: the partner writes the get area's second half into the owner's buffer at
  // split_dst (process owner_pid) while the owner reads the first half; split_ok says whether
  // its last write went through.
  alignas(64) std::atomic<std::uint64_t> split_req;
  std::int32_t owner_pid;
  std::uint64_t split_dst;
  alignas(64) std::atomic<std::uint64_t> split_done;
  std::atomic<std::uint32_t> split_ok;
};
static_assert(sizeof(Shared) <= kPage);
constexpr std::size_t kSegmentBytes = kPage + kSlots * kChunk + kGetArea;

std::size_t ready_size(const void* header) {
  const auto* s = static_cast<const Shared*>(header);
  return s->ready.load(std::memory_order_acquire) == 1 ? s->total : 0;
}

std::string segment_name(const JobIdentity& id) {
  return "/rmp-" + id.job_id + "-n" + std::to_string(id.node_id) + "-calib";
}

// Where this process's gets land during calibration. The partner writes into it (the split
// copy) and may still be doing so after a try was cut short and the owner moved on, so it
// lives as long as the process; before that it serves only measure_copy_bw, which runs before
// the first split request.
std::span<std::byte> get_buffer() {
  static std::byte* const buf = [] {
    auto* b = new std::byte[kGetArea];
    std::memset(b, 1, kGetArea);
    return b;
  }();
  return {buf, kGetArea};
}

std::byte* get_area(Shared* s) { return reinterpret_cast<std::byte*>(s) + kPage + kSlots * kChunk; }

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

std::byte* chunk(Shared* s, std::uint64_t i) {
  return reinterpret_cast<std::byte*>(s) + kPage + (i % kSlots) * kChunk;
}

// memcpy of a cache-resident block between cache-line-aligned buffers, as an eager message's
// copy into or out of a ring slot is. (Two separate heap blocks are typically 16 bytes apart
// modulo a page, which makes rep-movsb memcpy 20x slower and would measure that instead.)
// Within `area`, memory already touched (the get buffer): a fresh buffer's first touches cost
// ~20 us a page on this project's VMs, and a 128 KiB one took ~1 ms of calibration's 5-7.
// The copies write into it; its contents do not matter to the gets that follow.
double measure_copy_bw(std::span<std::byte> area) {
  constexpr std::size_t kBytes = 4 * kChunk;
  static_assert(2 * kBytes + 2 * kLine <= kGetArea);
  const auto base = reinterpret_cast<std::uintptr_t>(area.data());
  auto* src = area.data() + ((kLine - base % kLine) % kLine);
  std::byte* dst = src + kBytes + kLine;
  std::vector<double> rates;
  for (int i = 0; i < kCopyRepeats; ++i) {
    const Clock::time_point t0 = Clock::now();
    std::memcpy(dst, src, kBytes);
    const double s = seconds(Clock::now() - t0);
    if (s > 0) rates.push_back(static_cast<double>(kBytes) / s);
    src[static_cast<std::size_t>(i)] = dst[kBytes - 1];  // keeps the copies observable
  }
  return rates.empty() ? 0 : median(rates);
}

// Start-up cost of a single-copy get: a small process_vm_readv (the kernel work that does not
// depend on size). 0 when cross-memory attach is off or refused: the declared value applies.
double measure_get_setup_us(bool cma) {
  if (!cma) return 0;
  std::byte src[kSetupBytes] = {}, dst[kSetupBytes];
  std::vector<double> us;
  for (int i = 0; i < kSetupRepeats; ++i) {
    iovec l{dst, sizeof dst};
    iovec r{src, sizeof src};
    const Clock::time_point t0 = Clock::now();
    const ssize_t n = ::process_vm_readv(::getpid(), &l, 1, &r, 1, 0);
    const Clock::time_point t1 = Clock::now();
    if (n != static_cast<ssize_t>(sizeof src)) return 0;
    us.push_back(seconds(t1 - t0) * 1e6);
  }
  return median(us);
}

// The owner's side once the partner joined: round trips of a shared line, the pipelined copy
// with cached stores, (with cross-memory attach) the single and the split copy, then (when the
// transport may use them) the pipelined copy with streaming stores. Returns false when the
// deadline passed before the single copy was measured. Counters continue from an earlier
// try's.
bool measure_pair(Shared* s, Clock::time_point deadline, bool cma, bool streaming,
                  std::span<std::byte> dst, LinkFigures& f) {
  std::vector<double> batches;
  std::uint64_t seq = s->ping.load(std::memory_order_relaxed);  // written by this side only
  for (int b = 0; b < kRttBatches; ++b) {
    const Clock::time_point t0 = Clock::now();
    for (int t = 0; t < kTripsPerBatch; ++t) {
      s->ping.store(++seq, std::memory_order_release);
      while (s->pong.load(std::memory_order_acquire) != seq) {
        cpu_relax();
        if (Clock::now() > deadline) return false;
      }
    }
    batches.push_back(seconds(Clock::now() - t0) / kTripsPerBatch);
  }
  f.rtt_us = median(batches) * 1e6;

  // The pipelined copy, with cached and then with streaming stores into the chunks: the
  // transport stores eager payloads and chunk gets either way, whichever measures faster at
  // the time (eager_stores.hpp, copy_chooser.hpp), so the link is as fast as the faster. With
  // the cores far apart only the cached pass counted: 3.8 GB/s against ~11 near, an eager
  // threshold of 15 KB, and 64 KiB messages went by rendezvous at 9-11 GB/s where eager with
  // streaming stores moved 15. A streaming pass cut short by the deadline leaves the cached
  // figure.
  std::vector<std::byte> src(kChunk, std::byte{7});
  std::uint64_t next = s->produced.load(std::memory_order_relaxed);  // chunks produced so far
  auto pipelined = [&](bool streamed) -> double {
    const std::uint64_t first = next;
    Clock::time_point start{};
    for (std::uint64_t k = 0; k < kWarmChunks + kTimedChunks; ++k, ++next) {
      if (k == kWarmChunks) {
        while (s->consumed.load(std::memory_order_acquire) != first + kWarmChunks) {
          cpu_relax();
          if (Clock::now() > deadline) return -1;
        }
        start = Clock::now();
      }
      while (next - s->consumed.load(std::memory_order_acquire) >= kSlots) {
        cpu_relax();
        if (Clock::now() > deadline) return -1;
      }
      if (streamed) copy_streaming(chunk(s, next), src.data(), kChunk);
      else std::memcpy(chunk(s, next), src.data(), kChunk);
      s->produced.store(next + 1, std::memory_order_release);
    }
    while (s->consumed.load(std::memory_order_acquire) != next) {
      cpu_relax();
      if (Clock::now() > deadline) return -1;
    }
    const double took = seconds(Clock::now() - start);
    return took > 0 ? static_cast<double>(kTimedChunks * kChunk) / took : 0;
  };
  // Passes of the pipelined copy: the median of kPasses (one pass alone ran at 13-22 GB/s
  // from one calibration to the next, cores far apart).
  auto passes = [&](bool streamed) -> double {
    std::vector<double> r;
    for (int i = 0; i < kPasses; ++i) {
      const double v = pipelined(streamed);
      if (v <= 0) return r.empty() ? v : median(r);
      r.push_back(v);
    }
    return median(r);
  };
  f.bw_Bps = passes(false);
  if (f.bw_Bps <= 0 || f.rtt_us <= 0) return false;

  // A get takes the faster of the chunk copy and the single copy: of a buffer the partner
  // wrote once and that is read again and again, as a rendezvous send of a reused buffer is
  // (the first read is not timed).
  double single = 0;
  if (cma) {
    const std::uint64_t req = s->fill_req.load(std::memory_order_relaxed) + 1;
    s->fill_req.store(req, std::memory_order_release);
    while (s->filled.load(std::memory_order_acquire) != req) {
      cpu_relax();
      if (Clock::now() > deadline) return false;
    }
    std::vector<double> rates;
    for (int i = 0; i <= kGetRepeats; ++i) {
      iovec l{dst.data(), kGetBytes};
      iovec r{get_area(s), kGetBytes};
      const Clock::time_point t0 = Clock::now();
      const ssize_t n = ::process_vm_readv(::getpid(), &l, 1, &r, 1, 0);
      const double t = seconds(Clock::now() - t0) - f.rndv_setup_us * 1e-6;
      if (n != static_cast<ssize_t>(kGetBytes)) break;  // refused: the chunk copy it is
      if (i > 0 && t > 0) rates.push_back(static_cast<double>(kGetBytes) / t);
      if (Clock::now() > deadline) return false;
    }
    if (!rates.empty()) single = median(rates);
  }
  // The split copy, which the transport's gets take as often as not with the cores far apart:
  // this side reads the first half while the partner writes the second into this side's
  // buffer, both at once (the first untimed, as above). Without it a get counted as fast as
  // the faster of the other two, often no faster than an eager message's copy out of the
  // ring, and the eager threshold came out at (link_rtt_us + rndv_setup_us) x copy_bw, ~350
  // KB, in about half the runs (cores far apart; ~80-190 KB in the others): 256 KiB
  // ping-pongs went eager at 18.4-19.2 us one way where rendezvous took 13.3-14.0. Cut short
  // by the deadline or refused (ptrace rules), it counts for nothing.
  double split = 0;
  if (single > 0) {
    std::vector<double> rates;
    for (int i = 0; i <= kGetRepeats; ++i) {
      const std::uint64_t req = s->split_req.load(std::memory_order_relaxed) + 1;
      iovec l{dst.data(), kSplitCut};
      iovec r{get_area(s), kSplitCut};
      const Clock::time_point t0 = Clock::now();
      s->split_req.store(req, std::memory_order_release);
      const ssize_t n = ::process_vm_readv(::getpid(), &l, 1, &r, 1, 0);
      bool late = false;
      while (s->split_done.load(std::memory_order_acquire) != req && !late) {
        cpu_relax();
        late = Clock::now() > deadline;
      }
      const double t = seconds(Clock::now() - t0) - f.rndv_setup_us * 1e-6;
      if (late || n != static_cast<ssize_t>(kSplitCut) ||
          s->split_ok.load(std::memory_order_relaxed) == 0) {
        rates.clear();
        break;
      }
      if (i > 0 && t > 0) rates.push_back(static_cast<double>(kSplitBytes) / t);
    }
    if (!rates.empty()) split = median(rates);
  }
  // Last, as it may be cut short (the passes that ended count; none: the cached figure stands).
  if (streaming) f.bw_Bps = std::max(f.bw_Bps, passes(true));
  f.get_bw_Bps = std::max({f.bw_Bps, single, split});
  return true;
}

Calibration measure_as_owner(const JobIdentity& id, const ShmCalibrationOptions& opt) {
  const Clock::time_point t_begin = Clock::now();
  Calibration c;
  auto finish = [&](std::string reason) {
    c.took_us = seconds(Clock::now() - t_begin) * 1e6;
    c.reason = std::move(reason);
    if (!c.reason.empty()) c.figures.reset();
    return c;
  };
  const std::string name = segment_name(id);
  // Populated as it is mapped, here and at the partner's: faulted in one page at a time by the
  // first touches below, its pages cost 0.77-0.92 ms here and 0.33-0.73 at the partner's,
  // populated 0.39-0.43 and 0.09 (a test program on this project's VM).
  shm::Mapping seg = shm::create_segment(name, kSegmentBytes, shm::Populate::yes);
  if (!seg) return finish("calibration segment " + name + " exists already");
  auto* s = static_cast<Shared*>(seg.data());
  s->magic = kMagic;
  s->total = kSegmentBytes;
  s->state.store(kWaiting, std::memory_order_relaxed);
  s->partner_cpu.store(-1, std::memory_order_relaxed);
  s->owner_pid = static_cast<std::int32_t>(::getpid());
  s->ready.store(1, std::memory_order_release);
  // After ready: the partner starts touching its side of the segment while this rank's get
  // buffer is allocated and touched (~1.3 ms here on first use). The partner reads split_dst
  // only after a split request, which this rank publishes after writing it.
  const std::span<std::byte> get_dst = get_buffer();
  s->split_dst = reinterpret_cast<std::uint64_t>(get_dst.data());

  // The partner may still be starting: measure what needs no partner meanwhile.
  LinkFigures f;
  f.copy_bw_Bps = measure_copy_bw(get_dst);
  f.rndv_setup_us = measure_get_setup_us(opt.cma);
  std::memset(chunk(s, 0), 0, kSlots * kChunk + kGetArea);  // fault the owner's side in

  const Clock::time_point arrive_by = t_begin + opt.arrival_wait;
  while (s->state.load(std::memory_order_acquire) == kWaiting && Clock::now() < arrive_by)
    std::this_thread::sleep_for(std::chrono::microseconds(20));  // leave the core to it
  std::uint32_t expected = kWaiting;
  const bool abandoned = s->state.compare_exchange_strong(expected, kAbandoned);
  shm::unlink_segment(name);  // the partner has mapped it, or will never come
  if (abandoned)
    return finish("local rank 1 did not arrive within " +
                  std::to_string(opt.arrival_wait.count() / 1000) + " ms");

  bool ok = false;
  const Clock::time_point quiet_by = std::min(arrive_by, Clock::now() + kQuietMax);
  for (int t = 0; t < kPairTries && !ok; ++t) {
    if (opt.wait_for_cores) wait_for_cores(quiet_by);
    else if (t > 0) std::this_thread::yield();  // where the two share a core: let the partner run
    const AwayFrom away(opt.wait_for_cores ? s->partner_cpu.load(std::memory_order_acquire) : -1);
    ok = measure_pair(s, Clock::now() + opt.budget, opt.cma && f.rndv_setup_us > 0, opt.streaming,
                      get_dst, f);
  }
  s->state.store(ok ? kDone : kAbandoned, std::memory_order_release);
  if (!ok)
    return finish("local rank 1 was not scheduled within the " +
                  std::to_string(opt.budget.count()) + " us measurement budget (" +
                  std::to_string(kPairTries) + " tries)");
  c.figures = f;
  return finish("");
}

// The partner's side: answer pings and drain chunks until the owner says it is done (or the
// owner's whole budget has passed).
void participate_as_partner(const JobIdentity& id, const ShmCalibrationOptions& opt) {
  shm::Mapping seg;
  try {
    seg = shm::open_segment(segment_name(id), sizeof(Shared), ready_size,
                            std::chrono::duration_cast<std::chrono::milliseconds>(
                                opt.arrival_wait + std::chrono::milliseconds(1)),
                            shm::Populate::yes);
  } catch (const Error& e) {
    if (e.code() == Errc::timeout) return;  // the owner went ahead without us
    throw;
  }
  auto* s = static_cast<Shared*>(seg.data());
  if (s->magic != kMagic) return;
  std::uint32_t expected = kWaiting;
  // Fault this side's mapping in before the owner's clock runs (80 pages: ~0.7 ms here).
  std::memset(chunk(s, 0), 0, kSlots * kChunk + kGetArea);
  if (!s->state.compare_exchange_strong(expected, kJoined)) return;
  // The owner may still be asleep in its arrival wait: until its first ping, yield the core
  // to it rather than spin against it.
  // (The owner's wait for the cores, kQuietMax at most, comes on top where it waits.)
  const Clock::time_point deadline = Clock::now() + opt.arrival_wait +
                                     (kPairTries + 1) * opt.budget +
                                     (opt.wait_for_cores ? kQuietMax : Clock::duration{});
  std::vector<std::byte> dst(kChunk);
  std::uint64_t answered = 0, consumed = 0, filled = 0, split = 0;
  for (std::uint32_t polls = 0; s->state.load(std::memory_order_acquire) == kJoined; ++polls) {
    const std::uint64_t ping = s->ping.load(std::memory_order_acquire);
    if (ping != answered) {
      answered = ping;
      s->pong.store(ping, std::memory_order_release);
      continue;
    }
    if (s->produced.load(std::memory_order_acquire) > consumed) {
      std::memcpy(dst.data(), chunk(s, consumed), kChunk);
      s->consumed.store(++consumed, std::memory_order_release);
      continue;
    }
    if (const std::uint64_t req = s->fill_req.load(std::memory_order_acquire); req != filled) {
      filled = req;
      std::memset(get_area(s), static_cast<int>(req), kGetArea);
      s->filled.store(req, std::memory_order_release);
      continue;
    }
    if (const std::uint64_t req = s->split_req.load(std::memory_order_acquire); req != split) {
      split = req;
      iovec l{get_area(s) + kSplitCut, kSplitBytes - kSplitCut};
      iovec r{reinterpret_cast<void*>(s->split_dst + kSplitCut), kSplitBytes - kSplitCut};
      const ssize_t n = ::process_vm_writev(s->owner_pid, &l, 1, &r, 1, 0);
      s->split_ok.store(n == static_cast<ssize_t>(kSplitBytes - kSplitCut) ? 1 : 0,
                        std::memory_order_relaxed);
      s->split_done.store(req, std::memory_order_release);
      continue;
    }
    if (answered == 0) std::this_thread::yield();
    else cpu_relax();
    if ((polls & 63) == 0) {
      if (Clock::now() > deadline) return;
      s->partner_cpu.store(sched_getcpu(), std::memory_order_relaxed);
    }
  }
}

}  // namespace

Calibration calibrate_shm(Bootstrap& boot, const ShmCalibrationOptions& opt) {
  const JobIdentity& id = boot.identity();
  if (id.size <= 1) return Calibration{std::nullopt, "singleton", 0};
  // RMP_CALIBRATE is part of the job's environment, the same on every rank: no rank waits.
  if (!opt.enabled) return Calibration{std::nullopt, "RMP_CALIBRATE=0", 0};
  const bool owner = id.node_id == 0 && id.local_rank == 0;
  const bool partner = id.node_id == 0 && id.local_rank == 1;
  std::string skip;
  if (id.local_size < 2) skip = "no second rank on node 0";
  return share_calibration(
      boot, "calib/shm", owner, skip, [&] { return measure_as_owner(id, opt); },
      partner ? std::function<void()>([&] { participate_as_partner(id, opt); }) : nullptr,
      std::chrono::duration_cast<std::chrono::milliseconds>(kShareTimeout));
}

}  // namespace rmp::rt
