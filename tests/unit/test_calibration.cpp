// Calibration (runtime/calibration.hpp, runtime/transport/shm/shm_calibration.hpp) with ranks
// as threads over an in-process bootstrap: every rank ends with the same outcome, measured or
// declared with a reason; disabled, singleton and late-partner cases fall back. No timing is
// asserted: on a loaded machine a measurement may fall back, and the tests accept either
// outcome as long as all ranks agree and the reason says which.
#include <gtest/gtest.h>
#include <sched.h>

#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <rmp/rmp.hpp>

#include "runtime/bootstrap/bootstrap.hpp"
#include "runtime/calibration.hpp"
#include "runtime/cpu_place.hpp"
#include "runtime/transport/shm/shm_calibration.hpp"

namespace rmp::rt {
namespace {

// Runs calibrate_shm on n thread-ranks; `delay_rank1` holds rank 1 back before it starts.
std::vector<Calibration> calibrate_threads(int n, const ShmCalibrationOptions& opt,
                                           std::chrono::milliseconds delay_rank1 = {}) {
  auto store = make_in_process_store(n);
  std::vector<Calibration> out(static_cast<std::size_t>(n));
  std::vector<std::thread> ts;
  std::mutex m;
  std::string error;
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      try {
        auto boot = make_in_process_bootstrap(store, r);
        if (r == 1) std::this_thread::sleep_for(delay_rank1);
        out[static_cast<std::size_t>(r)] = calibrate_shm(*boot, opt);
      } catch (const std::exception& e) {
        std::lock_guard g(m);
        error += "rank " + std::to_string(r) + ": " + e.what() + "\n";
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(error, "");
  return out;
}

bool same(const Calibration& a, const Calibration& b) {
  if (a.figures.has_value() != b.figures.has_value() || a.reason != b.reason) return false;
  if (!a.figures) return true;
  return std::memcmp(&*a.figures, &*b.figures, sizeof(LinkFigures)) == 0;
}

void expect_all_agree(const std::vector<Calibration>& c) {
  for (std::size_t r = 1; r < c.size(); ++r)
    EXPECT_TRUE(same(c[0], c[r])) << "rank " << r << " differs from rank 0: "
                                  << (c[r].figures ? "measured" : c[r].reason) << " vs "
                                  << (c[0].figures ? "measured" : c[0].reason);
}

TEST(Calibration, WireForm_RoundTripsExactly) {
  Calibration c;
  c.figures = LinkFigures{.bw_Bps = 12345678901.25,
                          .rtt_us = 0.3125,
                          .copy_bw_Bps = 2.5e10,
                          .rndv_setup_us = 0.7,
                          .get_bw_Bps = 1.6e10};
  c.took_us = 321.5;
  const Calibration d = decode_calibration(encode_calibration(c));
  ASSERT_TRUE(d.figures);
  EXPECT_TRUE(same(c, d));
  EXPECT_EQ(d.took_us, 321.5);

  Calibration no;
  no.reason = "local rank 1 did not arrive within 20 ms";
  no.took_us = 20000;
  const Calibration e = decode_calibration(encode_calibration(no));
  EXPECT_FALSE(e.figures);
  EXPECT_EQ(e.reason, no.reason);
}

TEST(Calibration, WireForm_MalformedValueIsABootstrapError) {
  const std::string bad = "ok 1 2";
  const auto* p = reinterpret_cast<const std::byte*>(bad.data());
  try {
    decode_calibration({p, bad.size()});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::bootstrap);
    EXPECT_NE(std::string(e.what()).find("'ok 1 2'"), std::string::npos) << e.what();
  }
}

TEST(Calibration, Singleton_DeclaredWithoutBootstrapTraffic) {
  const std::vector<Calibration> c = calibrate_threads(1, {});
  EXPECT_FALSE(c[0].figures);
  EXPECT_EQ(c[0].reason, "singleton");
}

TEST(Calibration, Disabled_EveryRankDeclaredWithTheReason) {
  ShmCalibrationOptions opt;
  opt.enabled = false;
  const std::vector<Calibration> c = calibrate_threads(3, opt);
  for (const Calibration& x : c) {
    EXPECT_FALSE(x.figures);
    EXPECT_EQ(x.reason, "RMP_CALIBRATE=0");
  }
}

// Two ranks: measured (all four figures positive) or, on a machine too busy to schedule the
// pair within the budget, declared with a reason naming rank 1; the same on both ranks.
TEST(Calibration, TwoRanks_MeasuredOrDeclaredWithReason_BothAgree) {
  const std::vector<Calibration> c = calibrate_threads(2, {});
  expect_all_agree(c);
  if (c[0].figures) {
    const LinkFigures& f = *c[0].figures;
    EXPECT_GT(f.bw_Bps, 0);
    EXPECT_GT(f.rtt_us, 0);
    EXPECT_GT(f.copy_bw_Bps, 0);
    EXPECT_GE(f.rndv_setup_us, 0);  // 0 where cross-memory attach is refused: declared
    EXPECT_EQ(c[0].reason, "");
  } else {
    EXPECT_NE(c[0].reason.find("local rank 1"), std::string::npos) << c[0].reason;
  }
}

// Eight ranks (oversubscribed on small machines): only two measure, all eight agree; so do
// they where the owner first waits for the cores and moves off its partner's CPU.
TEST(Calibration, EightRanks_AllAgree) {
  expect_all_agree(calibrate_threads(8, {}));
  ShmCalibrationOptions opt;
  opt.wait_for_cores = true;
  expect_all_agree(calibrate_threads(8, opt));
}

// The owner's move off its partner's CPU (runtime/cpu_place.hpp): inside the scope this
// thread is not on the avoided CPU (moved to a single other one, or already elsewhere), and
// the affinity it had comes back after. On a machine with one usable CPU there is nowhere to
// go: nothing moves.
TEST(CpuPlace, AwayFrom_LeavesTheAvoidedCpuThenRestoresTheAffinity) {
  const int runnable = runnable_tasks();  // this thread at least; -1 without /proc/stat
  EXPECT_TRUE(runnable == -1 || runnable >= 1) << runnable;
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  const int cpus = usable_cpus();
  ASSERT_EQ(cpus, CPU_COUNT(&before));
  // Settle on the first usable CPU, then allow every one again: the thread stays there
  // until something moves it.
  int first = 0;
  while (!CPU_ISSET(first, &before)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  ASSERT_EQ(sched_getcpu(), first);
  ASSERT_EQ(sched_setaffinity(0, sizeof before, &before), 0);
  {
    const AwayFrom away(first);
    cpu_set_t now;
    ASSERT_EQ(sched_getaffinity(0, sizeof now, &now), 0);
    if (cpus > 1) {
      // Moved: pinned to one other CPU, and running there. Already elsewhere (the scheduler
      // moved it in between): as before, and free to come back.
      if (CPU_COUNT(&now) == 1) {
        EXPECT_FALSE(CPU_ISSET(first, &now));
        EXPECT_NE(sched_getcpu(), first);
      } else {
        EXPECT_TRUE(CPU_EQUAL(&now, &before));
      }
    } else {
      EXPECT_TRUE(CPU_EQUAL(&now, &before));
    }
  }
  cpu_set_t after;
  ASSERT_EQ(sched_getaffinity(0, sizeof after, &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&after, &before));
  const AwayFrom nothing(-1);  // unknown partner CPU: stays
  ASSERT_EQ(sched_getaffinity(0, sizeof after, &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&after, &before));
}

// A partner that comes long after the arrival wait: the owner does not wait for it, and the
// partner does not wait for the owner; both end on declared figures with the same reason.
TEST(Calibration, LatePartner_FallsBackWithinTheArrivalWait) {
  ShmCalibrationOptions opt;
  opt.arrival_wait = std::chrono::milliseconds(2);
  const std::vector<Calibration> c = calibrate_threads(2, opt, std::chrono::milliseconds(300));
  expect_all_agree(c);
  EXPECT_FALSE(c[0].figures);
  EXPECT_EQ(c[0].reason, "local rank 1 did not arrive within 2 ms");
}

// Where ranks that outnumber the cores crowd onto one CPU (rt::less_crowded_cpu): only the
// highest rank seen on a CPU holding two ranks more than the least crowded allowed CPU moves,
// to that CPU; balanced or nearly balanced groups, unknown places and a single allowed CPU
// move nobody.
TEST(CpuPlace, LessCrowdedCpu_OnlyTheHighestRankOfACrowdedCpuMoves) {
  const std::vector<int> two{0, 1};
  // 4 ranks, three on CPU 0: rank 2 (the highest there) moves to CPU 1, ranks 0 and 1 stay.
  const std::vector<int> three_one{0, 0, 0, 1};
  EXPECT_EQ(less_crowded_cpu(three_one, 2, two), 1);
  EXPECT_EQ(less_crowded_cpu(three_one, 0, two), -1);
  EXPECT_EQ(less_crowded_cpu(three_one, 1, two), -1);
  EXPECT_EQ(less_crowded_cpu(three_one, 3, two), -1);
  // All four on one CPU: the highest moves; the other CPU, empty, takes it.
  const std::vector<int> four_none{1, 1, 1, 1};
  EXPECT_EQ(less_crowded_cpu(four_none, 3, two), 0);
  EXPECT_EQ(less_crowded_cpu(four_none, 2, two), -1);
  // Balanced (2 + 2) or one apart (3 ranks: 2 + 1): nobody moves.
  const std::vector<int> two_two{0, 1, 0, 1}, two_one{0, 0, 1};
  for (int r = 0; r < 4; ++r) EXPECT_EQ(less_crowded_cpu(two_two, r, two), -1) << r;
  for (int r = 0; r < 3; ++r) EXPECT_EQ(less_crowded_cpu(two_one, r, two), -1) << r;
  // 8 ranks, 5 + 3: the highest of CPU 1's five moves.
  const std::vector<int> five_three{0, 1, 1, 0, 1, 1, 0, 1};
  EXPECT_EQ(less_crowded_cpu(five_three, 7, two), 0);
  for (int r = 0; r < 7; ++r) EXPECT_EQ(less_crowded_cpu(five_three, r, two), -1) << r;
  // Only CPUs the rank may use count: with CPU 1 alone allowed it has nowhere to go; three
  // CPUs allowed, the emptiest (the lowest of equals) takes it.
  EXPECT_EQ(less_crowded_cpu(three_one, 2, std::vector<int>{0}), -1);
  EXPECT_EQ(less_crowded_cpu(three_one, 2, std::vector<int>{0, 1, 2}), 2);
  EXPECT_EQ(less_crowded_cpu(std::vector<int>{0, 0, 0, 2}, 2, std::vector<int>{0, 1, 2}), 1);
  // Unknown places (-1) are not counted, and a rank whose own place is unknown stays.
  EXPECT_EQ(less_crowded_cpu(std::vector<int>{0, 0, -1, 1}, 1, two), -1);
  EXPECT_EQ(less_crowded_cpu(std::vector<int>{0, 0, 0, -1}, 2, two), 1);
  EXPECT_EQ(less_crowded_cpu(std::vector<int>{-1, 0}, 0, two), -1);
  // A rank index outside the group, or an empty group: nothing.
  EXPECT_EQ(less_crowded_cpu(three_one, 4, two), -1);
  EXPECT_EQ(less_crowded_cpu(three_one, -1, two), -1);
  EXPECT_EQ(less_crowded_cpu(std::vector<int>{}, 0, two), -1);
}

// A move (rt::move_to_cpu) leaves the thread on the CPU asked for with the affinity it had:
// a place, not a binding. A CPU outside that affinity is refused.
TEST(CpuPlace, MoveToCpu_RunsThereWithTheAffinityItHad) {
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  const std::vector<int> cpus = allowed_cpu_list();
  ASSERT_EQ(static_cast<int>(cpus.size()), CPU_COUNT(&before));
  for (const int cpu : cpus) {
    ASSERT_TRUE(move_to_cpu(cpu)) << cpu;
    // Where it moved, unless the scheduler already moved it on (it may: nothing binds it).
    const int now = sched_getcpu();
    EXPECT_TRUE(now == cpu || cpus.size() > 1) << now << " after a move to " << cpu;
    cpu_set_t after;
    ASSERT_EQ(sched_getaffinity(0, sizeof after, &after), 0);
    EXPECT_TRUE(CPU_EQUAL(&after, &before));
  }
  int outside = 0;
  while (outside < CPU_SETSIZE && CPU_ISSET(outside, &before)) ++outside;
  if (outside < CPU_SETSIZE) {
    EXPECT_FALSE(move_to_cpu(outside));
  }
  EXPECT_FALSE(move_to_cpu(-1));
  EXPECT_FALSE(move_to_cpu(CPU_SETSIZE));
  cpu_set_t after;
  ASSERT_EQ(sched_getaffinity(0, sizeof after, &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&after, &before));
}

}  // namespace
}  // namespace rmp::rt
