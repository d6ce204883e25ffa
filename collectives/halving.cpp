// Reduce-scatter by recursive halving (Thakur, Rabenseifner, Gropp 2005) over the Fold of the
// ranks: the first half of Rabenseifner's reduce and allreduce, and reduce_scatter's
// recursive_halving. See halving_reduce_scatter in algorithms.hpp.
#include "collectives/algorithms.hpp"
#include "collectives/reduce_ops.hpp"

namespace rmp::coll {

int halving_reduce_scatter(const CommImpl& c, std::byte* work, const Blocks& blocks,
                           std::size_t esize, Type t, Op op, int tag) {
  const int r = c.rank();
  const Fold f(c.size());
  const std::size_t total = blocks.total();
  // Elements of new ranks [a, b) (a range of new ranks is a contiguous range of originals).
  auto elem = [&](int nr) { return blocks.start(f.first_original(nr)); };

  if (f.sits_out(r)) {
    if (total) send(c, work, total * esize, r + 1, tag);
    return -1;
  }
  const int nr = f.newrank(r);
  // Scratch for what arrives: the whole vector at the fold, else the first kept half (the
  // later ones lie inside it).
  const int first_keep = nr < f.p2 / 2 ? 0 : f.p2 / 2;
  const std::size_t most = f.folded(r) ? total
                           : f.p2 > 1  ? elem(first_keep + f.p2 / 2) - elem(first_keep)
                                       : 0;
  Scratch tmp(most * esize);

  if (f.folded(r)) {
    // Combined here only, so any fixed operand order gives every later receiver the same bits.
    if (total) {
      recv(c, tmp.data(), total * esize, r - 1, tag);
      reduce_apply(op, t, tmp.data(), work, total);
    }
  }
  // Halve the range of new ranks this rank is responsible for: keep the half holding nr,
  // hand the other to the partner across, and combine what the partner hands over.
  int lo = 0;
  for (int mask = f.p2 / 2; mask >= 1; mask >>= 1) {
    const int mid = lo + mask;
    const int keep = nr < mid ? lo : mid, give = nr < mid ? mid : lo;
    const std::size_t nkeep = elem(keep + mask) - elem(keep);
    const std::size_t ngive = elem(give + mask) - elem(give);
    const int partner = f.survivor(nr ^ mask);
    exchange(c, work + elem(give) * esize, ngive * esize, partner, tmp.data(), nkeep * esize,
             partner, tag);
    if (nkeep) reduce_apply(op, t, tmp.data(), work + elem(keep) * esize, nkeep);
    lo = keep;
  }
  return nr;
}

}  // namespace rmp::coll
