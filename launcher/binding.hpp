// CPU binding of ranks through hwloc (--bind-to core|numa|none, DESIGN §4). The topology is
// loaded once in rlaunch; each forked child binds itself before exec, so the program starts
// (and first-touches its memory) already in place.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <hwloc.h>

namespace rmp::launcher {

enum class BindTo { core, numa, none };

class CpuBinding {
public:
  // requested: nullopt = the contract's default (core when ranks ≤ cores, else none).
  CpuBinding(std::optional<BindTo> requested, int local_ranks);
  ~CpuBinding();
  CpuBinding(const CpuBinding&) = delete;
  CpuBinding& operator=(const CpuBinding&) = delete;

  BindTo policy() const { return policy_; }
  // Cores (hardware threads where hwloc sees no cores) rlaunch's own CPU binding allows: what
  // "ranks ≤ cores" is judged against, here and by the ranks (RMP_LOCAL_CORES).
  int cores() const { return cores_; }

  // In the child, between fork and exec. Never throws; on failure it writes a warning to
  // stderr (the rank's forwarded stderr) and the rank runs unbound.
  void apply_in_child(int local_rank) const noexcept;

private:
  hwloc_topology_t topology_ = nullptr;
  BindTo policy_ = BindTo::none;
  int cores_ = 0;
  // Per core, in hwloc's logical order: the cpuset a rank placed on that core is bound to
  // (the core's PUs, or its NUMA node's PUs). Pointers into the topology, which outlives them.
  std::vector<hwloc_const_cpuset_t> core_sets_;
};

}  // namespace rmp::launcher
