// Baseline collective algorithms (see collectives.hpp).
#include <cstring>
#include <numeric>
#include <vector>

#include "collectives/collectives.hpp"
#include "collectives/node_shared.hpp"
#include "collectives/reduce_ops.hpp"

namespace rmp::coll {
namespace {

using p2p::Channel;
using detail::RequestState;

// Tags on the collective channel, one per operation kind. Collectives run in the same order
// on every rank and a pair's messages never overtake, so fixed tags match correctly.
enum Tag : int { kBarrier = 1, kBcast, kReduce, kGather, kScatter, kAllgather, kAlltoall, kScan };

RequestState* post_send(const CommImpl& c, const void* buf, std::size_t bytes, int dest, int tag) {
  return c.engine().isend(c, Channel::collective, buf, bytes, dest, tag, false);
}
RequestState* post_recv(const CommImpl& c, void* buf, std::size_t bytes, int src, int tag) {
  return c.engine().irecv(c, Channel::collective, buf, bytes, src, tag);
}
void wait(const CommImpl& c, RequestState* r) { c.engine().wait(r); }
void wait_all(const CommImpl& c, std::vector<RequestState*>& rs) {
  for (RequestState* r : rs) c.engine().wait(r);
  rs.clear();
}

std::byte* at(void* p, std::size_t off) { return static_cast<std::byte*>(p) + off; }
const std::byte* at(const void* p, std::size_t off) { return static_cast<const std::byte*>(p) + off; }
void copy(void* dst, const void* src, std::size_t n) {
  if (n && dst != src) std::memmove(dst, src, n);
}

}  // namespace

void barrier(const CommImpl& c) {
  if (NodeShared* ns = node_shared(c)) return shm_barrier(c, *ns);
  const int n = c.size(), r = c.rank();
  for (int k = 1; k < n; k <<= 1) {
    RequestState* s = post_send(c, nullptr, 0, (r + k) % n, kBarrier);
    wait(c, post_recv(c, nullptr, 0, (r - k + n) % n, kBarrier));
    wait(c, s);
  }
}

void bcast(const CommImpl& c, void* buf, std::size_t bytes, int root) {
  const int n = c.size();
  const int vr = (c.rank() - root + n) % n;
  int mask = 1;
  while (mask < n) {
    if (vr & mask) {
      wait(c, post_recv(c, buf, bytes, (vr - mask + root) % n, kBcast));
      break;
    }
    mask <<= 1;
  }
  std::vector<RequestState*> rs;
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vr + mask < n) rs.push_back(post_send(c, buf, bytes, (vr + mask + root) % n, kBcast));
  wait_all(c, rs);
}

void reduce(const CommImpl& c, const void* in, void* out, std::size_t count, std::size_t esize,
            Type t, Op op, int root) {
  const int n = c.size();
  const int vr = (c.rank() - root + n) % n;
  const std::size_t bytes = count * esize;
  std::vector<std::byte> acc(bytes), scratch(bytes);
  copy(acc.data(), in ? in : out, bytes);
  for (int mask = 1; mask < n; mask <<= 1) {
    if ((vr & mask) == 0) {
      const int child = vr | mask;
      if (child < n) {
        wait(c, post_recv(c, scratch.data(), bytes, (child + root) % n, kReduce));
        // Lower ranks' partial result stays on the left: a fixed order on every run.
        reduce_apply(op, t, scratch.data(), acc.data(), count);
      }
    } else {
      wait(c, post_send(c, acc.data(), bytes, ((vr & ~mask) + root) % n, kReduce));
      return;
    }
  }
  copy(out, acc.data(), bytes);
}

void allreduce(const CommImpl& c, const void* in, void* out, std::size_t count, std::size_t esize,
               Type t, Op op) {
  if (count * esize <= shm_allreduce_max_bytes())
    if (NodeShared* ns = node_shared(c)) return shm_allreduce(c, *ns, in, out, count, esize, t, op);
  // Reduce to rank 0, then broadcast: every rank gets the same bits.
  reduce(c, in, out, count, esize, t, op, 0);
  bcast(c, out, count * esize, 0);
}

void gather(const CommImpl& c, const void* in, void* out, std::size_t bytes, int root) {
  if (c.rank() != root) {
    wait(c, post_send(c, in, bytes, root, kGather));
    return;
  }
  std::vector<RequestState*> rs;
  for (int i = 0; i < c.size(); ++i)
    if (i != root) rs.push_back(post_recv(c, at(out, bytes * i), bytes, i, kGather));
  if (in) copy(at(out, bytes * root), in, bytes);
  wait_all(c, rs);
}

void gatherv(const CommImpl& c, const void* in, std::size_t count, void* out, sizes counts,
             sizes displs, std::size_t esize, int root) {
  if (c.rank() != root) {
    wait(c, post_send(c, in, count * esize, root, kGather));
    return;
  }
  std::vector<RequestState*> rs;
  for (int i = 0; i < c.size(); ++i)
    if (i != root)
      rs.push_back(post_recv(c, at(out, displs[i] * esize), counts[i] * esize, i, kGather));
  copy(at(out, displs[root] * esize), in, count * esize);
  wait_all(c, rs);
}

void scatter(const CommImpl& c, const void* in, void* out, std::size_t bytes, int root) {
  if (c.rank() != root) {
    wait(c, post_recv(c, out, bytes, root, kScatter));
    return;
  }
  std::vector<RequestState*> rs;
  for (int i = 0; i < c.size(); ++i)
    if (i != root) rs.push_back(post_send(c, at(in, bytes * i), bytes, i, kScatter));
  copy(out, at(in, bytes * root), bytes);
  wait_all(c, rs);
}

void scatterv(const CommImpl& c, const void* in, sizes counts, sizes displs, void* out,
              std::size_t count, std::size_t esize, int root) {
  if (c.rank() != root) {
    wait(c, post_recv(c, out, count * esize, root, kScatter));
    return;
  }
  std::vector<RequestState*> rs;
  for (int i = 0; i < c.size(); ++i)
    if (i != root)
      rs.push_back(post_send(c, at(in, displs[i] * esize), counts[i] * esize, i, kScatter));
  copy(out, at(in, displs[root] * esize), counts[root] * esize);
  wait_all(c, rs);
}

void allgatherv(const CommImpl& c, const void* in, std::size_t count, void* out, sizes counts,
                sizes displs, std::size_t esize) {
  const int n = c.size(), r = c.rank();
  const void* mine = in ? in : at(out, displs[r] * esize);
  std::vector<RequestState*> rs;
  for (int k = 1; k < n; ++k) {
    const int from = (r - k + n) % n;
    rs.push_back(post_recv(c, at(out, displs[from] * esize), counts[from] * esize, from, kAllgather));
  }
  for (int k = 1; k < n; ++k) rs.push_back(post_send(c, mine, count * esize, (r + k) % n, kAllgather));
  if (in) copy(at(out, displs[r] * esize), in, count * esize);
  wait_all(c, rs);
}

void allgather(const CommImpl& c, const void* in, void* out, std::size_t bytes) {
  const auto n = static_cast<std::size_t>(c.size());
  std::vector<std::size_t> counts(n, bytes), displs(n);
  for (std::size_t i = 0; i < n; ++i) displs[i] = i * bytes;
  allgatherv(c, in, bytes, out, counts, displs, 1);
}

void alltoallv(const CommImpl& c, const void* in, sizes scounts, sizes sdispls, void* out,
               sizes rcounts, sizes rdispls, std::size_t esize) {
  const int n = c.size(), r = c.rank();
  std::vector<RequestState*> rs;
  for (int k = 1; k < n; ++k) {
    const int from = (r - k + n) % n;
    rs.push_back(post_recv(c, at(out, rdispls[from] * esize), rcounts[from] * esize, from, kAlltoall));
  }
  for (int k = 1; k < n; ++k) {
    const int to = (r + k) % n;
    rs.push_back(post_send(c, at(in, sdispls[to] * esize), scounts[to] * esize, to, kAlltoall));
  }
  copy(at(out, rdispls[r] * esize), at(in, sdispls[r] * esize), scounts[r] * esize);
  wait_all(c, rs);
}

void alltoall(const CommImpl& c, const void* in, void* out, std::size_t bytes) {
  const auto n = static_cast<std::size_t>(c.size());
  std::vector<std::byte> staged;
  if (!in) {  // in place: the input is all of `out`
    staged.assign(static_cast<std::byte*>(out), static_cast<std::byte*>(out) + n * bytes);
    in = staged.data();
  }
  std::vector<std::size_t> counts(n, bytes), displs(n);
  for (std::size_t i = 0; i < n; ++i) displs[i] = i * bytes;
  alltoallv(c, in, counts, displs, out, counts, displs, 1);
}

void reduce_scatter(const CommImpl& c, const void* in, void* out, sizes counts,
                    std::size_t esize, Type t, Op op) {
  const auto n = static_cast<std::size_t>(c.size());
  std::vector<std::size_t> displs(n);
  std::size_t total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    displs[i] = total;
    total += counts[i];
  }
  std::vector<std::byte> full(total * esize);
  reduce(c, in ? in : out, full.data(), total, esize, t, op, 0);
  scatterv(c, full.data(), counts, displs, out, counts[static_cast<std::size_t>(c.rank())], esize, 0);
}

void scan(const CommImpl& c, const void* in, void* out, std::size_t count, std::size_t esize,
          Type t, Op op, bool exclusive) {
  const int n = c.size(), r = c.rank();
  const std::size_t bytes = count * esize;
  std::vector<std::byte> mine(bytes), prefix(bytes);
  copy(mine.data(), in ? in : out, bytes);
  // A chain: rank r receives the reduction of ranks 0..r-1 and passes on 0..r.
  if (r > 0) wait(c, post_recv(c, prefix.data(), bytes, r - 1, kScan));
  if (exclusive) {
    if (r > 0) copy(out, prefix.data(), bytes);
    if (r + 1 < n) {
      if (r > 0) {
        reduce_apply(op, t, mine.data(), prefix.data(), count);
        wait(c, post_send(c, prefix.data(), bytes, r + 1, kScan));
      } else {
        wait(c, post_send(c, mine.data(), bytes, r + 1, kScan));
      }
    }
    return;
  }
  if (r > 0) {
    reduce_apply(op, t, mine.data(), prefix.data(), count);
    copy(out, prefix.data(), bytes);
  } else {
    copy(out, mine.data(), bytes);
  }
  if (r + 1 < n) wait(c, post_send(c, out, bytes, r + 1, kScan));
}

}  // namespace rmp::coll
