// Rabenseifner's allreduce: reduce-scatter by recursive halving, then allgather by recursive
// doubling (the same exchanges in reverse), over the Fold of a non-power-of-two rank count.
// Every element is combined at exactly one rank and then copied, so all ranks end with the
// same bits. Bandwidth-optimal for power-of-two rank counts: for large vectors.
#include "collectives/algorithms.hpp"

namespace rmp::coll {

void allreduce_rabenseifner(const CommImpl& c, const void* in, void* out, std::size_t count,
                            std::size_t esize, Type t, Op op) {
  const int n = c.size(), r = c.rank();
  const std::size_t bytes = count * esize;
  copy_bytes(out, in ? in : out, bytes);
  if (n == 1 || bytes == 0) return;
  const Fold f(n);
  const Blocks blocks = Blocks::even(count, n);
  std::byte* work = static_cast<std::byte*>(out);
  const int nr = halving_reduce_scatter(c, work, blocks, esize, t, op, kAllreduce);
  if (nr < 0) {  // sat out: the odd neighbour hands back the result
    recv(c, out, bytes, r + 1, kAllreduce);
    return;
  }
  for (const DoublingStep& d : doubling_steps(f, blocks, nr))
    exchange(c, work + d.mine * esize, d.nmine * esize, d.partner, work + d.theirs * esize,
             d.ntheirs * esize, d.partner, kAllreduce);
  if (f.folded(r)) send(c, out, bytes, r - 1, kAllreduce);
}

}  // namespace rmp::coll
