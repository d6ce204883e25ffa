// Communicators and collectives across processes: split orders ranks by key then old rank,
// undefined gives an invalid Comm, trees of split and dup run collectives at every level,
// collectives of several communicators interleave without matching each other (also while a
// non-blocking collective is outstanding), context ids stay agreed over many dups, and
// communicators made and freed in a loop reuse their node-shared state with right results.
#include "harness.hpp"

#include "api/state.hpp"
#include "runtime/stats.hpp"

#include <algorithm>
#include <numeric>
#include <set>
#include <string>
#include <vector>

namespace {

using namespace itest;
using rmp::Op;

// World ranks of a communicator's members, in its rank order.
std::vector<int> members(const rmp::Comm& c) {
  const int me = rank();
  std::vector<int> all(static_cast<std::size_t>(c.size()));
  c.allgather(&me, 1, all.data());
  return all;
}

// Expected members of the split of world with colour(r), key(r): ordered by key, then old rank.
template <class Color, class Key>
std::vector<int> expected_split(Color color, Key key) {
  std::vector<int> v;
  for (int r = 0; r < size(); ++r)
    if (color(r) == color(rank())) v.push_back(r);
  std::stable_sort(v.begin(), v.end(), [&](int a, int b) { return key(a) < key(b); });
  return v;
}

// Sum of world ranks over c, through allreduce, checked against its members.
void check_allreduce(const rmp::Comm& c, const char* what) {
  const auto m = members(c);
  const long want = std::accumulate(m.begin(), m.end(), 0L);
  long mine = rank(), got = -1;
  c.allreduce(&mine, &got, 1, Op::sum);
  EXPECT_EQ(got, want) << what;
}

}  // namespace

TEST(CollComm, Split_OrdersByKeyThenOldRank) {
  const rmp::Comm& w = rmp::world();
  auto color = [](int r) { return r % 2; };
  auto key = [](int r) { return -(r / 3); };  // descending in thirds, ties by old rank
  const rmp::Comm c = w.split(color(rank()), key(rank()));
  ASSERT_TRUE(c.valid());
  const auto want = expected_split(color, key);
  EXPECT_EQ(c.size(), static_cast<int>(want.size()));
  EXPECT_EQ(members(c), want);
  EXPECT_EQ(want[static_cast<std::size_t>(c.rank())], rank());
  // Same key everywhere: old rank order.
  const rmp::Comm same = w.split(0, 5);
  EXPECT_EQ(same.rank(), rank());
  EXPECT_EQ(same.size(), size());
}

TEST(CollComm, SplitUndefined_InvalidCommThatThrowsInvalidComm) {
  const rmp::Comm& w = rmp::world();
  const bool out = rank() % 2 == 1;
  const rmp::Comm c = w.split(out ? rmp::undefined : 0, 0);
  EXPECT_EQ(c.valid(), !out);
  if (out) {
    expect_error([&] { c.barrier(); }, rmp::Errc::invalid_comm, {"barrier"},
                 "barrier on split(undefined)");
    expect_error([&] { (void)c.size(); }, rmp::Errc::invalid_comm, {"size"},
                 "size on split(undefined)");
  } else {
    EXPECT_EQ(c.size(), (size() + 1) / 2);
    check_allreduce(c, "even ranks");
  }
}

// A negative color other than rmp::undefined at one rank → Errc::invalid_argument on every
// rank, naming the color (and, elsewhere, the rank that passed it); no rank is left waiting,
// and the communicator still works after.
TEST(CollComm, SplitBadColorAtOneRank_InvalidArgumentEverywhere) {
  const rmp::Comm& w = rmp::world();
  const int culprit = size() - 1;
  const bool mine = rank() == culprit;
  const std::vector<std::string> needles =
      mine ? std::vector<std::string>{"split", "'color'", "-5"}
           : std::vector<std::string>{"split", "rank " + std::to_string(culprit), "'color'", "-5"};
  try {
    (void)w.split(mine ? -5 : 0, 0);
    ADD_FAILURE() << "split with color -5 at rank " << culprit << " did not throw";
  } catch (const rmp::Error& e) {
    EXPECT_EQ(e.code(), rmp::Errc::invalid_argument) << e.what();
    for (const std::string& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
  check_allreduce(w, "world after a refused split");
  const rmp::Comm again = w.split(0, 0);
  EXPECT_EQ(again.size(), size());
}

TEST(CollComm, SplitAndDupTrees_CollectivesOnEveryLevel) {
  const rmp::Comm& w = rmp::world();
  const rmp::Comm d = w.dup();
  const rmp::Comm half = d.split(rank() < size() / 2 ? 0 : 1, size() - rank());
  const rmp::Comm quarter = half.split(half.rank() % 2, 0);
  const rmp::Comm qdup = quarter.dup();
  // Bottom up and top down, so a level's traffic meets its parent's.
  for (const rmp::Comm* c : {&qdup, &quarter, &half, &d, &w, &half, &qdup})
    check_allreduce(*c, "tree level");
  for (const rmp::Comm* c : {&w, &d, &half, &quarter, &qdup}) {
    const int root = c->size() - 1;
    std::vector<int> v(3000, c->rank() == root ? rank() : -1);
    c->bcast(v.data(), v.size(), root);
    const int want = members(*c)[static_cast<std::size_t>(root)];
    EXPECT_EQ(std::count(v.begin(), v.end(), want), static_cast<std::ptrdiff_t>(v.size()))
        << "elements other than the root's world rank " << want;
    c->barrier();
  }
}

TEST(CollComm, InterleavedCommunicators_NeverMatchEachOther) {
  const rmp::Comm& w = rmp::world();
  const rmp::Comm a = w.dup();
  const rmp::Comm b = w.split(0, size() - rank());  // reversed order
  const rmp::Comm c = w.split(rank() % 2, rank());
  for (int round = 0; round < 12; ++round) {
    const std::size_t n = round % 3 == 0 ? 40000 : 3 + static_cast<std::size_t>(round);
    // Same sizes and tags on every communicator in turn: only the context keeps them apart.
    std::vector<double> x(n, rank()), ya(n), yb(n);
    a.allreduce(x.data(), ya.data(), n, Op::max);
    b.allreduce(x.data(), yb.data(), n, Op::min);
    std::vector<int> bc(n, b.rank() == 0 ? round : -1);
    b.bcast(bc.data(), n, 0);
    const auto cm = members(c);
    std::vector<int> g(n * static_cast<std::size_t>(c.size()));
    std::vector<int> mine(n, rank());
    c.allgather(mine.data(), n, g.data());
    a.barrier();
    // Every element, not only the ends: a message of another communicator lands anywhere.
    EXPECT_EQ(std::count(ya.begin(), ya.end(), size() - 1), static_cast<std::ptrdiff_t>(n));
    EXPECT_EQ(std::count(yb.begin(), yb.end(), 0.0), static_cast<std::ptrdiff_t>(n));
    EXPECT_EQ(std::count(bc.begin(), bc.end(), round), static_cast<std::ptrdiff_t>(n));
    for (int r = 0; r < c.size(); ++r)
      EXPECT_EQ(std::count(g.begin() + static_cast<std::ptrdiff_t>(r * n),
                           g.begin() + static_cast<std::ptrdiff_t>((r + 1) * n),
                           cm[static_cast<std::size_t>(r)]),
                static_cast<std::ptrdiff_t>(n))
          << "block " << r;
  }
}

TEST(CollComm, BlockingCollectives_WhileANonBlockingOneIsOutstanding) {
  const rmp::Comm& w = rmp::world();
  const std::size_t n = 50000;
  std::vector<double> x(n, 1.0), y(n, 0);
  rmp::Request r = w.iallreduce(x.data(), y.data(), n, Op::sum);
  long one = 1, total = 0;
  w.allreduce(&one, &total, 1, Op::sum);
  std::vector<int> v(100, rank() == 0 ? 9 : 0);
  w.bcast(v.data(), v.size(), 0);
  w.barrier();
  r.wait();
  EXPECT_EQ(total, size());
  EXPECT_EQ(v.back(), 9);
  EXPECT_EQ(y.front(), size());
  EXPECT_EQ(y.back(), size());
}

TEST(CollComm, ManyDupsAndSplits_ContextIdsAgree) {
  const rmp::Comm& w = rmp::world();
  std::vector<rmp::Comm> comms;
  for (int i = 0; i < 24; ++i) {
    // Subsets take ids the others do not: the next dup of all must still agree.
    if (i % 3 == 0) comms.push_back(w.split(rank() % 3 == i % 2 ? 0 : 1, i));
    else comms.push_back((i % 2 ? w : comms.back()).dup());
  }
  for (auto it = comms.rbegin(); it != comms.rend(); ++it) check_allreduce(*it, "dup/split chain");
}

// A code that dups (or splits) a communicator per solve: each one's node-shared state serves the
// next of the same members (collectives/node_shared.cpp, NodeSharedPool), the results stay right
// at every size (small, block and chunked paths; bcast from every root), and the split halves,
// whose members differ, keep their own.
TEST(CollComm, CommunicatorsMadeAndFreedInALoop_RightResultsAndReusedState) {
  const rmp::Comm& w = rmp::world();
  // The world's own node-shared state first (made at its first collective: not counted below
  // when this test runs alone).
  check_allreduce(w, "the world");
  const rmp::rt::Counters before = rmp::rt::counters();
  constexpr int kRounds = 12;
  for (int i = 0; i < kRounds; ++i) {
    rmp::Comm d = i % 2 ? w.dup() : w.split(rank() % 2, rank());
    for (const std::size_t n : {std::size_t{1}, std::size_t{500}, std::size_t{200000}}) {
      std::vector<double> in(n), out(n, -1.0);
      for (std::size_t k = 0; k < n; ++k) in[k] = d.rank() + static_cast<double>(k % 5) + i;
      d.allreduce(in.data(), out.data(), n, Op::sum);
      const double s = d.size();
      for (std::size_t k = 0; k < n; k += 997)
        ASSERT_EQ(out[k], s * (s - 1) / 2 + s * (static_cast<double>(k % 5) + i))
            << "round " << i << ", allreduce of " << n << ", element " << k;
      std::vector<int> b(n, d.rank() == i % d.size() ? 7 + i : -1);
      d.bcast(b.data(), n, i % d.size());
      ASSERT_EQ(std::count(b.begin(), b.end(), 7 + i), static_cast<std::ptrdiff_t>(n))
          << "round " << i << ", bcast of " << n;
    }
  }
  const rmp::rt::Counters after = rmp::rt::counters();
  const std::uint64_t made = after.coll_segments - before.coll_segments,
                      reused = after.coll_segments_reused - before.coll_segments_reused;
  // Where the communicators took node-shared paths at all (not across nodes, nor with every
  // collective forced onto point-to-point algorithms), each got node-shared state once, and at
  // most the first dup and the first split (where this rank's half has company: a split of 3
  // ranks leaves rank 1 alone) made it new (earlier tests may have left some to take over).
  if (made + reused > 0) {
    const bool half_shared = (size() + (rank() % 2 == 0)) / 2 >= 2;
    EXPECT_EQ(made + reused, kRounds / 2 + (half_shared ? kRounds / 2 : 0));
    EXPECT_LE(made, half_shared ? 2u : 1u) << reused << " taken over";
  }
}

// New context ids run out after 2^31 - 1: with none left and no ended communicator's id free at
// every member, dup and split fail on every member alike with an error that says so (without the
// check the id wrapped into the world's).
TEST(CollComm, ContextIdsUsedUp_DupAndSplitFailOnEveryRank) {
  const rmp::Comm& w = rmp::world();
  const rmp::api::ContextIds saved = rmp::api::exchange_context_ids({std::uint32_t{1} << 31, {}});
  expect_error([&] { (void)w.dup(); }, rmp::Errc::internal,
               {"dup: no communicator context ids left", "no ended communicator's id is free"},
               "dup");
  expect_error([&] { (void)w.split(rank() % 2, 0); }, rmp::Errc::internal,
               {"split: no communicator context ids left"}, "split");
  rmp::api::exchange_context_ids(saved);
  check_allreduce(w.dup(), "dup after the ids ran out");
}

std::uint32_t context_of(const rmp::Comm& c) {
  return rmp::api::comm_of(c, "context_of").base_context();
}

// A receive withdrawn before the communicator ended (cancelled; a dropped request alike) may
// still have a message coming that no one will take: its id is never given to another
// communicator, where that message would match a receive of the same source and tag.
TEST(CollComm, ReceiveWithdrawnOnAFreedCommunicator_ItsIdIsNotReused) {
  const rmp::Comm& w = rmp::world();
  if (size() < 2) GTEST_SKIP() << "needs a second rank to send to the withdrawn receive";
  std::uint32_t old = 0;
  {
    const rmp::Comm d = w.dup();
    old = context_of(d);
    if (rank() == 0) {
      int never = -1;
      rmp::Request q = d.irecv(&never, 1, 1, 9);
      EXPECT_TRUE(q.cancel());
    }
  }
  w.barrier();  // ended everywhere; the others have its id as the newest they freed
  for (int i = 0; i < 3; ++i) {
    const rmp::Comm next = w.dup();
    EXPECT_NE(context_of(next), old) << "dup " << i;
    check_allreduce(next, "a dup after a withdrawn receive");
  }
}

// The groups of a split agree on kept node-shared state each on its own (their offers travel in
// their own slots of the split's allreduce): here the even ranks' group offers its last state
// everywhere, while in the odd ranks' group rank 1 still holds its communicator, so their offers
// differ and that group agrees at its first collective. Every group's results stay right, and
// coll_segments_adopted counts the splits that agreed (where node-shared state serves the groups
// at all). Then groups of one rank beside a larger group (they take no slot in the agreement).
TEST(CollComm, SplitGroupsAgreeOnKeptStateEachOnItsOwn) {
  const rmp::Comm& w = rmp::world();
  if (size() < 4) GTEST_SKIP() << "needs two groups of at least two ranks";
  auto use = [&](const rmp::Comm& s, int round) {
    long mine = rank() + round, got = 0, want = 0;
    for (int q = rank() % 2; q < size(); q += 2) want += q + round;
    s.allreduce(&mine, &got, 1, Op::sum);
    EXPECT_EQ(got, want) << "round " << round;
    std::vector<double> v(3000, rank()), sum(v.size());
    s.allreduce(v.data(), sum.data(), v.size(), Op::sum);
    EXPECT_EQ(sum.back(), static_cast<double>(want - round * s.size())) << "round " << round;
  };
  const rmp::rt::Counters before = rmp::rt::counters();
  {
    const rmp::Comm s = w.split(rank() % 2, rank());
    use(s, 0);
  }
  rmp::Comm held = w.split(rank() % 2, rank());
  use(held, 1);
  if (rank() != 1) held = rmp::Comm();
  for (int round = 2; round < 6; ++round) {
    const rmp::Comm s = w.split(rank() % 2, rank());
    use(s, round);
  }
  held = rmp::Comm();
  w.barrier();
  const rmp::rt::Counters after = rmp::rt::counters();
  const std::uint64_t shared = after.coll_segments - before.coll_segments +
                               after.coll_segments_reused - before.coll_segments_reused,
                      adopted = after.coll_segments_adopted - before.coll_segments_adopted;
  if (shared > 0) {
    // Rounds 1-5 agree in the split, but round 2 in the odd group (and round 0 where an earlier
    // test left state of the same members).
    const std::uint64_t least = rank() % 2 ? 4 : 5;
    EXPECT_GE(adopted, least) << "splits that agreed on kept state (of 6)";
    EXPECT_LE(adopted, least + 1) << "splits that agreed on kept state (of 6)";
  }

  const rmp::rt::Counters before_alone = rmp::rt::counters();
  for (int round = 0; round < 4; ++round) {
    const rmp::Comm s = w.split(rank() < 2 ? rank() : 2, rank());
    long got = 0;
    const long mine = rank() + round;
    s.allreduce(&mine, &got, 1, Op::sum);
    const long others = (size() - 2) * round + (size() - 1) * size() / 2 - 1;
    EXPECT_EQ(got, rank() < 2 ? mine : others) << "round " << round;
    EXPECT_EQ(s.size(), rank() < 2 ? 1 : size() - 2);
  }
  const rmp::rt::Counters after_alone = rmp::rt::counters();
  if (rank() >= 2 && after_alone.coll_segments + after_alone.coll_segments_reused >
                         before_alone.coll_segments + before_alone.coll_segments_reused) {
    EXPECT_GE(after_alone.coll_segments_adopted - before_alone.coll_segments_adopted, 3u)
        << "splits of the larger group that agreed on kept state (of 4)";
  }
}

// A code that makes and frees communicators in a loop (a library that dups its caller's
// communicator per call) reuses a few context ids: they were never reused, so each one used
// kept its matching queues for good and ids ran out after 2^31 communicators. Each round's
// communicator carries point-to-point traffic (a ring exchange) and a collective.
TEST(CollComm, CommunicatorsMadeAndFreedInALoop_ReuseAFewContextIds) {
  const rmp::Comm& w = rmp::world();
  std::set<std::uint32_t> used;
  for (int i = 0; i < 400; ++i) {
    const rmp::Comm d = i % 2 ? w.dup() : w.split(rank() % 2, rank());
    used.insert(context_of(d));
    const int n = d.size(), r = d.rank();
    int got = -1;
    const int mine = r * 1000 + i;
    rmp::Request q = d.irecv(&got, 1, (r + n - 1) % n, i);
    d.send(&mine, 1, (r + 1) % n, i);
    q.wait();
    ASSERT_EQ(got, ((r + n - 1) % n) * 1000 + i) << "round " << i;
    check_allreduce(d, "a communicator of the loop");
  }
  EXPECT_LE(used.size(), 4u) << "context ids used by 400 communicators made and freed in turn";
  // The same while a split that rank 0 left (colour undefined) lives on: rank 0 has that id
  // free at once, the others not; proposing their lowest free id, rank 0 proposed that one for
  // good and no id was ever reused.
  const rmp::Comm workers = w.split(rank() == 0 ? rmp::undefined : 0, rank());
  used.clear();
  for (int i = 0; i < 100; ++i) {
    const rmp::Comm d = w.dup();
    used.insert(context_of(d));
    check_allreduce(d, "a dup beside the workers' split");
  }
  EXPECT_LE(used.size(), 3u) << "context ids used by 100 dups beside a split rank 0 left";
  // Two at a time, freed in one order at even ranks and the other at odd ones: the ids each
  // freed most recently differ for good, their lowest free ones do not.
  used.clear();
  for (int i = 0; i < 50; ++i) {
    rmp::Comm a = w.dup(), b = w.dup();
    used.insert(context_of(a));
    used.insert(context_of(b));
    check_allreduce(b, "the second of two dups");
    if (rank() % 2) {
      a = rmp::Comm();
      b = rmp::Comm();
    } else {
      b = rmp::Comm();
      a = rmp::Comm();
    }
  }
  EXPECT_LE(used.size(), 5u) << "context ids used by 50 pairs of dups freed in two orders";
}

// A receive posted on a communicator before it was freed still waits for its message: that
// rank's id is not free until it came, so a later communicator of the ranks that freed theirs
// takes another (else the message, sent by a member still holding the communicator, would be
// matched against the new communicator's traffic). Needs a third rank, which holds the old
// communicator and sends last; with fewer ranks the case does not arise.
TEST(CollComm, ReceivePostedOnAFreedCommunicator_ItsIdWaitsForTheMessage) {
  const rmp::Comm& w = rmp::world();
  if (size() < 3) GTEST_SKIP() << "needs a third rank to hold the communicator and send";
  const rmp::Comm pair = w.split(rank() < 2 ? 0 : 1, rank());  // ranks 0 and 1, and the rest
  rmp::Comm d = w.dup();
  const std::uint32_t old = context_of(d);
  int got = -1;
  rmp::Request q;
  if (rank() == 0) q = d.irecv(&got, 1, 2, 7);
  if (rank() < 2) d = rmp::Comm();  // ended at ranks 0 and 1; rank 0's receive still posted
  const rmp::Comm next = pair.dup();
  if (rank() < 2) {
    EXPECT_NE(context_of(next), old);
  }
  w.barrier();
  if (rank() == 2) {
    const int v = 42;
    d.send(&v, 1, 0, 7);
  }
  if (rank() == 0) {
    q.wait();
    EXPECT_EQ(got, 42);
  }
  // The new communicator's traffic is its own.
  if (rank() < 2) {
    int v = rank() + 10, from = -1;
    rmp::Request rq = next.irecv(&from, 1, 1 - rank(), 7);
    next.send(&v, 1, 1 - rank(), 7);
    rq.wait();
    EXPECT_EQ(from, 11 - rank());
  }
  w.barrier();
}
