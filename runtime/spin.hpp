// A pause inside busy-wait loops: lets the sibling hyper-thread run and saves power while a
// rank polls memory another rank will write.
#pragma once

#include <chrono>
#include <thread>

namespace rmp::rt {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Busy-polling alone can hold a core for good, and the kernel may need it: MADV_COLLAPSE
// (runtime/huge_pages.hpp) drains every CPU's page lists on that CPU's kworker and waits for
// all of them. On this project's VMs (Linux 6.18, PREEMPT_NONE, autogroups) a rank spinning
// in a blocking wait kept the kworker queued on its CPU from running for 17-60 s and more
// (runnable, its last run 35 s back), holding the peer it waited for in the madvise call all
// that time: 2 ranks with a progress thread each, ~1 run in 10 of a test of 3 MiB ping-pongs
// under ASan; stopping the spinning rank for 0.2 s let the call end at once. So a thread that
// polls without sleeping lets its core go for a moment (kNap) once every kAfter: a sleep, not
// sched_yield, which leaves the thread queued for the scheduler that passed the kworker over
// to pick again (inferred, not measured). Asked for 20 us, a nap lasts ~70 with the default
// 50 us timer slack: on a core of its own, under 1 % of the kAfter before it. Ten ms still
// lets a peer's collapse wait that long behind a spinner, against 0.3-0.7 ms for the call
// itself; the 90 runs of that test with naps spent 17-42 ms a rank in all their asks, as runs
// without a stall did before.
class NapClock {
public:
  static constexpr auto kAfter = std::chrono::milliseconds(10);  // RMP_STATS idle_naps, and
  static constexpr auto kNap = std::chrono::microseconds(20);    // the wait_mode knob's help
  // Called now and then while the thread polls without sleeping. The first tick after
  // restart() starts the count; from kAfter on, a tick naps. Returns whether it napped.
  bool tick() {
    const auto now = std::chrono::steady_clock::now();
    if (from_ == std::chrono::steady_clock::time_point{}) {
      from_ = now;
      return false;
    }
    if (now - from_ < kAfter) return false;
    std::this_thread::sleep_for(kNap);
    from_ = std::chrono::steady_clock::now();
    return true;
  }
  // The thread slept anyway, or its wait made progress: count again from the next tick.
  void restart() { from_ = {}; }

private:
  std::chrono::steady_clock::time_point from_;  // {}: not counting
};

}  // namespace rmp::rt
