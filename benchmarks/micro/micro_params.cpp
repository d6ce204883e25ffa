// The tuning formulas and the knob resolver (runtime/params.hpp): each DESIGN §5 formula on
// its own, and a full resolve_params() per transport view (what every rank does once at start
// and the online tuner may redo), plain and with environment overrides and a calibration.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <string>

#include "runtime/params.hpp"

namespace {

using namespace rmp::rt;

// Inputs vary a little per iteration so the compiler cannot fold the call away.
void pipeline_depth(benchmark::State& state) {
  double bw = 12.5e9;
  for (auto _ : state) {
    benchmark::DoNotOptimize(pipeline_depth_formula(bw, 2e-6, 65536, 64, 2));
    bw += 1.0;
  }
}
BENCHMARK(pipeline_depth)->Name("params/formula/pipeline_depth");

void sq_rq_cq_srq(benchmark::State& state) {
  std::size_t conc = 64;
  for (auto _ : state) {
    const std::size_t sq = sq_depth_formula(conc, 4, 2);
    const std::size_t rq = rq_depth_formula(sq);
    benchmark::DoNotOptimize(srq_size_formula(rq, 2, 1.5));
    benchmark::DoNotOptimize(cq_depth_formula(1e6, 2.0, sq, rq));
    conc = (conc + 1) & 1023;
  }
}
BENCHMARK(sq_rq_cq_srq)->Name("params/formula/sq_rq_cq_srq");

void spin_us(benchmark::State& state) {
  double rtt = 1.5;
  for (auto _ : state) {
    benchmark::DoNotOptimize(spin_us_formula(rtt));
    rtt += 1e-9;
  }
}
BENCHMARK(spin_us)->Name("params/formula/spin_us");

// Every knob resolved from scratch (table walk, formulas, range checks, the rows of
// strings rinfo prints).
void resolve(benchmark::State& state, std::string transport, bool with_env) {
  ParamsInput in;
  in.transport = transport;
  in.limits = declared_limits(transport);
  if (with_env) {
    in.env["RMP_EAGER_THRESHOLD"] = "16384";
    in.env["RMP_LINK_BW"] = "10e9";
    in.env["RMP_WAIT_MODE"] = "yield";
    in.cli["fragment_size"] = "65536";
    in.calibrated = LinkFigures{.bw_Bps = 9e9, .rtt_us = 3.0, .copy_bw_Bps = 8e9};
  }
  for (auto _ : state) {
    ParamSet set = resolve_params(in);
    benchmark::DoNotOptimize(set.values.pipeline_depth);
  }
}
BENCHMARK_CAPTURE(resolve, global, std::string(), false)->Name("params/resolve/global");
BENCHMARK_CAPTURE(resolve, shm, std::string("shm"), false)->Name("params/resolve/shm");
BENCHMARK_CAPTURE(resolve, tcp, std::string("tcp"), false)->Name("params/resolve/tcp");
BENCHMARK_CAPTURE(resolve, verbs, std::string("verbs"), false)->Name("params/resolve/verbs");
BENCHMARK_CAPTURE(resolve, verbs_env, std::string("verbs"), true)
    ->Name("params/resolve/verbs_env_cli_calibrated");

}  // namespace

BENCHMARK_MAIN();
