// A pause inside busy-wait loops: lets the sibling hyper-thread run and saves power while a
// rank polls memory another rank will write.
#pragma once

namespace rmp::rt {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace rmp::rt
