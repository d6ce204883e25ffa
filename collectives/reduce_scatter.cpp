// Reduce-scatter (and reduce_scatter_block, which arrives with equal counts): recursive
// halving over the Fold (halving.cpp; few rounds: power-of-two rank counts, small vectors)
// and the segmented ring (ring.cpp; any rank count, large vectors). In place, the input is
// the whole of `out` and the result is left in its first counts[rank] elements.
#include "collectives/algorithms.hpp"

namespace rmp::coll {

void reduce_scatter_recursive_halving(const CommImpl& c, const void* in, void* out, sizes counts,
                                      std::size_t esize, Type t, Op op) {
  const int n = c.size(), r = c.rank();
  const Blocks blocks = Blocks::of(counts, n);
  const std::size_t mine = blocks.count(r) * esize;
  Scratch work(blocks.total() * esize);
  copy_bytes(work.data(), in ? in : out, blocks.total() * esize);
  const Fold f(n);
  const int nr = halving_reduce_scatter(c, work.data(), blocks, esize, t, op, kReduceScatter);
  if (nr < 0) {  // sat out: the odd neighbour holds this rank's block too
    if (mine) recv(c, out, mine, r + 1, kReduceScatter);
    return;
  }
  if (f.folded(r) && blocks.count(r - 1))
    send(c, work.data() + blocks.start(r - 1) * esize, blocks.count(r - 1) * esize, r - 1,
         kReduceScatter);
  copy_bytes(out, work.data() + blocks.start(r) * esize, mine);
}

void reduce_scatter_ring(const CommImpl& c, const void* in, void* out, sizes counts,
                         std::size_t esize, Type t, Op op) {
  const int r = c.rank();
  const Blocks blocks = Blocks::of(counts, c.size());
  Scratch work(blocks.total() * esize);
  copy_bytes(work.data(), in ? in : out, blocks.total() * esize);
  ring_reduce_scatter(c, work.data(), blocks, esize, t, op, kReduceScatter);
  copy_bytes(out, work.data() + blocks.start(r) * esize, blocks.count(r) * esize);
}

}  // namespace rmp::coll
