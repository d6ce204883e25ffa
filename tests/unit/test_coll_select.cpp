// Collective algorithm selection (collectives/select.hpp): the switch points follow the cost
// formulas when the link figures change, sizes some ranks do not know are decided from the
// rank count alone, RMP_<COLL>_ALGO forces an algorithm and an unknown name says what is valid.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "collectives/select.hpp"
#include "runtime/params.hpp"
#include "tests/unit/coll_env.hpp"
#include "tests/unit/thread_ranks.hpp"

namespace {

using rmp::Errc;
using rmp::Error;
using rmp::coll::AllreduceAlgo;
using rmp::coll::BcastAlgo;
using rmp::coll::Coll;
using rmp::coll::CostModel;
using rmp::coll::RootedAlgo;
using rmp::testing::ScopedEnv;
namespace coll = rmp::coll;

rmp::rt::Params params(double bw, double rtt_us, double copy_bw = 10e9, std::size_t frag = 131072) {
  rmp::rt::Params p;
  p.link_bw = bw;
  p.link_rtt_us = rtt_us;
  p.copy_bw = copy_bw;
  p.fragment_size = frag;
  return p;
}

// Smallest byte count at which `k` on p ranks stops choosing `below` (bisection: the choice
// changes once between lo and hi).
double switch_point(Coll k, const CostModel& m, int p, int below, double lo = 0, double hi = 1e12) {
  EXPECT_EQ(coll::cheapest(k, m, p, lo), below);
  EXPECT_NE(coll::cheapest(k, m, p, hi), below);
  while (hi - lo > 1) {
    const double mid = std::floor((lo + hi) / 2);
    (coll::cheapest(k, m, p, mid) == below ? lo : hi) = mid;
  }
  return hi;
}

template <class A>
int idx(A a) {
  return static_cast<int>(a);
}

}  // namespace

TEST(CollSelect, CostModel_FromLinkFiguresAndOversubscription) {
  const CostModel m = coll::cost_model(params(20e9, 0.5), 1);
  EXPECT_DOUBLE_EQ(m.alpha, 0.25e-6);  // one way: half the round trip
  EXPECT_DOUBLE_EQ(m.beta, 1 / 20e9);
  EXPECT_DOUBLE_EQ(m.gamma, 1 / 10e9);
  EXPECT_DOUBLE_EQ(m.segment, 131072);
  EXPECT_DOUBLE_EQ(coll::cost_model(params(20e9, 0.5), 4).alpha, 1e-6);       // 4 ranks per core
  EXPECT_DOUBLE_EQ(coll::cost_model(params(20e9, 0.5), 0.5).alpha, 0.25e-6);  // never below 1×
}

TEST(CollSelect, AllreduceSwitch_MovesWithLatencyAndBandwidth_AsTheFormulasPredict) {
  // p = 4: recursive doubling 2(α + n(β+γ)) against Rabenseifner 4α + ¾n(2β+γ):
  // they cross at n* = 2α / (β/2 + 5γ/4).
  auto predicted = [](const CostModel& m) { return 2 * m.alpha / (m.beta / 2 + 1.25 * m.gamma); };
  for (double rtt : {0.5, 1.0, 4.0})
    for (double bw : {5e9, 20e9, 100e9}) {
      const CostModel m = coll::cost_model(params(bw, rtt), 1);
      const double got =
          switch_point(Coll::allreduce, m, 4, idx(AllreduceAlgo::recursive_doubling));
      EXPECT_NEAR(got, predicted(m), 2.0) << "rtt " << rtt << " us, bw " << bw;
      EXPECT_EQ(coll::cheapest(Coll::allreduce, m, 4, got), idx(AllreduceAlgo::rabenseifner));
    }
  // Doubling the latency doubles the switch point; more bandwidth moves it up too.
  const double base = switch_point(Coll::allreduce, coll::cost_model(params(20e9, 0.5), 1), 4, 0);
  EXPECT_NEAR(switch_point(Coll::allreduce, coll::cost_model(params(20e9, 1.0), 1), 4, 0), 2 * base,
              2);
  EXPECT_GT(switch_point(Coll::allreduce, coll::cost_model(params(80e9, 0.5), 1), 4, 0), base);
  // Oversubscription scales α, so the switch moves as if the latency were 4× higher.
  EXPECT_NEAR(switch_point(Coll::allreduce, coll::cost_model(params(20e9, 0.5), 4), 4, 0), 4 * base,
              4);
}

TEST(CollSelect, AllreduceLarge_RingOffPowersOfTwo_RabenseifnerOnThem) {
  const CostModel m = coll::cost_model(params(20e9, 0.5), 1);
  for (int p : {3, 5, 6, 7})
    EXPECT_EQ(coll::cheapest(Coll::allreduce, m, p, 64e6), idx(AllreduceAlgo::ring)) << p;
  for (int p : {2, 4, 8})
    EXPECT_EQ(coll::cheapest(Coll::allreduce, m, p, 64e6), idx(AllreduceAlgo::rabenseifner)) << p;
  for (int p : {2, 3, 4, 5, 8})
    EXPECT_EQ(coll::cheapest(Coll::allreduce, m, p, 8), idx(AllreduceAlgo::recursive_doubling))
        << p;
}

TEST(CollSelect, BcastSwitches_BinomialThenScatterAllgatherThenPipeline) {
  // p = 8: binomial 3(α + nβ) against scatter+allgather 10α + (7/4)nβ: n* = 7α / (5β/4).
  for (double rtt : {0.5, 2.0}) {
    const CostModel m = coll::cost_model(params(20e9, rtt), 1);
    const double first = switch_point(Coll::bcast, m, 8, idx(BcastAlgo::binomial));
    EXPECT_NEAR(first, 7 * m.alpha / (1.25 * m.beta), 2.0);  // ties keep the first
    EXPECT_EQ(coll::cheapest(Coll::bcast, m, 8, first), idx(BcastAlgo::scatter_allgather));
    const double second =
        switch_point(Coll::bcast, m, 8, idx(BcastAlgo::scatter_allgather), first, 1e12);
    EXPECT_EQ(coll::cheapest(Coll::bcast, m, 8, second), idx(BcastAlgo::pipeline));
    // The pipeline's segments are fragment_size: at the switch its cost equals the other's.
    EXPECT_NEAR(coll::predicted_time(Coll::bcast, idx(BcastAlgo::pipeline), m, 8, second),
                coll::predicted_time(Coll::bcast, idx(BcastAlgo::scatter_allgather), m, 8, second),
                (m.alpha + m.segment * m.beta));
  }
  // Two ranks: nothing beats the single message of the binomial tree.
  const CostModel m = coll::cost_model(params(20e9, 0.5), 1);
  for (double n : {0.0, 1e3, 1e6, 1e9})
    EXPECT_EQ(coll::cheapest(Coll::bcast, m, 2, n), idx(BcastAlgo::binomial));
}

TEST(CollSelect, SizesUnknownToSomeRanks_ChosenFromRankCountAlone) {
  const CostModel m = coll::cost_model(params(20e9, 0.5), 1);
  for (Coll k : {Coll::gatherv, Coll::scatterv, Coll::alltoallv}) {
    EXPECT_FALSE(coll::size_known_everywhere(k));
    for (int p = 1; p <= 64; ++p)
      EXPECT_EQ(coll::cheapest(k, m, p, 0), coll::cheapest(k, m, p, 1e9))
          << coll::coll_name(k) << " p=" << p;
  }
  // gatherv: linear (p − 1)α against binomial with size headers 2⌈log2 p⌉α; equal slopes.
  EXPECT_EQ(coll::cheapest(Coll::gatherv, m, 4, 0), idx(RootedAlgo::linear));
  EXPECT_EQ(coll::cheapest(Coll::gatherv, m, 6, 0), idx(RootedAlgo::linear));
  EXPECT_EQ(coll::cheapest(Coll::gatherv, m, 8, 0), idx(RootedAlgo::binomial));
  EXPECT_EQ(coll::cheapest(Coll::gatherv, m, 64, 0), idx(RootedAlgo::binomial));
  // alltoallv: pairwise's worst case (small blocks) against Bruck's (large blocks).
  EXPECT_EQ(coll::cheapest(Coll::alltoallv, m, 8, 0), idx(coll::AlltoallAlgo::pairwise));
  EXPECT_EQ(coll::cheapest(Coll::alltoallv, m, 1024, 0), idx(coll::AlltoallAlgo::bruck));
  for (Coll k :
       {Coll::gather, Coll::scatter, Coll::alltoall, Coll::allgatherv, Coll::reduce_scatter})
    EXPECT_TRUE(coll::size_known_everywhere(k));
}

TEST(CollSelect, EveryFormula_FiniteAndGrowingWithSize) {
  const CostModel m = coll::cost_model(params(20e9, 0.5), 1);
  for (std::size_t i = 0; i < coll::kCollCount; ++i) {
    const auto k = static_cast<Coll>(i);
    const auto names = coll::algo_names(k);
    ASSERT_FALSE(names.empty());
    for (std::size_t a = 0; a < names.size(); ++a) {
      if (names[a].starts_with("shm")) {  // the node-shared paths (shm, shm_direct)
        EXPECT_TRUE(std::isnan(coll::predicted_time(k, static_cast<int>(a), m, 4, 100)));
        continue;
      }
      EXPECT_NE(static_cast<int>(a), coll::node_shared_algo(k)) << names[a];
      for (int p : {1, 2, 3, 4, 7, 8, 64, 1000}) {
        double last = -1;
        for (double n : {0.0, 1.0, 1e3, 1e6, 1e9}) {
          const double t = coll::predicted_time(k, static_cast<int>(a), m, p, n);
          EXPECT_TRUE(std::isfinite(t) && t >= 0) << coll::coll_name(k) << " " << names[a];
          EXPECT_GE(t, last) << coll::coll_name(k) << " " << names[a] << " p=" << p << " n=" << n;
          last = t;
        }
      }
    }
  }
}

TEST(CollSelect, NodeShared_TakenWhenAvailableUnlessAnotherIsForced) {
  const CostModel m = coll::cost_model(params(20e9, 0.5), 1);
  EXPECT_EQ(coll::cheapest(Coll::barrier, m, 4, 0, true), idx(coll::BarrierAlgo::shm));
  EXPECT_EQ(coll::cheapest(Coll::barrier, m, 4, 0, false), idx(coll::BarrierAlgo::dissemination));
  EXPECT_EQ(coll::cheapest(Coll::allreduce, m, 4, 8, true), idx(AllreduceAlgo::shm));
  EXPECT_EQ(coll::cheapest(Coll::allreduce, m, 4, 1 << 24, true), idx(AllreduceAlgo::shm));
  EXPECT_EQ(coll::cheapest(Coll::bcast, m, 4, 1 << 20, true), idx(BcastAlgo::shm));
  EXPECT_EQ(coll::cheapest(Coll::allgatherv, m, 4, 8, true), idx(coll::AllgatherAlgo::shm));
  EXPECT_EQ(coll::cheapest(Coll::reduce, m, 4, 8, true), idx(coll::ReduceAlgo::shm));
  EXPECT_EQ(coll::cheapest(Coll::scan, m, 4, 8, true), idx(coll::ScanAlgo::recursive_doubling));  // none
  // The direct alltoall is node-shared too; the cheapest of the formulas is the plain one.
  EXPECT_EQ(coll::cheapest(Coll::alltoall, m, 4, 1 << 20, true), idx(coll::AlltoallAlgo::shm));
  // Whether a call may use the node-shared path, so that its segment is created: not when an
  // algorithm with a formula is forced. (The forced algorithms are the context's, read when it
  // is created: one thread-rank under each setting.)
  auto may_use = [](Coll k) {
    bool may = false;
    rmp::testing::run_thread_ranks(
        1, [&](rmp::testing::ThreadRank& t) { may = coll::may_use_node_shared(k, t.world); });
    return may;
  };
  EXPECT_TRUE(may_use(Coll::allreduce));
  EXPECT_TRUE(may_use(Coll::bcast));
  EXPECT_TRUE(may_use(Coll::reduce));
  EXPECT_FALSE(may_use(Coll::scan));
  {
    ScopedEnv force("RMP_ALLREDUCE_ALGO", "ring");
    EXPECT_FALSE(may_use(Coll::allreduce));  // its segment is not created
    EXPECT_TRUE(may_use(Coll::bcast));
  }
  {
    ScopedEnv force("RMP_ALLREDUCE_ALGO", "shm");
    EXPECT_TRUE(may_use(Coll::allreduce));
  }
  ScopedEnv direct("RMP_ALLTOALL_ALGO", "shm_direct");
  EXPECT_TRUE(may_use(Coll::alltoall));
}

// What the runtime's resolver makes of RMP_<COLL>_ALGO settings (rt::EnvSettings::coll_algo,
// which the collectives read through the context).
rmp::rt::ForcedAlgos forced_by(std::map<std::string, std::string, std::less<>> env) {
  rmp::rt::ParamsInput in;
  in.env = std::move(env);
  return rmp::rt::resolve_env_settings(in).coll_algo;
}

int forced(const rmp::rt::ForcedAlgos& a, Coll k) { return a[static_cast<std::size_t>(k)]; }

TEST(CollSelect, ForcedByEnvironment_EveryNameOfEveryCollective) {
  const auto none = forced_by({});
  for (std::size_t i = 0; i < coll::kCollCount; ++i) {
    const auto k = static_cast<Coll>(i);
    EXPECT_EQ(forced(none, k), -1) << coll::algo_env_name(k);
    const auto names = coll::algo_names(k);
    for (std::size_t a = 0; a < names.size(); ++a) {
      const auto set = forced_by({{coll::algo_env_name(k), std::string(names[a])}});
      EXPECT_EQ(forced(set, k), static_cast<int>(a)) << coll::algo_env_name(k) << "=" << names[a];
      for (std::size_t j = 0; j < coll::kCollCount; ++j) {  // the others unaffected
        const bool falls_back =
            k == Coll::reduce_scatter && j == static_cast<std::size_t>(Coll::reduce_scatter_block);
        if (j != i && !falls_back) {
          EXPECT_EQ(set[j], -1) << coll::algo_env_name(k) << " set, " << j;
        }
      }
    }
  }
  EXPECT_EQ(coll::algo_env_name(Coll::allreduce), "RMP_ALLREDUCE_ALGO");
  EXPECT_EQ(coll::algo_env_name(Coll::reduce_scatter_block), "RMP_REDUCE_SCATTER_BLOCK_ALGO");
  EXPECT_STREQ(coll::coll_name(Coll::reduce_scatter_block), "reduce_scatter_block");
}

TEST(CollSelect, ReduceScatterBlock_FallsBackToReduceScatterVariable) {
  const auto general = forced_by({{"RMP_REDUCE_SCATTER_ALGO", "ring"}});
  EXPECT_EQ(forced(general, Coll::reduce_scatter_block), idx(coll::ReduceScatterAlgo::ring));
  const auto both = forced_by({{"RMP_REDUCE_SCATTER_ALGO", "ring"},
                               {"RMP_REDUCE_SCATTER_BLOCK_ALGO", "recursive_halving"}});
  EXPECT_EQ(forced(both, Coll::reduce_scatter_block),
            idx(coll::ReduceScatterAlgo::recursive_halving));
  EXPECT_EQ(forced(both, Coll::reduce_scatter), idx(coll::ReduceScatterAlgo::ring));
}

// At start-up, with the other RMP_ settings (and by rlaunch before it starts a job), not at the
// first call of that collective.
TEST(CollSelect, UnknownName_InvalidArgumentListingTheValidNames) {
  try {
    forced_by({{"RMP_ALLREDUCE_ALGO", "butterfly"}});
    FAIL() << "no error for RMP_ALLREDUCE_ALGO=butterfly";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_STREQ(e.what(),
                 "RMP_ALLREDUCE_ALGO=butterfly: not an algorithm of allreduce (valid: "
                 "recursive_doubling, rabenseifner, ring, shm, shm_direct)");
  }
  EXPECT_THROW(forced_by({{"RMP_SCAN_ALGO", ""}}), Error);
  EXPECT_THROW(forced_by({{"RMP_BARRIER_ALGO", "SHM"}}), Error);
  // A context is not created with one.
  ScopedEnv force("RMP_BCAST_ALGO", "binomal");
  EXPECT_THROW(rmp::testing::run_thread_ranks(1, [](rmp::testing::ThreadRank&) {}), Error);
}

TEST(CollSelect, EveryAlgorithmVariable_IsAKnownRmpVariable) {
  // The parameter resolver rejects RMP_ names close to known ones: ours must be known.
  for (std::size_t i = 0; i < coll::kCollCount; ++i) {
    rmp::rt::ParamsInput in;
    in.limits = rmp::rt::declared_limits("");
    in.env[coll::algo_env_name(static_cast<Coll>(i))] = "ring";
    EXPECT_NO_THROW(rmp::rt::resolve_params(in)) << coll::algo_env_name(static_cast<Coll>(i));
  }
}
