// Algorithm selection: for every collective, the algorithms that implement it, their α–β–γ
// cost formulas (docs/algorithms.md states the same formulas), and the per-call choice — the
// cheapest by the formulas, or the one RMP_<COLL>_ALGO forces. The choice uses only values
// every rank of a communicator shares (its size, the message size, the job's parameters), so
// every rank picks the same algorithm.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "collectives/collectives.hpp"

namespace rmp::rt {
struct Params;
}

namespace rmp::coll {

enum class Coll : std::uint8_t {
  barrier,
  bcast,
  reduce,
  allreduce,
  gather,
  gatherv,
  scatter,
  scatterv,
  allgather,
  allgatherv,
  alltoall,
  alltoallv,
  reduce_scatter,
  reduce_scatter_block,
  scan,
  exscan,
};
inline constexpr std::size_t kCollCount = 16;

// Algorithms of each collective, in the order of their names in rt::kCollAlgorithms
// (runtime/coll_algorithms.hpp, the names RMP_<COLL>_ALGO takes; Coll follows its order too).
// On equal cost the first one wins.
// `shm`: the node-shared paths of node_shared.hpp (flag barrier; allreduce, reduce, bcast,
// allgather(v) and alltoall through the node's shared segment). They replace messages by
// cache-line writes and reads and by copies into and out of shared chunks, which the α–β
// model (α and β from p2p's link_rtt_us and link_bw) cannot price, so they have no formula:
// they are taken whenever the call can use them (a node-local communicator; for alltoall,
// pieces of at least a cache line) unless RMP_<COLL>_ALGO forces another algorithm; above
// eager_threshold (an allgather(v) or alltoall of ranks with cores of their own above 4 KiB)
// a bcast, reduce, allgather(v) or alltoall may still take the formulas' pick instead, and a
// reduce, allreduce, allgather(v) or alltoall its direct path, as measured (PathChoice,
// node_shared.hpp).
enum class BarrierAlgo : std::uint8_t { dissemination, shm };
enum class BcastAlgo : std::uint8_t { binomial, scatter_allgather, pipeline, shm, shm_direct };
enum class ReduceAlgo : std::uint8_t { binomial, rabenseifner, shm, shm_direct };
enum class AllreduceAlgo : std::uint8_t { recursive_doubling, rabenseifner, ring, shm, shm_direct };
enum class RootedAlgo : std::uint8_t { binomial, linear };  // gather(v), scatter(v)
enum class AllgatherAlgo : std::uint8_t { recursive_doubling, bruck, ring, shm, shm_direct };
// shm_direct (bcast, reduce, allreduce, allgather(v), alltoall): the others read straight from
// the root's buffer (the root of a reduce from theirs), or from each rank's input or block (the
// allreduce also writes each result slice into the others' outputs), with cross-memory attach
// (node_shared.hpp): one copy instead of two.
enum class AlltoallAlgo : std::uint8_t { pairwise, bruck, shm, shm_direct };
enum class ReduceScatterAlgo : std::uint8_t { recursive_halving, ring, shm };
enum class ScanAlgo : std::uint8_t { recursive_doubling, chain };

const char* coll_name(Coll k);                         // "allreduce"
std::string algo_env_name(Coll k);                     // "RMP_ALLREDUCE_ALGO"
std::span<const std::string_view> algo_names(Coll k);  // table order

// The machine as the formulas see it (seconds, bytes).
struct CostModel {
  double alpha = 0;    // per message: one-way latency, × ranks per core when oversubscribed
  double beta = 0;     // per byte sent from one rank to another (1 / link_bw)
  double gamma = 0;    // per byte combined by a reduction (1 / copy_bw: one pass over memory)
  double delta = 0;    // per byte copied locally (1 / copy_bw)
  double segment = 1;  // bytes per segment of the pipelined algorithms (fragment_size)
};
// α = link_rtt_us / 2 × max(1, ranks_per_core); β = 1 / link_bw; γ = δ = 1 / copy_bw.
CostModel cost_model(const rt::Params& p, double ranks_per_core);
// The model of the communicator's job, from rank 0's parameters: ranks per core = local
// ranks / cores where rank 0's node is oversubscribed, else 1.
CostModel cost_model(const CommImpl& c);

// Predicted time in seconds of algorithm `algo` (an index into algo_names(k)) of collective k
// on p ranks moving `bytes` (what "bytes" is per collective: docs/algorithms.md); NaN for an
// algorithm without a formula (`shm`).
double predicted_time(Coll k, int algo, const CostModel& m, int p, double bytes);
// Index of collective k's node-shared algorithm, or -1 when it has none.
int node_shared_algo(Coll k);

// Collectives whose message sizes not every rank knows (gatherv, scatterv, alltoallv) are
// chosen from p alone: the algorithm whose worst case over all sizes, relative to the best
// algorithm at that size, is smallest (evaluated at the two ends, bytes → 0 and → ∞, between
// which every formula is monotonic in its ratio).
bool size_known_everywhere(Coll k);

// Index of the algorithm the formulas pick (bytes ignored where !size_known_everywhere(k)),
// or the node-shared one when `node_shared` says this call can use it.
int cheapest(Coll k, const CostModel& m, int p, double bytes, bool node_shared = false);

// The algorithm RMP_<COLL>_ALGO forces on this communicator (an index into algo_names(k)), or
// -1. The runtime validated the names at start-up (rt::resolve_env_settings), and takes rank
// 0's values for every rank (rt::Context::coll_algos), so that all pick the same algorithm;
// reduce_scatter_block takes RMP_REDUCE_SCATTER_ALGO when its own is unset.
int forced(Coll k, const CommImpl& c);

// The per-call choice: forced, else cheapest. A forced `shm` that this call cannot use
// (`node_shared` false: not node-local, or alltoall's pieces too small) falls back to the
// formulas.
int select(Coll k, const CommImpl& c, std::size_t bytes, bool node_shared = false);

template <class Algo>
Algo choose(Coll k, const CommImpl& c, std::size_t bytes, bool node_shared = false) {
  return static_cast<Algo>(select(k, c, bytes, node_shared));
}

// Whether a call of k may use the node-shared path, so that the caller creates the
// communicator's segment (a collective step) only then: not when another algorithm is forced.
bool may_use_node_shared(Coll k, const CommImpl& c);

}  // namespace rmp::coll
