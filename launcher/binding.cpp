// hwloc CPU binding (binding.hpp).
#include "launcher/binding.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "launcher/fd.hpp"

namespace rmp::launcher {

CpuBinding::CpuBinding(std::optional<BindTo> requested, int local_ranks) {
  if (hwloc_topology_init(&topology_) != 0) throw SystemError("hwloc_topology_init", errno);
  // hwloc drops only what cgroups forbid; rlaunch's own affinity mask (taskset, a batch
  // system's binding) would otherwise be ignored and ranks placed on CPUs it was not given.
  // Restricted, "cores" means cores rlaunch may run on, partly allowed cores keeping only their
  // allowed PUs, and NUMA nodes only their allowed CPUs.
  if (hwloc_topology_set_flags(topology_, HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM |
                                              HWLOC_TOPOLOGY_FLAG_RESTRICT_TO_CPUBINDING) != 0 ||
      hwloc_topology_load(topology_) != 0) {
    const int err = errno;
    hwloc_topology_destroy(topology_);
    throw SystemError("hwloc: loading the topology restricted to rlaunch's CPU binding", err);
  }
  hwloc_obj_type_t unit = HWLOC_OBJ_CORE;
  int n = hwloc_get_nbobjs_by_type(topology_, unit);
  if (n <= 0) {  // some virtual machines report no cores: fall back to hardware threads
    unit = HWLOC_OBJ_PU;
    n = hwloc_get_nbobjs_by_type(topology_, unit);
  }
  cores_ = std::max(n, 0);
  policy_ = requested.value_or(local_ranks <= n ? BindTo::core : BindTo::none);
  if (policy_ == BindTo::none || n <= 0) {
    policy_ = n <= 0 ? BindTo::none : policy_;
    return;
  }
  const int numa_nodes = hwloc_get_nbobjs_by_type(topology_, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < n; ++i) {
    const hwloc_obj_t core = hwloc_get_obj_by_type(topology_, unit, static_cast<unsigned>(i));
    hwloc_const_cpuset_t set = core->cpuset;
    if (policy_ == BindTo::numa) {
      // The NUMA node holding the core a core-bound rank would get: --bind-to numa widens each
      // rank's mask to its node without moving it to another node.
      for (int j = 0; j < numa_nodes; ++j) {
        const hwloc_obj_t node =
            hwloc_get_obj_by_type(topology_, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(j));
        if (node->cpuset != nullptr && hwloc_bitmap_isincluded(core->cpuset, node->cpuset)) {
          set = node->cpuset;
          break;
        }
      }
    }
    core_sets_.push_back(set);
  }
}

CpuBinding::~CpuBinding() {
  if (topology_ != nullptr) hwloc_topology_destroy(topology_);
}

void CpuBinding::apply_in_child(int local_rank) const noexcept {
  if (policy_ == BindTo::none || core_sets_.empty()) return;
  const auto core = static_cast<std::size_t>(local_rank) % core_sets_.size();
  if (hwloc_set_cpubind(topology_, core_sets_[core], HWLOC_CPUBIND_PROCESS) != 0) {
    // A container may forbid changing affinity; running unbound beats not running.
    char line[256];
    const int n = std::snprintf(
        line, sizeof(line), "rlaunch: warning: rank %d: binding to %s %zu failed: %s\n", local_rank,
        policy_ == BindTo::core ? "core" : "the NUMA node of core", core, std::strerror(errno));
    if (n > 0) (void)!::write(2, line, static_cast<std::size_t>(n));
  }
}

}  // namespace rmp::launcher
