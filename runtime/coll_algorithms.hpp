// The names RMP_<COLL>_ALGO accepts: every collective and its algorithms, in the order the
// collectives layer numbers them (collectives/select.hpp: enum Coll and the per-collective
// Algo enums; select.cpp checks the order at compile time). The runtime validates the
// variables with the other RMP_ settings (resolve_env_settings, also run by rlaunch before it
// starts a job), so a misspelt algorithm stops a job at start-up rather than at the first call
// of that collective.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <string_view>

namespace rmp::rt {

struct CollAlgorithms {
  std::string_view name;      // "allreduce"
  std::string_view variable;  // "RMP_ALLREDUCE_ALGO"
  std::span<const std::string_view> algos;
};

namespace coll_names {
inline constexpr std::string_view kBarrier[] = {"dissemination", "shm"};
inline constexpr std::string_view kBcast[] = {"binomial", "scatter_allgather", "pipeline", "shm",
                                              "shm_direct"};
inline constexpr std::string_view kReduce[] = {"binomial", "rabenseifner", "shm", "shm_direct"};
inline constexpr std::string_view kAllreduce[] = {"recursive_doubling", "rabenseifner", "ring",
                                                  "shm", "shm_direct"};
inline constexpr std::string_view kRooted[] = {"binomial", "linear"};
inline constexpr std::string_view kAllgather[] = {"recursive_doubling", "bruck", "ring", "shm",
                                                  "shm_direct"};
inline constexpr std::string_view kAlltoall[] = {"pairwise", "bruck", "shm", "shm_direct"};
inline constexpr std::string_view kAlltoallV[] = {"pairwise", "bruck"};
inline constexpr std::string_view kReduceScatter[] = {"recursive_halving", "ring", "shm"};
inline constexpr std::string_view kScan[] = {"recursive_doubling", "chain"};
}  // namespace coll_names

inline constexpr std::size_t kCollectiveCount = 16;

// Indexed by rmp::coll::Coll.
inline constexpr std::array<CollAlgorithms, kCollectiveCount> kCollAlgorithms = {{
    {"barrier", "RMP_BARRIER_ALGO", coll_names::kBarrier},
    {"bcast", "RMP_BCAST_ALGO", coll_names::kBcast},
    {"reduce", "RMP_REDUCE_ALGO", coll_names::kReduce},
    {"allreduce", "RMP_ALLREDUCE_ALGO", coll_names::kAllreduce},
    {"gather", "RMP_GATHER_ALGO", coll_names::kRooted},
    {"gatherv", "RMP_GATHERV_ALGO", coll_names::kRooted},
    {"scatter", "RMP_SCATTER_ALGO", coll_names::kRooted},
    {"scatterv", "RMP_SCATTERV_ALGO", coll_names::kRooted},
    {"allgather", "RMP_ALLGATHER_ALGO", coll_names::kAllgather},
    {"allgatherv", "RMP_ALLGATHERV_ALGO", coll_names::kAllgather},
    {"alltoall", "RMP_ALLTOALL_ALGO", coll_names::kAlltoall},
    {"alltoallv", "RMP_ALLTOALLV_ALGO", coll_names::kAlltoallV},
    {"reduce_scatter", "RMP_REDUCE_SCATTER_ALGO", coll_names::kReduceScatter},
    {"reduce_scatter_block", "RMP_REDUCE_SCATTER_BLOCK_ALGO", coll_names::kReduceScatter},
    {"scan", "RMP_SCAN_ALGO", coll_names::kScan},
    {"exscan", "RMP_EXSCAN_ALGO", coll_names::kScan},
}};

// The algorithm each collective is forced to, by index into its names, or -1 (choose).
using ForcedAlgos = std::array<signed char, kCollectiveCount>;

}  // namespace rmp::rt
