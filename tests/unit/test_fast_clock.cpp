// FastClock (runtime/fast_clock.hpp): the hot paths' cheap clock keeps steady_clock's pace.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "runtime/fast_clock.hpp"

using rmp::rt::FastClock;

namespace {

// Both clocks over one span of ~20 ms: the fast one's rate was measured over 50 µs, so it
// may be off by a little; a wrong scale (ticks taken for nanoseconds, a rate off by a power of
// two) is off by far more than the 2 % allowed.
TEST(FastClock, KeepsSteadyClocksPace) {
  using Steady = std::chrono::steady_clock;
  for (int attempt = 0;; ++attempt) {
    const auto s0 = Steady::now();
    const auto f0 = FastClock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const auto f1 = FastClock::now();
    const auto s1 = Steady::now();
    const double steady = std::chrono::duration<double>(s1 - s0).count();
    const double fast = std::chrono::duration<double>(f1 - f0).count();
    // The fast span lies inside the steady one; the thread may be descheduled between the
    // paired reads, so a miss is retried a few times before it counts.
    const bool ok = fast <= steady * 1.02 && fast >= 0.98 * steady - 200e-6;
    if (ok) break;
    ASSERT_LT(attempt, 4) << "fast " << fast << " s, steady " << steady << " s, counter "
                          << FastClock::scale().counter;
  }
}

}  // namespace
