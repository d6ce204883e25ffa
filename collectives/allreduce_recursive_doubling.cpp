// Allreduce by recursive doubling: log2 P exchanges of the whole vector between partners
// r ^ 2^k, each combining both halves of the group; a non-power-of-two rank count folds onto
// P = 2^⌊log2 p⌋ first and unfolds at the end (Fold). Latency-optimal: for small vectors.
#include <utility>

#include "collectives/algorithms.hpp"
#include "collectives/reduce_ops.hpp"

namespace rmp::coll {

void allreduce_recursive_doubling(const CommImpl& c, const void* in, void* out, std::size_t count,
                                  std::size_t esize, Type t, Op op) {
  const int n = c.size(), r = c.rank();
  const std::size_t bytes = count * esize;
  copy_bytes(out, in ? in : out, bytes);
  if (n == 1 || bytes == 0) return;
  const Fold f(n);
  if (f.sits_out(r)) {
    send(c, out, bytes, r + 1, kAllreduce);
    recv(c, out, bytes, r + 1, kAllreduce);
    return;
  }
  // Two buffers swap roles, so that the lower group's value is always the left operand
  // without copying: partners compute lower op higher from the same bits, so both end with
  // the same bits, and so does the whole group at every step.
  Scratch tmp(bytes);
  std::byte* cur = static_cast<std::byte*>(out);
  std::byte* other = tmp.data();
  if (f.folded(r)) {
    recv(c, other, bytes, r - 1, kAllreduce);
    reduce_apply(op, t, cur, other, count);  // other = (r − 1) op r
    std::swap(cur, other);
  }
  const int nr = f.newrank(r);
  for (int mask = 1; mask < f.p2; mask <<= 1) {
    const int partner = f.survivor(nr ^ mask);
    sendrecv(c, cur, bytes, partner, other, bytes, partner, kAllreduce);
    if (nr & mask) {  // the partner's group is the lower one
      reduce_apply(op, t, cur, other, count);
      std::swap(cur, other);
    } else {
      reduce_apply(op, t, other, cur, count);
    }
  }
  copy_bytes(out, cur, bytes);
  if (f.folded(r)) send(c, out, bytes, r - 1, kAllreduce);
}

}  // namespace rmp::coll
