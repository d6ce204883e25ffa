// Non-blocking collectives as progress-driven schedules (ranks as threads over shm):
// several outstanding at once, interleaved with point-to-point traffic, with and without the
// asynchronous progress thread.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/nonblocking.hpp"
#include "tests/unit/thread_ranks.hpp"

using rmp::Op;
using rmp::detail::CommImpl;
using rmp::detail::RequestState;
using rmp::detail::Type;
using rmp::p2p::Channel;
using rmp::testing::ThreadRank;
using rmp::testing::run_thread_ranks;

namespace {

void overlapping_collectives(ThreadRank& t, bool progress_thread) {
  auto& e = t.engine;
  if (progress_thread) e.start_progress_thread();
  const int n = t.world.size(), me = t.world.rank();
  auto comm = std::make_shared<CommImpl>(e, 7, me, n);
  const std::size_t count = 50000;  // large enough for rendezvous in the reduction
  std::vector<double> in(count), out(count, -1), in2(count), out2(count, -1);
  for (std::size_t i = 0; i < count; ++i) {
    in[i] = me + 0.25 * static_cast<double>(i % 7);
    in2[i] = 2.0 * me;
  }
  std::vector<int> b(1000, me == 1 % n ? 42 : 0);
  RequestState* r1 = e.start(rmp::coll::iallreduce(comm, in.data(), out.data(), count, 8, Type::f64, Op::sum));
  RequestState* r2 = e.start(rmp::coll::ibcast(comm, b.data(), b.size() * sizeof(int), 1 % n));
  RequestState* r3 = e.start(rmp::coll::ibarrier(comm));
  RequestState* r4 = e.start(rmp::coll::iallreduce(comm, in2.data(), out2.data(), count, 8, Type::f64, Op::max));
  // Point-to-point traffic on the world communicator while they run.
  const int to = (me + 1) % n, from = (me - 1 + n) % n;
  std::vector<char> s(300000, static_cast<char>(me)), r(300000);
  RequestState* rr = e.irecv(t.world, Channel::user, r.data(), r.size(), from, 3);
  RequestState* ss = e.isend(t.world, Channel::user, s.data(), s.size(), to, 3, false);
  e.wait(rr);
  e.wait(ss);
  EXPECT_EQ(r[12345], static_cast<char>(from));
  e.wait(r4);
  e.wait(r3);
  e.wait(r2);
  e.wait(r1);
  for (std::size_t i = 0; i < count; i += 997) {
    double want = 0;
    for (int k = 0; k < n; ++k) want += k + 0.25 * static_cast<double>(i % 7);
    ASSERT_NEAR(out[i], want, 1e-9) << "element " << i;
    ASSERT_EQ(out2[i], 2.0 * (n - 1));
  }
  EXPECT_EQ(b[999], 42);
  if (progress_thread) e.stop_progress_thread();
}

}  // namespace

TEST(NbcThreads, OutstandingTogetherWithPointToPoint) {
  for (int n : {1, 2, 3, 4}) run_thread_ranks(n, [](ThreadRank& t) { overlapping_collectives(t, false); });
}

TEST(NbcThreads, OutstandingTogetherWithPointToPoint_ProgressThread) {
  for (int n : {2, 3}) run_thread_ranks(n, [](ThreadRank& t) { overlapping_collectives(t, true); });
}

TEST(NbcThreads, ProgressThreadAdvancesWhileTheCallerComputes) {
  run_thread_ranks(2, [](ThreadRank& t) {
    auto& e = t.engine;
    e.start_progress_thread();
    auto comm = std::make_shared<CommImpl>(e, 9, t.world.rank(), 2);
    std::vector<double> in(1 << 16, 1.0), out(1 << 16);
    RequestState* r = e.start(rmp::coll::iallreduce(comm, in.data(), out.data(), in.size(), 8, Type::f64, Op::sum));
    // No rmp call here: only the progress thread can move the operation on.
    bool done = false;
    for (int i = 0; i < 20000 && !done; ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      done = e.is_complete(r);
    }
    EXPECT_TRUE(done) << "the progress thread did not complete the iallreduce";
    e.wait(r);
    EXPECT_EQ(out[123], 2.0);
    e.stop_progress_thread();
  });
}

// The schedule iallreduce takes unless one is named: the binomial reduce and broadcast for
// short vectors and whenever there are fewer elements than ranks, Rabenseifner's for long
// ones, and once a size takes Rabenseifner's every longer one does too (the formulas'
// bandwidth terms only grow). Every rank picks the same.
TEST(NbcThreads, IallreduceSchedule_BinomialWhenShort_RabenseifnerFromSomeSizeOn) {
  using rmp::coll::IallreduceSchedule;
  for (int n : {2, 3, 4, 8}) {
    std::vector<std::vector<IallreduceSchedule>> picks(static_cast<std::size_t>(n));
    run_thread_ranks(n, [&](ThreadRank& t) {
      auto& mine = picks[static_cast<std::size_t>(t.world.rank())];
      for (std::size_t count = 1; count <= (std::size_t{16} << 20) / 8; count *= 2)
        mine.push_back(rmp::coll::iallreduce_schedule(t.world, count, 8));
      mine.push_back(rmp::coll::iallreduce_schedule(t.world, static_cast<std::size_t>(n) - 1,
                                                    std::size_t{1} << 20));
    });
    const auto& p = picks[0];
    for (const auto& q : picks) EXPECT_EQ(q, p) << n << " ranks: the ranks disagree";
    EXPECT_EQ(p.front(), IallreduceSchedule::binomial) << n << " ranks, 8 bytes";
    EXPECT_EQ(p[p.size() - 2], IallreduceSchedule::rabenseifner) << n << " ranks, 16 MiB";
    EXPECT_EQ(p.back(), IallreduceSchedule::binomial)
        << n << " ranks, " << n - 1 << " elements of 1 MiB";
    for (std::size_t i = 1; i + 1 < p.size(); ++i) {
      if (p[i - 1] == IallreduceSchedule::rabenseifner) {
        EXPECT_EQ(p[i], IallreduceSchedule::rabenseifner)
            << n << " ranks: " << (std::size_t{8} << i) << " bytes after "
            << (std::size_t{8} << (i - 1));
      }
    }
  }
}

// ibcast (a binomial schedule, one message per tree edge) at every rank count 1-8, from the
// first, the middle and the last rank, sizes from 0 to several MiB (eager and rendezvous).
TEST(NbcThreads, Ibcast_EveryRankCountSizeAndRoot) {
  for (int n = 1; n <= 8; ++n)
    run_thread_ranks(n, [n](ThreadRank& t) {
      auto& e = t.engine;
      const int me = t.world.rank();
      auto comm = std::make_shared<CommImpl>(e, 13, me, n);
      std::vector<int> roots{0};
      if (n > 1) roots.push_back(n - 1);
      if (n > 2) roots.push_back(n / 2);
      std::uint8_t salt = 0;
      for (std::size_t bytes :
           {std::size_t{0}, std::size_t{1}, std::size_t{4095}, std::size_t{4096}, std::size_t{4097},
            std::size_t{100000}, (std::size_t{3} << 20) + 3})
        for (int root : roots) {
          ++salt;
          auto value = [&](std::size_t i) { return static_cast<char>((i * 31 + salt) & 0x7f); };
          std::vector<char> buf(bytes + 1, '.');
          if (me == root)
            for (std::size_t i = 0; i < bytes; ++i) buf[i] = value(i);
          e.wait(e.start(rmp::coll::ibcast(comm, buf.data(), bytes, root)));
          std::size_t bad = bytes;
          for (std::size_t i = 0; i < bytes && bad == bytes; ++i)
            if (buf[i] != value(i)) bad = i;
          EXPECT_EQ(bad, bytes) << "n=" << n << " rank " << me << " root " << root << " bytes "
                                << bytes << ": first wrong byte";
          EXPECT_EQ(buf[bytes], '.') << "n=" << n << " rank " << me << ": wrote past the end";
        }
    });
}

// ibarrier completes at no rank before every rank has started it (a rank that starts late,
// asleep first, by turns, holds every other rank's wait).
TEST(NbcThreads, Ibarrier_NoRankCompletesBeforeAllStart) {
  for (int n = 1; n <= 8; ++n) {
    std::atomic<int> started{0}, early{0};
    run_thread_ranks(n, [&](ThreadRank& t) {
      auto& e = t.engine;
      const int me = t.world.rank();
      auto comm = std::make_shared<CommImpl>(e, 15, me, n);
      for (int round = 1; round <= 12; ++round) {
        if (round % n == me && round % 3 == 0)
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        started.fetch_add(1);
        e.wait(e.start(rmp::coll::ibarrier(comm)));
        if (started.load() < round * n) early.fetch_add(1);
        e.wait(
            e.start(rmp::coll::ibarrier(comm)));  // nobody starts the next round before the check
      }
    });
    EXPECT_EQ(early.load(), 0) << n << " ranks: waits that ended before every rank started";
  }
}

// A rank whose ibcast buffer is shorter than the root's message: its operation fails with
// Errc::truncate naming ibcast (not an internal receive), the root's completes.
TEST(NbcThreads, BufferShorterThanTheRootsMessage_IbcastFailsNamingItself) {
  run_thread_ranks(2, [](ThreadRank& t) {
    auto& e = t.engine;
    const int me = t.world.rank();
    auto comm = std::make_shared<CommImpl>(e, 9, me, 2);
    std::vector<char> buf(100, me == 0 ? 'r' : '.');
    RequestState* r = e.start(rmp::coll::ibcast(comm, buf.data(), me == 0 ? 100 : 50, 0));
    if (me == 0) {
      e.wait(r);
      return;
    }
    try {
      e.wait(r);
      ADD_FAILURE() << "the short ibcast succeeded";
    } catch (const rmp::Error& err) {
      EXPECT_EQ(err.code(), rmp::Errc::truncate) << err.what();
      EXPECT_EQ(std::string(err.what()).rfind("ibcast: ", 0), 0u) << err.what();
    }
  });
}

// A wait on a non-blocking collective ended by a failed peer stops the operation: its
// receive not yet matched is withdrawn, and the message that comes later stays unexpected
// instead of landing in the buffer the caller may have freed.
TEST(NbcThreads, WaitEndedByPeerFailure_StopsWritingTheBuffer) {
  std::atomic<bool> gave_up{false};
  run_thread_ranks(2, [&](ThreadRank& t) {
    auto& e = t.engine;
    const int me = t.world.rank();
    auto comm = std::make_shared<CommImpl>(e, 11, me, 2);
    std::vector<char> buf(64, me == 1 ? 'x' : '.');
    if (me == 1) {  // the root, late: it starts once rank 0 gave up waiting for it
      while (!gave_up.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      e.wait(e.start(rmp::coll::ibcast(comm, buf.data(), buf.size(), 1)));
      return;
    }
    RequestState* r = e.start(rmp::coll::ibcast(comm, buf.data(), buf.size(), 1));
    rmp::rt::report_peer_failure(t.store, {1, "rank 1 (test) exited with status 3"});
    try {
      e.wait(r);
      ADD_FAILURE() << "the wait did not end";
    } catch (const rmp::Error& err) {
      EXPECT_EQ(err.code(), rmp::Errc::peer_failed) << err.what();
    }
    gave_up = true;
    // The first operation on the communicator: tag 2^24 + 0 on its collective channel.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!e.iprobe(*comm, Channel::collective, 1, 1 << 24).has_value() && buf[0] == '.') {
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "the root's message never arrived";
        break;
      }
      std::this_thread::yield();
    }
    EXPECT_EQ(buf[0], '.') << "the given-up ibcast wrote the buffer";
  });
}
