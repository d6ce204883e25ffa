// Where the calling thread runs, for the rare moments a rank needs another rank running at
// the same time as itself (the shm calibration's pair, DESIGN §5): how many tasks the machine
// has runnable, how many CPUs the thread may use, and a temporary move off another rank's
// CPU; and, where ranks outnumber cores and the scheduler crowds them, which rank moves where
// (the node-shared collectives' waits). (A rank's main thread: the process's, where ranks are
// processes.)
#pragma once

#include <sched.h>

#include <cstddef>
#include <cstdio>
#include <span>
#include <vector>

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

// Restricts the calling thread to `cpu` alone (the kernel moves it there at once). Returns
// whether it could.
inline bool pin_to_cpu(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return sched_setaffinity(0, sizeof one, &one) == 0;
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
    for (int cpu = 0; cpu < CPU_SETSIZE && !moved_; ++cpu)
      if (cpu != avoid && CPU_ISSET(cpu, &old_)) moved_ = pin_to_cpu(cpu);
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

// Ranks crowded onto one CPU while another CPU they may use holds fewer (ranks outnumber
// cores, unbound: the scheduler places them). `cpu_of_rank`: the CPU each rank of the group
// was last seen on (-1: unknown); `me`: the calling rank's index; `allowed`: the CPUs it may run
// on. Returns the CPU it should move to, or -1: only when its CPU holds at least two ranks more
// than the least crowded allowed CPU (a move then evens them out without crowding the other),
// and only the highest-indexed rank seen on its CPU moves, so that ranks deciding at once do
// not all leave together. Ties go to the first in `allowed`.
inline int less_crowded_cpu(std::span<const int> cpu_of_rank, int me,
                            std::span<const int> allowed) {
  if (me < 0 || static_cast<std::size_t>(me) >= cpu_of_rank.size()) return -1;
  const int here = cpu_of_rank[static_cast<std::size_t>(me)];
  if (here < 0) return -1;
  auto ranks_on = [&](int cpu) {
    std::size_t n = 0;
    for (const int c : cpu_of_rank) n += c == cpu;
    return n;
  };
  for (std::size_t q = static_cast<std::size_t>(me) + 1; q < cpu_of_rank.size(); ++q)
    if (cpu_of_rank[q] == here) return -1;  // a higher rank moves
  int best = -1;
  std::size_t fewest = 0;
  for (const int cpu : allowed) {
    if (cpu == here) continue;
    const std::size_t n = ranks_on(cpu);
    if (best < 0 || n < fewest) best = cpu, fewest = n;
  }
  return best >= 0 && ranks_on(here) >= fewest + 2 ? best : -1;
}

// The CPUs the calling thread may run on, in increasing order (empty: unknown).
inline std::vector<int> allowed_cpu_list() {
  cpu_set_t set;
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

// Moves the calling thread onto `cpu` and gives it back every CPU it could use before: a new
// place, not a binding (the scheduler may move it again). Returns whether it moved.
inline bool move_to_cpu(int cpu) {
  cpu_set_t had;
  if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof had, &had) != 0 ||
      !CPU_ISSET(cpu, &had))
    return false;
  if (!pin_to_cpu(cpu)) return false;
  sched_setaffinity(0, sizeof had, &had);
  return true;
}

}  // namespace rmp::rt
