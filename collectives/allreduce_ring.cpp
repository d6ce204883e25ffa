// Ring allreduce: a segmented ring reduce-scatter, then a segmented ring allgather (ring.cpp).
// 2(p − 1) steps of 1/p of the vector each: bandwidth-optimal for any p, at the price of
// latency — for large vectors, especially where p is not a power of two.
#include "collectives/algorithms.hpp"

namespace rmp::coll {

void allreduce_ring(const CommImpl& c, const void* in, void* out, std::size_t count,
                    std::size_t esize, Type t, Op op) {
  copy_bytes(out, in ? in : out, count * esize);
  if (c.size() == 1 || count == 0) return;
  const Blocks blocks = Blocks::even(count, c.size());
  ring_reduce_scatter(c, static_cast<std::byte*>(out), blocks, esize, t, op, kAllreduce);
  ring_allgather(c, out, blocks.layout(esize), kAllreduce);
}

}  // namespace rmp::coll
