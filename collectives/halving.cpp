// Reduce-scatter by recursive halving (Thakur, Rabenseifner, Gropp 2005) over the Fold of the
// ranks: the first half of Rabenseifner's reduce and allreduce, and reduce_scatter's
// recursive_halving. See halving_reduce_scatter in algorithms.hpp.
#include "collectives/algorithms.hpp"
#include "collectives/reduce_ops.hpp"

namespace rmp::coll {

std::vector<HalvingStep> halving_steps(const Fold& f, const Blocks& blocks, int nr) {
  // Elements of new ranks [a, b) (a range of new ranks is a contiguous range of originals).
  auto elem = [&](int q) { return blocks.start(f.first_original(q)); };
  // Halve the range of new ranks this rank is responsible for: keep the half holding nr,
  // hand the other to the partner across.
  std::vector<HalvingStep> steps;
  int lo = 0;
  for (int mask = f.p2 / 2; mask >= 1; mask >>= 1) {
    const int mid = lo + mask;
    const int keep = nr < mid ? lo : mid, give = nr < mid ? mid : lo;
    steps.push_back({f.survivor(nr ^ mask), elem(give), elem(give + mask) - elem(give), elem(keep),
                     elem(keep + mask) - elem(keep)});
    lo = keep;
  }
  return steps;
}

std::vector<DoublingStep> doubling_steps(const Fold& f, const Blocks& blocks, int nr) {
  auto elem = [&](int q) { return blocks.start(f.first_original(q)); };
  std::vector<DoublingStep> steps;
  for (int mask = 1; mask < f.p2; mask <<= 1) {
    const int mine = nr & ~(mask - 1), theirs = mine ^ mask;
    steps.push_back({f.survivor(nr ^ mask), elem(mine), elem(mine + mask) - elem(mine),
                     elem(theirs), elem(theirs + mask) - elem(theirs)});
  }
  return steps;
}

std::size_t halving_scratch(const Fold& f, const Blocks& blocks, int r) {
  if (f.folded(r)) return blocks.total();
  if (f.p2 < 2) return 0;
  const int nr = f.newrank(r), first_keep = nr < f.p2 / 2 ? 0 : f.p2 / 2;
  return blocks.start(f.first_original(first_keep + f.p2 / 2)) -
         blocks.start(f.first_original(first_keep));
}

int halving_reduce_scatter(const CommImpl& c, std::byte* work, const Blocks& blocks,
                           std::size_t esize, Type t, Op op, int tag) {
  const int r = c.rank();
  const Fold f(c.size());
  const std::size_t total = blocks.total();
  if (f.sits_out(r)) {
    if (total) send(c, work, total * esize, r + 1, tag);
    return -1;
  }
  const int nr = f.newrank(r);
  Scratch tmp(halving_scratch(f, blocks, r) * esize);
  if (f.folded(r)) {
    // Combined here only, so any fixed operand order gives every later receiver the same bits.
    if (total) {
      recv(c, tmp.data(), total * esize, r - 1, tag);
      reduce_apply(op, t, tmp.data(), work, total);
    }
  }
  for (const HalvingStep& h : halving_steps(f, blocks, nr)) {
    exchange(c, work + h.give * esize, h.ngive * esize, h.partner, tmp.data(), h.nkeep * esize,
             h.partner, tag);
    if (h.nkeep) reduce_apply(op, t, tmp.data(), work + h.keep * esize, h.nkeep);
  }
  return nr;
}

}  // namespace rmp::coll
