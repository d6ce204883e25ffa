// Every collective algorithm, callable directly (dispatch.cpp picks one per call; composite
// algorithms call their parts). Each takes the arguments of its collective as
// collectives.hpp defines them (`in == nullptr` means in place) and works for every rank
// count, including non-powers of two, and every count, including count < size and 0.
// docs/algorithms.md describes each: steps, messages, bytes, cost.
#pragma once

#include <cstddef>

#include "collectives/collectives.hpp"
#include "collectives/exchange.hpp"

namespace rmp::coll {

// barrier.cpp
void barrier_dissemination(const CommImpl& c);

// bcast.cpp
void bcast_binomial(const CommImpl& c, void* buf, std::size_t bytes, int root);
void bcast_scatter_allgather(const CommImpl& c, void* buf, std::size_t bytes, int root);
void bcast_pipeline(const CommImpl& c, void* buf, std::size_t bytes, int root);

// reduce.cpp
void reduce_binomial(const CommImpl& c, const void* in, void* out, std::size_t count,
                     std::size_t esize, Type t, Op op, int root);
void reduce_rabenseifner(const CommImpl& c, const void* in, void* out, std::size_t count,
                         std::size_t esize, Type t, Op op, int root);

// allreduce_*.cpp
void allreduce_recursive_doubling(const CommImpl& c, const void* in, void* out, std::size_t count,
                                  std::size_t esize, Type t, Op op);
void allreduce_rabenseifner(const CommImpl& c, const void* in, void* out, std::size_t count,
                            std::size_t esize, Type t, Op op);
void allreduce_ring(const CommImpl& c, const void* in, void* out, std::size_t count,
                    std::size_t esize, Type t, Op op);
// allreduce_compressed.cpp: float/double (t f32 or f64) with sum, min or max; 16-bit values
// (comp fp16 or bf16) on the wire, reduced in full precision; bit-identical on every rank.
void allreduce_compressed(const CommImpl& c, const void* in, void* out, std::size_t count,
                          std::size_t esize, Type t, Op op, Compression comp);

// gather.cpp, scatter.cpp. `all` is the layout at the root (only the root's is read);
// `sizes_known`: every rank knows every block size (gather, scatter), so no block-size
// headers travel (gatherv, scatterv: false).
void gather_binomial(const CommImpl& c, const void* in, std::size_t bytes, void* out,
                     const Layout& all, bool sizes_known, int root);
void gather_linear(const CommImpl& c, const void* in, std::size_t bytes, void* out,
                   const Layout& all, int root);
void scatter_binomial(const CommImpl& c, const void* in, const Layout& all, void* out,
                      std::size_t bytes, bool sizes_known, int root);
void scatter_linear(const CommImpl& c, const void* in, const Layout& all, void* out,
                    std::size_t bytes, int root);

// allgather.cpp (`l`: every rank's block in `out`; in == nullptr: in place)
void allgather_recursive_doubling(const CommImpl& c, const void* in, void* out, const Layout& l);
void allgather_bruck(const CommImpl& c, const void* in, void* out, const Layout& l);
void allgather_ring(const CommImpl& c, const void* in, void* out, const Layout& l);

// alltoall.cpp (in == nullptr: in place, the input is `out` laid out by `rl`)
void alltoall_pairwise(const CommImpl& c, const void* in, const Layout& sl, void* out,
                       const Layout& rl);
void alltoall_bruck(const CommImpl& c, const void* in, const Layout& sl, void* out,
                    const Layout& rl, bool sizes_known);

// reduce_scatter.cpp (`counts`: elements of every rank's result block)
void reduce_scatter_recursive_halving(const CommImpl& c, const void* in, void* out, sizes counts,
                                      std::size_t esize, Type t, Op op);
void reduce_scatter_ring(const CommImpl& c, const void* in, void* out, sizes counts,
                         std::size_t esize, Type t, Op op);

// scan.cpp
void scan_recursive_doubling(const CommImpl& c, const void* in, void* out, std::size_t count,
                             std::size_t esize, Type t, Op op, bool exclusive);
void scan_chain(const CommImpl& c, const void* in, void* out, std::size_t count, std::size_t esize,
                Type t, Op op, bool exclusive);

// ---- Building blocks shared by several algorithms --------------------------------------------

// Consecutive element blocks of a vector, one per rank: block i is `counts[i]` elements from
// element `first[i]` (first has one more entry: the total).
struct Blocks {
  std::vector<std::size_t> counts, first;

  // The even split of even_offset().
  static Blocks even(std::size_t count, int n) {
    Blocks b;
    for (int i = 0; i <= n; ++i) b.first.push_back(even_offset(count, n, i));
    for (int i = 0; i < n; ++i) b.counts.push_back(b.first[i + 1] - b.first[i]);
    return b;
  }
  static Blocks of(sizes counts, int n) {
    Blocks b;
    b.counts.assign(counts.begin(), counts.begin() + n);
    b.first.push_back(0);
    for (int i = 0; i < n; ++i) b.first.push_back(b.first.back() + b.counts[i]);
    return b;
  }
  std::size_t count(int i) const { return counts[static_cast<std::size_t>(i)]; }
  std::size_t start(int i) const { return first[static_cast<std::size_t>(i)]; }
  std::size_t total() const { return first.back(); }
  // The blocks as a byte layout (for the allgather that follows a reduce-scatter).
  Layout layout(std::size_t esize) const { return Layout(counts, first, esize); }
};

// halving.cpp — reduce-scatter by recursive halving over the Fold of c's ranks. On entry
// `work` holds this rank's vector (blocks.first.back() elements); on return a surviving rank
// holds, in `work`, its new rank's segment [first(first_original(nr)), first(first_original(nr+1)))
// fully reduced; returns that new rank, or -1 for a rank that sat out (its vector was handed
// to its odd neighbour). Each element is combined at exactly one rank, so whoever receives it
// later receives the same bits.
int halving_reduce_scatter(const CommImpl& c, std::byte* work, const Blocks& blocks,
                           std::size_t esize, Type t, Op op, int tag);
// Its exchanges, for it and for the non-blocking allreduce's schedule (nonblocking.cpp): at
// each step new rank nr hands elements [give, give + ngive) of its vector to `partner` and
// combines the partner's [keep, keep + nkeep) into its own.
struct HalvingStep {
  int partner;
  std::size_t give, ngive, keep, nkeep;
};
std::vector<HalvingStep> halving_steps(const Fold& f, const Blocks& blocks, int nr);
// Elements of scratch original rank r needs for what arrives: the whole vector at the fold,
// else the first kept half (the later ones lie inside it).
std::size_t halving_scratch(const Fold& f, const Blocks& blocks, int r);
// The recursive doubling that undoes it (Rabenseifner's allgather half; the blocking allreduce
// and the non-blocking one's schedule): at each step new rank nr sends the elements it has
// gathered, [mine, mine + nmine), to `partner` and receives the partner's, [theirs, theirs +
// ntheirs).
struct DoublingStep {
  int partner;
  std::size_t mine, nmine, theirs, ntheirs;
};
std::vector<DoublingStep> doubling_steps(const Fold& f, const Blocks& blocks, int nr);

// ring.cpp — segmented rings (segments of fragment_size bytes, pipeline_depth of them in
// flight, each forwarded as soon as it arrives).
// Reduce-scatter: on return block r of `work` (elements) holds the reduction of every rank's
// block r.
void ring_reduce_scatter(const CommImpl& c, std::byte* work, const Blocks& blocks,
                         std::size_t esize, Type t, Op op, int tag);
// Allgather: block r of `buf` (laid out by `l`) is this rank's on entry; every block is
// everyone's on return.
void ring_allgather(const CommImpl& c, void* buf, const Layout& l, int tag);

}  // namespace rmp::coll
