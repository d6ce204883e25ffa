// A long stream of collectives drawn at random, the same stream on every rank: runs of one
// collective, size and type on one communicator (so that the node-shared path choice warms up,
// holds, re-measures and changes paths within a size class, as a solver's loop makes it), broken
// by single calls of others on other communicators, with non-blocking collectives and
// point-to-point messages outstanding across them and communicators freed and made again
// midway. Every result is checked against a sequential reference; a failure names the step and
// everything the step drew, and ITEST_SOAK_SEED / ITEST_SOAK_STEPS replay or lengthen a stream.
#include "harness.hpp"

#include <algorithm>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "tests/coll_values.hpp"

namespace {

using namespace itest;
using rmp::Op;
using rmp::testing::exact_value;
using rmp::testing::fold;
using rmp::testing::op_allowed;

enum class Kind {
  barrier,
  bcast,
  reduce,
  allreduce,
  gather,
  scatter,
  allgather,
  alltoall,
  reduce_scatter_block,
  scan,
  exscan,
  gatherv,
  scatterv,
  allgatherv,
  alltoallv,
  reduce_scatter,
  ibarrier,
  ibcast,
  iallreduce,
  kCount
};
const char* const kKindNames[] = {"barrier",        "bcast",      "reduce",
                                  "allreduce",      "gather",     "scatter",
                                  "allgather",      "alltoall",   "reduce_scatter_block",
                                  "scan",           "exscan",     "gatherv",
                                  "scatterv",       "allgatherv", "alltoallv",
                                  "reduce_scatter", "ibarrier",   "ibcast",
                                  "iallreduce"};
static_assert(std::size(kKindNames) == static_cast<std::size_t>(Kind::kCount));

bool reduces(Kind k) {
  return k == Kind::reduce || k == Kind::allreduce || k == Kind::reduce_scatter_block ||
         k == Kind::scan || k == Kind::exscan || k == Kind::reduce_scatter || k == Kind::iallreduce;
}

// Element counts of a block: empty, one, both sides of the 56 bytes a small call carries in
// its flag line, of the 4 KiB small slot and of a 16 KiB quarter chunk, and sizes past a
// 128-512 KiB fragment; half the runs take the larger ones, where the node-shared paths are
// chosen by measurement. The whole of a call's buffer is held to kMaxCallBytes.
const std::size_t kCounts[] = {0,  1,   3,   7,   8,    9,    63,    64,
                               65, 511, 512, 513, 2047, 2049, 40001, 70001};
const std::size_t kLargeCounts[] = {2049, 8191, 40001, 70001, 140001};
constexpr std::size_t kMaxCallBytes = std::size_t{3} << 20;
constexpr std::uint64_t kDefaultSteps = 2000;

const Op kOps[] = {Op::sum, Op::prod, Op::min, Op::max, Op::land,
                   Op::lor, Op::band, Op::bor, Op::bxor};

// What one step drew.
struct Step {
  std::uint64_t number = 0;
  int comm = 0;  // index into the test's communicators
  Kind kind = Kind::barrier;
  int type = 0;  // index into kTypeNames (with_type)
  std::size_t count = 0;
  Op op = Op::sum;
  int root = 0;  // a fraction of the communicator's size, scaled at the call
  bool in_place = false;
  std::uint64_t salt = 0;
  std::string describe(const rmp::Comm& c) const;
};

const char* const kTypeNames[] = {"uint8",  "int32",           "int64", "float",
                                  "double", "complex<double>", "byte"};

std::string Step::describe(const rmp::Comm& c) const {
  std::ostringstream o;
  o << "step " << number << ": " << kKindNames[static_cast<int>(kind)] << " on communicator "
    << comm << " (size " << c.size() << ", rank " << c.rank() << "), type " << kTypeNames[type]
    << ", count " << count << ", op " << static_cast<int>(op) << ", root " << root
    << (in_place ? ", in place" : "");
  return o.str();
}

template <class F>
void with_type(int type, F&& f) {
  switch (type) {
    case 0:
      return f(std::uint8_t{});
    case 1:
      return f(std::int32_t{});
    case 2:
      return f(std::int64_t{});
    case 3:
      return f(float{});
    case 4:
      return f(double{});
    case 5:
      return f(std::complex<double>{});
    default:
      return f(std::byte{});
  }
}
constexpr int kTypes = static_cast<int>(std::size(kTypeNames));

// A block's elements from rank `from` of the communicator for rank `to` (-1: for all).
template <class T>
T value(const Step& s, int from, int to, std::size_t i) {
  return exact_value<T>(s.op, from, i, s.salt * 131 + static_cast<std::uint64_t>(to + 1));
}
template <class T>
std::vector<T> block(const Step& s, int from, int to, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value<T>(s, from, to, i);
  return v;
}
// The reduction of ranks [0, last) at element i of every rank's input (value(.., -1, i)).
template <class T>
T reduced(const Step& s, int last, std::size_t i) {
  return fold<T>(s.op, 0, last, i, s.salt * 131);
}

// Per-rank counts of a v-variant, zeros among them, the same on every rank.
std::vector<std::size_t> counts_of(const Step& s, int n, std::size_t most) {
  std::vector<std::size_t> c(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q) {
    const std::uint64_t x = mix64(s.salt + static_cast<std::uint64_t>(q) * 7919);
    c[static_cast<std::size_t>(q)] = x % 4 == 0 ? 0 : static_cast<std::size_t>(x % (most + 1));
  }
  return c;
}
// Displacements with a gap of `gap` elements before every block.
std::vector<std::size_t> displs_of(const std::vector<std::size_t>& counts, std::size_t gap) {
  std::vector<std::size_t> d(counts.size());
  std::size_t at = 0;
  for (std::size_t q = 0; q < counts.size(); ++q) {
    at += gap;
    d[q] = at;
    at += counts[q];
  }
  return d;
}
std::size_t extent(const std::vector<std::size_t>& counts, const std::vector<std::size_t>& displs) {
  std::size_t e = 0;
  for (std::size_t q = 0; q < counts.size(); ++q) e = std::max(e, displs[q] + counts[q]);
  return e;
}

// Checks got[0, n) against want(i); the message names the first element that differs.
template <class T, class Want>
::testing::AssertionResult equal(const T* got, std::size_t n, Want&& want, const char* what) {
  for (std::size_t i = 0; i < n; ++i)
    if (!(got[i] == want(i)))
      return ::testing::AssertionFailure()
             << what << ": element " << i << " of " << n << " differs from the reference";
  return ::testing::AssertionSuccess();
}
// Whether rank r's input to a call (not in place) still holds what block() made of it.
template <class T>
::testing::AssertionResult unchanged(const std::vector<T>& in, const Step& s, int r) {
  return equal(
      in.data(), in.size(), [&](std::size_t i) { return value<T>(s, r, -1, i); },
      "the call changed its input");
}
// Rank `from`'s blocks for every rank q of the communicator: counts[q] elements at displs[q],
// sentinels between them.
template <class T>
std::vector<T> laid_out(const Step& s, int from, const std::vector<std::size_t>& counts,
                        const std::vector<std::size_t>& displs) {
  std::vector<T> v(extent(counts, displs), sentinel<T>());
  for (std::size_t q = 0; q < counts.size(); ++q)
    for (std::size_t i = 0; i < counts[q]; ++i)
      v[displs[q] + i] = value<T>(s, from, static_cast<int>(q), i);
  return v;
}
template <class T>
::testing::AssertionResult gaps_untouched(const std::vector<T>& out,
                                          const std::vector<std::size_t>& counts,
                                          const std::vector<std::size_t>& displs) {
  std::vector<bool> covered(out.size());
  for (std::size_t q = 0; q < counts.size(); ++q)
    for (std::size_t i = 0; i < counts[q]; ++i) covered[displs[q] + i] = true;
  for (std::size_t i = 0; i < out.size(); ++i)
    if (!covered[i] && !(out[i] == sentinel<T>()))
      return ::testing::AssertionFailure() << "element " << i << " outside every block was written";
  return ::testing::AssertionSuccess();
}

// One step of the stream, of element type T, on communicator c.
template <class T>
::testing::AssertionResult run_step(const rmp::Comm& c, const Step& s, const rmp::Comm& world) {
  const int n = c.size(), r = c.rank();
  const int root = s.root % n;
  const std::size_t count = s.count;
  const T* const inplace = rmp::in_place<T>;
  auto un = [](int q) { return static_cast<std::size_t>(q); };
  switch (s.kind) {
    case Kind::barrier:
      c.barrier();
      return ::testing::AssertionSuccess();
    case Kind::ibarrier:
    case Kind::ibcast:
    case Kind::iallreduce: {
      // Started, then a ring exchange on the world while it is outstanding, then completed.
      std::vector<T> buf = r == root || s.kind == Kind::iallreduce ? block<T>(s, r, -1, count)
                                                                   : std::vector<T>(count);
      std::vector<T> out(count);
      if (s.kind == Kind::iallreduce && s.in_place) out = buf;
      rmp::Request req = s.kind == Kind::ibarrier ? c.ibarrier()
                         : s.kind == Kind::ibcast ? c.ibcast(buf.data(), count, root)
                                                  : c.iallreduce(s.in_place ? inplace : buf.data(),
                                                                 out.data(), count, s.op);
      const int wn = world.size(), wr = world.rank();
      const std::uint64_t ring = seed(wr, (wr + 1) % wn, s.number, 77);
      std::vector<std::uint32_t> sent = make_message<std::uint32_t>(count + 5, ring);
      std::vector<std::uint32_t> got(count + 5);
      const int tag = static_cast<int>(s.number % 1000) + 10;
      rmp::Request rr = world.irecv(got.data(), got.size(), (wr + wn - 1) % wn, tag);
      world.send(sent.data(), sent.size(), (wr + 1) % wn, tag);
      rr.wait();
      req.wait();
      if (!matches(got.data(), got.size(), seed((wr + wn - 1) % wn, wr, s.number, 77)))
        return ::testing::AssertionFailure() << "the ring message beside it differs";
      if (s.kind == Kind::ibcast)
        return equal(
            buf.data(), count, [&](std::size_t i) { return value<T>(s, root, -1, i); }, "ibcast");
      if (s.kind == Kind::iallreduce)
        return equal(
            out.data(), count, [&](std::size_t i) { return reduced<T>(s, n, i); }, "iallreduce");
      return ::testing::AssertionSuccess();
    }
    case Kind::bcast: {
      std::vector<T> buf = r == root ? block<T>(s, r, -1, count) : std::vector<T>(count);
      buf.push_back(sentinel<T>());
      c.bcast(buf.data(), count, root);
      if (!(buf.back() == sentinel<T>()))
        return ::testing::AssertionFailure() << "bcast wrote past its buffer";
      return equal(
          buf.data(), count, [&](std::size_t i) { return value<T>(s, root, -1, i); }, "bcast");
    }
    case Kind::reduce:
    case Kind::allreduce: {
      std::vector<T> in = block<T>(s, r, -1, count);
      const bool all = s.kind == Kind::allreduce;
      const bool gets = all || r == root;
      std::vector<T> out(gets ? count : 0);
      const bool inpl = s.in_place && gets;
      if (inpl) out = in;
      if (all) c.allreduce(inpl ? inplace : in.data(), out.data(), count, s.op);
      else c.reduce(inpl ? inplace : in.data(), gets ? out.data() : nullptr, count, s.op, root);
      if (auto kept = unchanged(in, s, r); !kept) return kept;
      if (!gets) return ::testing::AssertionSuccess();
      return equal(
          out.data(), count, [&](std::size_t i) { return reduced<T>(s, n, i); },
          all ? "allreduce" : "reduce");
    }
    case Kind::scan:
    case Kind::exscan: {
      std::vector<T> in = block<T>(s, r, -1, count);
      std::vector<T> out(count, sentinel<T>());
      if (s.in_place) out = in;
      if (s.kind == Kind::scan) c.scan(s.in_place ? inplace : in.data(), out.data(), count, s.op);
      else c.exscan(s.in_place ? inplace : in.data(), out.data(), count, s.op);
      if (auto kept = unchanged(in, s, r); !kept) return kept;
      const int upto = s.kind == Kind::scan ? r + 1 : r;
      if (upto == 0) return ::testing::AssertionSuccess();  // exscan at rank 0: undefined
      return equal(
          out.data(), count, [&](std::size_t i) { return reduced<T>(s, upto, i); }, "scan");
    }
    case Kind::gather:
    case Kind::allgather: {
      const bool all = s.kind == Kind::allgather;
      const bool gets = all || r == root;
      std::vector<T> in = block<T>(s, r, -1, count);
      std::vector<T> out(gets ? un(n) * count : 0, sentinel<T>());
      const bool inpl = s.in_place && gets;
      if (inpl)
        std::copy(in.begin(), in.end(), out.begin() + static_cast<std::ptrdiff_t>(un(r) * count));
      if (all) c.allgather(inpl ? inplace : in.data(), count, out.data());
      else c.gather(inpl ? inplace : in.data(), count, gets ? out.data() : nullptr, root);
      if (auto kept = unchanged(in, s, r); !kept) return kept;
      if (!gets) return ::testing::AssertionSuccess();
      return equal(
          out.data(), out.size(),
          [&](std::size_t i) { return value<T>(s, static_cast<int>(i / count), -1, i % count); },
          all ? "allgather" : "gather");
    }
    case Kind::scatter: {
      const std::vector<std::size_t> counts(un(n), count);
      const std::vector<T> in =
          r == root ? laid_out<T>(s, root, counts, displs_of(counts, 0)) : std::vector<T>();
      std::vector<T> out(count + 1, sentinel<T>());
      c.scatter(r == root ? in.data() : nullptr, count, out.data(), root);
      if (!(out.back() == sentinel<T>()))
        return ::testing::AssertionFailure() << "scatter wrote past its block";
      return equal(
          out.data(), count, [&](std::size_t i) { return value<T>(s, root, r, i); }, "scatter");
    }
    case Kind::alltoall: {
      const std::vector<std::size_t> counts(un(n), count);
      const std::vector<T> in = laid_out<T>(s, r, counts, displs_of(counts, 0));
      std::vector<T> out(un(n) * count, sentinel<T>());
      if (s.in_place) out = in;
      c.alltoall(s.in_place ? inplace : in.data(), count, out.data());
      auto sent = [&](std::size_t i) {
        return value<T>(s, r, static_cast<int>(i / count), i % count);
      };
      if (auto kept = equal(in.data(), in.size(), sent, "the call changed its input"); !kept)
        return kept;
      return equal(
          out.data(), out.size(),
          [&](std::size_t i) { return value<T>(s, static_cast<int>(i / count), r, i % count); },
          "alltoall");
    }
    case Kind::reduce_scatter_block: {
      std::vector<T> in = block<T>(s, r, -1, un(n) * count);
      std::vector<T> out(s.in_place ? un(n) * count : count + 1, sentinel<T>());
      if (s.in_place) out = in;
      c.reduce_scatter_block(s.in_place ? inplace : in.data(), out.data(), count, s.op);
      if (!s.in_place && !(out.back() == sentinel<T>()))
        return ::testing::AssertionFailure() << "reduce_scatter_block wrote past its block";
      if (auto kept = unchanged(in, s, r); !kept) return kept;
      return equal(
          out.data(), count, [&](std::size_t i) { return reduced<T>(s, n, un(r) * count + i); },
          "reduce_scatter_block");
    }
    case Kind::reduce_scatter: {
      const std::vector<std::size_t> counts = counts_of(s, n, count);
      const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
      const std::size_t first = std::accumulate(counts.begin(), counts.begin() + r, std::size_t{0});
      std::vector<T> in = block<T>(s, r, -1, total);
      std::vector<T> out(counts[un(r)] + 1, sentinel<T>());
      c.reduce_scatter(in.data(), out.data(), counts, s.op);
      if (!(out.back() == sentinel<T>()))
        return ::testing::AssertionFailure() << "reduce_scatter wrote past its block";
      return equal(
          out.data(), counts[un(r)], [&](std::size_t i) { return reduced<T>(s, n, first + i); },
          "reduce_scatter");
    }
    case Kind::gatherv:
    case Kind::allgatherv: {
      const bool all = s.kind == Kind::allgatherv;
      const bool gets = all || r == root;
      const std::vector<std::size_t> counts = counts_of(s, n, count);
      const std::vector<std::size_t> displs = displs_of(counts, s.salt % 3);
      std::vector<T> in = block<T>(s, r, -1, counts[un(r)]);
      std::vector<T> out(gets ? extent(counts, displs) + 2 : 0, sentinel<T>());
      if (all) {
        c.allgatherv(in.data(), in.size(), out.data(), counts, displs);
      } else if (gets) {
        c.gatherv(in.data(), in.size(), out.data(), counts, displs, root);
      } else {
        c.gatherv(in.data(), in.size(), static_cast<T*>(nullptr), {}, {}, root);
      }
      if (!gets) return ::testing::AssertionSuccess();
      for (int q = 0; q < n; ++q) {
        auto res = equal(
            out.data() + displs[un(q)], counts[un(q)],
            [&](std::size_t i) { return value<T>(s, q, -1, i); }, all ? "allgatherv" : "gatherv");
        if (!res) return res << " (block of rank " << q << ")";
      }
      return gaps_untouched(out, counts, displs);
    }
    case Kind::scatterv: {
      const std::vector<std::size_t> counts = counts_of(s, n, count);
      const std::vector<std::size_t> displs = displs_of(counts, 1 + s.salt % 2);
      const std::vector<T> in = r == root ? laid_out<T>(s, root, counts, displs) : std::vector<T>();
      std::vector<T> out(counts[un(r)] + 1, sentinel<T>());
      if (r == root) c.scatterv(in.data(), counts, displs, out.data(), counts[un(r)], root);
      else c.scatterv(static_cast<const T*>(nullptr), {}, {}, out.data(), counts[un(r)], root);
      if (!(out.back() == sentinel<T>()))
        return ::testing::AssertionFailure() << "scatterv wrote past its block";
      return equal(
          out.data(), counts[un(r)], [&](std::size_t i) { return value<T>(s, root, r, i); },
          "scatterv");
    }
    case Kind::alltoallv: {
      // Rank `from` sends rank `to` amount(from, to) elements: every rank computes the matrix.
      auto amount = [&](int from, int to) {
        const std::uint64_t x = mix64(s.salt * 31 + un(from) * 1009 + un(to));
        return x % 3 == 0 ? std::size_t{0} : static_cast<std::size_t>(x % (count + 1));
      };
      std::vector<std::size_t> sc(un(n)), rc(un(n));
      for (int q = 0; q < n; ++q) sc[un(q)] = amount(r, q), rc[un(q)] = amount(q, r);
      const std::vector<std::size_t> sd = displs_of(sc, 1), rd = displs_of(rc, s.salt % 2);
      const std::vector<T> in = laid_out<T>(s, r, sc, sd);
      std::vector<T> out(extent(rc, rd) + 1, sentinel<T>());
      c.alltoallv(in.data(), sc, sd, out.data(), rc, rd);
      for (int q = 0; q < n; ++q) {
        auto res = equal(
            out.data() + rd[un(q)], rc[un(q)], [&](std::size_t i) { return value<T>(s, q, r, i); },
            "alltoallv");
        if (!res) return res << " (block from rank " << q << ")";
      }
      return gaps_untouched(out, rc, rd);
    }
    case Kind::kCount:
      break;
  }
  return ::testing::AssertionFailure() << "no such step";
}

}  // namespace

TEST(CollSoak, RandomStreamOfCollectives_EveryResultRight) {
  const rmp::Comm& world = rmp::world();
  const std::uint64_t seed0 = env_number("ITEST_SOAK_SEED", 20261206);
  const std::uint64_t steps = env_number("ITEST_SOAK_STEPS", kDefaultSteps);
  Draw draw(seed0);
  const int wr = world.rank(), wn = world.size();
  // 0: the world; 1: a dup of it; 2: halves by parity, keys reversed; 3: the lower half and
  // the upper one (which holds the middle rank where the size is odd; at one rank, it alone).
  std::vector<rmp::Comm> comms(4);
  auto make = [&](int which) {
    switch (which) {
      case 0:
        comms[0] = world;
        break;
      case 1:
        comms[1] = world.dup();
        break;
      case 2:
        comms[2] = world.split(wr % 2, wn - wr);
        break;
      default:
        comms[3] = world.split(wr < wn / 2 ? 0 : 1, wr);
        break;
    }
  };
  for (int k = 0; k < 4; ++k) make(k);

  // Point-to-point messages left outstanding across steps, on the world.
  struct Pending {
    std::uint64_t step;
    std::vector<std::uint64_t> sent, got;
    rmp::Request send, recv;
    std::uint64_t due;
  };
  std::vector<Pending> pending;
  auto finish = [&](Pending& p) {
    p.recv.wait();
    p.send.wait();
    const int from = (wr + wn - 1) % wn;
    return matches(p.got.data(), p.got.size(), seed(from, wr, p.step, 99));
  };

  // A call's communicator, collective and element type.
  auto draw_call = [&](Step& x) {
    x.comm = static_cast<int>(draw.below(4));
    x.kind = static_cast<Kind>(draw.below(static_cast<std::size_t>(Kind::kCount)));
    x.type = static_cast<int>(draw.below(kTypes));
  };
  Step run{};
  std::uint64_t run_left = 0;
  std::vector<std::uint64_t> per_kind(static_cast<std::size_t>(Kind::kCount));
  std::uint64_t i = 0;
  for (; i < steps; ++i) {
    // A new run: communicator, collective, count and type; 1-48 calls.
    if (run_left == 0) {
      draw_call(run);
      run.count = draw.percent(50) ? kLargeCounts[draw.below(std::size(kLargeCounts))]
                                   : kCounts[draw.below(std::size(kCounts))];
      run_left = 1 + draw.below(48);
    }
    Step s = run;
    const bool aside = draw.percent(20);  // a single call of something else first
    if (aside) {
      draw_call(s);
      s.count = kCounts[draw.below(std::size(kCounts))];
    } else {
      --run_left;
    }
    s.number = i;
    s.salt = draw.next();
    s.root = static_cast<int>(draw.below(8));
    s.in_place = draw.percent(30);
    s.op = kOps[draw.below(std::size(kOps))];
    // std::byte takes bitwise ops only; an op the type does not take becomes one it does.
    bool ok = false;
    with_type(s.type, [&](auto t) {
      using T = decltype(t);
      if (!reduces(s.kind)) return void(ok = true);
      for (int k = 0; k < 9 && !op_allowed<T>(s.op); ++k)
        s.op = kOps[(static_cast<int>(s.op) + 1) % 9];
      ok = op_allowed<T>(s.op);
    });
    EXPECT_TRUE(ok);
    const rmp::Comm& c = comms[static_cast<std::size_t>(s.comm)];
    // The whole of a call's buffers stays under kMaxCallBytes (from the world's size: the count
    // is the same on every rank, whose communicators' sizes differ, and so is the ring message
    // beside a non-blocking collective).
    std::size_t esize = 1;
    with_type(s.type, [&](auto t) { esize = sizeof(t); });
    const std::size_t most = kMaxCallBytes / esize / static_cast<std::size_t>(wn + 1);
    s.count = std::min(s.count, most);

    // Point-to-point traffic: now and then a ring message posted, completed some steps later.
    if (draw.percent(15)) {
      Pending p;
      p.step = i;
      const std::size_t len = kCounts[draw.below(std::size(kCounts))] * 2;
      p.sent = make_message<std::uint64_t>(len, seed(wr, (wr + 1) % wn, i, 99));
      p.got.assign(len, 0);
      const int tag = static_cast<int>(i % 5000) + 2000;
      p.recv = world.irecv(p.got.data(), len, (wr + wn - 1) % wn, tag);
      p.send = world.isend(p.sent.data(), len, (wr + 1) % wn, tag);
      p.due = i + 1 + draw.below(6);
      pending.push_back(std::move(p));
    }

    ::testing::AssertionResult res = ::testing::AssertionSuccess();
    with_type(s.type, [&](auto t) {
      using T = decltype(t);
      res = run_step<T>(c, s, world);
    });
    EXPECT_TRUE(res) << s.describe(c) << ", seed " << seed0;
    ++per_kind[static_cast<std::size_t>(s.kind)];

    for (auto it = pending.begin(); it != pending.end();) {
      if (it->due > i) {
        ++it;
        continue;
      }
      EXPECT_TRUE(finish(*it)) << "ring message of step " << it->step << ", seed " << seed0;
      it = pending.erase(it);
    }
    // Now and then a communicator other than the world is freed and made again: its
    // successor may take over the node-shared state it leaves.
    if (draw.percent(2)) make(1 + static_cast<int>(draw.below(3)));
    if (stop_together(i)) break;  // (a failed check leaves every call in step)
  }
  for (Pending& p : pending)
    EXPECT_TRUE(finish(p)) << "ring message of step " << p.step << ", seed " << seed0;
  // Every collective came up (a whole stream of the default length is long enough for each).
  if (i == steps && steps >= kDefaultSteps) {
    for (std::size_t k = 0; k < per_kind.size(); ++k)
      EXPECT_GT(per_kind[k], 0u) << kKindNames[k] << " was never drawn";
  }
}
