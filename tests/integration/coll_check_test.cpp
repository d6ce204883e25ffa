// RMP_COLL_CHECK=1 (api/coll_check.hpp; this executable runs only with it set): ranks that
// call a collective differently all get the same rmp::Error instead of hanging or receiving
// part of the data, and the communicator stays usable. (The correct calls under the check are
// the collective suite's `collcheck` variant.)
#include "harness.hpp"

#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

namespace {

using namespace itest;
using rmp::Errc;
using rmp::Op;

// The ranks still agree after a detected mismatch: a correct collective works.
void still_usable() {
  int v = rank() + 1, sum = 0;
  rmp::world().allreduce(&v, &sum, 1, Op::sum);
  EXPECT_EQ(sum, size() * (size() + 1) / 2) << "allreduce after the mismatch";
}

TEST(CollCheck, IsOn) {
  const char* v = std::getenv("RMP_COLL_CHECK");
  ASSERT_TRUE(v && std::string(v) == "1") << "this suite runs with RMP_COLL_CHECK=1";
}

TEST(CollCheck, BcastCountsDiffer_InvalidCountOnEveryRank) {
  const rmp::Comm& w = rmp::world();
  const int last = size() - 1;
  for (std::size_t n : {std::size_t{8}, std::size_t{300000}}) {
    std::vector<int> v(n + 10, 7);
    const std::size_t mine = rank() == last ? n + 10 : n;  // the last rank expects more
    expect_error([&] { w.bcast(v.data(), mine, 0); }, Errc::invalid_count,
                 {"bcast",
                  "ranks disagree on the count: rank 0 (the root) passed " + std::to_string(n) +
                      ", rank " + std::to_string(last) + " " + std::to_string(n + 10),
                  "RMP_COLL_CHECK"},
                 "bcast " + std::to_string(n));
    still_usable();
  }
}

TEST(CollCheck, RootsDiffer_InvalidRank) {
  const rmp::Comm& w = rmp::world();
  std::vector<double> v(16, 1.0), out(16);
  const int root = rank() == size() - 1 ? 1 : 0;
  expect_error([&] { w.reduce(v.data(), out.data(), 16, Op::sum, root); }, Errc::invalid_rank,
               {"reduce", "ranks disagree on the root", "rank 0 passed 0"}, "reduce");
  still_usable();
}

TEST(CollCheck, OpsAndTypesDiffer_InvalidArgument) {
  const rmp::Comm& w = rmp::world();
  std::vector<double> d(32, 1.0), dout(32);
  std::vector<float> f(64, 1.0f), fout(64);
  const bool odd = rank() % 2 == 1;
  expect_error([&] { w.allreduce(d.data(), dout.data(), 32, odd ? Op::max : Op::sum); },
               Errc::invalid_argument, {"allreduce", "ranks disagree on the op", "sum", "max"},
               "allreduce op");
  // The same bytes (256), different element types.
  expect_error(
      [&] {
        if (odd) w.allreduce(f.data(), fout.data(), 64, Op::sum);
        else w.allreduce(d.data(), dout.data(), 32, Op::sum);
      },
      Errc::invalid_argument, {"allreduce", "ranks disagree on the element type"},
      "allreduce type");
  expect_error(
      [&] {
        w.allreduce(d.data(), dout.data(), 32, Op::sum,
                    odd ? rmp::Compression::bf16 : rmp::Compression::none);
      },
      Errc::invalid_argument, {"allreduce", "ranks disagree on the compression"},
      "allreduce compression");
  still_usable();
}

// The compression that will run is compared, not the argument as written: with
// RMP_ALLREDUCE_COMPRESS=fp16 (variant collcheckfp16) a call without the argument compresses,
// so it disagrees with an explicit none and agrees with an explicit fp16.
TEST(CollCheck, CompressionKnobAgainstExplicitArgument) {
  const char* knob = std::getenv("RMP_ALLREDUCE_COMPRESS");
  const bool fp16 = knob && std::string(knob) == "fp16";
  const rmp::Comm& w = rmp::world();
  std::vector<double> d(32, 0.5), out(32);
  const bool odd = rank() % 2 == 1;
  if (fp16) {
    expect_error(
        [&] {
          if (odd) w.allreduce(d.data(), out.data(), 32, Op::sum, rmp::Compression::none);
          else w.allreduce(d.data(), out.data(), 32, Op::sum);
        },
        Errc::invalid_argument, {"allreduce", "ranks disagree on the compression"},
        "knob fp16 against explicit none");
  }
  // Agreeing forms: explicit fp16 against the knob's (or none against none without it).
  if (odd)
    w.allreduce(d.data(), out.data(), 32, Op::sum,
                fp16 ? rmp::Compression::fp16 : rmp::Compression::none);
  else w.allreduce(d.data(), out.data(), 32, Op::sum);
  EXPECT_NEAR(out[0], 0.5 * size(), 0.01 * size());
  still_usable();
}

// The element types must match (MPI: type signatures) wherever there are elements, also when
// the bytes do: 4 doubles against 4 int64, 8 int32 against 4 int64.
TEST(CollCheck, ElementTypesDiffer_InvalidArgument) {
  const rmp::Comm& w = rmp::world();
  const bool last = rank() == size() - 1;
  std::vector<double> d(4 * size(), 1.0);
  std::vector<std::int64_t> l(4 * size(), 1);
  std::vector<std::int32_t> i(8 * size(), 1), iout(8 * size());
  std::vector<std::int64_t> lout(4 * size());
  expect_error(
      [&] {
        if (last) w.bcast(d.data(), 4, 0);
        else w.bcast(l.data(), 4, 0);
      },
      Errc::invalid_argument, {"bcast", "ranks disagree on the element type", "int64", "double"},
      "bcast double against int64");
  expect_error(
      [&] {
        if (last) w.allgather(i.data(), 8, iout.data());
        else w.allgather(l.data(), 4, lout.data());
      },
      Errc::invalid_argument, {"allgather", "ranks disagree on the element type"},
      "allgather int32 against int64");
  still_usable();
}

TEST(CollCheck, DifferentCollectives_InvalidArgumentNamingBoth) {
  const rmp::Comm& w = rmp::world();
  std::vector<int> v(4, 1), out(4);
  expect_error(
      [&] {
        if (rank() == size() - 1) w.allreduce(v.data(), out.data(), 4, Op::sum);
        else w.bcast(v.data(), 4, 0);
      },
      Errc::invalid_argument,
      {"rank 0 called bcast, rank " + std::to_string(size() - 1) + " called allreduce"},
      "bcast against allreduce");
  expect_error(
      [&] {
        if (rank() == 0) w.barrier();
        else w.allgather(v.data(), 1, out.data());
      },
      Errc::invalid_argument, {"rank 0 called barrier, rank 1 called allgather"},
      "barrier against allgather");
  still_usable();
}

// dup and split are collective calls too: a rank creating a communicator while the others
// call a collective (or the other call) read each other's messages on the communicator's
// collective channel, and hung. Checked, every rank throws naming both calls.
TEST(CollCheck, CommunicatorCallAgainstCollective_InvalidArgumentNamingBoth) {
  const rmp::Comm& w = rmp::world();
  const int last = size() - 1;
  expect_error(
      [&] {
        if (rank() == last) w.barrier();
        else (void)w.dup();
      },
      Errc::invalid_argument,
      {"dup", "rank 0 called dup, rank " + std::to_string(last) + " called barrier"},
      "dup against barrier");
  std::vector<int> v(4, 1), out(4 * static_cast<std::size_t>(size()));
  expect_error(
      [&] {
        if (rank() == 0) w.allgather(v.data(), 4, out.data());
        else (void)w.split(0, rank());
      },
      Errc::invalid_argument, {"rank 0 called allgather, rank 1 called split"},
      "allgather against split");
  expect_error(
      [&] {
        if (rank() == 0) (void)w.dup();
        else (void)w.split(rank() % 2, 0);
      },
      Errc::invalid_argument, {"rank 0 called dup, rank 1 called split"}, "dup against split");
  still_usable();
  // Matching calls pass the check, and the communicators work.
  rmp::Comm d = w.dup(), s = w.split(rank() % 2, -rank());
  int one = 1, sum = 0;
  d.allreduce(&one, &sum, 1, Op::sum);
  EXPECT_EQ(sum, size());
  s.allreduce(&one, &sum, 1, Op::sum);
  EXPECT_EQ(sum, (size() + (rank() % 2 == 0 ? 1 : 0)) / 2);
  EXPECT_EQ(s.rank(), (s.size() - 1) - rank() / 2);
}

// One rank's own arguments are wrong (its root out of range): it throws its own error, and
// the others, instead of waiting for it in the bcast, throw naming it.
TEST(CollCheck, OneRankRejectsItsArguments_OthersNameIt) {
  const rmp::Comm& w = rmp::world();
  std::vector<int> v(4, 1);
  const int bad = size() - 1;
  if (rank() == bad) {
    expect_error([&] { w.bcast(v.data(), 4, size() + 3); }, Errc::invalid_rank,
                 {"bcast", "root", std::to_string(size() + 3)}, "own error");
  } else {
    expect_error([&] { w.bcast(v.data(), 4, 0); }, Errc::invalid_rank,
                 {"bcast: rank " + std::to_string(bad) + " rejected its arguments (invalid_rank"},
                 "a peer's error");
  }
  still_usable();
}

TEST(CollCheck, GathervCountsDiffer_InvalidCount) {
  const rmp::Comm& w = rmp::world();
  const int n = size();
  std::vector<std::size_t> counts(n), displs(n);
  for (int q = 0; q < n; ++q) counts[q] = static_cast<std::size_t>(q) + 1;
  std::partial_sum(counts.begin(), counts.end() - 1, displs.begin() + 1);
  std::vector<int> out(displs.back() + counts.back() + 4);
  // The last rank sends one element more than the root expects from it.
  const std::size_t mine = counts[rank()] + (rank() == n - 1 ? 1 : 0);
  std::vector<int> in(mine, rank());
  const std::string which = "rank " + std::to_string(n - 1) + " passed count " +
                            std::to_string(n + 1) + ", the root's counts[" + std::to_string(n - 1) +
                            "] is " + std::to_string(n);
  expect_error([&] { w.gatherv(in.data(), mine, out.data(), counts, displs, 0); },
               Errc::invalid_count, {"gatherv", which}, "gatherv");
  expect_error([&] { w.scatterv(out.data(), counts, displs, in.data(), mine, 0); },
               Errc::invalid_count, {"scatterv", which}, "scatterv");
  still_usable();
}

TEST(CollCheck, AlltoallvCountsDiffer_InvalidCount) {
  const rmp::Comm& w = rmp::world();
  const int n = size();
  std::vector<std::size_t> sc(n, 2), rc(n, 2), sd(n), rd(n);
  for (int q = 0; q < n; ++q) sd[q] = rd[q] = 3 * static_cast<std::size_t>(q);
  if (rank() == 0) sc[n - 1] = 3;  // rank n-1 expects 2 from rank 0
  std::vector<int> in(3 * n, rank()), out(3 * n);
  expect_error([&] { w.alltoallv(in.data(), sc, sd, out.data(), rc, rd); }, Errc::invalid_count,
               {"alltoallv", "rank 0's scounts[" + std::to_string(n - 1) + "] is 3, rank " +
                                 std::to_string(n - 1) + "'s rcounts[0] is 2"},
               "alltoallv");
  still_usable();
}

TEST(CollCheck, ReduceScatterCountsDiffer_InvalidCount) {
  const rmp::Comm& w = rmp::world();
  const int n = size();
  std::vector<std::size_t> counts(n, 2);
  if (rank() == n - 1) {
    counts[0] = 1;  // the others have 2 for rank 0
    counts[n - 1] = 3;
  }
  std::vector<int> in(2 * n + 1, 1), out(3);
  expect_error([&] { w.reduce_scatter(in.data(), out.data(), counts, Op::sum); },
               Errc::invalid_count, {"reduce_scatter", "ranks disagree on 'counts'"},
               "reduce_scatter");
  still_usable();
}

// Every collective called alike passes the check (the collective suite's `collcheck` variant
// covers them at every size); here the v-variants with uneven counts and in place.
TEST(CollCheck, MatchingVariableCounts_Pass) {
  const rmp::Comm& w = rmp::world();
  const int n = size(), r = rank();
  std::vector<std::size_t> counts(n), displs(n);
  for (int q = 0; q < n; ++q) counts[q] = static_cast<std::size_t>(q % 3) + 1;
  std::partial_sum(counts.begin(), counts.end() - 1, displs.begin() + 1);
  const std::size_t total = displs.back() + counts.back();
  std::vector<int> in(counts[r], r), out(total, -1);
  w.allgatherv(in.data(), counts[r], out.data(), counts, displs);
  for (int q = 0; q < n; ++q) EXPECT_EQ(out[displs[q]], q);
  std::vector<std::size_t> sc(n), rc(n), sd(n), rd(n);
  for (int q = 0; q < n; ++q) sc[q] = static_cast<std::size_t>((r + q) % 3), rc[q] = (q + r) % 3;
  std::partial_sum(sc.begin(), sc.end() - 1, sd.begin() + 1);
  std::partial_sum(rc.begin(), rc.end() - 1, rd.begin() + 1);
  std::vector<int> a(sd.back() + sc.back() + 1, r), b(rd.back() + rc.back() + 1, -1);
  w.alltoallv(a.data(), sc, sd, b.data(), rc, rd);
  for (int q = 0; q < n; ++q) {
    if (rc[q]) {
      EXPECT_EQ(b[rd[q]], q);
    }
  }
}

}  // namespace
