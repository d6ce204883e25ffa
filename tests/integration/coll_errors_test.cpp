// Argument errors of the collectives (API.md §Errors): local checks that every rank makes
// alike, so no rank enters a collective the others left — root out of range, a null buffer
// with a non-zero count, an Op that does not apply to the element type, an invalid
// communicator, in_place where it is not allowed; and ranks called differently (counts that
// differ: truncation on point-to-point algorithms, the node-shared paths' own comparison).
#include "harness.hpp"

#include <algorithm>
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace {

using namespace itest;
using rmp::Errc;
using rmp::Op;

}  // namespace

TEST(CollErrors, RootOutOfRange_InvalidRank) {
  const rmp::Comm& w = rmp::world();
  std::vector<int> v(size() * 4), o(size() * 4);
  std::vector<std::size_t> counts(size(), 4), displs(size());
  for (int bad : {-1, size(), size() + 7}) {
    const std::string b = std::to_string(bad);
    expect_error([&] { w.bcast(v.data(), 4, bad); }, Errc::invalid_rank, {"bcast", "root", b},
                 "bcast");
    expect_error([&] { w.reduce(v.data(), o.data(), 4, Op::sum, bad); }, Errc::invalid_rank,
                 {"reduce", "root", b}, "reduce");
    expect_error([&] { w.gather(v.data(), 4, o.data(), bad); }, Errc::invalid_rank,
                 {"gather", "root", b}, "gather");
    expect_error([&] { w.scatter(v.data(), 4, o.data(), bad); }, Errc::invalid_rank,
                 {"scatter", "root", b}, "scatter");
    expect_error([&] { w.gatherv(v.data(), 4, o.data(), counts, displs, bad); }, Errc::invalid_rank,
                 {"gatherv", "root", b}, "gatherv");
    expect_error([&] { w.scatterv(v.data(), counts, displs, o.data(), 4, bad); },
                 Errc::invalid_rank, {"scatterv", "root", b}, "scatterv");
    expect_error([&] { (void)w.ibcast(v.data(), 4, bad); }, Errc::invalid_rank,
                 {"ibcast", "root", b}, "ibcast");
  }
}

// Ranks that call bcast with different counts make an erroneous program (as in MPI); where a
// point-to-point algorithm carries it, the rank whose count is the smaller gets more data than
// its count holds: Errc::truncate naming bcast and its count, not an internal receive. Only
// the binomial tree forced and two ranks (a receiver that fails forwards nothing further down
// a tree; the node-shared paths compare counts their own way: the last test).
TEST(CollErrors, BcastCountsDiffer_TruncateNamingTheCollective) {
  const char* algo = std::getenv("RMP_BCAST_ALGO");
  if (size() != 2 || algo == nullptr || std::string(algo) != "binomial")
    GTEST_SKIP() << "needs 2 ranks and RMP_BCAST_ALGO=binomial (variant collalgos3)";
  const rmp::Comm& w = rmp::world();
  std::vector<int> v(8, rank() == 0 ? 5 : 0);
  if (rank() == 0) {
    w.bcast(v.data(), 8, 0);
  } else {
    expect_error([&] { w.bcast(v.data(), 4, 0); }, Errc::truncate, {"bcast: count", "32 bytes"},
                 "bcast with the smaller count");
  }
  w.barrier();  // the truncated receive took the message: the world goes on
}

// The same for scatter (point-to-point only): its block error is said as scatter's, not as
// scatterv's, whose code it shares. Two ranks: rank 1's count is half the root's.
TEST(CollErrors, ScatterCountsDiffer_TruncateNamingScatter) {
  const char* check = std::getenv("RMP_COLL_CHECK");
  if (size() != 2 || (check && std::string(check) == "1"))
    GTEST_SKIP() << "needs 2 ranks, without RMP_COLL_CHECK=1 (which refuses the call first)";
  const rmp::Comm& w = rmp::world();
  std::vector<int> all(16, 7), mine(8, 0);
  if (rank() == 0) {
    w.scatter(all.data(), 8, mine.data(), 0);
  } else {
    expect_error([&] { w.scatter(all.data(), 4, mine.data(), 0); }, Errc::truncate,
                 {"scatter: the block from rank 0", "(16 bytes)"},
                 "scatter with the smaller count");
  }
  w.barrier();
}

// v-variants whose counts disagree by an empty block (0 elements against 1, both ways): an
// empty block goes as a message too, so the rank whose count differs gets an error (the longer
// block: truncate, its message consumed; the shorter one: invalid_count), never a receive that
// waits for ever nor a message left over to match the next call's receive; the next call, with
// counts that agree, gets its own data. Rank 0 and the last rank disagree; the others agree.
TEST(CollErrors, VCountsDifferByAnEmptyBlock_ErrorThenTheNextCallIsRight) {
  if (size() < 2) GTEST_SKIP() << "one rank has nobody to differ from";
  if (env_is("RMP_COLL_CHECK", "1"))
    GTEST_SKIP() << "RMP_COLL_CHECK=1 refuses these calls first (rmp_coll_check_itest)";
  const rmp::Comm& w = rmp::world();
  const int n = size(), odd = n - 1, me = rank();
  const auto un = static_cast<std::size_t>(n);
  std::vector<std::size_t> ones(un, 1), displs(un);
  for (std::size_t i = 0; i < un; ++i) displs[i] = i;
  for (const bool zero_at_0 : {true, false}) {
    // Rank 0's count for the block the last rank sends it (or it sends the last rank), and the
    // last rank's: one of them 0. The block's receiver gets the error.
    const std::size_t at_0 = zero_at_0 ? 0 : 1, at_odd = zero_at_0 ? 1 : 0;
    const std::string how = zero_at_0 ? " (rank 0's count 0, the last rank's 1)"
                                      : " (rank 0's count 1, the last rank's 0)";
    std::vector<std::size_t> counts = ones;
    counts[static_cast<std::size_t>(odd)] = at_0;
    {  // gatherv to rank 0: rank 0 receives the last rank's block
      const rmp::Comm d = w.dup();
      std::vector<int> out(un, -1);
      int in = 100 + me;
      const std::size_t mine = me == odd ? at_odd : 1;
      if (me == 0) {
        expect_error([&] { d.gatherv(&in, mine, out.data(), counts, displs, 0); },
                     zero_at_0 ? Errc::truncate : Errc::invalid_count, {"gatherv", " from rank "},
                     "gatherv" + how);
      } else {
        d.gatherv(&in, mine, out.data(), counts, displs, 0);
      }
      in = 200 + me;
      d.gatherv(&in, 1, out.data(), ones, displs, 0);
      if (me == 0) {
        for (int i = 0; i < n; ++i)
          EXPECT_EQ(out[static_cast<std::size_t>(i)], 200 + i) << "gatherv after" << how;
      }
    }
    {  // scatterv from rank 0: the last rank receives its block
      const rmp::Comm d = w.dup();
      std::vector<int> in(un);
      for (std::size_t i = 0; i < un; ++i) in[i] = 300 + static_cast<int>(i);
      int got = -1;
      const std::size_t mine = me == odd ? at_odd : 1;
      if (me == odd) {
        expect_error([&] { d.scatterv(in.data(), counts, displs, &got, mine, 0); },
                     zero_at_0 ? Errc::invalid_count : Errc::truncate,
                     {"scatterv", "the block from rank "}, "scatterv" + how);
      } else {
        d.scatterv(in.data(), counts, displs, &got, mine, 0);
      }
      for (std::size_t i = 0; i < un; ++i) in[i] = 400 + static_cast<int>(i);
      d.scatterv(in.data(), ones, displs, &got, 1, 0);
      EXPECT_EQ(got, 400 + me) << "scatterv after" << how;
    }
    {  // alltoallv: rank 0 receives the last rank's block
      const rmp::Comm d = w.dup();
      std::vector<int> in(un), out(un, -1);
      for (std::size_t i = 0; i < un; ++i) in[i] = 1000 * me + static_cast<int>(i);
      std::vector<std::size_t> scounts = ones, rcounts = ones;
      if (me == 0) rcounts[static_cast<std::size_t>(odd)] = at_0;
      if (me == odd) scounts[0] = at_odd;
      if (me == 0) {
        expect_error([&] { d.alltoallv(in.data(), scounts, displs, out.data(), rcounts, displs); },
                     zero_at_0 ? Errc::truncate : Errc::invalid_count,
                     {"alltoallv", "the block from rank "}, "alltoallv" + how);
      } else {
        d.alltoallv(in.data(), scounts, displs, out.data(), rcounts, displs);
      }
      for (std::size_t i = 0; i < un; ++i) in[i] = 5000 + 1000 * me + static_cast<int>(i);
      d.alltoallv(in.data(), ones, displs, out.data(), ones, displs);
      for (int i = 0; i < n; ++i)
        EXPECT_EQ(out[static_cast<std::size_t>(i)], 5000 + 1000 * i + me)
            << "alltoallv after" << how;
    }
  }
}

TEST(CollErrors, NullBufferWithCount_InvalidArgument) {
  const rmp::Comm& w = rmp::world();
  std::vector<int> v(size() * 4);
  int* null = nullptr;
  expect_error([&] { w.bcast(null, 4, 0); }, Errc::invalid_argument, {"bcast", "buf"}, "bcast");
  expect_error([&] { w.allreduce(null, v.data(), 4, Op::sum); }, Errc::invalid_argument,
               {"allreduce", "in"}, "allreduce in");
  expect_error([&] { w.allreduce(v.data(), null, 4, Op::sum); }, Errc::invalid_argument,
               {"allreduce", "out"}, "allreduce out");
  expect_error([&] { w.allgather(v.data(), 4, null); }, Errc::invalid_argument,
               {"allgather", "out"}, "allgather");
  expect_error([&] { w.alltoall(null, 4, v.data()); }, Errc::invalid_argument, {"alltoall", "in"},
               "alltoall");
  expect_error([&] { w.reduce_scatter_block(null, v.data(), 4, Op::sum); }, Errc::invalid_argument,
               {"reduce_scatter_block", "in"}, "reduce_scatter_block");
  expect_error([&] { w.scan(v.data(), null, 4, Op::sum); }, Errc::invalid_argument, {"scan", "out"},
               "scan");
  expect_error([&] { w.exscan(null, v.data(), 4, Op::sum); }, Errc::invalid_argument,
               {"exscan", "in"}, "exscan");
  // In place, reduce_scatter's `out` holds the whole input: null is an error even where this
  // rank's own count is 0 (with one rank there is nothing else: no error).
  std::vector<std::size_t> counts(static_cast<std::size_t>(size()), 2);
  counts[static_cast<std::size_t>(rank())] = 0;
  if (size() > 1)
    expect_error([&] { w.reduce_scatter(rmp::in_place<int>, null, counts, Op::sum); },
                 Errc::invalid_argument, {"reduce_scatter", "out"}, "reduce_scatter in place");
  // A root-only buffer is not significant elsewhere: null there is fine (no error, no hang).
  std::vector<int> mine(4, rank()), all(rank() == 0 ? 4 * size() : 0);
  w.gather(mine.data(), 4, rank() == 0 ? all.data() : nullptr, 0);
  if (rank() == 0) {
    EXPECT_EQ(all.back(), size() - 1);
  }
  // Zero elements need no buffer.
  w.allreduce(null, null, 0, Op::sum);
  w.bcast(null, 0, 0);
  // The rest of the calls, each with its input or output null on every rank (valid otherwise).
  std::vector<int> big(4 * static_cast<std::size_t>(size()));
  std::vector<std::size_t> fours(static_cast<std::size_t>(size()), 4), at(fours.size());
  for (std::size_t i = 0; i < at.size(); ++i) at[i] = 4 * i;
  expect_error([&] { w.reduce(null, big.data(), 4, Op::sum, 0); }, Errc::invalid_argument,
               {"reduce", "in"}, "reduce in");
  expect_error([&] { w.gather(null, 4, big.data(), 0); }, Errc::invalid_argument, {"gather", "in"},
               "gather in");
  expect_error([&] { w.scatter(big.data(), 4, null, 0); }, Errc::invalid_argument,
               {"scatter", "out"}, "scatter out");
  expect_error([&] { w.gatherv(null, 4, big.data(), fours, at, 0); }, Errc::invalid_argument,
               {"gatherv", "in"}, "gatherv in");
  expect_error([&] { w.scatterv(big.data(), fours, at, null, 4, 0); }, Errc::invalid_argument,
               {"scatterv", "out"}, "scatterv out");
  expect_error([&] { w.allgatherv(v.data(), 4, null, fours, at); }, Errc::invalid_argument,
               {"allgatherv", "out"}, "allgatherv out");
  expect_error([&] { w.alltoallv(null, fours, at, big.data(), fours, at); }, Errc::invalid_argument,
               {"alltoallv", "in"}, "alltoallv in");
  expect_error([&] { w.reduce_scatter(null, v.data(), fours, Op::sum); }, Errc::invalid_argument,
               {"reduce_scatter", "in"}, "reduce_scatter in");
  expect_error([&] { (void)w.ibcast(null, 4, 0); }, Errc::invalid_argument, {"ibcast", "buf"},
               "ibcast buf");
  expect_error([&] { (void)w.iallreduce(null, v.data(), 4, Op::sum); }, Errc::invalid_argument,
               {"iallreduce", "in"}, "iallreduce in");
}

TEST(CollErrors, OpNotApplicableToType_InvalidArgument) {
  const rmp::Comm& w = rmp::world();
  std::vector<float> f(4);
  std::vector<double> d(size() * 4), d2(size() * 4);
  std::vector<std::complex<double>> z(4), z2(4);
  std::vector<std::byte> b(4), b2(4);
  expect_error([&] { w.allreduce(f.data(), f.data(), 4, Op::band); }, Errc::invalid_argument,
               {"allreduce", "band", "float"}, "band float");
  expect_error([&] { w.reduce(d.data(), d2.data(), 4, Op::land, 0); }, Errc::invalid_argument,
               {"reduce", "land", "double"}, "land double");
  expect_error([&] { w.allreduce(z.data(), z2.data(), 4, Op::min); }, Errc::invalid_argument,
               {"allreduce", "min"}, "min complex");
  expect_error([&] { w.allreduce(b.data(), b2.data(), 4, Op::sum); }, Errc::invalid_argument,
               {"allreduce", "sum"}, "sum byte");
  expect_error([&] { w.scan(f.data(), f.data(), 4, Op::bxor); }, Errc::invalid_argument,
               {"scan", "bxor"}, "scan bxor float");
  expect_error([&] { w.reduce_scatter_block(d.data(), d2.data(), 4, Op::bor); },
               Errc::invalid_argument, {"reduce_scatter_block", "bor"},
               "reduce_scatter_block bor double");
  std::vector<std::size_t> fours(static_cast<std::size_t>(size()), 4);
  expect_error([&] { w.reduce_scatter(d.data(), d2.data(), fours, Op::band); },
               Errc::invalid_argument, {"reduce_scatter", "band", "double"},
               "reduce_scatter band double");
  expect_error([&] { w.exscan(f.data(), f.data(), 4, Op::lor); }, Errc::invalid_argument,
               {"exscan", "lor", "float"}, "exscan lor float");
  expect_error([&] { (void)w.iallreduce(f.data(), f.data(), 4, Op::band); }, Errc::invalid_argument,
               {"iallreduce", "band", "float"}, "iallreduce band float");
}

TEST(CollErrors, InvalidCommunicator_InvalidComm) {
  rmp::Comm none;
  rmp::Comm moved = rmp::world().dup();
  rmp::Comm taken = std::move(moved);
  std::vector<int> v(4), o(4);
  for (const rmp::Comm* c : {&none, &moved}) {
    expect_error([&] { c->barrier(); }, Errc::invalid_comm, {"barrier"}, "barrier");
    expect_error([&] { c->bcast(v.data(), 4, 0); }, Errc::invalid_comm, {"bcast"}, "bcast");
    expect_error([&] { c->allreduce(v.data(), o.data(), 4, Op::sum); }, Errc::invalid_comm,
                 {"allreduce"}, "allreduce");
    expect_error([&] { c->alltoall(v.data(), 1, o.data()); }, Errc::invalid_comm, {"alltoall"},
                 "alltoall");
    expect_error([&] { c->reduce(v.data(), o.data(), 4, Op::sum, 0); }, Errc::invalid_comm,
                 {"reduce"}, "reduce");
    expect_error([&] { c->gather(v.data(), 1, o.data(), 0); }, Errc::invalid_comm, {"gather"},
                 "gather");
    expect_error([&] { c->scatter(v.data(), 1, o.data(), 0); }, Errc::invalid_comm, {"scatter"},
                 "scatter");
    expect_error([&] { c->allgather(v.data(), 1, o.data()); }, Errc::invalid_comm, {"allgather"},
                 "allgather");
    expect_error([&] { c->scan(v.data(), o.data(), 4, Op::sum); }, Errc::invalid_comm, {"scan"},
                 "scan");
    expect_error([&] { c->reduce_scatter_block(v.data(), o.data(), 1, Op::sum); },
                 Errc::invalid_comm, {"reduce_scatter_block"}, "reduce_scatter_block");
    expect_error([&] { (void)c->ibarrier(); }, Errc::invalid_comm, {"ibarrier"}, "ibarrier");
    expect_error([&] { (void)c->ibcast(v.data(), 4, 0); }, Errc::invalid_comm, {"ibcast"},
                 "ibcast");
    expect_error([&] { (void)c->iallreduce(v.data(), o.data(), 4, Op::sum); }, Errc::invalid_comm,
                 {"iallreduce"}, "iallreduce");
    expect_error([&] { (void)c->dup(); }, Errc::invalid_comm, {"dup"}, "dup");
    expect_error([&] { (void)c->split(0, 0); }, Errc::invalid_comm, {"split"}, "split");
  }
  taken.barrier();  // the communicator itself lives on in the moved-to handle
}

TEST(CollErrors, InPlaceAwayFromTheRoot_InvalidArgument) {
  // Only the non-roots call (the root would otherwise wait for them): the check is local.
  // With RMP_COLL_CHECK=1 (the collcheck variant) the ranks compare their calls first, so the
  // root calls too, correctly, and learns that the others rejected theirs.
  const rmp::Comm& w = rmp::world();
  std::vector<int> v(4 * size());
  const char* check = std::getenv("RMP_COLL_CHECK");
  const bool checking = check && std::string(check) == "1";
  if (rank() != 0) {
    expect_error([&] { w.reduce(rmp::in_place<int>, v.data(), 4, Op::sum, 0); },
                 Errc::invalid_argument, {"reduce", "in_place"}, "reduce in_place off root");
    const std::string me = "this is rank " + std::to_string(rank());
    expect_error([&] { w.gather(rmp::in_place<int>, 4, v.data(), 0); }, Errc::invalid_argument,
                 {"gather: in:", "in_place", "(rank 0)", me}, "gather in_place off root");
    expect_error([&] { w.gatherv(rmp::in_place<int>, 4, v.data(), {}, {}, 0); },
                 Errc::invalid_argument, {"gatherv", "in_place"}, "gatherv in_place off root");
    // With no `out` (not significant off the root): still the in_place error, not a null `in`.
    expect_error([&] { w.gatherv(rmp::in_place<int>, 4, static_cast<int*>(nullptr), {}, {}, 0); },
                 Errc::invalid_argument, {"gatherv", "in_place is allowed only at the root"},
                 "gatherv in_place off root, no out");
  } else if (checking && size() > 1) {
    expect_error([&] { w.reduce(rmp::in_place<int>, v.data(), 4, Op::sum, 0); },
                 Errc::invalid_argument, {"reduce: rank 1 rejected its arguments"},
                 "reduce at the root");
    expect_error([&] { w.gather(rmp::in_place<int>, 4, v.data(), 0); }, Errc::invalid_argument,
                 {"gather: rank 1 rejected its arguments"}, "gather at the root");
    std::vector<std::size_t> counts(static_cast<std::size_t>(size()), 4), displs(counts.size());
    for (std::size_t q = 0; q < displs.size(); ++q) displs[q] = 4 * q;
    for (int call = 0; call < 2; ++call)  // one for each of the non-roots' two gatherv calls
      expect_error([&] { w.gatherv(rmp::in_place<int>, 4, v.data(), counts, displs, 0); },
                   Errc::invalid_argument, {"gatherv: rank 1 rejected its arguments"},
                   "gatherv at the root");
  }
}

// in_place where it has no meaning (bcast's buffer, a scatter's input, alltoallv's): refused
// on every rank alike, never read or written as a buffer of one element.
TEST(CollErrors, InPlaceWhereItHasNoMeaning_InvalidArgument) {
  const rmp::Comm& w = rmp::world();
  const auto n = static_cast<std::size_t>(size());
  std::vector<int> v(4 * n, 7);
  std::vector<std::size_t> counts(n, 4), displs(n);
  for (std::size_t q = 0; q < n; ++q) displs[q] = 4 * q;
  int* ip = const_cast<int*>(rmp::in_place<int>);
  expect_error([&] { w.bcast(ip, 4, 0); }, Errc::invalid_argument, {"bcast", "'buf'", "in_place"},
               "bcast");
  expect_error([&] { (void)w.ibcast(ip, 4, 0); }, Errc::invalid_argument,
               {"ibcast", "'buf'", "in_place"}, "ibcast");
  expect_error([&] { w.scatter(rmp::in_place<int>, 4, v.data(), 0); }, Errc::invalid_argument,
               {"scatter", "'in'", "in_place"}, "scatter");
  expect_error([&] { w.scatterv(rmp::in_place<int>, counts, displs, v.data(), 4, 0); },
               Errc::invalid_argument, {"scatterv", "'in'", "in_place"}, "scatterv");
  expect_error([&] { w.alltoallv(rmp::in_place<int>, counts, displs, v.data(), counts, displs); },
               Errc::invalid_argument, {"alltoallv", "'in'", "in_place"}, "alltoallv");
  EXPECT_EQ(v, std::vector<int>(4 * n, 7)) << "a refused call wrote into its output";
  w.barrier();  // and the communicator still works
}

// A displacement whose block ends beyond the address space: the error names the displacement
// and count of the block, as given.
TEST(CollErrors, DisplacementBeyondTheAddressSpace_InvalidCountNamingIt) {
  const rmp::Comm& w = rmp::world();
  const auto n = static_cast<std::size_t>(size());
  std::vector<int> a(1), b(4 * n);
  std::vector<std::size_t> counts(n, 1), displs(n), far(n);
  for (std::size_t q = 0; q < n; ++q) displs[q] = q;
  far = displs;
  far[n - 1] = SIZE_MAX / 2;  // × 4 bytes: beyond
  const std::string last = std::to_string(n - 1), d = std::to_string(SIZE_MAX / 2);
  expect_error([&] { w.allgatherv(a.data(), 1, b.data(), counts, far); }, Errc::invalid_count,
               {"allgatherv", "displs[" + last + "] = " + d, "counts[" + last + "] = 1"},
               "allgatherv");
  expect_error([&] { w.alltoallv(b.data(), counts, far, b.data(), counts, displs); },
               Errc::invalid_count, {"alltoallv", "sdispls[" + last + "] = " + d},
               "alltoallv sdispls");
  expect_error([&] { w.alltoallv(b.data(), counts, displs, b.data(), counts, far); },
               Errc::invalid_count, {"alltoallv", "rdispls[" + last + "] = " + d},
               "alltoallv rdispls");
  far[0] = SIZE_MAX;  // displacement + count wraps
  expect_error([&] { w.allgatherv(a.data(), 1, b.data(), counts, far); }, Errc::invalid_count,
               {"allgatherv", "displs[0] = " + std::to_string(SIZE_MAX), "overflows"},
               "allgatherv wrapping");
  w.barrier();
}

// A count whose whole vector (count × ranks) overflows: every rank throws, not just the root
// (a root that threw alone left the others waiting, or reading a wrapped length).
TEST(CollErrors, CountOverflowingOverAllRanks_InvalidCount) {
  if (size() < 2) GTEST_SKIP() << "count × 1 rank is the count itself";
  const rmp::Comm& w = rmp::world();
  const std::size_t huge = SIZE_MAX / sizeof(int) / static_cast<std::size_t>(size()) + 1;
  std::vector<int> v(4);
  const std::string n = std::to_string(huge);
  for (int root : {0, size() - 1}) {
    expect_error([&] { w.gather(v.data(), huge, v.data(), root); }, Errc::invalid_count,
                 {"gather", "count", n}, "gather");
    expect_error([&] { w.scatter(v.data(), huge, v.data(), root); }, Errc::invalid_count,
                 {"scatter", "count", n}, "scatter");
  }
  expect_error([&] { w.allgather(v.data(), huge, v.data()); }, Errc::invalid_count,
               {"allgather", "count", n}, "allgather");
  expect_error([&] { w.alltoall(v.data(), huge, v.data()); }, Errc::invalid_count,
               {"alltoall", "count", n}, "alltoall");
  w.barrier();  // and the communicator still works
}

// Ranks that call a collective differently (another count, root, op, element type or
// collective) make an erroneous program, as in MPI; where the node-shared paths carry the call,
// no rank may hang, write past a buffer or return wrong data: every rank that waits for one
// called differently throws rmp::Error naming the call, the argument and both values
// (collectives/node_shared.hpp: CallSig), and the communicator then refuses further calls
// (Errc::invalid_comm) until it is freed. A rank that waits for nobody (the root of a bcast, a
// non-root of a reduce) may return. Not where RMP_<COLL>_ALGO forces a point-to-point
// algorithm (the variant's case is skipped, named), nor with RMP_COLL_CHECK=1 (which refuses
// every such call first: rmp_coll_check_itest), nor at one rank.
namespace {

constexpr std::size_t kGuard = 16;  // sentinel elements past every buffer's count

// Whether the variant forces the collective of `var` onto a point-to-point algorithm.
bool forced_off_node_shared(const char* var) {
  const char* v = std::getenv(var);
  return v && std::string(v).rfind("shm", 0) != 0;
}

struct Outcome {
  bool threw = false;
  Errc code = Errc::internal;
  std::string what;
};

// f on a fresh dup of the world (freed after it), then a barrier on the world: every rank
// goes on, whatever happened on the dup.
Outcome on_dup(const std::function<void(const rmp::Comm&)>& f) {
  Outcome o;
  {
    rmp::Comm d = rmp::world().dup();
    try {
      f(d);
    } catch (const rmp::Error& e) {
      o = {true, e.code(), e.what()};
    }
  }
  rmp::world().barrier();
  return o;
}

void expect_thrown(const Outcome& o, Errc code, std::initializer_list<std::string> needles,
                   const std::string& what_case) {
  if (!o.threw) {
    ADD_FAILURE() << what_case << ": returned (expected rmp::Error " << rmp::errc_name(code) << ")";
    return;
  }
  EXPECT_EQ(std::string(rmp::errc_name(o.code)), rmp::errc_name(code))
      << what_case << ": what(): " << o.what;
  for (const std::string& n : needles)
    EXPECT_NE(o.what.find(n), std::string::npos)
        << what_case << ": what() does not mention \"" << n << "\"; what(): " << o.what;
}

// A buffer of `count` elements and kGuard sentinels after them.
template <class T>
std::vector<T> guarded(std::size_t count, T fill) {
  std::vector<T> v(count + kGuard, fill);
  for (std::size_t i = count; i < v.size(); ++i) v[i] = sentinel<T>();
  return v;
}
template <class T>
bool guard_intact(const std::vector<T>& v) {
  for (std::size_t i = v.size() - kGuard; i < v.size(); ++i)
    if (v[i] != sentinel<T>()) return false;
  return true;
}

}  // namespace

TEST(CollErrors, NodeSharedCallsThatDiffer_ErrorsNotHangsNorOverruns) {
  if (size() < 2) GTEST_SKIP() << "one rank has nobody to differ from";
  if (env_is("RMP_COLL_CHECK", "1"))
    GTEST_SKIP() << "RMP_COLL_CHECK=1 refuses these calls first (rmp_coll_check_itest)";
  const int odd = size() - 1;  // the rank called differently
  const bool is_odd = rank() == odd;
  std::set<std::string> skipped;
  auto runs = [&](const char* var) {
    if (!forced_off_node_shared(var)) return true;
    skipped.insert(var);
    return false;
  };

  // Allreduce: counts that take the same path (flag lines; chunk rounds of the same number, or
  // the direct path), different small paths, small against chunked, one round over the shm
  // defaults' two chunks (1 MiB) against three of one chunk; then the op, the element type;
  // every rank waits for every other, so every rank throws.
  if (runs("RMP_ALLREDUCE_ALGO")) {
    const std::pair<std::size_t, std::size_t> counts[] = {
        {1, 2}, {1, 100}, {1, 65536}, {20000, 20001}, {600, 500}, {131072, 131073}};
    for (const auto& [mine, theirs] : counts) {
      const std::size_t n = is_odd ? theirs : mine;
      std::vector<std::uint64_t> in(n, 3), out = guarded<std::uint64_t>(n, 0);
      const std::string what = "allreduce of " + std::to_string(mine) + " against " +
                               std::to_string(theirs) + " elements";
      const Outcome o = on_dup([&](const rmp::Comm& d) {
        try {
          d.allreduce(in.data(), out.data(), n, Op::sum);
        } catch (const rmp::Error&) {
          // The communicator refuses further calls now, at once (no rank waits for another).
          expect_error([&] { d.allreduce(in.data(), out.data(), n, Op::sum); }, Errc::invalid_comm,
                       {"allreduce", "out of step"}, what + ", called again");
          throw;
        }
      });
      expect_thrown(o, Errc::invalid_count, {"allreduce: count: rank "}, what);
      EXPECT_TRUE(guard_intact(out)) << what << ": written past the output";
    }
    std::vector<std::int64_t> in(8, 1), out = guarded<std::int64_t>(8, 0);
    expect_thrown(on_dup([&](const rmp::Comm& d) {
                    d.allreduce(in.data(), out.data(), 8, is_odd ? Op::max : Op::sum);
                  }),
                  Errc::invalid_argument, {"allreduce: op: rank ", "sum", "max"},
                  "allreduce with different ops");
    std::vector<double> dv(8, 1.0), dr(8);
    std::vector<float> fv(8, 1.0f), fr(8);
    expect_thrown(on_dup([&](const rmp::Comm& d) {
                    if (is_odd) {
                      d.allreduce(fv.data(), fr.data(), 8, Op::sum);
                    } else {
                      d.allreduce(dv.data(), dr.data(), 8, Op::sum);
                    }
                  }),
                  Errc::invalid_argument, {"allreduce: element type: rank "},
                  "allreduce of different element types");
  }
  // A barrier against an allreduce: another collective.
  if (runs("RMP_BARRIER_ALGO") && runs("RMP_ALLREDUCE_ALGO")) {
    std::uint64_t v = 1, r = 0;
    expect_thrown(on_dup([&](const rmp::Comm& d) {
                    if (is_odd) {
                      d.allreduce(&v, &r, 1, Op::sum);
                    } else {
                      d.barrier();
                    }
                  }),
                  Errc::invalid_argument, {" called ", "as its collective number 1"},
                  "barrier against allreduce");
  }
  // Reduce with two roots: both roots wait for every contribution and throw; the other ranks
  // only contribute and may return.
  if (runs("RMP_REDUCE_ALGO")) {
    std::vector<std::int32_t> in(4, 1), out = guarded<std::int32_t>(4, 0);
    const int root = is_odd ? odd : 0;
    const Outcome o =
        on_dup([&](const rmp::Comm& d) { d.reduce(in.data(), out.data(), 4, Op::sum, root); });
    if (rank() == 0 || is_odd)
      expect_thrown(o, Errc::invalid_rank, {"reduce: root: rank "}, "reduce with two roots");
    EXPECT_TRUE(guard_intact(out));
  }
  // Bcast: a receiver whose count differs from the root's throws, small or chunked against
  // small; the other receivers get the root's data.
  if (runs("RMP_BCAST_ALGO")) {
    for (const std::size_t theirs : {std::size_t{16}, std::size_t{100000}}) {
      const std::size_t n = is_odd ? theirs : 8;
      std::vector<std::int32_t> buf = guarded<std::int32_t>(n, rank() == 0 ? 42 : 0);
      const std::string what = "bcast of 8 against " + std::to_string(theirs) + " elements";
      const Outcome o = on_dup([&](const rmp::Comm& d) { d.bcast(buf.data(), n, 0); });
      if (is_odd) {
        expect_thrown(o, Errc::invalid_count, {"bcast: count: rank 0 passed 32 bytes"}, what);
      } else {
        EXPECT_FALSE(o.threw) << what << ": " << o.what;
        EXPECT_EQ(buf[7], 42) << what;
      }
      EXPECT_TRUE(guard_intact(buf)) << what << ": written past the buffer";
    }
  }
  // Bcast: one rank takes the wrong root, after 20 bcasts from that root (whose round and
  // slot tags of them, with the same count, are still there), small and chunked: it throws,
  // naming the root; the rest may finish.
  if (runs("RMP_BCAST_ALGO") && size() >= 2) {
    for (const std::size_t n : {std::size_t{8}, std::size_t{3000}}) {
      std::vector<std::int32_t> buf = guarded<std::int32_t>(n, 0);
      const std::string what = "bcast of " + std::to_string(n) + " elements, the wrong root";
      const Outcome o = on_dup([&](const rmp::Comm& d) {
        for (int i = 0; i < 20; ++i) d.bcast(buf.data(), n, 1);
        buf.assign(buf.size() - kGuard, rank() == 0 ? 7 : 0);
        buf.resize(n + kGuard, sentinel<std::int32_t>());
        d.bcast(buf.data(), n, is_odd && odd != 1 ? 1 : 0);
      });
      if (is_odd && odd != 1) {
        expect_thrown(o, Errc::invalid_rank, {"bcast: root: rank "}, what);
      } else if (!o.threw && rank() != 0) {
        EXPECT_EQ(buf[n - 1], 7) << what;
      }
      EXPECT_TRUE(guard_intact(buf)) << what << ": written past the buffer";
    }
  }
  // Allgather and alltoall: blocks of different sizes (allgather also 1 MiB, one round over
  // the shm defaults' two chunks, against 4 bytes more, three rounds).
  if (runs("RMP_ALLGATHER_ALGO")) {
    const std::pair<std::size_t, std::size_t> counts[] = {{2, 4}, {262144, 262145}};
    for (const auto& [mine, theirs] : counts) {
      const std::size_t n = is_odd ? theirs : mine;
      std::vector<std::int32_t> in(n, rank()), out = guarded<std::int32_t>(n * size(), 0);
      const std::string what = "allgather of " + std::to_string(mine) + " against " +
                               std::to_string(theirs) + " elements";
      expect_thrown(on_dup([&](const rmp::Comm& d) { d.allgather(in.data(), n, out.data()); }),
                    Errc::invalid_count, {"allgather: count: rank "}, what);
      EXPECT_TRUE(guard_intact(out)) << what << ": written past the output";
    }
  }
  if (runs("RMP_ALLTOALL_ALGO")) {
    const std::size_t n = is_odd ? 4000 : 2000;
    std::vector<std::int32_t> in(n * size(), rank()), out = guarded<std::int32_t>(n * size(), 0);
    expect_thrown(on_dup([&](const rmp::Comm& d) { d.alltoall(in.data(), n, out.data()); }),
                  Errc::invalid_count, {"alltoall: count: rank "}, "alltoall");
    EXPECT_TRUE(guard_intact(out));
  }
  // Allgatherv: the same counts in another order (the same total).
  if (runs("RMP_ALLGATHERV_ALGO")) {
    std::vector<std::size_t> counts(static_cast<std::size_t>(size())), displs(counts.size());
    for (std::size_t i = 0; i < counts.size(); ++i) counts[i] = 100 * (i + 1);
    if (is_odd) std::reverse(counts.begin(), counts.end());
    std::size_t total = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) displs[i] = total, total += counts[i];
    std::vector<std::int32_t> in(counts[static_cast<std::size_t>(rank())], rank()),
        out = guarded<std::int32_t>(total, 0);
    expect_thrown(on_dup([&](const rmp::Comm& d) {
                    d.allgatherv(in.data(), in.size(), out.data(), counts, displs);
                  }),
                  Errc::invalid_count, {"allgatherv: counts: rank "}, "allgatherv");
    EXPECT_TRUE(guard_intact(out));
  }
  // Allreduce with compression on one rank only.
  if (runs("RMP_ALLREDUCE_ALGO")) {
    std::vector<float> in(64, 0.5f), out = guarded<float>(64, 0.0f);
    expect_thrown(on_dup([&](const rmp::Comm& d) {
                    d.allreduce(in.data(), out.data(), 64, Op::sum,
                                is_odd ? rmp::Compression::fp16 : rmp::Compression::none);
                  }),
                  Errc::invalid_argument, {"allreduce: compression: rank "},
                  "allreduce with compression on one rank");
    EXPECT_TRUE(guard_intact(out));
  }
  // Reduce_scatter: the same counts in another order (the same total).
  if (runs("RMP_REDUCE_SCATTER_ALGO")) {
    std::vector<std::size_t> counts(static_cast<std::size_t>(size()));
    for (std::size_t i = 0; i < counts.size(); ++i) counts[i] = i + 1;
    if (is_odd) std::reverse(counts.begin(), counts.end());
    std::size_t total = 0;
    for (const std::size_t k : counts) total += k;
    std::vector<std::int32_t> in(total, 1), out = guarded<std::int32_t>(total, 0);
    expect_thrown(on_dup([&](const rmp::Comm& d) {
                    d.reduce_scatter(in.data(), out.data(), counts, Op::sum);
                  }),
                  Errc::invalid_count, {"reduce_scatter: counts: rank "}, "reduce_scatter");
    EXPECT_TRUE(guard_intact(out));
  }
  // After all of it a new communicator of the same ranks (its state may be one of theirs, kept
  // and cleared) works.
  {
    rmp::Comm d = rmp::world().dup();
    std::uint64_t v = static_cast<std::uint64_t>(rank()) + 1, r = 0;
    d.allreduce(&v, &r, 1, Op::sum);
    EXPECT_EQ(r, static_cast<std::uint64_t>(size()) * (size() + 1) / 2);
  }
  if (!skipped.empty() && rank() == 0) {
    std::string names;
    for (const std::string& s : skipped) names += " " + s;
    std::printf("[ NOTE     ] cases left out, their collectives forced onto point-to-point:%s\n",
                names.c_str());
  }
}
