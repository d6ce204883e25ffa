// The in-process bootstrap: ranks as threads sharing one store (what every in-process unit test
// of the layers above runs on), and the singleton a program gets without a launcher.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <rmp/rmp.hpp>

#include "runtime/bootstrap/bootstrap.hpp"

namespace rmp::rt {
namespace {

using namespace std::chrono_literals;

std::span<const std::byte> bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}
std::string text(const std::vector<std::byte>& b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

constexpr int kRanks = 4;

// Runs body(bootstrap) on kRanks threads over one store; rethrows nothing, reports via gtest.
template <typename Body>
void run_ranks(Body body, int ranks = kRanks) {
  auto store = make_in_process_store(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      auto b = make_in_process_bootstrap(store, r);
      try {
        body(*b);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
}

TEST(InProcessBootstrap, Identity_RankSizeLocalNodeAndSharedJobId) {
  auto store = make_in_process_store(kRanks);
  auto other = make_in_process_store(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    auto b = make_in_process_bootstrap(store, r);
    const auto& id = b->identity();
    EXPECT_EQ(id.rank, r);
    EXPECT_EQ(id.size, kRanks);
    EXPECT_EQ(id.local_rank, r);
    EXPECT_EQ(id.local_size, kRanks);
    EXPECT_EQ(id.node_id, 0);
    EXPECT_EQ(id.job_id, make_in_process_bootstrap(store, 0)->identity().job_id);
    EXPECT_NE(
        id.job_id,
        make_in_process_bootstrap(other, 0)->identity().job_id);  // segment names must not clash
  }
  EXPECT_THROW(make_in_process_bootstrap(store, kRanks), Error);
  EXPECT_THROW(make_in_process_bootstrap(store, -1), Error);
  EXPECT_THROW(make_in_process_store(0), Error);
}

TEST(InProcessBootstrap, PutGet_EveryRankReadsEveryOther) {
  run_ranks([](Bootstrap& b) {
    const int me = b.identity().rank;
    b.put("addr-" + std::to_string(me), bytes("endpoint of " + std::to_string(me)));
    for (int peer = 0; peer < kRanks; ++peer) {
      EXPECT_EQ(text(b.get("addr-" + std::to_string(peer), 5s)),
                "endpoint of " + std::to_string(peer));
    }
  });
}

TEST(InProcessBootstrap, Get_WaitsForALaterPut) {
  std::atomic<bool> put_done{false};
  run_ranks(
      [&](Bootstrap& b) {
        if (b.identity().rank == 1) {
          std::this_thread::sleep_for(150ms);
          put_done = true;
          b.put("late", bytes("here"));
        } else {
          const auto start = std::chrono::steady_clock::now();
          EXPECT_EQ(text(b.get("late", 5s)), "here");
          EXPECT_TRUE(put_done.load());
          EXPECT_GE(std::chrono::steady_clock::now() - start, 100ms);
        }
      },
      2);
}

TEST(InProcessBootstrap, GetTimeout_ErrorNamesTheKey) {
  auto store = make_in_process_store(1);
  auto b = make_in_process_bootstrap(store, 0);
  const auto start = std::chrono::steady_clock::now();
  try {
    b->get("peer-7-address", 100ms);
    FAIL() << "get of a key nobody put returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::timeout);
    EXPECT_NE(std::string(e.what()).find("peer-7-address"), std::string::npos) << e.what();
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, 100ms);
}

TEST(InProcessBootstrap, Fence_GenerationsNeverMix) {
  // Each rank writes its round number before every fence; after the fence of round k every rank
  // must see every other rank at round >= k, and no rank may pass two fences ahead.
  constexpr int kRounds = 50;
  std::vector<std::atomic<int>> round(kRanks);
  for (auto& r : round) r = 0;
  run_ranks([&](Bootstrap& b) {
    const int me = b.identity().rank;
    for (int k = 1; k <= kRounds; ++k) {
      round[static_cast<std::size_t>(me)] = k;
      b.fence(5s);
      for (int peer = 0; peer < kRanks; ++peer) {
        const int seen = round[static_cast<std::size_t>(peer)];
        EXPECT_GE(seen, k) << "rank " << me << " passed fence " << k << " before rank " << peer
                           << " reached it";
        EXPECT_LE(seen, k + 1);
      }
    }
  });
}

TEST(InProcessBootstrap, FenceTimeout_SaysHowManyArrived_AndLaterFencesStillWork) {
  auto store = make_in_process_store(3);
  auto b0 = make_in_process_bootstrap(store, 0);
  try {
    b0->fence(100ms);
    FAIL() << "a fence of one of three ranks returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::timeout);
    EXPECT_NE(std::string(e.what()).find("1 of 3"), std::string::npos) << e.what();
  }
  // The timed-out rank withdrew: a full fence afterwards completes.
  std::vector<std::thread> threads;
  for (int r = 1; r < 3; ++r) {
    threads.emplace_back([&store, r] { make_in_process_bootstrap(store, r)->fence(5s); });
  }
  b0->fence(5s);
  for (auto& t : threads) t.join();
}

TEST(InProcessBootstrap, Abort_ThrowsInternal_InsteadOfEndingTheTestProcess) {
  auto b = make_in_process_bootstrap(make_in_process_store(2), 1);
  try {
    b->abort(3, "cannot continue");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::internal);
    EXPECT_NE(std::string(e.what()).find("cannot continue"), std::string::npos);
  }
}

TEST(SingletonBootstrap, RankZeroOfOne_StoreWorksLocally) {
  auto b = make_singleton_bootstrap();
  EXPECT_EQ(b->identity().rank, 0);
  EXPECT_EQ(b->identity().size, 1);
  EXPECT_EQ(b->identity().job_id.rfind("single-", 0), 0u);
  b->put("k", bytes("v"));
  EXPECT_EQ(text(b->get("k", 1s)), "v");
  b->fence(1s);
  b->finalize();
}

TEST(SingletonBootstrapDeathTest, Abort_ExitsWithTheCodeAndSaysWhy) {
  EXPECT_EXIT(make_singleton_bootstrap()->abort(5, "out of input"), testing::ExitedWithCode(5),
              "out of input");
}

}  // namespace
}  // namespace rmp::rt
