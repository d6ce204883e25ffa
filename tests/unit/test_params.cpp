// The knob table (runtime/params.cpp): formulas against hand-computed values, precedence and
// sources, profiles and the CQ invariant, parsing errors, typo detection, per-transport rows.
#include <gtest/gtest.h>

#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>

#include "runtime/params.hpp"

namespace rmp::rt {
namespace {

using Vars = std::initializer_list<std::pair<const char*, const char*>>;

ParamsInput make_input(std::string transport = {}, Vars env = {}, Vars cli = {}) {
  ParamsInput in;
  in.transport = std::move(transport);
  in.limits = declared_limits(in.transport);
  for (const auto& [k, v] : env) in.env.insert_or_assign(k, v);
  for (const auto& [k, v] : cli) in.cli.insert_or_assign(k, v);
  return in;
}

std::size_t row_index(const ParamSet& set, std::string_view name) {
  for (std::size_t i = 0; i < set.rows.size(); ++i)
    if (set.rows[i].name == name) return i;
  ADD_FAILURE() << "no row " << name;
  return 0;
}
const ParamInfo& row(const ParamSet& set, std::string_view name) {
  return set.rows[row_index(set, name)];
}
const std::string& note(const ParamSet& set, std::string_view name) {
  return set.notes[row_index(set, name)];
}

// The message of the rmp::Error that resolve_params throws (or "" if it does not throw).
std::string resolve_error(const ParamsInput& in) {
  try {
    resolve_params(in);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    return e.what();
  }
  return "";
}

// Restores the process environment a test changed (the unit executable is shared).
class ScopedEnv {
public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_.c_str(), old_->c_str(), 1);
    else unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
  std::string name_;
  std::optional<std::string> old_;
};

// ---- Formulas, by hand --------------------------------------------------------------------------

TEST(ParamsFormula, PipelineDepth_FillsBandwidthDelayProduct) {
  // 12.5e9 B/s x 2e-6 s = 25000 B over 4096 - 64 = 4032 B per fragment: 6.2 -> 7
  EXPECT_EQ(pipeline_depth_formula(12.5e9, 2e-6, 4096, 64, 2), 7u);
  // exactly 5 fragments stays 5 (no floating-point bump to 6)
  EXPECT_EQ(pipeline_depth_formula(4032e6, 5e-6, 4096, 64, 1), 5u);
}

TEST(ParamsFormula, PipelineDepth_NeverBelowMinDepth) {
  // shm: 20e9 x 0.5e-6 = 10000 B, less than one 131008 B chunk -> 1, raised to min_depth 2
  EXPECT_EQ(pipeline_depth_formula(20e9, 0.5e-6, 131072, 64, 2), 2u);
  EXPECT_EQ(pipeline_depth_formula(20e9, 0.5e-6, 131072, 64, 1), 1u);
  EXPECT_EQ(pipeline_depth_formula(0, 0, 131072, 64, 2), 2u);
}

TEST(ParamsFormula, PipelineDepth_RejectsFragmentNotAboveHeader) {
  EXPECT_THROW(pipeline_depth_formula(12.5e9, 2e-6, 64, 64, 1), Error);
  EXPECT_THROW(pipeline_depth_formula(12.5e9, 2e-6, 32, 64, 1), Error);
}

TEST(ParamsFormula, QueueDepths_MatchHandComputedValues) {
  EXPECT_EQ(sq_depth_formula(16, 7, 1), 20u);  // 16 x 1.2 = 19.2 -> 20
  EXPECT_EQ(sq_depth_formula(10, 1, 1), 12u);  // 12 exactly, not 13 from binary 1.2
  EXPECT_EQ(sq_depth_formula(16, 7, 4), 28u);  // pipeline x lanes dominates
  EXPECT_EQ(rq_depth_formula(128), 192u);
  EXPECT_EQ(rq_depth_formula(1024), 1536u);
  EXPECT_EQ(rq_depth_formula(21), 32u);  // 31.5 -> 32
  EXPECT_EQ(srq_size_formula(30, 1, 1.4), 42u);
  EXPECT_EQ(srq_size_formula(1152, 4, 1.4), 6452u);      // 6451.2 -> 6452
  EXPECT_EQ(srq_size_formula(10, 1, 1.3), 13u);          // 13 exactly
  EXPECT_EQ(cq_depth_formula(1e6, 0.008, 20, 30), 50u);  // sq + rq dominates
  EXPECT_EQ(cq_depth_formula(1e6, 1.0, 5, 5), 1000u);    // completions during one max RTT
  EXPECT_EQ(cq_depth_formula(0, 0, 1, 1), 32u);          // floor
  EXPECT_DOUBLE_EQ(spin_us_formula(0.2), 1.0);
  EXPECT_DOUBLE_EQ(spin_us_formula(2.0), 4.0);
}

// eager_threshold = (link_rtt_us + rndv_setup_us) / 1e6 / (1/copy_bw + 1/link_bw - 1/get_bw):
// the size whose extra eager copy costs as much as rendezvous's extra handshake. Arguments:
// copy_bw, link_bw, get_bw, link_rtt_us, rndv_setup_us.
TEST(ParamsFormula, EagerThreshold_WhereHandshakeCostsAsMuchAsTheCopy) {
  // get_bw = link_bw: copy_bw x (rtt + setup).
  EXPECT_EQ(eager_threshold_formula(40e9, 20e9, 20e9, 0.5, 1.0), 60000u);      // shm declared
  EXPECT_EQ(eager_threshold_formula(10e9, 12.5e9, 12.5e9, 2.0, 1.0), 30000u);  // global defaults
  EXPECT_EQ(eager_threshold_formula(45e9, 17e9, 17e9, 0.12, 1.66), 80100u);    // shm, near cores
  // A get faster than the link (shm's single copy when the cores are far apart): eager's
  // transfer at link speed costs more than the get's, 1/40e9 + 1/5e9 - 1/10e9 = 1.25e-10 s/B.
  EXPECT_EQ(eager_threshold_formula(40e9, 5e9, 10e9, 0.4, 1.6), 16000u);
  // A get slower than the link is never chosen over the chunk copy: taken as link speed.
  EXPECT_EQ(eager_threshold_formula(10e9, 20e9, 5e9, 0.5, 0.5), 10000u);
  EXPECT_EQ(eager_threshold_formula(1e9, 1e9, 1e9, 0.0001, 0), 1u);  // 0.1 B rounds up
  EXPECT_EQ(eager_threshold_formula(10e9, 10e9, 10e9, 0, 0), 0u);
  EXPECT_EQ(eager_threshold_formula(1e13, 1e13, 1e13, 1000, 0), 10000000000u);  // unclamped here
}

// With chunked gets (get_fill_bytes, shm: 16 KiB) a get starts with the lesser of the single
// copy's set-up and the first piece through both copies, 2 × get_fill_bytes / link_bw: at
// 32.768 GB/s, 2 × 16 KiB take 1.0 us.
TEST(ParamsFormula, EagerThreshold_ChunkedGetStartsWithItsFirstPiece) {
  // (0.5 + min(3.0, 1.0)) us × copy_bw 100e9 (get_bw = link_bw).
  EXPECT_EQ(eager_threshold_formula(100e9, 32.768e9, 32.768e9, 0.5, 3.0, 16384), 150000u);
  // A set-up below the piece's time stays: (0.5 + 0.25) us × 100e9.
  EXPECT_EQ(eager_threshold_formula(100e9, 32.768e9, 32.768e9, 0.5, 0.25, 16384), 75000u);
  // Far apart (a get faster than the link): (0.5 + 2.0) us / (1/100e9 + 1/16.384e9 -
  // 1/32.768e9) = 61701.6.
  EXPECT_EQ(eager_threshold_formula(100e9, 16.384e9, 32.768e9, 0.5, 3.0, 16384), 61702u);
  // No chunked gets: the set-up alone, as before.
  EXPECT_EQ(eager_threshold_formula(100e9, 32.768e9, 32.768e9, 0.5, 3.0, 0), 350000u);
  // shm's declared figures keep their 60000 (set-up 1 us < 2 × 16 KiB at 20 GB/s, 1.64 us).
  EXPECT_EQ(eager_threshold_formula(40e9, 20e9, 20e9, 0.5, 1.0, 16384), 60000u);
  // Chunks only (no single copy): the piece's 1.6384 us even where the set-up is less,
  // (0.5 + 1.6384) us × 40e9.
  EXPECT_EQ(eager_threshold_formula(40e9, 20e9, 20e9, 0.5, 1.0, 16384, true), 85536u);
  EXPECT_EQ(eager_threshold_formula(100e9, 32.768e9, 32.768e9, 0.5, 0.25, 16384, true), 150000u);
}

// ---- Defaults and formulas through resolve_params -----------------------------------------------

TEST(ParamsResolve, GlobalDefaults_DeriveQueuesFromFormulas) {
  const ParamSet set = resolve_params(make_input());
  const Params& p = set.values;
  EXPECT_EQ(set.rows.size(), knob_names().size());
  EXPECT_EQ(set.notes.size(), set.rows.size());
  EXPECT_EQ(p.pipeline_depth, 2u);  // 25000 B < one 131008 B fragment; min_depth 2
  EXPECT_EQ(p.sq_depth, 20u);
  EXPECT_EQ(p.rq_depth, 30u);
  EXPECT_EQ(p.srq_size, 42u);
  EXPECT_EQ(p.cq_depth, 50u);
  EXPECT_EQ(p.rndv_read_contexts, 2u);
  EXPECT_EQ(p.inline_threshold, 44u);
  EXPECT_DOUBLE_EQ(p.spin_us, 4.0);
  EXPECT_DOUBLE_EQ(p.max_rtt_ms, 0.008);
  EXPECT_EQ(p.wait_mode, WaitMode::poll);
  EXPECT_EQ(p.eager_threshold, 30000u);  // copy_bw 10e9 B/s x (2 + 1) us (get_bw = link_bw)
  EXPECT_EQ(p.fragment_size, 131072u);
  EXPECT_EQ(p.lanes, 1u);
  EXPECT_TRUE(p.srq);
  EXPECT_FALSE(p.connect_eager);
  EXPECT_DOUBLE_EQ(p.link_bw, 12.5e9);
  EXPECT_DOUBLE_EQ(p.copy_bw, 10e9);
  EXPECT_EQ(row(set, "sq_depth").source, "formula");
  EXPECT_EQ(row(set, "inline_threshold").source, "formula");
  EXPECT_EQ(row(set, "eager_threshold").source, "formula");
  EXPECT_EQ(row(set, "link_bw").value, "12500000000");
  EXPECT_EQ(row(set, "link_bw").unit, "bytes/s");
  EXPECT_EQ(note(set, "link_bw"), "declared, not calibrated");
  for (const ParamInfo& r : set.rows) EXPECT_NE(r.value, "n/a") << r.name;  // global view
}

TEST(ParamsResolve, Shm_UsesDeclaredShmLinkFigures) {
  const ParamSet set = resolve_params(make_input("shm"));
  EXPECT_DOUBLE_EQ(set.values.link_bw, 20e9);
  EXPECT_DOUBLE_EQ(set.values.link_rtt_us, 0.5);
  EXPECT_DOUBLE_EQ(set.values.spin_us, 1.0);  // max(1, 2 x 0.5)
  EXPECT_EQ(row(set, "link_rtt_us").value, "0.5");
  EXPECT_EQ(row(set, "link_bw").source, "default");
  EXPECT_DOUBLE_EQ(set.values.rndv_setup_us, 1.0);
  EXPECT_DOUBLE_EQ(set.values.copy_bw, 40e9);
  EXPECT_DOUBLE_EQ(set.values.get_bw, 20e9);  // link_bw
  EXPECT_EQ(row(set, "get_bw").source, "formula");
  EXPECT_EQ(set.values.eager_threshold, 60000u);  // copy_bw 40e9 x (0.5 + 1.0) us
}

TEST(ParamsResolve, PipelineDepth_FromLinkFiguresAndFragment) {
  const ParamSet set = resolve_params(make_input("verbs", {{"RMP_FRAGMENT_SIZE", "4096"}}));
  EXPECT_EQ(set.values.pipeline_depth, 7u);
  EXPECT_EQ(row(set, "pipeline_depth").source, "formula");
  EXPECT_EQ(set.values.rndv_read_contexts, 7u);
  EXPECT_EQ(set.values.sq_depth, 20u);  // max(19.2 -> 20, 7 x 1)
}

TEST(ParamsResolve, FormulaResult_ClampedToRangeWithNote) {
  // 1e13 x 1e-3 s / 64 B per fragment is far beyond 64
  const ParamSet set = resolve_params(make_input(
      "verbs",
      {{"RMP_FRAGMENT_SIZE", "128"}, {"RMP_LINK_BW", "1e13"}, {"RMP_LINK_RTT_US", "1000"}}));
  EXPECT_EQ(set.values.pipeline_depth, 64u);
  EXPECT_EQ(row(set, "pipeline_depth").source, "formula");
  EXPECT_EQ(note(set, "pipeline_depth").rfind("clamped from ", 0), 0u)
      << note(set, "pipeline_depth");
}

// ---- Profiles and the CQ invariant --------------------------------------------------------------

TEST(ParamsProfile, Latency_CqRaisedTo320ByInvariant) {
  const ParamSet set = resolve_params(make_input("verbs", {{"RMP_PROFILE", "latency"}}));
  EXPECT_EQ(set.profile, "latency");
  EXPECT_EQ(set.values.lanes, 1u);
  EXPECT_EQ(set.values.sq_depth, 128u);
  EXPECT_EQ(set.values.rq_depth, 192u);
  EXPECT_EQ(set.values.cq_depth, 320u);
  EXPECT_EQ(row(set, "cq_depth").source, "formula");
  EXPECT_NE(note(set, "cq_depth").find("raised from 256"), std::string::npos);
  EXPECT_EQ(set.values.inline_threshold, 256u);
  EXPECT_DOUBLE_EQ(set.values.spin_us, 1.0);
  EXPECT_EQ(set.values.wait_mode, WaitMode::poll);
  EXPECT_EQ(row(set, "wait_mode").source, "profile");
  EXPECT_EQ(row(set, "sq_depth").source, "profile");
  EXPECT_EQ(row(set, "rq_depth").source, "formula");
}

TEST(ParamsProfile, Latency_YieldsWhenOversubscribed) {
  ParamsInput in = make_input("shm", {{"RMP_PROFILE", "latency"}});
  in.oversubscribed = true;
  const ParamSet set = resolve_params(in);
  EXPECT_EQ(set.values.wait_mode, WaitMode::yield);
  EXPECT_EQ(row(set, "wait_mode").value, "yield");
  EXPECT_EQ(row(set, "wait_mode").source, "formula");
  EXPECT_NE(note(set, "wait_mode").find("raised from poll"), std::string::npos);
}

TEST(ParamsProfile, NoProfile_WaitModeYieldsOnlyWhenOversubscribed) {
  ParamsInput in = make_input("shm");
  EXPECT_EQ(resolve_params(in).values.wait_mode, WaitMode::poll);
  in.oversubscribed = true;
  EXPECT_EQ(resolve_params(in).values.wait_mode, WaitMode::yield);
  // an explicit poll is honoured (with a note), not an error: it is a performance choice
  in.env["RMP_WAIT_MODE"] = "poll";
  const ParamSet set = resolve_params(in);
  EXPECT_EQ(set.values.wait_mode, WaitMode::poll);
  EXPECT_EQ(row(set, "wait_mode").source, "env");
  EXPECT_FALSE(note(set, "wait_mode").empty());
}

TEST(ParamsProfile, Storage_CqRaisedTo2560ByInvariant) {
  const ParamSet set = resolve_params(make_input("verbs", {{"RMP_PROFILE", "storage"}}));
  EXPECT_EQ(set.values.lanes, 8u);
  EXPECT_EQ(set.values.sq_depth, 1024u);
  EXPECT_EQ(set.values.rq_depth, 1536u);
  EXPECT_EQ(set.values.cq_depth, 2560u);
  EXPECT_EQ(row(set, "cq_depth").source, "formula");
  EXPECT_NE(note(set, "cq_depth").find("raised from 2048"), std::string::npos);
  EXPECT_EQ(set.values.srq_size, 8192u);
  EXPECT_EQ(row(set, "srq_size").source, "profile");
  EXPECT_EQ(set.values.inline_threshold, 0u);
  EXPECT_EQ(set.values.rndv_read_contexts, 16u);
  EXPECT_EQ(set.values.wait_mode, WaitMode::yield);
  EXPECT_EQ(row(set, "spin_us").source, "formula");
}

TEST(ParamsProfile, Training_LeavesQueueSizesToFormulas) {
  const ParamSet set = resolve_params(make_input("verbs", {{"RMP_PROFILE", "training"}}));
  EXPECT_EQ(set.values.lanes, 4u);
  EXPECT_EQ(set.values.sq_depth, 768u);
  EXPECT_EQ(set.values.rq_depth, 1152u);
  EXPECT_EQ(set.values.srq_size, 6452u);  // 1152 x 4 x 1.4 = 6451.2
  EXPECT_EQ(set.values.cq_depth, 1920u);  // sq + rq
  EXPECT_EQ(row(set, "cq_depth").source, "formula");
  EXPECT_TRUE(note(set, "cq_depth").empty());
  EXPECT_EQ(set.values.rndv_read_contexts, 32u);
  EXPECT_EQ(set.values.inline_threshold, 44u);
  EXPECT_EQ(row(set, "inline_threshold").source, "formula");
  EXPECT_EQ(set.values.wait_mode, WaitMode::yield);
}

TEST(ParamsProfile, UnknownProfile_ErrorListsValidOnes) {
  const std::string msg = resolve_error(make_input("", {{"RMP_PROFILE", "fast"}}));
  EXPECT_NE(msg.find("RMP_PROFILE=fast"), std::string::npos) << msg;
  EXPECT_NE(msg.find("latency|storage|training"), std::string::npos) << msg;
  const std::string empty = resolve_error(make_input("", {{"RMP_PROFILE", ""}}));
  EXPECT_NE(empty.find("RMP_PROFILE=: empty value"), std::string::npos) << empty;
  EXPECT_NE(empty.find("latency|storage|training"), std::string::npos) << empty;
}

TEST(ParamsInvariant, ExplicitCqBelowBound_ErrorNamesBound) {
  std::string msg = resolve_error(make_input("verbs", {{"RMP_CQ_DEPTH", "40"}}));
  EXPECT_NE(msg.find("RMP_CQ_DEPTH=40"), std::string::npos) << msg;
  EXPECT_NE(msg.find("sq_depth + rq_depth = 50"), std::string::npos) << msg;

  msg = resolve_error(make_input("verbs", {{"RMP_PROFILE", "latency"}}, {{"cq_depth", "256"}}));
  EXPECT_NE(msg.find("--param cq_depth=256"), std::string::npos) << msg;
  EXPECT_NE(msg.find("= 320"), std::string::npos) << msg;
}

TEST(ParamsInvariant, ExplicitCqAtBound_Accepted) {
  const ParamSet set =
      resolve_params(make_input("verbs", {{"RMP_PROFILE", "latency"}, {"RMP_CQ_DEPTH", "320"}}));
  EXPECT_EQ(set.values.cq_depth, 320u);
  EXPECT_EQ(row(set, "cq_depth").source, "env");
  EXPECT_TRUE(note(set, "cq_depth").empty());
}

// ---- Precedence and sources ---------------------------------------------------------------------

TEST(ParamsPrecedence, CliBeatsEnvBeatsProfileBeatsFormulaBeatsDefault) {
  ParamsInput in =
      make_input("verbs", {{"RMP_PROFILE", "storage"}, {"RMP_LANES", "2"}}, {{"lanes", "3"}});
  ParamSet set = resolve_params(in);
  EXPECT_EQ(set.values.lanes, 3u);
  EXPECT_EQ(row(set, "lanes").source, "cli");

  in.cli.clear();
  set = resolve_params(in);
  EXPECT_EQ(set.values.lanes, 2u);
  EXPECT_EQ(row(set, "lanes").source, "env");

  in.env.erase("RMP_LANES");
  set = resolve_params(in);
  EXPECT_EQ(set.values.lanes, 8u);
  EXPECT_EQ(row(set, "lanes").source, "profile");

  // rq_depth: no profile sets it, so the formula; explicit values still win over it
  EXPECT_EQ(row(set, "rq_depth").source, "formula");
  in.env["RMP_RQ_DEPTH"] = "4000";
  set = resolve_params(in);
  EXPECT_EQ(set.values.rq_depth, 4000u);
  EXPECT_EQ(row(set, "rq_depth").source, "env");

  in.env.erase("RMP_PROFILE");
  set = resolve_params(in);
  EXPECT_EQ(set.values.lanes, 1u);
  EXPECT_EQ(row(set, "lanes").source, "default");
}

TEST(ParamsPrecedence, ExplicitInputOfAFormulaFeedsIt) {
  const ParamSet set = resolve_params(make_input("verbs", {{"RMP_SQ_DEPTH", "100"}}));
  EXPECT_EQ(set.values.sq_depth, 100u);
  EXPECT_EQ(set.values.rq_depth, 150u);
  EXPECT_EQ(row(set, "rq_depth").source, "formula");
}

TEST(ParamsPrecedence, CalibratedLinkFigures_SourceCalibratedAndDerivedStaysFormula) {
  ParamsInput in = make_input("verbs", {{"RMP_FRAGMENT_SIZE", "4096"}});
  in.calibrated = LinkFigures{.bw_Bps = 40e9, .rtt_us = 1.0, .copy_bw_Bps = 0};
  ParamSet set = resolve_params(in);
  EXPECT_DOUBLE_EQ(set.values.link_bw, 40e9);
  EXPECT_EQ(row(set, "link_bw").source, "calibrated");
  EXPECT_EQ(row(set, "link_rtt_us").source, "calibrated");
  EXPECT_EQ(row(set, "copy_bw").source, "default");  // 0 = not measured
  EXPECT_EQ(set.values.pipeline_depth, 10u);         // 40000 / 4032 = 9.9
  EXPECT_EQ(row(set, "pipeline_depth").source, "formula");
  EXPECT_DOUBLE_EQ(set.values.spin_us, 2.0);

  // env outranks calibration; a profile does not touch link figures
  in.env["RMP_LINK_BW"] = "1e9";
  in.env["RMP_PROFILE"] = "latency";
  set = resolve_params(in);
  EXPECT_DOUBLE_EQ(set.values.link_bw, 1e9);
  EXPECT_EQ(row(set, "link_bw").source, "env");
  EXPECT_EQ(row(set, "link_rtt_us").source, "calibrated");
}

TEST(ParamsPrecedence, EagerThreshold_FromCalibratedFigures_ClampedExplicitWins) {
  ParamsInput in = make_input("shm");
  in.calibrated = LinkFigures{.bw_Bps = 30e9, .rtt_us = 0.4, .copy_bw_Bps = 25e9,
                              .rndv_setup_us = 1.2};
  ParamSet set = resolve_params(in);
  // copy_bw 25e9 x (0.4 + min(1.2, 2 x 16 KiB / 30e9 = 1.0923)) us (get_bw = link_bw; shm's
  // chunked gets start with their first piece).
  EXPECT_EQ(set.values.eager_threshold, 37307u);
  EXPECT_EQ(row(set, "eager_threshold").source, "formula");
  EXPECT_EQ(row(set, "rndv_setup_us").source, "calibrated");
  EXPECT_EQ(row(set, "copy_bw").source, "calibrated");
  EXPECT_EQ(row(set, "get_bw").source, "formula");  // not measured: link_bw

  // A measured get faster than the link: 1.4923e-6 / (1/25e9 + 1/30e9 - 1/60e9).
  in.calibrated->get_bw_Bps = 60e9;
  set = resolve_params(in);
  EXPECT_EQ(row(set, "get_bw").source, "calibrated");
  EXPECT_EQ(set.values.eager_threshold, 26335u);

  // A slow link pushes the formula past the knob's range: clamped to 1 MiB, with a note.
  in.env["RMP_LINK_RTT_US"] = "1000";
  set = resolve_params(in);
  EXPECT_EQ(set.values.eager_threshold, 1048576u);
  EXPECT_EQ(note(set, "eager_threshold").rfind("clamped from ", 0), 0u);

  // An explicit threshold wins over the formula; explicit link figures win over calibration.
  in.env["RMP_EAGER_THRESHOLD"] = "8192";
  in.env["RMP_COPY_BW"] = "1e10";
  set = resolve_params(in);
  EXPECT_EQ(set.values.eager_threshold, 8192u);
  EXPECT_EQ(row(set, "eager_threshold").source, "env");
  EXPECT_DOUBLE_EQ(set.values.copy_bw, 1e10);
  EXPECT_EQ(row(set, "copy_bw").source, "env");
}

TEST(ParamsResolve, NotCalibrated_NoteSaysWhy) {
  ParamsInput in = make_input("shm");
  in.not_calibrated_reason = "RMP_CALIBRATE=0";
  const ParamSet set = resolve_params(in);
  for (const char* n : {"link_bw", "link_rtt_us", "copy_bw", "rndv_setup_us"})
    EXPECT_EQ(note(set, n), "declared, not calibrated (RMP_CALIBRATE=0)") << n;
}

TEST(ParamsResolve, Tune_StaticByDefaultAdaptiveByEnvOrCli) {
  EXPECT_FALSE(resolve_params(make_input("shm")).values.tune_adaptive);
  EXPECT_EQ(row(resolve_params(make_input("shm")), "tune").value, "static");
  EXPECT_TRUE(resolve_params(make_input("shm", {{"RMP_TUNE", "adaptive"}})).values.tune_adaptive);
  EXPECT_TRUE(resolve_params(make_input("shm", {}, {{"tune", "adaptive"}})).values.tune_adaptive);
  EXPECT_EQ(resolve_error(make_input("shm", {{"RMP_TUNE", "fast"}})),
            "RMP_TUNE=fast: unknown value (allowed static|adaptive)");
  EXPECT_EQ(row(resolve_params(make_input("tcp")), "tune").value, "n/a");
}

// ---- Parsing ------------------------------------------------------------------------------------

TEST(ParamsParse, NotANumber_MessageNamesVariableValueAndRange) {
  EXPECT_EQ(resolve_error(make_input("", {{"RMP_FRAGMENT_SIZE", "abc"}})),
            "RMP_FRAGMENT_SIZE=abc: not a number (allowed 128..67108864 bytes)");
  EXPECT_EQ(resolve_error(make_input("", {}, {{"fragment_size", "abc"}})),
            "--param fragment_size=abc: not a number (allowed 128..67108864 bytes)");
}

TEST(ParamsParse, RejectsNegativeFractionalGarbageOverflowAndOutOfRange) {
  auto error_for = [](const char* var, const char* value) {
    return resolve_error(make_input("", {{var, value}}));
  };
  EXPECT_NE(error_for("RMP_LANES", "-1").find("RMP_LANES=-1: negative (allowed 1..16)"),
            std::string::npos);
  EXPECT_NE(error_for("RMP_EAGER_THRESHOLD", "1.5").find("not an integer"), std::string::npos);
  EXPECT_NE(error_for("RMP_EAGER_THRESHOLD", "16x").find("unexpected 'x'"), std::string::npos);
  EXPECT_NE(error_for("RMP_EAGER_THRESHOLD", "").find("empty value"), std::string::npos);
  EXPECT_NE(error_for("RMP_SQ_DEPTH", "99999999999999999999999").find("too large"),
            std::string::npos);
  EXPECT_NE(error_for("RMP_SQ_DEPTH", "18446744073709551615K").find("too large"),
            std::string::npos);
  EXPECT_NE(error_for("RMP_FRAGMENT_SIZE", "70M").find("out of range (allowed 128..67108864"),
            std::string::npos);
  EXPECT_NE(error_for("RMP_LANES", "17").find("out of range"), std::string::npos);
  EXPECT_NE(error_for("RMP_INLINE_THRESHOLD", "1025").find("allowed 0..1024 bytes"),
            std::string::npos);
  EXPECT_NE(error_for("RMP_LINK_BW", "fast").find("RMP_LINK_BW=fast: not a number"),
            std::string::npos);
  EXPECT_NE(error_for("RMP_LINK_BW", "inf").find("not a number"), std::string::npos);
  EXPECT_NE(error_for("RMP_SRQ_SAFETY", "2").find("allowed 1.3..1.5"), std::string::npos);
  EXPECT_NE(error_for("RMP_WAIT_MODE", "spin").find("allowed poll|yield|block"), std::string::npos);
  EXPECT_NE(error_for("RMP_SRQ", "yes").find("allowed off|on"), std::string::npos);
  EXPECT_NE(error_for("RMP_CONNECT", "Eager").find("allowed lazy|eager"), std::string::npos);
}

TEST(ParamsParse, FragmentMinimumFollowsHeaderOverhead) {
  const std::string msg = resolve_error(
      make_input("", {{"RMP_HEADER_OVERHEAD", "1024"}, {"RMP_FRAGMENT_SIZE", "1050"}}));
  EXPECT_NE(msg.find("allowed 1088..67108864 bytes"), std::string::npos) << msg;
}

TEST(ParamsParse, MalformedEnvIsAnErrorEvenWhenCliOverridesIt) {
  EXPECT_FALSE(resolve_error(make_input("", {{"RMP_LANES", "many"}}, {{"lanes", "2"}})).empty());
}

TEST(ParamsParse, SizeSuffixesArePowersOfTwo) {
  ParamSet set =
      resolve_params(make_input("", {{"RMP_FRAGMENT_SIZE", "64K"}, {"RMP_EAGER_THRESHOLD", "1M"}}));
  EXPECT_EQ(set.values.fragment_size, 65536u);
  EXPECT_EQ(set.values.eager_threshold, 1048576u);
  set = resolve_params(
      make_input("", {{"RMP_FRAGMENT_SIZE", "2MiB"}, {"RMP_EAGER_THRESHOLD", "8k"}}));
  EXPECT_EQ(set.values.fragment_size, 2097152u);
  EXPECT_EQ(set.values.eager_threshold, 8192u);
  EXPECT_EQ(row(set, "fragment_size").value, "2097152");
}

TEST(ParamsParse, ChoiceAndIntegerKnobsReachParams) {
  const ParamSet set = resolve_params(make_input("verbs", {{"RMP_CONNECT", "eager"},
                                                           {"RMP_SRQ", "off"},
                                                           {"RMP_WAIT_MODE", "block"},
                                                           {"RMP_TRAFFIC_CLASS", "46"},
                                                           {"RMP_SRQ_SAFETY", "1.5"}}));
  EXPECT_TRUE(set.values.connect_eager);
  EXPECT_FALSE(set.values.srq);
  EXPECT_EQ(set.values.wait_mode, WaitMode::block);
  EXPECT_EQ(set.values.traffic_class, 46);
  EXPECT_DOUBLE_EQ(set.values.srq_safety, 1.5);
  EXPECT_EQ(row(set, "srq").value, "off");
  EXPECT_EQ(row(set, "connect").value, "eager");
}

// ---- Variable names -----------------------------------------------------------------------------

TEST(ParamsNames, TypoInVariable_ErrorSuggestsKnownName) {
  EXPECT_EQ(resolve_error(make_input("", {{"RMP_EAGER_TRESHOLD", "8192"}})),
            "unknown variable RMP_EAGER_TRESHOLD (did you mean RMP_EAGER_THRESHOLD?)");
  EXPECT_NE(resolve_error(make_input("", {{"RMP_LANSE", "2"}})).find("RMP_LANES"),
            std::string::npos);
  EXPECT_NE(resolve_error(make_input("", {{"RMP_lanes", "2"}})).find("RMP_LANES"),
            std::string::npos);
  EXPECT_NE(
      resolve_error(make_input("", {{"RMP_ALLREDUC_ALGO", "ring"}})).find("RMP_ALLREDUCE_ALGO"),
      std::string::npos);
}

TEST(ParamsNames, KnownAndDistantVariablesAreAccepted) {
  EXPECT_NO_THROW(resolve_params(make_input("", {{"RMP_ALLREDUCE_ALGO", "ring"},
                                                 {"RMP_REDUCE_SCATTER_BLOCK_ALGO", "x"},
                                                 {"RMP_RANK", "0"},
                                                 {"RMP_JOB_ID", "7"},
                                                 {"RMP_SOMETHING_ELSE_ENTIRELY", "1"},
                                                 {"RMP_TUNE", "adaptive"}})));
}

TEST(ParamsNames, UnknownCliParameter_ErrorSuggests) {
  const std::string msg = resolve_error(make_input("", {}, {{"lanse", "2"}}));
  EXPECT_NE(msg.find("--param lanse=2: unknown parameter (did you mean lanes?)"), std::string::npos)
      << msg;
  EXPECT_FALSE(resolve_error(make_input("", {}, {{"warp_factor", "9"}})).empty());
}

TEST(ParamsNames, KnobNamesAreTheContractInTableOrder) {
  const std::vector<std::string_view> expected{"lanes",
                                               "sq_depth",
                                               "rq_depth",
                                               "cq_depth",
                                               "srq",
                                               "srq_size",
                                               "inline_threshold",
                                               "eager_threshold",
                                               "fragment_size",
                                               "header_overhead",
                                               "pipeline_depth",
                                               "signal_interval",
                                               "signal_size",
                                               "rndv_read_contexts",
                                               "spin_us",
                                               "wait_mode",
                                               "connect",
                                               "traffic_class",
                                               "link_bw",
                                               "link_rtt_us",
                                               "expected_concurrency",
                                               "post_recv_per_s",
                                               "max_rtt_ms",
                                               "srq_safety",
                                               "copy_bw",
                                               "get_bw",
                                               "rndv_setup_us",
                                               "tune",
                                               "allreduce_compress"};
  EXPECT_EQ(knob_names(), expected);
  const ParamSet set = resolve_params(make_input());
  for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(set.rows[i].name, expected[i]);
}

TEST(ParamsNames, UnknownTransport_Error) {
  EXPECT_NE(resolve_error(make_input("ib")).find("self|shm|tcp|verbs"), std::string::npos);
}

// ---- Per-transport rows and limits --------------------------------------------------------------

TEST(ParamsTransport, ShmRows_NotApplicableKnobsSayNa) {
  const ParamSet set = resolve_params(make_input("shm", {{"RMP_PROFILE", "latency"}}));
  EXPECT_EQ(row(set, "lanes").value, "n/a");
  EXPECT_EQ(row(set, "cq_depth").value, "n/a");
  EXPECT_EQ(row(set, "srq_size").value, "n/a");
  EXPECT_TRUE(note(set, "cq_depth").empty());  // the raise is verbs business
  EXPECT_EQ(row(set, "sq_depth").value, "128");
  EXPECT_EQ(row(set, "fragment_size").value, "524288");  // shm's own default chunk
  EXPECT_EQ(row(set, "inline_threshold").value, "256");
  EXPECT_EQ(set.values.lanes, 1u);  // Params still carries a value
  EXPECT_EQ(set.values.cq_depth, 320u);
}

TEST(ParamsTransport, FragmentDefaultIsPerTransport_ExplicitValueWins) {
  EXPECT_EQ(resolve_params(make_input("shm", {})).values.fragment_size, 524288u);
  EXPECT_EQ(resolve_params(make_input("", {})).values.fragment_size, 131072u);
  EXPECT_EQ(resolve_params(make_input("tcp", {})).values.fragment_size, 131072u);
  const ParamSet set = resolve_params(make_input("shm", {{"RMP_FRAGMENT_SIZE", "65536"}}));
  EXPECT_EQ(set.values.fragment_size, 65536u);
  EXPECT_EQ(row(set, "fragment_size").source, "env");
}

TEST(ParamsTransport, LanesDoNotMultiplyQueuesWhereNotApplicable) {
  const Vars env{{"RMP_LANES", "8"}, {"RMP_PIPELINE_DEPTH", "10"}};
  EXPECT_EQ(resolve_params(make_input("shm", env)).values.sq_depth, 20u);    // max(20, 10 x 1)
  EXPECT_EQ(resolve_params(make_input("verbs", env)).values.sq_depth, 80u);  // max(20, 10 x 8)
}

TEST(ParamsTransport, InlineAboveDeviceLimit_ClampedWithNote) {
  ParamsInput in = make_input("verbs", {{"RMP_INLINE_THRESHOLD", "1024"}});
  in.limits.max_inline = 220;
  ParamSet set = resolve_params(in);
  EXPECT_EQ(set.values.inline_threshold, 220u);
  EXPECT_EQ(row(set, "inline_threshold").source, "env");
  EXPECT_EQ(note(set, "inline_threshold"), "clamped from 1024");

  in.env = {{"RMP_PROFILE", "latency"}};
  set = resolve_params(in);
  EXPECT_EQ(set.values.inline_threshold, 220u);
  EXPECT_EQ(note(set, "inline_threshold"), "clamped from 256");
}

TEST(ParamsTransport, ReadContextsClampedToMaxRdAtom) {
  ParamsInput in = make_input("verbs", {{"RMP_PIPELINE_DEPTH", "32"}});
  in.limits.max_rd_atom = 16;
  const ParamSet set = resolve_params(in);
  EXPECT_EQ(set.values.pipeline_depth, 32u);
  EXPECT_EQ(set.values.rndv_read_contexts, 16u);
  EXPECT_EQ(row(set, "rndv_read_contexts").source, "formula");
  EXPECT_EQ(note(set, "rndv_read_contexts"), "clamped from 32");
}

TEST(ParamsTransport, InlineFormulaIsSingleUnitInline) {
  ParamsInput in = make_input("verbs");
  in.limits.single_unit_inline = 188;
  EXPECT_EQ(resolve_params(in).values.inline_threshold, 188u);
}

// ---- Environment, output ------------------------------------------------------------------------

TEST(ParamsEnvironment, CliParamsVariableBecomesCliLayer) {
  ScopedEnv cli("RMP_CLI_PARAMS", "lanes=4;eager_threshold=8K;");
  ScopedEnv lanes("RMP_LANES", "2");
  const ParamsInput in = params_input_from_environment();
  EXPECT_EQ(in.cli.at("lanes"), "4");
  EXPECT_EQ(in.env.at("RMP_LANES"), "2");
  const ParamSet set = resolve_params(in);
  EXPECT_EQ(set.values.lanes, 4u);
  EXPECT_EQ(row(set, "lanes").source, "cli");
  EXPECT_EQ(set.values.eager_threshold, 8192u);
}

TEST(ParamsEnvironment, MalformedCliParams_Error) {
  ScopedEnv cli("RMP_CLI_PARAMS", "lanes=4;eager_threshold");
  EXPECT_THROW(params_input_from_environment(), Error);
}

TEST(ParamsEnvironment, EnvSettings_DefaultsAndValues) {
  EnvSettings s = resolve_env_settings(make_input());
  EXPECT_TRUE(s.shm_cma);
  EXPECT_TRUE(s.shm_hugepages);
  EXPECT_EQ(s.shm_copy, ShmCopy::auto_);
  EXPECT_TRUE(s.calibrate);
  EXPECT_EQ(s.log_level, LogLevel::warn);
  EXPECT_FALSE(s.progress_thread);
  EXPECT_FALSE(s.print_params);
  EXPECT_TRUE(s.transports.empty());

  s = resolve_env_settings(make_input("", {{"RMP_SHM_CMA", "0"},
                                           {"RMP_SHM_HUGEPAGES", "0"},
                                           {"RMP_SHM_COPY", "chunks"},
                                           {"RMP_CALIBRATE", "0"},
                                           {"RMP_LOG", "debug"},
                                           {"RMP_PROGRESS_THREAD", "1"},
                                           {"RMP_PRINT_PARAMS", "1"},
                                           {"RMP_TRANSPORTS", "shm,tcp"},
                                           {"RMP_STATS", "json:/tmp/s-%r.json"}}));
  EXPECT_FALSE(s.shm_cma);
  EXPECT_FALSE(s.shm_hugepages);
  EXPECT_EQ(s.shm_copy, ShmCopy::chunks);
  EXPECT_FALSE(s.calibrate);
  EXPECT_EQ(s.log_level, LogLevel::debug);
  EXPECT_TRUE(s.progress_thread);
  EXPECT_TRUE(s.print_params);
  EXPECT_EQ(s.transports, (std::vector<std::string>{"shm", "tcp"}));
  EXPECT_EQ(s.stats, "json:/tmp/s-%r.json");
}

TEST(ParamsEnvironment, EnvSettings_MalformedValuesNameVariableAndChoices) {
  auto error_for = [](const char* var, const char* value) -> std::string {
    try {
      resolve_env_settings(make_input("", {{var, value}}));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_for("RMP_SHM_CMA", "2"), "RMP_SHM_CMA=2: unknown value (allowed 0|1)");
  EXPECT_EQ(error_for("RMP_SHM_HUGEPAGES", "yes"),
            "RMP_SHM_HUGEPAGES=yes: unknown value (allowed 0|1)");
  EXPECT_NE(error_for("RMP_SHM_HUGEPAGE", "1").find("did you mean RMP_SHM_HUGEPAGES"),
            std::string::npos);
  EXPECT_NE(error_for("RMP_SHM_COPY", "fast").find("auto|single|chunks|split"), std::string::npos);
  EXPECT_NE(error_for("RMP_LOG", "verbose").find("off|warn|info|debug"), std::string::npos);
  EXPECT_NE(error_for("RMP_TRANSPORTS", "shm,tpc").find("'tpc'"), std::string::npos);
  EXPECT_NE(error_for("RMP_STATS", "json:").find("RMP_STATS=json:"), std::string::npos);
  EXPECT_NE(error_for("RMP_CALIBRAT", "0").find("did you mean RMP_CALIBRATE"), std::string::npos);
  // Set but empty is refused as every other knob's empty value is (these three took it for
  // unset), and so is the empty name after a trailing comma.
  EXPECT_NE(error_for("RMP_TRANSPORTS", "").find("RMP_TRANSPORTS=: empty value"),
            std::string::npos);
  EXPECT_NE(error_for("RMP_TRANSPORTS", "shm,").find("unknown transport ''"), std::string::npos);
  EXPECT_NE(error_for("RMP_TRANSPORTS", ",shm").find("unknown transport ''"), std::string::npos);
  EXPECT_NE(error_for("RMP_TRANSPORTS", "shm,,tcp").find("unknown transport ''"),
            std::string::npos);
  EXPECT_NE(error_for("RMP_STATS", "").find("RMP_STATS=: unknown value"), std::string::npos);
  EXPECT_EQ(error_for("RMP_TRANSPORTS", "self,shm,tcp,verbs"), "");
}

TEST(ParamsFormat, TableAndJsonCarryEveryRowAndNotes) {
  const ParamSet set = resolve_params(make_input("verbs", {{"RMP_PROFILE", "latency"}}));
  const std::string table = format_params(set, false);
  EXPECT_EQ(table.rfind("name", 0), 0u);
  EXPECT_NE(table.find("source"), std::string::npos);
  EXPECT_NE(table.find("raised from 256"), std::string::npos);
  for (std::string_view name : knob_names()) EXPECT_NE(table.find(name), std::string::npos);

  const std::string json = format_params(set, true);
  EXPECT_EQ(json.front(), '[');
  EXPECT_EQ(json.substr(json.size() - 2), "]\n");
  EXPECT_NE(json.find(R"({"name": "cq_depth", "value": "320", "unit": "entries", "source": )"
                      R"("formula", "note": "raised from 256)"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find(R"({"name": "lanes", "value": "1", "unit": "", "source": "profile"})"),
            std::string::npos);
}

TEST(ParamsFormat, KnobReferenceCoversEveryKnob) {
  const std::string doc = format_knob_reference();
  for (std::string_view name : knob_names()) {
    std::string heading = "## `";
    heading.append(name).append("`");
    EXPECT_NE(doc.find(heading), std::string::npos) << name;
  }
}

TEST(ParamsFormat, SourceNames) {
  EXPECT_STREQ(source_name(Source::default_value), "default");
  EXPECT_STREQ(source_name(Source::profile), "profile");
  EXPECT_STREQ(source_name(Source::formula), "formula");
  EXPECT_STREQ(source_name(Source::calibrated), "calibrated");
  EXPECT_STREQ(source_name(Source::env), "env");
  EXPECT_STREQ(source_name(Source::cli), "cli");
}

}  // namespace
}  // namespace rmp::rt
