// A clock for the spans the library times on its own hot paths, always within one process:
// the adaptive tuner's sends (p2p/protocol_tuner.hpp) and the shm transport's gets (its copy
// chooser). std::chrono::steady_clock is clock_gettime, which a VM whose kernel keeps time by
// kvm-clock serves in ~26 ns; two reads a tuned send were ~3 % of a 16 KiB ping-pong's one-way
// time (tuned against the static rule, 8 interleaved pairs: 1.019 of its time, 1.006 with this
// clock; the gets' timing made no difference measurable). Where the CPU says its time-stamp
// counter runs at one rate through every power state (invariant TSC), this clock reads it
// (~11 ns here) and scales it to nanoseconds by a rate measured once against steady_clock;
// elsewhere it is steady_clock.
// Not for stamps compared across processes: each process measures its own rate and origin.
// A span that comes out negative (a thread moved to a core whose counter is behind: the
// kernel here boots with tsc=unstable and keeps time by kvm-clock) is the caller's to clamp.
#pragma once

#include <chrono>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace rmp::rt {

#if defined(__x86_64__)
__extension__ typedef __int128 Wide;  // (GCC's; __extension__ keeps -Wpedantic quiet)
#endif

struct FastClock {
  using rep = std::int64_t;
  using period = std::nano;
  using duration = std::chrono::nanoseconds;
  using time_point = std::chrono::time_point<FastClock>;
  static constexpr bool is_steady = false;

  // Counter ticks to nanoseconds: ns = origin_ns + ((ticks - origin) × mult) >> 32.
  struct Scale {
    bool counter = false;  // false: steady_clock
    std::uint64_t origin = 0;
    std::int64_t origin_ns = 0;
    std::uint64_t mult = 0;
  };
  // Measured at the first call (~50 µs of spinning when the counter is used).
  static const Scale& scale() {
    static const Scale s = measure();
    return s;
  }
  static Scale measure();

  static time_point now() noexcept {
#if defined(__x86_64__)
    const Scale& s = scale();
    if (s.counter) {
      const auto ticks = static_cast<std::int64_t>(__rdtsc() - s.origin);
      const Wide ns = (static_cast<Wide>(ticks) * static_cast<Wide>(s.mult)) >> 32;
      return time_point(duration(s.origin_ns + static_cast<std::int64_t>(ns)));
    }
#endif
    return time_point(
        std::chrono::duration_cast<duration>(std::chrono::steady_clock::now().time_since_epoch()));
  }
};

}  // namespace rmp::rt
