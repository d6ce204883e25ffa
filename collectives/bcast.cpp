// Broadcast: binomial tree (small), scatter + ring allgather (van de Geijn; medium), and a
// segmented pipeline along a chain (large). Ranks are numbered relative to the root.
#include "collectives/algorithms.hpp"

namespace rmp::coll {

void bcast_binomial(const CommImpl& c, void* buf, std::size_t bytes, int root) {
  const int n = c.size(), vr = rel(c.rank(), root, n);
  // Receive from the parent (vr without its lowest set bit), then send to the children from
  // the largest subtree down, so that the deepest branch starts first.
  if (vr != 0) recv(c, buf, bytes, abs_rank(vr - lowbit(vr), root, n), kBcast);
  Requests rs(c);
  for (int mask = vr != 0 ? lowbit(vr) >> 1 : floor_pow2(n - 1); mask > 0; mask >>= 1)
    if (vr + mask < n) rs.add(isend(c, buf, bytes, abs_rank(vr + mask, root, n), kBcast));
  rs.wait_all();
}

void bcast_scatter_allgather(const CommImpl& c, void* buf, std::size_t bytes, int root) {
  const int n = c.size(), vr = rel(c.rank(), root, n);
  if (n == 1 || bytes == 0) return;
  // Block j (of relative rank j) is the j-th of an even split of the bytes.
  auto off = [&](int j) { return even_offset(bytes, n, j); };
  auto size = [&](int j) { return off(j + 1) - off(j); };
  // After the binomial scatter, relative rank v holds blocks [v, v + subtree_size(v)).
  auto holds = [&](int v, int block) {
    return v == 0 || (block >= v && block < v + subtree_size(v, n));
  };

  // Scatter: each subtree's blocks are contiguous in relative order, hence in the buffer.
  if (vr != 0) {
    const int first = vr, last = vr + subtree_size(vr, n);
    if (off(last) > off(first))
      recv(c, at(buf, off(first)), off(last) - off(first), abs_rank(vr - lowbit(vr), root, n),
           kBcast);
  }
  {
    Requests rs(c);
    for (int mask = vr != 0 ? lowbit(vr) >> 1 : floor_pow2(n - 1); mask > 0; mask >>= 1) {
      const int child = vr + mask;
      if (child >= n) continue;
      const int last = child + subtree_size(child, n);
      if (off(last) > off(child))
        rs.add(isend(c, at(buf, off(child)), off(last) - off(child), abs_rank(child, root, n),
                     kBcast));
    }
    rs.wait_all();
  }

  // Ring allgather in relative order. A block travels only to ranks that lack it: both ends
  // of each link can tell, so sends and receives stay matched (and nobody overwrites a block
  // it may be sending).
  const int right = (vr + 1) % n, left = (vr - 1 + n) % n;
  for (int s = 0; s < n - 1; ++s) {
    const int sb = (vr - s + n) % n, rb = (vr - s - 1 + n) % n;
    Requests rs(c);
    if (!holds(vr, rb) && size(rb) > 0)
      rs.add(irecv(c, at(buf, off(rb)), size(rb), abs_rank(left, root, n), kBcast));
    if (!holds(right, sb) && size(sb) > 0)
      rs.add(isend(c, at(buf, off(sb)), size(sb), abs_rank(right, root, n), kBcast));
    rs.wait_all();
  }
}

void bcast_pipeline(const CommImpl& c, void* buf, std::size_t bytes, int root) {
  const int n = c.size(), vr = rel(c.rank(), root, n);
  if (n == 1 || bytes == 0) return;
  // Chain 0 → 1 → … → n−1 in relative order; each segment moves on as soon as it arrives.
  const std::size_t seg = segment_bytes(c), depth = segments_in_flight(c);
  const std::size_t nseg = (bytes + seg - 1) / seg;
  auto len = [&](std::size_t k) { return std::min(seg, bytes - k * seg); };
  const bool has_next = vr + 1 < n;
  const int prev = abs_rank(vr - 1, root, n), next = abs_rank(vr + 1, root, n);
  Requests recvs(c), sends(c);
  std::size_t posted = 0;
  auto post = [&] {
    for (; vr != 0 && posted < nseg && recvs.pending() < depth; ++posted)
      recvs.add(irecv(c, at(buf, posted * seg), len(posted), prev, kBcast));
  };
  post();
  for (std::size_t k = 0; k < nseg; ++k) {
    if (vr != 0) recvs.wait_front();
    post();
    if (!has_next) continue;
    // At most `depth` segments unacknowledged downstream: waiting on the oldest send is safe,
    // the next rank keeps receiving (its own forwarding never waits on us).
    if (sends.pending() >= depth) sends.wait_front();
    sends.add(isend(c, at(buf, k * seg), len(k), next, kBcast));
  }
  sends.wait_all();
}

}  // namespace rmp::coll
