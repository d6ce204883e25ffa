// Reduce: binomial tree (small vectors) and Rabenseifner's reduce-scatter + gather (large).
#include "collectives/algorithms.hpp"
#include "collectives/reduce_ops.hpp"

namespace rmp::coll {

void reduce_binomial(const CommImpl& c, const void* in, void* out, std::size_t count,
                     std::size_t esize, Type t, Op op, int root) {
  const int n = c.size(), vr = rel(c.rank(), root, n);
  const std::size_t bytes = count * esize;
  const void* mine = in ? in : out;
  const int parent = vr == 0 ? -1 : abs_rank(vr - lowbit(vr), root, n);
  const int span = vr == 0 ? n : lowbit(vr);    // children are vr + mask for mask < span
  if (vr != 0 && (span == 1 || vr + 1 >= n)) {  // a leaf sends its input as it is
    send(c, mine, bytes, parent, kReduce);
    return;
  }
  Scratch acc_s(vr == 0 ? 0 : bytes), tmp(bytes);
  std::byte* acc = vr == 0 ? static_cast<std::byte*>(out) : acc_s.data();
  // acc covers relative ranks [vr, vr + mask); the child brings [vr + mask, vr + 2·mask):
  // lower ranks stay the left operand, a fixed order on every run. The first child's part is
  // combined with this rank's own in one pass (reduce_into: the same bits as copying the own
  // part into acc and combining into it), unless acc is the own part (in place at the root).
  bool combined = false;
  for (int mask = 1; mask < span && vr + mask < n; mask <<= 1) {
    recv(c, tmp.data(), bytes, abs_rank(vr + mask, root, n), kReduce);
    if (!combined && acc != mine) {
      reduce_into(op, t, mine, tmp.data(), acc, count);
    } else {
      reduce_apply(op, t, tmp.data(), acc, count);
    }
    combined = true;
  }
  if (!combined && acc != mine) copy_bytes(acc, mine, bytes);
  if (vr != 0) send(c, acc, bytes, parent, kReduce);
}

void reduce_rabenseifner(const CommImpl& c, const void* in, void* out, std::size_t count,
                         std::size_t esize, Type t, Op op, int root) {
  const int n = c.size(), r = c.rank();
  const std::size_t bytes = count * esize;
  const bool at_root = r == root;
  Scratch work_s(at_root ? 0 : bytes);
  std::byte* work = at_root ? static_cast<std::byte*>(out) : work_s.data();
  copy_bytes(work, in ? in : out, bytes);
  if (n == 1) return;

  const Fold f(n);
  const Blocks blocks = Blocks::even(count, n);
  auto elem = [&](int nr) { return blocks.start(f.first_original(nr)); };
  const int nr = halving_reduce_scatter(c, work, blocks, esize, t, op, kReduce);
  // The segments gather at the survivor standing for the root (its odd neighbour when the
  // root sat out of the fold).
  const int root_nr = f.newrank(f.sits_out(root) ? root + 1 : root);
  if (nr >= 0) {
    // Binomial gather in new ranks relative to root_nr by XOR: before the step of `mask` a
    // rank holds the segments of the aligned group of `mask` new ranks around it, a
    // contiguous piece of the vector, and either sends it across or receives the partner's.
    const int vr = nr ^ root_nr;
    for (int mask = 1; mask < f.p2; mask <<= 1) {
      const int lo = nr & ~(mask - 1), plo = lo ^ mask;
      const int partner = f.survivor(nr ^ mask);
      if (vr & mask) {
        const std::size_t len = elem(lo + mask) - elem(lo);
        if (len) send(c, work + elem(lo) * esize, len * esize, partner, kReduce);
        break;
      }
      const std::size_t len = elem(plo + mask) - elem(plo);
      if (len) recv(c, work + elem(plo) * esize, len * esize, partner, kReduce);
    }
    if (vr == 0 && !at_root && bytes) send(c, work, bytes, root, kReduce);
  } else if (at_root && bytes) {
    recv(c, out, bytes, r + 1, kReduce);
  }
}

}  // namespace rmp::coll
