// Barrier by dissemination (Hensgen, Finkel, Manber): in round k every rank signals the rank
// 2^k ahead and waits for the one 2^k behind; after ⌈log2 p⌉ rounds each rank has heard,
// directly or through others, from every rank. Works for any p. (The node-shared flag
// barrier is node_shared.hpp's shm_barrier.)
#include "collectives/algorithms.hpp"

namespace rmp::coll {

void barrier_dissemination(const CommImpl& c) {
  const int n = c.size(), r = c.rank();
  for (int k = 1; k < n; k <<= 1)
    sendrecv(c, nullptr, 0, (r + k) % n, nullptr, 0, (r - k + n) % n, kBarrier);
}

}  // namespace rmp::coll
