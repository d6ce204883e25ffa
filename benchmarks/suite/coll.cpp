// Collective benchmarks over every rank of the job, after the OSU micro-benchmarks
// (osu_allreduce, osu_reduce, osu_bcast, osu_allgather, osu_alltoall, osu_barrier,
// osu_reduce_scatter_block):
//   - each call is timed on its own and followed by an untimed barrier, so that one call's
//     stragglers never overlap the next call (barrier itself: back-to-back calls);
//   - the value is the average time per call in µs, averaged over the ranks (OSU's
//     "Avg Latency");
//   - bytes = the call's count × element size: the whole vector for allreduce, reduce and
//     bcast; one rank's block for allgather, alltoall and reduce_scatter_block (the block each
//     rank receives from / sends to each peer, or its share of the result);
//   - after timing, one untimed call on rank-dependent values is checked element by element
//     against a reference computed here; a wrong result makes the program exit 1.
//   - iallreduce_overlap: how much of a non-blocking allreduce hides behind compute (%).
// Element type (--type, default double), reduction (--op, default sum) and root (--root,
// default 0) are options; --compress fp16|bf16 times rmp's mixed-precision allreduce. Built
// once per backend: bench_coll_rmp, bench_coll_openmpi, bench_coll_mpich.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "backend.hpp"
#include "harness.hpp"

namespace {

using bench::Backend;
using bench::Context;
using bench::Elem;
using bench::ReduceOp;

template <class T>
inline constexpr bool is_complex_v = false;
template <class R>
inline constexpr bool is_complex_v<std::complex<R>> = true;

// ---- Values and the reference reduction -----------------------------------------------------
// Small integers only: every sum, product, min and max of them is exact in every element
// type (products are powers of two, or Gaussian integers of modulus ≤ 2^(ranks/2)), so the
// reference is exact whatever order a library reduces in; integer types wrap, and so does the
// reference. Nothing here is ever NaN, infinite or denormal, so the buffers, which the timed
// loops reuse, never slow a reduction down.

template <class T>
T from_ints(long re, long im) {
  if constexpr (is_complex_v<T>) {
    using R = typename T::value_type;
    return T(static_cast<R>(re), static_cast<R>(im));
  } else {
    (void)im;
    return static_cast<T>(re);  // wraps for unsigned types (and, since C++20, signed ones)
  }
}

// The value rank `rank` contributes at element `i` of a reduction with `op`.
template <class T>
T reduce_input(ReduceOp op, int rank, int ranks, std::size_t i) {
  const long r = rank;
  const long k = static_cast<long>(i % 4096);
  switch (op) {
    case ReduceOp::sum:
      return from_ints<T>((r * 7 + k * 3) % 11 + 1, (r + k) % 5);
    case ReduceOp::prod:
      if constexpr (is_complex_v<T>) {
        const long z = (r + k) % 3;  // 1, i or 1 + i
        return from_ints<T>(z == 1 ? 0 : 1, z == 0 ? 0 : 1);
      } else {
        return from_ints<T>((r + k) % 2 + 1, 0);
      }
    case ReduceOp::min:
    case ReduceOp::max:
      return from_ints<T>((r * 5 + k * 3) % 17 - 8, 0);
    case ReduceOp::land:
    case ReduceOp::lor: {
      // Elements where every rank, no rank, exactly one rank, all but one rank is non-zero.
      const long who = (k / 4) % ranks;
      switch (k % 4) {
        case 0:
          return from_ints<T>(1 + r % 3, 0);
        case 1:
          return from_ints<T>(0, 0);
        case 2:
          return from_ints<T>(r == who ? 3 : 0, 0);
        default:
          return from_ints<T>(r == who ? 0 : 2, 0);
      }
    }
    case ReduceOp::band:
    case ReduceOp::bor:
    case ReduceOp::bxor:
      return from_ints<T>((r * 37 + k * 11 + 5) & 0x7f, 0);
  }
  return T{};
}

// acc op= v, with the semantics API.md and MPI give `op` on T.
template <class T>
T reference_apply(ReduceOp op, T acc, T v) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    const W a = static_cast<U>(acc), b = static_cast<U>(v);
    switch (op) {
      case ReduceOp::sum:
        return static_cast<T>(static_cast<U>(a + b));
      case ReduceOp::prod:
        return static_cast<T>(static_cast<U>(a * b));
      case ReduceOp::min:
        return v < acc ? v : acc;
      case ReduceOp::max:
        return acc < v ? v : acc;
      case ReduceOp::land:
        return static_cast<T>(acc != 0 && v != 0);
      case ReduceOp::lor:
        return static_cast<T>(acc != 0 || v != 0);
      case ReduceOp::band:
        return static_cast<T>(acc & v);
      case ReduceOp::bor:
        return static_cast<T>(acc | v);
      case ReduceOp::bxor:
        return static_cast<T>(acc ^ v);
    }
  } else if constexpr (is_complex_v<T>) {
    if (op == ReduceOp::prod) return acc * v;
    return acc + v;
  } else {
    switch (op) {
      case ReduceOp::sum:
        return acc + v;
      case ReduceOp::prod:
        return acc * v;
      case ReduceOp::min:
        return v < acc ? v : acc;
      case ReduceOp::max:
        return acc < v ? v : acc;
      default:
        break;
    }
  }
  return acc;
}

// What a compressed allreduce (--compress) returns for the exact result v: v rounded once to
// the 16-bit format's significand (11 bits fp16, 8 bits bf16), ties to even. The inputs here
// are small integers, exact in both formats, and rmp adds them in full precision, so this one
// rounding is the only difference from the reference.
double rounded(bench::Compress c, double v) {
  if (c == bench::Compress::none || v == 0) return v;
  const int bits = c == bench::Compress::fp16 ? 11 : 8;
  int e = 0;
  std::frexp(v, &e);
  return std::ldexp(std::nearbyint(std::ldexp(v, bits - e)), e - bits);
}

// The reduction over all ranks of element `i`.
template <class T>
T reference(ReduceOp op, int ranks, std::size_t i) {
  T acc = reduce_input<T>(op, 0, ranks, i);
  for (int r = 1; r < ranks; ++r) acc = reference_apply(op, acc, reduce_input<T>(op, r, ranks, i));
  return acc;
}

// Contents of a data-moving block identified by `seed` (bcast, allgather, alltoall).
template <class T>
T block_value(std::size_t seed, std::size_t i) {
  const long a = static_cast<long>((seed * 131 + i * 7) % 97);
  return from_ints<T>(a, static_cast<long>((seed + i) % 13));
}

template <class T>
std::string text(const T& v) {
  if constexpr (is_complex_v<T>) {
    return "(" + std::to_string(static_cast<double>(v.real())) + ", " +
           std::to_string(static_cast<double>(v.imag())) + ")";
  } else if constexpr (std::is_integral_v<T>) {
    return std::to_string(static_cast<long long>(v));
  } else {
    return std::to_string(static_cast<double>(v));
  }
}

// Compares `count` elements with expect(i); reports the first difference and how many there
// were. Exact comparison: every expected value is exact (see above).
template <class T, class Expect>
void check(Context& c, const char* test, std::size_t bytes, const void* data, std::size_t count,
           const char* where, Expect&& expect) {
  const T* p = static_cast<const T*>(data);
  std::size_t bad = 0, first = 0;
  T want{}, got{};
  for (std::size_t i = 0; i < count; ++i) {
    const T e = expect(i);
    if (!(p[i] == e)) {
      if (bad++ == 0) {
        first = i;
        want = e;
        got = p[i];
      }
    }
  }
  if (bad) {
    bench::report_validation_failure(
        c.b, test, bytes,
        std::string(where) + ": " + std::to_string(bad) + " of " + std::to_string(count) +
            " elements wrong; first at element " + std::to_string(first) + ": expected " +
            text(want) + ", got " + text(got));
  }
}

template <class T, class F>
void fill(void* data, std::size_t count, F&& value) {
  T* p = static_cast<T*>(data);
  for (std::size_t i = 0; i < count; ++i) p[i] = value(i);
}

// ---- Timing -------------------------------------------------------------------------------

// OSU style: each call timed alone, an untimed barrier after it; µs per call, averaged over
// the timed iterations, then over the ranks.
template <class Call>
double time_calls(Context& c, std::size_t iters, std::size_t warmup, Call&& call) {
  Backend& b = c.b;
  double total = 0;
  for (std::size_t i = 0; i < warmup + iters; ++i) {
    const double t0 = b.wtime();
    call(i);
    const double dt = b.wtime() - t0;
    if (i >= warmup) total += dt;
    b.barrier();
  }
  double mine = total * 1e6 / static_cast<double>(iters), sum = 0;
  b.allreduce(&mine, &sum, 1, Elem::f64, ReduceOp::sum);
  return sum / b.size();
}

std::size_t elements(const Context& c, std::size_t bytes) {
  return bytes / bench::elem_size(c.opt.elem);
}

std::size_t ranks(const Context& c) { return static_cast<std::size_t>(c.b.size()); }

// What a typed test reads from its context for one size: the library, the element count,
// the element type and the reduction. Used as `const auto [b, n, e, op] = typed(c, bytes);`.
struct Typed {
  Backend& b;
  std::size_t n;
  Elem e;
  ReduceOp op;
};
Typed typed(Context& c, std::size_t bytes) {
  return Typed{c.b, elements(c, bytes), c.opt.elem, c.opt.op};
}

// ---- Tests --------------------------------------------------------------------------------

// The untimed check of a reduction: every rank contributes reduce_input() at `in_count`
// elements, `call(in, out)` reduces, and the `bytes` of `out` must equal the reference from
// element `first` on wherever `has_result` says the result lands (allreduce, reduce: the whole
// vector from 0; reduce_scatter_block: this rank's block). `wire` is the allreduce's
// compression: a compressed result is the reference rounded once to 16 bits.
template <class Call>
void check_reduction(Context& c, const char* test, std::size_t bytes, std::size_t in_count,
                     std::size_t first, bool has_result, const char* where, bench::Compress wire,
                     Call&& call) {
  Backend& b = c.b;
  const std::size_t n = elements(c, bytes);
  const ReduceOp op = c.opt.op;
  with_elem(c.opt.elem, [&](auto tag) {
    using T = decltype(tag);
    void* in = c.sbuf.region(0, in_count * sizeof(T));
    void* out = c.rbuf.region(0, bytes);
    fill<T>(in, in_count,
            [&](std::size_t i) { return reduce_input<T>(op, b.rank(), b.size(), i); });
    fill<T>(out, n, [](std::size_t) { return T{}; });
    call(in, out);
    if (has_result) {
      check<T>(c, test, bytes, out, n, where, [&](std::size_t i) {
        const T want = reference<T>(op, b.size(), first + i);
        if constexpr (std::is_floating_point_v<T>)
          return static_cast<T>(rounded(wire, static_cast<double>(want)));
        return want;
      });
    }
  });
}

double allreduce(Context& c, std::size_t bytes, std::size_t iters, std::size_t warmup) {
  const auto [b, n, e, op] = typed(c, bytes);
  const double us = time_calls(c, iters, warmup, [&](std::size_t i) {
    b.allreduce(c.sbuf.region(i, bytes), c.rbuf.region(i, bytes), n, e, op, c.opt.compress);
  });
  check_reduction(c, "allreduce", bytes, n, 0, true, "result", c.opt.compress,
                  [&](const void* in, void* out) { b.allreduce(in, out, n, e, op, c.opt.compress); });
  return us;
}

// A communicator made, used for one allreduce, freed (no OSU counterpart): a library that dups
// its caller's communicator per call pays this.
double comm_allreduce(Context& c, Backend::NewComm how, const char* name, std::size_t bytes,
                      std::size_t iters, std::size_t warmup) {
  const auto [b, n, e, op] = typed(c, bytes);
  const double us = time_calls(c, iters, warmup, [&](std::size_t i) {
    b.comm_allreduce(how, c.sbuf.region(i, bytes), c.rbuf.region(i, bytes), n, e, op);
  });
  check_reduction(c, name, bytes, n, 0, true, "result", bench::Compress::none,
                  [&](const void* in, void* out) { b.comm_allreduce(how, in, out, n, e, op); });
  return us;
}
double comm_dup(Context& c, std::size_t bytes, std::size_t iters, std::size_t warmup) {
  return comm_allreduce(c, Backend::NewComm::dup, "comm_dup", bytes, iters, warmup);
}
double comm_split(Context& c, std::size_t bytes, std::size_t iters, std::size_t warmup) {
  return comm_allreduce(c, Backend::NewComm::split, "comm_split", bytes, iters, warmup);
}

double reduce(Context& c, std::size_t bytes, std::size_t iters, std::size_t warmup) {
  const auto [b, n, e, op] = typed(c, bytes);
  const int root = c.opt.root;
  const double us = time_calls(c, iters, warmup, [&](std::size_t i) {
    b.reduce(c.sbuf.region(i, bytes), c.rbuf.region(i, bytes), n, e, op, root);
  });
  check_reduction(c, "reduce", bytes, n, 0, b.rank() == root, "result at the root",
                  bench::Compress::none,
                  [&](const void* in, void* out) { b.reduce(in, out, n, e, op, root); });
  return us;
}

// Spins on arithmetic for `seconds` of wall time, as OSU's dummy compute: the work a
// non-blocking collective should overlap with. Calls nothing of the library.
void compute_for(Backend& b, double seconds) {
  const double t0 = b.wtime();
  volatile double x = 1.0;
  while (b.wtime() - t0 < seconds) {
    for (int k = 0; k < 64; ++k) x = x * 1.0000001 + 1e-9;
  }
}

// osu_iallreduce: the pure time of iallreduce + wait, then compute of that length alone, then
// iallreduce started, the same compute, wait. Overlap % = 100 · (1 − (overlapped − compute) /
// pure), at least 0: 100 means the collective finished entirely behind the compute, 0 that it
// only moved while the rank waited. Each of the three is averaged over the ranks (time_calls).
double iallreduce_overlap(Context& c, std::size_t bytes, std::size_t iters, std::size_t warmup) {
  const auto [b, n, e, op] = typed(c, bytes);
  auto start = [&](std::size_t i) {
    b.iallreduce(c.sbuf.region(i, bytes), c.rbuf.region(i, bytes), n, e, op);
  };
  const double pure = time_calls(c, iters, warmup, [&](std::size_t i) {
    start(i);
    b.waitall();
  });
  const double seconds = pure * 1e-6;
  const double compute =
      time_calls(c, iters, warmup, [&](std::size_t) { compute_for(b, seconds); });
  const double overlapped = time_calls(c, iters, warmup, [&](std::size_t i) {
    start(i);
    compute_for(b, seconds);
    b.waitall();
  });
  check_reduction(c, "iallreduce_overlap", bytes, n, 0, true, "result", bench::Compress::none,
                  [&](const void* in, void* out) {
                    b.iallreduce(in, out, n, e, op);
                    b.waitall();
                  });
  if (b.rank() == 0) {
    std::printf("# iallreduce_overlap %zu pure_us=%.3f compute_us=%.3f overlapped_us=%.3f\n",
                bytes, pure, compute, overlapped);
  }
  return std::max(0.0, 100.0 * (1.0 - (overlapped - compute) / pure));
}

double bcast(Context& c, std::size_t bytes, std::size_t iters, std::size_t warmup) {
  const auto [b, n, e, op] = typed(c, bytes);
  const int root = c.opt.root;
  const double us = time_calls(
      c, iters, warmup, [&](std::size_t i) { b.bcast(c.sbuf.region(i, bytes), n, e, root); });
  with_elem(e, [&](auto tag) {
    using T = decltype(tag);
    void* buf = c.sbuf.region(0, bytes);
    const std::size_t seed = 1000 + static_cast<std::size_t>(root);
    if (b.rank() == root) {
      fill<T>(buf, n, [&](std::size_t i) { return block_value<T>(seed, i); });
    } else {
      fill<T>(buf, n, [](std::size_t) { return T{}; });
    }
    b.bcast(buf, n, e, root);
    check<T>(c, "bcast", bytes, buf, n, "buffer",
             [&](std::size_t i) { return block_value<T>(seed, i); });
  });
  return us;
}

double allgather(Context& c, std::size_t bytes, std::size_t iters, std::size_t warmup) {
  const auto [b, n, e, op] = typed(c, bytes);
  const std::size_t all = bytes * ranks(c);
  const double us = time_calls(c, iters, warmup, [&](std::size_t i) {
    b.allgather(c.sbuf.region(i, bytes), c.rbuf.region(i, all), n, e);
  });
  with_elem(e, [&](auto tag) {
    using T = decltype(tag);
    void* in = c.sbuf.region(0, bytes);
    void* out = c.rbuf.region(0, all);
    const auto me = static_cast<std::size_t>(b.rank());
    fill<T>(in, n, [&](std::size_t i) { return block_value<T>(me + 1, i); });
    fill<T>(out, n * ranks(c), [](std::size_t) { return T{}; });
    b.allgather(in, out, n, e);
    check<T>(c, "allgather", bytes, out, n * ranks(c), "gathered blocks",
             [&](std::size_t i) { return block_value<T>(i / n + 1, i % n); });
  });
  return us;
}

double alltoall(Context& c, std::size_t bytes, std::size_t iters, std::size_t warmup) {
  const auto [b, n, e, op] = typed(c, bytes);
  const std::size_t p = ranks(c);
  const std::size_t all = bytes * p;
  const double us = time_calls(c, iters, warmup, [&](std::size_t i) {
    b.alltoall(c.sbuf.region(i, all), c.rbuf.region(i, all), n, e);
  });
  with_elem(e, [&](auto tag) {
    using T = decltype(tag);
    void* in = c.sbuf.region(0, all);
    void* out = c.rbuf.region(0, all);
    const auto me = static_cast<std::size_t>(b.rank());
    // Block d of rank s carries seed s·p + d + 1: rank d must find it at block s.
    fill<T>(in, n * p, [&](std::size_t i) { return block_value<T>(me * p + i / n + 1, i % n); });
    fill<T>(out, n * p, [](std::size_t) { return T{}; });
    b.alltoall(in, out, n, e);
    check<T>(c, "alltoall", bytes, out, n * p, "received blocks",
             [&](std::size_t i) { return block_value<T>((i / n) * p + me + 1, i % n); });
  });
  return us;
}

double reduce_scatter_block(Context& c, std::size_t bytes, std::size_t iters, std::size_t warmup) {
  const auto [b, n, e, op] = typed(c, bytes);
  const std::size_t all = bytes * ranks(c);
  const double us = time_calls(c, iters, warmup, [&](std::size_t i) {
    b.reduce_scatter_block(c.sbuf.region(i, all), c.rbuf.region(i, bytes), n, e, op);
  });
  check_reduction(c, "reduce_scatter_block", bytes, n * ranks(c),
                  static_cast<std::size_t>(b.rank()) * n, true, "this rank's block",
                  bench::Compress::none,
                  [&](const void* in, void* out) { b.reduce_scatter_block(in, out, n, e, op); });
  return us;
}

// Back-to-back barriers (osu_barrier). The check: rank 0 enters late by kLate; every other
// rank must have been held for most of that (half: generous for descheduled ranks, and far
// above what a barrier that does not wait would show).
double barrier(Context& c, std::size_t, std::size_t iters, std::size_t warmup) {
  Backend& b = c.b;
  double t0 = b.wtime();
  for (std::size_t i = 0; i < warmup + iters; ++i) {
    if (i == warmup) t0 = b.wtime();
    b.barrier();
  }
  double mine = (b.wtime() - t0) * 1e6 / static_cast<double>(iters), sum = 0;
  b.allreduce(&mine, &sum, 1, Elem::f64, ReduceOp::sum);

  constexpr auto kLate = std::chrono::milliseconds(200);
  b.barrier();
  if (b.rank() == 0) std::this_thread::sleep_for(kLate);
  const double start = b.wtime();
  b.barrier();
  const double held = b.wtime() - start;
  const double need = std::chrono::duration<double>(kLate).count() / 2;
  if (b.rank() != 0 && held < need) {
    bench::report_validation_failure(
        b, "barrier", 0,
        "left the barrier after " + std::to_string(held * 1e3) + " ms although rank 0 entered " +
            std::to_string(std::chrono::duration<double>(kLate).count() * 1e3) + " ms late");
  }
  return sum / b.size();
}

// Gives both pools well-behaved contents of the chosen type before anything is timed (the
// harness fills them with 0x5a bytes: as floats those overflow under prod).
void prepare(Context& c) {
  with_elem(c.opt.elem, [&](auto tag) {
    using T = decltype(tag);
    for (bench::BufferPool* pool : {&c.sbuf, &c.rbuf}) {
      fill<T>(pool->region(0, pool->bytes()), pool->bytes() / sizeof(T),
              [&](std::size_t i) { return reduce_input<T>(c.opt.op, c.b.rank(), c.b.size(), i); });
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  // OSU's defaults: 1000 iterations (100 warm-up) up to 8 KiB, fewer above.
  const bench::IterPolicy small{
      .base = 1000, .warmup = 100, .large_threshold = 8192, .min_large = 50};
  const std::vector<bench::Test> tests = {
      {"allreduce", "us", "vector of BYTES reduced, result on every rank (osu_allreduce)", small,
       allreduce},
      {"reduce", "us", "vector of BYTES reduced to --root (osu_reduce)", small, reduce},
      {"bcast", "us", "BYTES from --root to every rank (osu_bcast)", small, bcast},
      {"allgather", "us", "BYTES per rank gathered on every rank (osu_allgather)", small,
       allgather},
      {"alltoall", "us", "BYTES from every rank to every rank (osu_alltoall)", small, alltoall},
      {"reduce_scatter_block", "us",
       "size() blocks of BYTES reduced, block r to rank r (osu_reduce_scatter_block)", small,
       reduce_scatter_block},
      {"iallreduce_overlap", "%",
       "iallreduce overlapped with compute of its own length: overlap % (osu_iallreduce)",
       bench::IterPolicy{.base = 200, .warmup = 20, .large_threshold = 8192, .min_large = 20},
       iallreduce_overlap},
      {"comm_dup", "us", "dup of the world, allreduce of BYTES on it, free (no osu test)", small,
       comm_dup},
      {"comm_split", "us",
       "split of the world (one colour), allreduce of BYTES on it, free (no osu test)", small,
       comm_split},
      {"barrier", "us", "back-to-back barriers, no size (osu_barrier)",
       bench::IterPolicy{.base = 1000, .warmup = 100, .large_threshold = 8192, .min_large = 50},
       barrier, /*sizeless=*/true},
  };
  bench::SuiteSpec spec;
  spec.program = "bench_coll";
  spec.min_ranks = 1;
  spec.max_ranks = 0;
  spec.typed = true;
  spec.default_max = std::size_t{1} << 20;
  spec.pools_per_rank = true;
  spec.prepare = prepare;
  int status = 0;
  {
    Backend b(argc, argv);
    status = bench::run_suite(b, spec, tests, argc, argv);
  }
  return status;
}
