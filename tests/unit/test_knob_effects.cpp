// Each knob that means something on shm changes what the transport or p2p does, as the
// counters show (not just the value rinfo prints): two runs that differ only in that knob,
// with ranks as threads over the real shm transport. Where a peer must not drain its queues
// while the other fills them, it is held on an atomic flag (threads of one process), so every
// count here is deterministic (the naps' too: each test waits for a set number of them). Knobs that
// are n/a on shm, and those no counter can observe, are listed in kNotObservedOnShm with the
// reason; a test checks that every knob is either tested here or listed there.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runtime/params.hpp"
#include "runtime/transport/shm/shm_transport.hpp"
#include "tests/unit/coll_env.hpp"
#include "tests/unit/thread_ranks.hpp"

using rmp::p2p::Channel;
using rmp::rt::Counters;
using rmp::testing::ScopedEnv;
using rmp::testing::ThreadRank;
using rmp::testing::run_thread_ranks;

namespace {

// Knobs exercised below (each by a test named after it).
const std::set<std::string> kTested = {"sq_depth",
                                       "rq_depth",
                                       "inline_threshold",
                                       "eager_threshold",
                                       "fragment_size",
                                       "header_overhead",
                                       "pipeline_depth",
                                       "spin_us",
                                       "wait_mode",
                                       "connect",
                                       "link_bw",
                                       "link_rtt_us",
                                       "expected_concurrency",
                                       "rndv_setup_us",
                                       "tune",
                                       "copy_bw",
                                       "get_bw"};

// Knobs that apply on shm but that no counter observes, with where they are shown instead.
const std::map<std::string, std::string> kNotObservedOnShm = {
    {"allreduce_compress",
     "applied by the API layer (rmp::Comm::allreduce), not by p2p: "
     "rmp_tuning_itest.*.compressbf16 shows it rounding results"}};

// One thread-rank run; returns each rank's counters at the end of fn.
std::vector<Counters> run(int n, const std::function<void(ThreadRank&)>& fn) {
  std::vector<Counters> out(static_cast<std::size_t>(n));
  run_thread_ranks(n, [&](ThreadRank& t) {
    fn(t);
    out[static_cast<std::size_t>(t.world.rank())] = t.ctx.counters();
  });
  return out;
}

void wait_for(const std::atomic<bool>& flag) {
  while (!flag.load(std::memory_order_acquire)) std::this_thread::yield();
}

// Rank 0 issues `count` sends of `bytes` to rank 1 while rank 1 is held (polls nothing), then
// rank 1 receives them all. Returns rank 0's counters.
Counters flood(std::size_t count, std::size_t bytes) {
  std::atomic<bool> issued{false};
  return run(2, [&](ThreadRank& t) {
    auto& e = t.engine;
    std::vector<unsigned char> buf(count * std::max<std::size_t>(bytes, 1), 0x5a);
    if (t.world.rank() == 0) {
      std::vector<rmp::detail::RequestState*> rs;
      for (std::size_t i = 0; i < count; ++i)
        rs.push_back(e.isend(t.world, Channel::user, buf.data() + i * bytes, bytes, 1, 3, false));
      issued.store(true, std::memory_order_release);
      for (auto* r : rs) e.wait(r);
    } else {
      wait_for(issued);
      for (std::size_t i = 0; i < count; ++i)
        e.wait(e.irecv(t.world, Channel::user, buf.data() + i * bytes, bytes, 0, 3));
    }
  })[0];
}

// One message of `bytes` from rank 0 to rank 1; returns both ranks' counters.
std::vector<Counters> one_message(std::size_t bytes) {
  return run(2, [&](ThreadRank& t) {
    std::vector<unsigned char> buf(bytes, 0x33);
    auto& e = t.engine;
    if (t.world.rank() == 0) e.wait(e.isend(t.world, Channel::user, buf.data(), bytes, 1, 5, false));
    else e.wait(e.irecv(t.world, Channel::user, buf.data(), bytes, 0, 5));
  });
}

// A 1 MiB rendezvous through the chunk copy while the receiver stops draining right after it
// asked for the data: the sender fills every chunk the pipeline has. Returns the sender's
// chunks_in_flight_peak.
std::uint64_t chunks_in_flight() {
  ScopedEnv copy("RMP_SHM_COPY", "chunks");
  constexpr std::size_t kBytes = 1 << 20;
  std::atomic<bool> receiver_held{false}, release{false};
  return run(2, [&](ThreadRank& t) {
    std::vector<unsigned char> buf(kBytes, 0x42);
    auto& e = t.engine;
    if (t.world.rank() == 0) {
      auto* r = e.isend(t.world, Channel::user, buf.data(), kBytes, 1, 9, false);
      wait_for(receiver_held);
      // Fill the pipeline: it can hold at most its depth, and this message has more chunks.
      const std::size_t depth = std::clamp<std::size_t>(t.ctx.params().pipeline_depth, 2, 16);
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      e.progress_until([&] {
        return t.ctx.counters().chunks_in_flight_peak >= depth ||
               std::chrono::steady_clock::now() > give_up;
      });
      release.store(true, std::memory_order_release);
      e.wait(r);
    } else {
      auto* r = e.irecv(t.world, Channel::user, buf.data(), kBytes, 0, 9);
      e.progress_until([&] { return t.ctx.counters().shm_gets_chunks > 0; });
      receiver_held.store(true, std::memory_order_release);
      wait_for(release);
      e.wait(r);
    }
  })[0].chunks_in_flight_peak;
}

// Link figures fixed, so that formulas do not depend on calibration.
struct FixedLink {
  ScopedEnv calibrate{"RMP_CALIBRATE", "0"};
  ScopedEnv bw{"RMP_LINK_BW", "20000000000"};
  ScopedEnv rtt{"RMP_LINK_RTT_US", "0.5"};
};

TEST(KnobEffects, EveryKnob_TestedHereOrNamedWithTheReason) {
  rmp::rt::ParamsInput in;
  in.transport = "shm";
  in.limits = rmp::rt::declared_limits("shm");
  const rmp::rt::ParamSet set = rmp::rt::resolve_params(in);
  std::vector<std::string> na;
  for (const rmp::ParamInfo& row : set.rows) {
    if (row.value == "n/a") {
      na.push_back(row.name);
      EXPECT_FALSE(kTested.count(row.name)) << row.name << " is n/a on shm yet tested";
      continue;
    }
    EXPECT_TRUE(kTested.count(row.name) || kNotObservedOnShm.count(row.name))
        << "knob " << row.name << " applies on shm but no test here shows its effect";
  }
  std::string names;
  for (const auto& n : na) names += " " + n;
  // Excluded: n/a on shm (rinfo --params --transport shm prints n/a; the knob table says
  // what they mean on tcp/verbs).
  std::printf("n/a on shm, excluded:%s\n", names.c_str());
  for (const auto& [name, why] : kNotObservedOnShm)
    std::printf("applies on shm, no counter (%s): %s\n", name.c_str(), why.c_str());
  EXPECT_FALSE(na.empty());
}

// rinfo --params --transport shm (declared limits) shows the inline threshold a job on shm
// uses (the ring line less the line's and p2p's headers); it said 44 where jobs used 36 (28 since
// the line header grew to 20 bytes).
TEST(KnobEffects, InlineThreshold_DeclaredIsWhatAJobUses) {
  rmp::rt::ParamsInput in;
  in.transport = "shm";
  in.limits = rmp::rt::declared_limits("shm");
  const std::size_t declared = rmp::rt::resolve_params(in).values.inline_threshold;
  std::size_t used = 0;
  run_thread_ranks(2, [&](ThreadRank& t) {
    if (t.ctx.rank() == 0) used = t.ctx.params().inline_threshold;
  });
  EXPECT_EQ(declared, used);
  EXPECT_GT(used, 0u);
}

// The eager threshold's formula takes a chunked get's first piece from the limits: what rinfo
// and rlaunch declare for shm is what the transport cuts its gets into.
TEST(KnobEffects, GetFillBytes_DeclaredIsWhatTheTransportUses) {
  const std::size_t declared = rmp::rt::declared_limits("shm").get_fill_bytes;
  EXPECT_EQ(declared, rmp::rt::shm_static_caps().get_fill_bytes);
  EXPECT_GT(declared, 0u);
}

// A job's eager threshold starts a get with its first piece through the chunks, unless its gets
// never go through them (RMP_SHM_COPY=single or split): then with the set-up alone. Declared
// figures (copy_bw 40 GB/s, link 20 GB/s, rtt 0.5 us) and a set-up of 3 us, above the first
// piece's 2 x 16 KiB / 20 GB/s = 1.6384 us: 40e9 x 2.1384 us = 85536 against 40e9 x 3.5 us =
// 140000.
// The eager threshold a 2-rank job's rank 0 runs with (ranks as threads).
std::size_t rank0_eager_threshold() {
  std::size_t v = 0;
  run_thread_ranks(2, [&](ThreadRank& t) {
    if (t.ctx.rank() == 0) v = t.ctx.params().eager_threshold;
  });
  return v;
}

TEST(KnobEffects, EagerThreshold_ForcedSingleCopy_StartsWithTheSetUp) {
  ScopedEnv cal("RMP_CALIBRATE", "0");
  ScopedEnv setup("RMP_RNDV_SETUP_US", "3");
  EXPECT_EQ(rank0_eager_threshold(), 85536u);
  for (const char* copy : {"single", "split"}) {
    ScopedEnv forced("RMP_SHM_COPY", copy);
    EXPECT_EQ(rank0_eager_threshold(), 140000u) << "RMP_SHM_COPY=" << copy;
  }
  ScopedEnv chunks("RMP_SHM_COPY", "chunks");
  EXPECT_EQ(rank0_eager_threshold(), 85536u) << "RMP_SHM_COPY=chunks";
}

// Without cross-memory attach there is no single copy: a get starts with its first piece through
// the chunks (2 × 16 KiB at the declared 20 GB/s, 1.6384 us) even where the set-up is less.
TEST(KnobEffects, EagerThreshold_NoCrossMemoryAttach_StartsWithTheFirstPiece) {
  ScopedEnv cal("RMP_CALIBRATE", "0");
  ScopedEnv setup("RMP_RNDV_SETUP_US", "0.25");
  EXPECT_EQ(rank0_eager_threshold(), 30000u);  // (0.5 + 0.25) us × 40 GB/s
  // The chunks forced: the same with cross-memory attach on.
  for (const char* copy : {"chunks", "streaming"}) {
    ScopedEnv forced("RMP_SHM_COPY", copy);
    EXPECT_EQ(rank0_eager_threshold(), 85536u) << "RMP_SHM_COPY=" << copy;
  }
  ScopedEnv cma("RMP_SHM_CMA", "0");
  EXPECT_EQ(rank0_eager_threshold(), 85536u);  // (0.5 + 1.6384) us × 40 GB/s
  // What rinfo --params and rmp::effective_params print comes from the same limits.
  rmp::rt::ParamsInput in = rmp::rt::params_input_from_environment();
  in.transport = "shm";
  in.limits = rmp::rt::settled_limits(rmp::rt::declared_limits("shm"), "shm",
                                      rmp::rt::resolve_env_settings(in));
  EXPECT_EQ(rmp::rt::resolve_params(in).values.eager_threshold, 85536u);
}

// settled_limits: the shm settings that decide how gets start.
TEST(KnobEffects, SettledLimits_ShmCopySettings) {
  using rmp::rt::ShmCopy;
  const rmp::rt::TransportLimits shm = rmp::rt::declared_limits("shm");
  auto settled = [&](bool cma, ShmCopy copy) {
    rmp::rt::EnvSettings s;
    s.shm_cma = cma;
    s.shm_copy = copy;
    return rmp::rt::settled_limits(shm, "shm", s);
  };
  EXPECT_FALSE(settled(true, ShmCopy::auto_).chunked_gets_only);
  EXPECT_EQ(settled(true, ShmCopy::auto_).get_fill_bytes, shm.get_fill_bytes);
  for (ShmCopy c : {ShmCopy::single, ShmCopy::split}) {
    EXPECT_EQ(settled(true, c).get_fill_bytes, 0u);    // never through the chunks
    EXPECT_TRUE(settled(false, c).chunked_gets_only);  // no cross-memory attach: the chunks
  }
  for (ShmCopy c : {ShmCopy::chunks, ShmCopy::streaming, ShmCopy::auto_})
    EXPECT_EQ(settled(c == ShmCopy::auto_, c).chunked_gets_only, c != ShmCopy::auto_);
  EXPECT_TRUE(settled(false, ShmCopy::auto_).chunked_gets_only);
  rmp::rt::EnvSettings off;
  off.shm_cma = false;
  EXPECT_FALSE(rmp::rt::settled_limits(shm, "tcp", off).chunked_gets_only);
}

TEST(KnobEffects, EagerThreshold_MovesMessagesBetweenEagerAndRendezvous) {
  constexpr std::size_t kBytes = 6000;
  ScopedEnv inl("RMP_INLINE_THRESHOLD", "0");
  {
    ScopedEnv eager("RMP_EAGER_THRESHOLD", "8192");
    const Counters c = one_message(kBytes)[0];
    EXPECT_EQ(c.msgs_eager, 1u);
    EXPECT_EQ(c.msgs_rndv, 0u);
  }
  {
    ScopedEnv eager("RMP_EAGER_THRESHOLD", "4096");
    const Counters c = one_message(kBytes)[0];
    EXPECT_EQ(c.msgs_eager, 0u);
    EXPECT_EQ(c.msgs_rndv, 1u);
  }
}

TEST(KnobEffects, InlineThreshold_MovesMessagesBetweenInlineAndCopy) {
  constexpr std::size_t kBytes = 100;
  {
    ScopedEnv inl("RMP_INLINE_THRESHOLD", "128");
    const Counters c = one_message(kBytes)[0];
    EXPECT_EQ(c.msgs_inline, 1u);
    EXPECT_EQ(c.msgs_eager, 0u);
  }
  {
    ScopedEnv inl("RMP_INLINE_THRESHOLD", "0");
    const Counters c = one_message(kBytes)[0];
    EXPECT_EQ(c.msgs_inline, 0u);
    EXPECT_EQ(c.msgs_eager, 1u);
  }
}

TEST(KnobEffects, FragmentSize_SetsRendezvousFragmentCount) {
  ScopedEnv copy("RMP_SHM_COPY", "chunks");
  for (std::size_t frag : {65536u, 262144u}) {
    ScopedEnv f("RMP_FRAGMENT_SIZE", std::to_string(frag));
    const Counters c = one_message(1 << 20)[1];
    EXPECT_EQ(c.shm_gets_chunks, 1u);
    EXPECT_EQ(c.rndv_fragments, (1u << 20) / frag) << "fragment_size " << frag;
  }
}

// eager_threshold's formula: (link_rtt_us + start) / (1/copy_bw + 1/link_bw - 1/get_bw), start =
// min(rndv_setup_us, 2 x 16 KiB / link_bw) on shm; here the set-up is never above the first
// piece's time (at 20 GB/s 1.64 us), so start = rndv_setup_us. With rtt 0.5 us and link_bw =
// get_bw it is copy_bw x (rtt + setup): a 12000-byte
// message is eager at 10 GB/s x 1.5 us = 15000 and rendezvous at 10 GB/s x 0.6 us = 6000 or
// 4 GB/s x 1.5 us = 6000. A get at 20 GB/s over a 4 GB/s link: 1.5e-6 / (1e-10 + 2.5e-10 -
// 0.5e-10) = 5000, rendezvous; over a 20 GB/s link: 15000 again, eager.
TEST(KnobEffects, EagerThresholdInputs_MoveItThroughItsFormula) {
  FixedLink link;
  ScopedEnv inl("RMP_INLINE_THRESHOLD", "0");
  const auto eager_sends = [](const char* copy_bw, const char* link_bw, const char* get_bw,
                              const char* setup) {
    ScopedEnv cb("RMP_COPY_BW", copy_bw);
    ScopedEnv bw("RMP_LINK_BW", link_bw);
    std::optional<ScopedEnv> gb;
    if (get_bw) gb.emplace("RMP_GET_BW", get_bw);
    ScopedEnv su("RMP_RNDV_SETUP_US", setup);
    const Counters c = one_message(12000)[0];
    EXPECT_EQ(c.msgs_eager + c.msgs_rndv, 1u);
    return c.msgs_eager;
  };
  EXPECT_EQ(eager_sends("1e10", "2e10", nullptr, "1"), 1u);
  EXPECT_EQ(eager_sends("1e10", "2e10", nullptr, "0.1"), 0u) << "rndv_setup_us";
  EXPECT_EQ(eager_sends("4e9", "2e10", nullptr, "1"), 0u) << "copy_bw";
  EXPECT_EQ(eager_sends("1e10", "4e9", nullptr, "1"), 1u) << "get_bw follows link_bw";
  EXPECT_EQ(eager_sends("1e10", "4e9", "2e10", "1"), 0u) << "get_bw";
  EXPECT_EQ(eager_sends("1e10", "2e10", "2e10", "1"), 1u) << "link_bw";
}

// tune=adaptive explores a neighbouring protocol for some messages near the switch point;
// static never does.
TEST(KnobEffects, Tune_AdaptiveExplores_StaticDoesNot) {
  FixedLink link;
  ScopedEnv eager("RMP_EAGER_THRESHOLD", "16384");
  const auto explorations = [](const char* mode) {
    ScopedEnv tune("RMP_TUNE", mode);
    return run(2, [&](ThreadRank& t) {
      std::vector<unsigned char> buf(8192, 0x21);
      auto& e = t.engine;
      for (int i = 0; i < 128; ++i) {
        if (t.world.rank() == 0) e.wait(e.isend(t.world, Channel::user, buf.data(), 8192, 1, 4, false));
        else e.wait(e.irecv(t.world, Channel::user, buf.data(), 8192, 0, 4));
      }
    })[0].tune_explorations;
  };
  EXPECT_EQ(explorations("static"), 0u);
  EXPECT_GE(explorations("adaptive"), 1u);
}

TEST(KnobEffects, PipelineDepth_SetsChunksInFlight) {
  ScopedEnv frag("RMP_FRAGMENT_SIZE", "65536");  // 16 chunks in the 1 MiB message
  for (unsigned depth : {2u, 8u}) {
    ScopedEnv d("RMP_PIPELINE_DEPTH", std::to_string(depth));
    EXPECT_EQ(chunks_in_flight(), depth) << "pipeline_depth " << depth;
  }
}

// On shm the formula inputs reach the transport through pipeline_depth:
// max(2, link_bw × link_rtt / (fragment_size − header_overhead)), clamped to 16 chunks.
TEST(KnobEffects, HeaderOverheadAndLinkFigures_ChangeChunksInFlightThroughTheFormula) {
  FixedLink link;
  ScopedEnv frag("RMP_FRAGMENT_SIZE", "4160");
  {
    // 20e9 × 0.5e-6 = 10000 bytes in flight / 4096 payload bytes → 3 chunks.
    EXPECT_EQ(chunks_in_flight(), 3u) << "header_overhead 64 (default)";
  }
  {
    ScopedEnv h("RMP_HEADER_OVERHEAD", "3160");  // 1000 payload bytes → 10 chunks
    EXPECT_EQ(chunks_in_flight(), 10u) << "header_overhead 3160";
  }
  {
    ScopedEnv bw("RMP_LINK_BW", "40000000000");  // 20000 / 4096 → 5
    EXPECT_EQ(chunks_in_flight(), 5u) << "link_bw 40e9";
  }
  {
    ScopedEnv rtt("RMP_LINK_RTT_US", "1.5");  // 30000 / 4096 → 8
    EXPECT_EQ(chunks_in_flight(), 8u) << "link_rtt_us 1.5";
  }
}

// sq_depth = ring slots per peer (rounded up to a power of two, at least 64): 600 inline
// messages to a held peer fill 64 slots but not 1024.
TEST(KnobEffects, SqDepth_RingFullEventsInAFlood) {
  {
    ScopedEnv sq("RMP_SQ_DEPTH", "64");
    EXPECT_GT(flood(600, 8).ring_full, 0u);
  }
  {
    ScopedEnv sq("RMP_SQ_DEPTH", "1024");
    EXPECT_EQ(flood(600, 8).ring_full, 0u);
  }
}

// expected_concurrency sizes sq_depth (× 1.2), and so the ring.
TEST(KnobEffects, ExpectedConcurrency_RingFullEventsThroughSqDepth) {
  FixedLink link;
  {
    ScopedEnv ec("RMP_EXPECTED_CONCURRENCY", "16");  // sq_depth 20 → 64 slots
    EXPECT_GT(flood(600, 8).ring_full, 0u);
  }
  {
    ScopedEnv ec("RMP_EXPECTED_CONCURRENCY", "1000");  // sq_depth 1200 → 2048 slots
    EXPECT_EQ(flood(600, 8).ring_full, 0u);
  }
}

// rq_depth = eager credits per peer (rq_depth × eager_threshold bytes, or the byte ring's
// size where that is more: twice the L2, at most 16 MiB): 1200 eager messages of 16000 B
// (16064 credit bytes each, 19.3 MB in all) to a held peer exceed 2 × 16384 and any byte ring
// but not 2000 × 16384.
TEST(KnobEffects, RqDepth_CreditStallsInAFlood) {
  ScopedEnv inl("RMP_INLINE_THRESHOLD", "0");
  ScopedEnv eager("RMP_EAGER_THRESHOLD", "16384");
  {
    ScopedEnv rq("RMP_RQ_DEPTH", "2");
    const Counters c = flood(1200, 16000);
    EXPECT_GT(c.credit_stalls, 0u);
    EXPECT_EQ(c.msgs_rndv, c.credit_stalls);
  }
  {
    ScopedEnv rq("RMP_RQ_DEPTH", "2000");
    EXPECT_EQ(flood(1200, 16000).credit_stalls, 0u);
  }
}

// The credit covers at least the transport's eager buffer: with rq_depth 30 and
// eager_threshold 24000 (720000 bytes of credit by slots) the shm byte ring holds 1 MiB or
// more (twice the L2 where the node's memory allows: runtime/context.cpp), and
// 63 messages of 16 KiB (16448 credit bytes each, 1036224 in all) go eager to a held peer.
TEST(KnobEffects, Credit_CoversTheTransportsEagerBuffer) {
  ScopedEnv eager("RMP_EAGER_THRESHOLD", "24000");
  ScopedEnv rq("RMP_RQ_DEPTH", "30");
  const Counters c = flood(63, 16384);
  EXPECT_EQ(c.credit_stalls, 0u);
  EXPECT_EQ(c.msgs_eager, 63u);
}

// connect=eager maps every peer at start; lazy on first use.
TEST(KnobEffects, Connect_EndpointsRightAfterStart) {
  for (const char* mode : {"eager", "lazy"}) {
    ScopedEnv connect("RMP_CONNECT", mode);
    const std::vector<Counters> c = run(4, [](ThreadRank&) {});
    for (const Counters& r : c) EXPECT_EQ(r.endpoints, mode[0] == 'e' ? 3u : 0u) << mode;
  }
}

// A waiting call that finds nothing to do: wait_mode=poll never gives the core away;
// yield with spin_us=0 yields at every clock check (each 16th idle call).
// keep_core: the same once its window (Idle::kKeepCore × spin_us) has passed.
std::uint64_t yields_in(std::size_t idle_calls, double* elapsed_us = nullptr,
                        bool keep_core = false) {
  std::uint64_t yields = 0;
  run_thread_ranks(1, [&](ThreadRank& t) {
    rmp::rt::Context::Idle idle(t.ctx);
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < idle_calls; ++i) keep_core ? idle.keep_core() : idle();
    if (elapsed_us)
      *elapsed_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                        .count();
    yields = t.ctx.counters().idle_yields;
  });
  return yields;
}

TEST(KnobEffects, WaitMode_PollNeverYields_YieldDoes) {
  ScopedEnv spin("RMP_SPIN_US", "0");
  {
    ScopedEnv mode("RMP_WAIT_MODE", "poll");
    EXPECT_EQ(yields_in(160), 0u);
  }
  {
    ScopedEnv mode("RMP_WAIT_MODE", "yield");
    // The clock is first read at the 16th idle call; spin_us=0 has passed then, and from
    // there on every idle call gives the core away: calls 16 … 160.
    EXPECT_EQ(yields_in(160), 145u);
  }
}

// A wait that believes the rank it waits for runs on another core keeps its own for a while,
// then gives it away as any other wait. (It used to hand over to operator() only on a call
// that operator() itself skipped, and never gave the core away: a rank queued behind it waited
// for the end of the time slice, 5 ms.)
TEST(KnobEffects, KeepCore_GivesTheCoreAwayOnceItsWindowHasPassed) {
  ScopedEnv mode("RMP_WAIT_MODE", "yield");
  ScopedEnv spin("RMP_SPIN_US", "0");
  EXPECT_EQ(yields_in(160, nullptr, true), 145u);
}

TEST(KnobEffects, SpinUs_NoYieldBeforeItHasPassed) {
  ScopedEnv mode("RMP_WAIT_MODE", "yield");
  ScopedEnv spin("RMP_SPIN_US", "1000000");
  double elapsed_us = 0;
  const std::uint64_t yields = yields_in(160, &elapsed_us);
  if (elapsed_us >= 1e6)
    GTEST_SKIP() << "160 idle calls took " << elapsed_us << " us (a descheduled thread): "
                 << "spin_us=1e6 had passed, so yields are allowed";
  EXPECT_EQ(yields, 0u);
}

// A thread that polls without sleeping lets its core go for a moment once every
// NapClock::kAfter (runtime/spin.hpp): a blocking wait that finds nothing to do (wait modes
// poll and yield; block sleeps anyway), and a progress thread kept busy by a send in flight.
// Each waits until it has napped a set number of times (or 5 s, a failure): the naps are
// sleeps (voluntary switches, which sched_yield is not), and they took at least kAfter each.
using rmp::rt::NapClock;
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
long voluntary_switches() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_nvcsw;
}
constexpr double kAfterMs = std::chrono::duration<double, std::milli>(NapClock::kAfter).count();

TEST(KnobEffects, LongWait_GivesTheCoreAwayForAMomentEveryNapAfter) {
  for (const char* mode : {"poll", "yield", "block"}) {
    ScopedEnv wait_mode("RMP_WAIT_MODE", mode);
    const bool naps = mode[0] != 'b';
    run_thread_ranks(1, [&](ThreadRank& t) {
      const Counters& c = t.ctx.counters();
      const long switches = voluntary_switches();
      const auto t0 = Clock::now();
      t.engine.progress_until([&] {
        return ms_since(t0) > (naps ? 5000 : 3.5 * kAfterMs) || (naps && c.idle_naps >= 3);
      });
      const double waited = ms_since(t0);
      if (naps) {
        EXPECT_EQ(c.idle_naps, 3u) << mode << ": waited " << waited << " ms";
        EXPECT_GE(waited, 3 * kAfterMs) << mode;
        EXPECT_GE(voluntary_switches() - switches, 3) << mode;
      } else {
        EXPECT_EQ(c.idle_naps, 0u) << "block sleeps anyway";
        EXPECT_GT(c.idle_sleeps, 0u);
      }
    });
  }
}

TEST(KnobEffects, BusyProgressThread_GivesTheCoreAwayForAMomentEveryNapAfter) {
  std::atomic<bool> napped{false};
  double waited = 0;
  std::uint64_t naps = 0;
  run_thread_ranks(2, [&](ThreadRank& t) {
    auto& e = t.engine;
    std::vector<std::byte> buf(1 << 20);  // rendezvous: in flight until rank 1 reads it
    if (t.world.rank() == 1) {
      while (!napped.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      e.wait(e.irecv(t.world, Channel::user, buf.data(), buf.size(), 0, 4));
      return;
    }
    // From before the progress thread starts: its idle time, which the naps divide, starts
    // with it (timed from after the isend, 2 naps once took 19.6 ms with another build
    // running beside the test).
    const auto t0 = Clock::now();
    e.start_progress_thread();
    rmp::detail::RequestState* r =
        e.isend(t.world, Channel::user, buf.data(), buf.size(), 1, 4, false);
    // The progress thread bumps it (count_shared) while this thread reads it.
    const std::atomic_ref<std::uint64_t> bumped(t.ctx.counters().idle_naps);
    while (bumped.load(std::memory_order_relaxed) < 2 && ms_since(t0) < 5000)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    waited = ms_since(t0);
    naps = bumped.load(std::memory_order_relaxed);
    napped = true;
    e.wait(r);
    e.stop_progress_thread();
  });
  EXPECT_GE(naps, 2u) << "waited " << waited << " ms";
  EXPECT_GE(waited, 2 * kAfterMs);
}
}  // namespace
