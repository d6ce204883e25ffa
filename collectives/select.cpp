// Algorithm selection (see select.hpp). The t_* functions are the cost formulas of
// docs/algorithms.md, one per algorithm; nothing here is a size cut-off: switch points are
// wherever one formula overtakes another for the job's α, β, γ, δ.
#include "collectives/select.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "collectives/exchange.hpp"
#include "runtime/coll_algorithms.hpp"
#include "runtime/context.hpp"
#include "runtime/params.hpp"

namespace rmp::coll {
namespace {

// ---- Cost formulas ---------------------------------------------------------------------------
// p ranks, n bytes; L = ⌈log2 p⌉; P = 2^⌊log2 p⌋, Lp = log2 P, f = 1 when p ≠ P (the fold
// of Fold in exchange.hpp costs extra steps).

struct Shape {
  double p, L, P, Lp, f;
  explicit Shape(int ranks)
      : p(ranks),
        L(ceil_log2(ranks)),
        P(floor_pow2(ranks)),
        Lp(ceil_log2(floor_pow2(ranks))),
        f(ranks != floor_pow2(ranks) ? 1 : 0) {}
};

// Segments of a pipelined algorithm that moves n bytes in pieces of m.segment.
double segments(const CostModel& m, double n) { return std::max(1.0, std::ceil(n / m.segment)); }

double t_barrier_dissemination(const CostModel& m, const Shape& s, double) { return s.L * m.alpha; }

double t_bcast_binomial(const CostModel& m, const Shape& s, double n) {
  return s.L * (m.alpha + n * m.beta);
}
double t_bcast_scatter_allgather(const CostModel& m, const Shape& s, double n) {
  if (s.p == 1) return 0;
  return (s.L + s.p - 1) * m.alpha + 2 * (s.p - 1) / s.p * n * m.beta;
}
// A chain of p ranks moving n bytes in S segments of (at most) s bytes: the first segment
// crosses p − 1 links, then one more segment arrives per step — (p + S − 2) messages in a
// row, and ((p − 2)·s + n) bytes through the slowest path.
double t_chain(const CostModel& m, const Shape& s, double n, double per_byte) {
  if (s.p == 1) return 0;
  const double seg = std::min(n, m.segment);
  return (s.p + segments(m, n) - 2) * m.alpha + ((s.p - 2) * seg + n) * per_byte;
}

double t_bcast_pipeline(const CostModel& m, const Shape& s, double n) {
  return t_chain(m, s, n, m.beta);
}

double t_reduce_binomial(const CostModel& m, const Shape& s, double n) {
  return s.L * (m.alpha + n * (m.beta + m.gamma));
}
double t_reduce_rabenseifner(const CostModel& m, const Shape& s, double n) {
  return s.f * (m.alpha + n * (m.beta + m.gamma)) + 2 * s.Lp * m.alpha +
         (s.P - 1) / s.P * n * (2 * m.beta + m.gamma);
}

double t_allreduce_recursive_doubling(const CostModel& m, const Shape& s, double n) {
  return s.Lp * (m.alpha + n * (m.beta + m.gamma)) +
         s.f * (2 * m.alpha + 2 * n * m.beta + n * m.gamma);
}
double t_allreduce_rabenseifner(const CostModel& m, const Shape& s, double n) {
  return 2 * s.Lp * m.alpha + (s.P - 1) / s.P * n * (2 * m.beta + m.gamma) +
         s.f * (2 * m.alpha + 2 * n * m.beta + n * m.gamma);
}
double t_allreduce_ring(const CostModel& m, const Shape& s, double n) {
  if (s.p == 1) return 0;
  return 2 * (s.p - 1) * segments(m, n / s.p) * m.alpha +
         (s.p - 1) / s.p * n * (2 * m.beta + m.gamma);
}

// gather, scatter: n = bytes of all ranks together.
double t_rooted_binomial(const CostModel& m, const Shape& s, double n) {
  return s.L * m.alpha + (s.p - 1) / s.p * n * m.beta;
}
double t_rooted_linear(const CostModel& m, const Shape& s, double n) {
  return (s.p - 1) * m.alpha + (s.p - 1) / s.p * n * m.beta;
}
// gatherv, scatterv: the binomial tree sends a block-size header before each data message.
double t_rootedv_binomial(const CostModel& m, const Shape& s, double n) {
  return 2 * s.L * m.alpha + (s.p - 1) / s.p * n * m.beta;
}

// allgather(v): n = bytes of the whole result.
double t_allgather_recursive_doubling(const CostModel& m, const Shape& s, double n) {
  return s.Lp * m.alpha + (s.P - 1) / s.P * n * m.beta +
         s.f * (2 * m.alpha + (1 + 1 / s.p) * n * m.beta);
}
double t_allgather_bruck(const CostModel& m, const Shape& s, double n) {
  return s.L * m.alpha + (s.p - 1) / s.p * n * m.beta + n * m.delta;
}
double t_allgather_ring(const CostModel& m, const Shape& s, double n) {
  if (s.p == 1) return 0;
  return (s.p - 1) * segments(m, n / s.p) * m.alpha + (s.p - 1) / s.p * n * m.beta;
}

// alltoall(v): n = bytes one rank sends in all.
double t_alltoall_pairwise(const CostModel& m, const Shape& s, double n) {
  return (s.p - 1) * m.alpha + (s.p - 1) / s.p * n * m.beta;
}
double t_alltoall_bruck(const CostModel& m, const Shape& s, double n) {
  return s.L * m.alpha + s.L * n / 2 * (m.beta + m.delta) + n * m.delta;
}
double t_alltoallv_bruck(const CostModel& m, const Shape& s, double n) {
  return 2 * s.L * m.alpha + s.L * n / 2 * (m.beta + m.delta) + n * m.delta;
}

// reduce_scatter(_block): n = bytes of the whole input vector.
double t_reduce_scatter_recursive_halving(const CostModel& m, const Shape& s, double n) {
  return s.Lp * m.alpha + (s.P - 1) / s.P * n * (m.beta + m.gamma) +
         s.f * (2 * m.alpha + n * (m.beta + m.gamma) + n / s.p * m.beta);
}
double t_reduce_scatter_ring(const CostModel& m, const Shape& s, double n) {
  if (s.p == 1) return 0;
  return (s.p - 1) * segments(m, n / s.p) * m.alpha + (s.p - 1) / s.p * n * (m.beta + m.gamma);
}

// scan keeps one running value, exscan two (the exclusive result and the inclusive partial).
double t_scan_recursive_doubling(const CostModel& m, const Shape& s, double n) {
  return s.L * (m.alpha + n * (m.beta + m.gamma));
}
double t_exscan_recursive_doubling(const CostModel& m, const Shape& s, double n) {
  return s.L * (m.alpha + n * (m.beta + 2 * m.gamma));
}
double t_scan_chain(const CostModel& m, const Shape& s, double n) {
  return t_chain(m, s, n, m.beta + m.gamma);
}

// ---- Tables ----------------------------------------------------------------------------------

using Formula = double (*)(const CostModel&, const Shape&, double);

// Formulas of each collective's algorithms, in the order of their names
// (rt::kCollAlgorithms; checked below).
using Formulas = std::span<const Formula>;

struct Entry {
  Formulas algos;   // nullptr: the node-shared path, taken whenever available (select.hpp)
  bool size_known;  // every rank knows the byte count (else: chosen from p alone)
};

constexpr Formula kBarrier[] = {t_barrier_dissemination, nullptr};
constexpr Formula kBcast[] = {t_bcast_binomial, t_bcast_scatter_allgather, t_bcast_pipeline,
                              nullptr, nullptr};
constexpr Formula kReduce[] = {t_reduce_binomial, t_reduce_rabenseifner, nullptr, nullptr};
constexpr Formula kAllreduce[] = {t_allreduce_recursive_doubling, t_allreduce_rabenseifner,
                                  t_allreduce_ring, nullptr, nullptr};
constexpr Formula kRooted[] = {t_rooted_binomial, t_rooted_linear};
constexpr Formula kRootedV[] = {t_rootedv_binomial, t_rooted_linear};
constexpr Formula kAllgather[] = {t_allgather_recursive_doubling, t_allgather_bruck,
                                  t_allgather_ring, nullptr, nullptr};
constexpr Formula kAlltoall[] = {t_alltoall_pairwise, t_alltoall_bruck, nullptr, nullptr};
constexpr Formula kAlltoallV[] = {t_alltoall_pairwise, t_alltoallv_bruck};
constexpr Formula kReduceScatter[] = {t_reduce_scatter_recursive_halving, t_reduce_scatter_ring,
                                      nullptr};
constexpr Formula kScan[] = {t_scan_recursive_doubling, t_scan_chain};
constexpr Formula kExscan[] = {t_exscan_recursive_doubling, t_scan_chain};

// Indexed by Coll.
constexpr Entry kTable[kCollCount] = {
    {kBarrier, true},        // barrier
    {kBcast, true},          // bcast
    {kReduce, true},         // reduce
    {kAllreduce, true},      // allreduce
    {kRooted, true},         // gather
    {kRootedV, false},       // gatherv
    {kRooted, true},         // scatter
    {kRootedV, false},       // scatterv
    {kAllgather, true},      // allgather
    {kAllgather, true},      // allgatherv
    {kAlltoall, true},       // alltoall
    {kAlltoallV, false},     // alltoallv
    {kReduceScatter, true},  // reduce_scatter
    {kReduceScatter, true},  // reduce_scatter_block
    {kScan, true},           // scan
    {kExscan, true},         // exscan
};

// The formulas follow the names RMP_<COLL>_ALGO accepts, whose order the Algo enums of
// select.hpp follow; a node-shared name ("shm...") has no formula.
consteval bool formulas_match_names() {
  for (std::size_t k = 0; k < kCollCount; ++k) {
    const auto names = rt::kCollAlgorithms[k].algos;
    if (names.size() != kTable[k].algos.size()) return false;
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i].starts_with("shm") != (kTable[k].algos[i] == nullptr)) return false;
  }
  return true;
}
static_assert(kCollCount == rt::kCollectiveCount && formulas_match_names());
// The enums of select.hpp against the names, value by value (and no name left over): an enum
// out of step would force another algorithm than the one named.
template <class Algo>
consteval bool names_are(Coll k, std::initializer_list<std::pair<Algo, std::string_view>> list) {
  const auto names = rt::kCollAlgorithms[static_cast<std::size_t>(k)].algos;
  if (names.size() != list.size()) return false;
  for (const auto& [algo, name] : list)
    if (static_cast<std::size_t>(algo) >= names.size() ||
        names[static_cast<std::size_t>(algo)] != name)
      return false;
  return true;
}
using BA = BarrierAlgo;
using BC = BcastAlgo;
using RE = ReduceAlgo;
using AR = AllreduceAlgo;
using RO = RootedAlgo;
using AG = AllgatherAlgo;
using AA = AlltoallAlgo;
using RS = ReduceScatterAlgo;
using SC = ScanAlgo;
static_assert(names_are<BA>(Coll::barrier,
                            {{BA::dissemination, "dissemination"}, {BA::shm, "shm"}}));
static_assert(names_are<BC>(Coll::bcast, {{BC::binomial, "binomial"},
                                          {BC::scatter_allgather, "scatter_allgather"},
                                          {BC::pipeline, "pipeline"},
                                          {BC::shm, "shm"},
                                          {BC::shm_direct, "shm_direct"}}));
static_assert(names_are<RE>(Coll::reduce, {{RE::binomial, "binomial"},
                                           {RE::rabenseifner, "rabenseifner"},
                                           {RE::shm, "shm"},
                                           {RE::shm_direct, "shm_direct"}}));
static_assert(names_are<AR>(Coll::allreduce, {{AR::recursive_doubling, "recursive_doubling"},
                                              {AR::rabenseifner, "rabenseifner"},
                                              {AR::ring, "ring"},
                                              {AR::shm, "shm"},
                                              {AR::shm_direct, "shm_direct"}}));
static_assert(names_are<AG>(Coll::allgather, {{AG::recursive_doubling, "recursive_doubling"},
                                              {AG::bruck, "bruck"},
                                              {AG::ring, "ring"},
                                              {AG::shm, "shm"},
                                              {AG::shm_direct, "shm_direct"}}));
static_assert(names_are<AA>(Coll::alltoall, {{AA::pairwise, "pairwise"},
                                             {AA::bruck, "bruck"},
                                             {AA::shm, "shm"},
                                             {AA::shm_direct, "shm_direct"}}));
static_assert(names_are<AA>(Coll::alltoallv, {{AA::pairwise, "pairwise"}, {AA::bruck, "bruck"}}));
static_assert(names_are<RS>(Coll::reduce_scatter, {{RS::recursive_halving, "recursive_halving"},
                                                   {RS::ring, "ring"},
                                                   {RS::shm, "shm"}}));
static_assert(names_are<SC>(Coll::scan, {{SC::recursive_doubling, "recursive_doubling"},
                                         {SC::chain, "chain"}}));
// The collectives that share a list with the ones above.
consteval bool same_names(Coll a, Coll b) {
  const auto x = rt::kCollAlgorithms[static_cast<std::size_t>(a)].algos;
  const auto y = rt::kCollAlgorithms[static_cast<std::size_t>(b)].algos;
  return x.data() == y.data() && x.size() == y.size();
}
static_assert(names_are<RO>(Coll::gather, {{RO::binomial, "binomial"}, {RO::linear, "linear"}}));
static_assert(same_names(Coll::gather, Coll::gatherv) && same_names(Coll::gather, Coll::scatter) &&
              same_names(Coll::gather, Coll::scatterv) &&
              same_names(Coll::allgather, Coll::allgatherv) &&
              same_names(Coll::reduce_scatter, Coll::reduce_scatter_block) &&
              same_names(Coll::scan, Coll::exscan));
static_assert(rt::kCollAlgorithms[static_cast<std::size_t>(Coll::exscan)].name == "exscan");

const Entry& entry(Coll k) { return kTable[static_cast<std::size_t>(k)]; }

}  // namespace

const char* coll_name(Coll k) {
  return rt::kCollAlgorithms[static_cast<std::size_t>(k)].name.data();
}

std::string algo_env_name(Coll k) {
  return std::string(rt::kCollAlgorithms[static_cast<std::size_t>(k)].variable);
}

std::span<const std::string_view> algo_names(Coll k) {
  return rt::kCollAlgorithms[static_cast<std::size_t>(k)].algos;
}

int node_shared_algo(Coll k) {
  static constexpr std::array<int, kCollCount> kIndex = [] {
    std::array<int, kCollCount> t{};
    for (std::size_t c = 0; c < kCollCount; ++c) {
      t[c] = -1;
      const auto algos = kTable[c].algos;
      for (std::size_t i = 0; i < algos.size() && t[c] < 0; ++i)
        if (!algos[i]) t[c] = static_cast<int>(i);
    }
    return t;
  }();
  return kIndex[static_cast<std::size_t>(k)];
}

CostModel cost_model(const rt::Params& p, double ranks_per_core) {
  CostModel m;
  m.alpha = p.link_rtt_us * 1e-6 / 2 * std::max(1.0, ranks_per_core);
  m.beta = p.link_bw > 0 ? 1 / p.link_bw : 0;
  m.gamma = p.copy_bw > 0 ? 1 / p.copy_bw : 0;
  m.delta = m.gamma;
  m.segment = static_cast<double>(std::max<std::size_t>(1, p.fragment_size));
  return m;
}

CostModel cost_model(const CommImpl& c) {
  const rt::Context& ctx = c.engine().context();
  return cost_model(ctx.coll_params(), ctx.coll_ranks_per_core());
}

double predicted_time(Coll k, int algo, const CostModel& m, int p, double bytes) {
  const Formula f = entry(k).algos[static_cast<std::size_t>(algo)];
  return f ? f(m, Shape(p), bytes) : NAN;
}

bool size_known_everywhere(Coll k) { return entry(k).size_known; }

int cheapest(Coll k, const CostModel& m, int p, double bytes, bool node_shared) {
  const Entry& e = entry(k);
  if (node_shared) {
    if (const int ns = node_shared_algo(k); ns >= 0) return ns;
  }
  const Shape s(p);
  int best = -1;
  if (e.size_known) {
    double best_t = INFINITY;
    for (std::size_t i = 0; i < e.algos.size(); ++i) {
      if (!e.algos[i]) continue;
      const double t = e.algos[i](m, s, bytes);
      if (best < 0 || t < best_t) best = static_cast<int>(i), best_t = t;
    }
    return best;
  }
  // Sizes unknown to some ranks: minimise the worst ratio to the best algorithm over all
  // sizes. These formulas are affine in the byte count, so each ratio is monotonic and its
  // worst case is at one end: bytes -> 0 (the alpha terms) or bytes -> infinity (the slopes).
  constexpr double kFar = 1e18;
  const std::size_t n = e.algos.size();
  std::vector<double> at0(n), slope(n);
  double best0 = INFINITY, best_slope = INFINITY;
  for (std::size_t i = 0; i < n; ++i) {
    at0[i] = e.algos[i](m, s, 0);
    slope[i] = (e.algos[i](m, s, kFar) - at0[i]) / kFar;
    best0 = std::min(best0, at0[i]);
    best_slope = std::min(best_slope, slope[i]);
  }
  auto ratio = [](double x, double best) { return best > 0 ? x / best : (x > 0 ? INFINITY : 1.0); };
  double best_worst = INFINITY;
  for (std::size_t i = 0; i < n; ++i) {
    const double worst = std::max(ratio(at0[i], best0), ratio(slope[i], best_slope));
    if (best < 0 || worst < best_worst) best = static_cast<int>(i), best_worst = worst;
  }
  return best;
}

int forced(Coll k, const CommImpl& c) {
  return c.engine().context().coll_algos()[static_cast<std::size_t>(k)];
}

bool may_use_node_shared(Coll k, const CommImpl& c) {
  if (node_shared_algo(k) < 0) return false;
  const int f = forced(k, c);
  return f < 0 || !entry(k).algos[static_cast<std::size_t>(f)];
}

int select(Coll k, const CommImpl& c, std::size_t bytes, bool node_shared) {
  const int f = forced(k, c);
  const int ns = node_shared_algo(k);
  // A forced node-shared algorithm (no formula) that this call cannot use: the formulas.
  if (f >= 0 && (node_shared || entry(k).algos[static_cast<std::size_t>(f)])) return f;
  // The node-shared path is taken whenever the call can use it: no costs to weigh. (Building
  // the cost model first was ~120 of the ~200 instructions a node-shared barrier spent
  // choosing, callgrind.)
  if (node_shared && ns >= 0) return ns;
  return cheapest(k, cost_model(c), c.size(), static_cast<double>(bytes), node_shared);
}

}  // namespace rmp::coll
