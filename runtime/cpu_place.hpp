// Where the calling thread runs, for the rare moments a rank needs another rank running at
// the same time as itself (the shm calibration's pair, DESIGN §5): how many tasks the machine
// has runnable, how many CPUs the thread may use, and a temporary move off another rank's
// CPU. (A rank's main thread: the process's, where ranks are processes.)
#pragma once

#include <sched.h>

#include <cstdio>

namespace rmp::rt {

// Tasks runnable on the whole machine right now (procs_running of /proc/stat), -1 unknown.
inline int runnable_tasks() {
  std::FILE* f = std::fopen("/proc/stat", "re");
  if (!f) return -1;
  char line[256];
  int n = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "procs_running %d", &n) == 1) break;
  std::fclose(f);
  return n;
}

// CPUs the calling thread may run on (taskset, a cpuset included); 0 unknown (more than
// CPU_SETSIZE).
inline int usable_cpus() {
  cpu_set_t set;
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
}

// While it lives, the calling thread runs on one CPU other than `avoid` (the partner's) when
// it would otherwise share that one with the partner: two ranks queued on one CPU never run at
// once, and the scheduler does not move either within a measurement's budget. The affinity
// it found is restored at the end.
class AwayFrom {
public:
  explicit AwayFrom(int avoid) {
    if (avoid < 0 || sched_getcpu() != avoid || sched_getaffinity(0, sizeof old_, &old_) != 0)
      return;
    for (int cpu = 0; cpu < CPU_SETSIZE && !moved_; ++cpu) {
      if (cpu == avoid || !CPU_ISSET(cpu, &old_)) continue;
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      moved_ = sched_setaffinity(0, sizeof one, &one) == 0;
    }
  }
  ~AwayFrom() {
    if (moved_) sched_setaffinity(0, sizeof old_, &old_);
  }
  AwayFrom(const AwayFrom&) = delete;
  AwayFrom& operator=(const AwayFrom&) = delete;

private:
  cpu_set_t old_{};
  bool moved_ = false;
};

}  // namespace rmp::rt
