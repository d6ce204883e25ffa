// Algorithm selection (see select.hpp). The t_* functions are the cost formulas of
// docs/algorithms.md, one per algorithm; nothing here is a size cut-off: switch points are
// wherever one formula overtakes another for the job's α, β, γ, δ.
#include "collectives/select.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "collectives/exchange.hpp"
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

struct Algorithm {
  std::string_view name;
  Formula time;  // nullptr: the node-shared path, taken whenever available (select.hpp)
};

struct Entry {
  const char* name;
  std::span<const Algorithm> algos;
  bool size_known;  // every rank knows the byte count (else: chosen from p alone)
};

constexpr Algorithm kBarrier[] = {{"dissemination", t_barrier_dissemination}, {"shm", nullptr}};
constexpr Algorithm kBcast[] = {{"binomial", t_bcast_binomial},
                                {"scatter_allgather", t_bcast_scatter_allgather},
                                {"pipeline", t_bcast_pipeline},
                                {"shm", nullptr},
                                {"shm_direct", nullptr}};
constexpr Algorithm kReduce[] = {{"binomial", t_reduce_binomial},
                                 {"rabenseifner", t_reduce_rabenseifner},
                                 {"shm", nullptr},
                                 {"shm_direct", nullptr}};
constexpr Algorithm kAllreduce[] = {{"recursive_doubling", t_allreduce_recursive_doubling},
                                    {"rabenseifner", t_allreduce_rabenseifner},
                                    {"ring", t_allreduce_ring},
                                    {"shm", nullptr},
                                    {"shm_direct", nullptr}};
constexpr Algorithm kRooted[] = {{"binomial", t_rooted_binomial}, {"linear", t_rooted_linear}};
constexpr Algorithm kRootedV[] = {{"binomial", t_rootedv_binomial}, {"linear", t_rooted_linear}};
constexpr Algorithm kAllgather[] = {{"recursive_doubling", t_allgather_recursive_doubling},
                                    {"bruck", t_allgather_bruck},
                                    {"ring", t_allgather_ring},
                                    {"shm", nullptr},
                                    {"shm_direct", nullptr}};
constexpr Algorithm kAlltoall[] = {{"pairwise", t_alltoall_pairwise},
                                   {"bruck", t_alltoall_bruck},
                                   {"shm", nullptr},
                                   {"shm_direct", nullptr}};
constexpr Algorithm kAlltoallV[] = {{"pairwise", t_alltoall_pairwise},
                                    {"bruck", t_alltoallv_bruck}};
constexpr Algorithm kReduceScatter[] = {{"recursive_halving", t_reduce_scatter_recursive_halving},
                                        {"ring", t_reduce_scatter_ring},
                                        {"shm", nullptr}};
constexpr Algorithm kScan[] = {{"recursive_doubling", t_scan_recursive_doubling},
                               {"chain", t_scan_chain}};
constexpr Algorithm kExscan[] = {{"recursive_doubling", t_exscan_recursive_doubling},
                                 {"chain", t_scan_chain}};

// Indexed by Coll.
constexpr Entry kTable[kCollCount] = {
    {"barrier", kBarrier, true},
    {"bcast", kBcast, true},
    {"reduce", kReduce, true},
    {"allreduce", kAllreduce, true},
    {"gather", kRooted, true},
    {"gatherv", kRootedV, false},
    {"scatter", kRooted, true},
    {"scatterv", kRootedV, false},
    {"allgather", kAllgather, true},
    {"allgatherv", kAllgather, true},
    {"alltoall", kAlltoall, true},
    {"alltoallv", kAlltoallV, false},
    {"reduce_scatter", kReduceScatter, true},
    {"reduce_scatter_block", kReduceScatter, true},
    {"scan", kScan, true},
    {"exscan", kExscan, true},
};

// Names per collective, for algo_names (a span of names, built once).
struct NameTable {
  std::array<std::vector<std::string_view>, kCollCount> names;
  NameTable() {
    for (std::size_t k = 0; k < kCollCount; ++k)
      for (const Algorithm& a : kTable[k].algos) names[k].push_back(a.name);
  }
};

const Entry& entry(Coll k) { return kTable[static_cast<std::size_t>(k)]; }

// ---- Forced algorithms -------------------------------------------------------------------------

int parse_forced(Coll k, const std::string& value);

struct ForcedTable {
  static constexpr int kUnset = -1, kInvalid = -2;
  std::array<std::string, kCollCount> value;  // "" = not set
  // value parsed once (a collective asks on every call): the algorithm's index, kUnset, or
  // kInvalid (then every call parses it again, to throw the error naming it)
  std::array<int, kCollCount> index = [] {
    std::array<int, kCollCount> a{};
    a.fill(kUnset);
    return a;
  }();
};

ForcedTable load_forced() {
  ForcedTable t;
  for (std::size_t i = 0; i < kCollCount; ++i) {
    const char* v = std::getenv(algo_env_name(static_cast<Coll>(i)).c_str());
    if (v) t.value[i] = v;
  }
  for (std::size_t i = 0; i < kCollCount; ++i) {
    if (t.value[i].empty()) continue;
    try {
      t.index[i] = parse_forced(static_cast<Coll>(i), t.value[i]);
    } catch (const Error&) {
      t.index[i] = ForcedTable::kInvalid;
    }
  }
  return t;
}

ForcedTable& forced_table() {
  static ForcedTable t = load_forced();
  return t;
}

int parse_forced(Coll k, const std::string& value) {
  const auto names = algo_names(k);
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == value) return static_cast<int>(i);
  std::string valid;
  for (std::string_view n : names) valid += (valid.empty() ? "" : ", ") + std::string(n);
  throw Error(Errc::invalid_argument, std::string(coll_name(k)) + ": " + algo_env_name(k) + "=" +
                                          value + " is not an algorithm of " + coll_name(k) +
                                          " (valid: " + valid + ")");
}

}  // namespace

const char* coll_name(Coll k) { return entry(k).name; }

std::string algo_env_name(Coll k) {
  std::string s = "RMP_";
  for (const char* c = coll_name(k); *c; ++c)
    s += static_cast<char>(std::toupper(static_cast<unsigned char>(*c)));
  return s + "_ALGO";
}

std::span<const std::string_view> algo_names(Coll k) {
  static const NameTable table;  // function-local: usable from any static initialiser
  return table.names[static_cast<std::size_t>(k)];
}

int node_shared_algo(Coll k) {
  static constexpr std::array<int, kCollCount> kIndex = [] {
    std::array<int, kCollCount> t{};
    for (std::size_t c = 0; c < kCollCount; ++c) {
      t[c] = -1;
      const auto algos = kTable[c].algos;
      for (std::size_t i = 0; i < algos.size() && t[c] < 0; ++i)
        if (!algos[i].time) t[c] = static_cast<int>(i);
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
  double per_core = 1;
  if (ctx.oversubscribed()) per_core = static_cast<double>(ctx.id().local_size) / ctx.local_cores();
  return cost_model(ctx.coll_params(), per_core);
}

double predicted_time(Coll k, int algo, const CostModel& m, int p, double bytes) {
  const Formula f = entry(k).algos[static_cast<std::size_t>(algo)].time;
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
      if (!e.algos[i].time) continue;
      const double t = e.algos[i].time(m, s, bytes);
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
    at0[i] = e.algos[i].time(m, s, 0);
    slope[i] = (e.algos[i].time(m, s, kFar) - at0[i]) / kFar;
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

int forced(Coll k) {
  const ForcedTable& t = forced_table();
  const int i = t.index[static_cast<std::size_t>(k)];
  if (i == ForcedTable::kInvalid) return parse_forced(k, t.value[static_cast<std::size_t>(k)]);
  if (i == ForcedTable::kUnset && k == Coll::reduce_scatter_block)
    return forced(Coll::reduce_scatter);
  return i;
}

void reload_forced_algorithms() { forced_table() = load_forced(); }

bool may_use_node_shared(Coll k) {
  if (node_shared_algo(k) < 0) return false;
  const int f = forced(k);
  return f < 0 || !entry(k).algos[static_cast<std::size_t>(f)].time;
}

int select(Coll k, const CommImpl& c, std::size_t bytes, bool node_shared) {
  const int f = forced(k);
  const int ns = node_shared_algo(k);
  // A forced node-shared algorithm (no formula) that this call cannot use: the formulas.
  if (f >= 0 && (node_shared || entry(k).algos[static_cast<std::size_t>(f)].time)) return f;
  // The node-shared path is taken whenever the call can use it: no costs to weigh. (Building
  // the cost model first was ~120 of the ~200 instructions a node-shared barrier spent
  // choosing, callgrind.)
  if (node_shared && ns >= 0) return ns;
  return cheapest(k, cost_model(c), c.size(), static_cast<double>(bytes), node_shared);
}

}  // namespace rmp::coll
