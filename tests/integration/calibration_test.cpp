// Calibration as a job sees it (DESIGN §5): every rank resolved its parameters from the same
// link figures — measured by local ranks 0 and 1 of node 0, or declared with the reason why —
// and the knob rows say which. Runs in every variant; variants that force thresholds set
// RMP_CALIBRATE=0.
#include <cstdio>
#include <string>

#include "harness.hpp"
#include "runtime/context.hpp"

namespace itest {
namespace {

std::string row_value(const std::vector<rmp::ParamInfo>& rows, const std::string& name,
                      std::string* source = nullptr) {
  for (const rmp::ParamInfo& r : rows)
    if (r.name == name) {
      if (source) *source = r.source;
      return r.value;
    }
  ADD_FAILURE() << "no row " << name;
  return "";
}

TEST(Calibration, AllRanksUseTheSameFigures_SourceSaysMeasuredOrWhyNot) {
  const rmp::rt::Context* ctx = rmp::rt::default_context();
  ASSERT_NE(ctx, nullptr);
  const rmp::rt::Calibration& cal = ctx->calibration();
  const std::vector<rmp::ParamInfo> rows = rmp::effective_params("shm");
  const rmp::Comm& w = rmp::world();

  // The same figures and threshold on every rank: min and max over ranks agree.
  const char* shared[] = {"link_bw", "link_rtt_us", "copy_bw", "rndv_setup_us", "eager_threshold"};
  for (const char* name : shared) {
    const double v = std::stod(row_value(rows, name));
    double lo = 0, hi = 0;
    w.allreduce(&v, &lo, 1, rmp::Op::min);
    w.allreduce(&v, &hi, 1, rmp::Op::max);
    EXPECT_EQ(lo, hi) << name << " differs between ranks";
  }
  const int measured = cal.figures ? 1 : 0;
  int all_measured = 0;
  w.allreduce(&measured, &all_measured, 1, rmp::Op::sum);
  EXPECT_TRUE(all_measured == 0 || all_measured == size()) << "only some ranks calibrated";

  std::string source;
  row_value(rows, "link_rtt_us", &source);
  if (env_is("RMP_CALIBRATE", "0")) {
    EXPECT_FALSE(cal.figures);
    EXPECT_EQ(cal.reason, size() == 1 ? "singleton" : "RMP_CALIBRATE=0");
  } else if (size() == 1) {
    EXPECT_EQ(cal.reason, "singleton");
  } else if (cal.figures) {
    EXPECT_EQ(source, "calibrated");  // no variant sets link figures explicitly
    std::string copy_source;
    row_value(rows, "copy_bw", &copy_source);
    EXPECT_EQ(copy_source, "calibrated");
  } else {
    // A machine too busy to schedule the pair in time: declared, and the reason says so.
    EXPECT_NE(cal.reason.find("local rank 1"), std::string::npos) << cal.reason;
    EXPECT_EQ(source, "default");
  }
  std::string eager_source;
  const std::string eager = row_value(rows, "eager_threshold", &eager_source);
  if (rank() == 0)
    std::printf(
        "[rank 0] shm calibration: %s in %.0f us; link_bw %s, link_rtt_us %s, copy_bw %s, "
        "rndv_setup_us %s -> eager_threshold %s (%s)\n",
        cal.figures ? "measured" : ("declared: " + cal.reason).c_str(), cal.took_us,
        row_value(rows, "link_bw").c_str(), row_value(rows, "link_rtt_us").c_str(),
        row_value(rows, "copy_bw").c_str(), row_value(rows, "rndv_setup_us").c_str(), eager.c_str(),
        eager_source.c_str());
}

}  // namespace
}  // namespace itest
