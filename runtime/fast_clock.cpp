#include "runtime/fast_clock.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace rmp::rt {

namespace {

#if defined(__x86_64__)
// CPUID 0x80000007, EDX bit 8: the time-stamp counter runs at a constant rate in every P-, C-
// and T-state (Intel and AMD alike).
bool invariant_tsc() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0x80000000, nullptr) < 0x80000007) return false;
  __cpuid(0x80000007, a, b, c, d);
  return (d >> 8) & 1;
}
#endif

}  // namespace

FastClock::Scale FastClock::measure() {
  Scale s;
#if defined(__x86_64__)
  if (!invariant_tsc()) return s;
  using Steady = std::chrono::steady_clock;
  // 50 µs against a clock read to ~30 ns: the rate within ~0.1 %, plenty for spans compared
  // with each other.
  const auto t0 = Steady::now();
  const std::uint64_t c0 = __rdtsc();
  auto t1 = t0;
  std::uint64_t c1 = c0;
  do {
    t1 = Steady::now();
    c1 = __rdtsc();
  } while (t1 - t0 < std::chrono::microseconds(50));
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  const std::uint64_t ticks = c1 - c0;
  // A rate outside 100 MHz - 20 GHz is no counter to trust (or the thread moved mid-way).
  if (ns <= 0 || ticks < static_cast<std::uint64_t>(ns) / 10 ||
      ticks > static_cast<std::uint64_t>(ns) * 20)
    return s;
  s.counter = true;
  s.origin = c1;
  s.origin_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t1.time_since_epoch()).count();
  s.mult = (static_cast<std::uint64_t>(ns) << 32) / ticks;
#endif
  return s;
}

}  // namespace rmp::rt
