// The collectives of collectives.hpp: each picks its algorithm for this call (select.hpp)
// and runs it. Barrier, bcast, reduce, allreduce, allgather(v), alltoall and
// reduce_scatter(_block) also have the node-shared paths of node_shared.hpp: every rank
// evaluates the same condition before node_shared(), so the communicator's segment is
// created collectively.
#include "collectives/algorithms.hpp"
#include "collectives/collectives.hpp"
#include "collectives/count_weights.hpp"
#include "collectives/node_shared.hpp"
#include "collectives/select.hpp"

namespace rmp::coll {
namespace {

CallSig reduction(Coll k, std::size_t bytes, std::size_t esize, Type t, Op op, int root = -1) {
  return {.kind = k,
          .bytes = bytes,
          .esize = static_cast<std::uint32_t>(esize),
          .root = root,
          .type = static_cast<int>(t),
          .op = static_cast<int>(op)};
}

}  // namespace

void barrier(const CommImpl& c) {
  CallScope scope(c, {.kind = Coll::barrier});
  NodeShared* const ns = scope.ns();
  switch (choose<BarrierAlgo>(Coll::barrier, c, 0, ns != nullptr)) {
    case BarrierAlgo::dissemination:
      return barrier_dissemination(c);
    case BarrierAlgo::shm:
      return shm_barrier(c, *ns);
  }
}

void bcast(const CommImpl& c, void* buf, std::size_t bytes, int root) {
  CallScope scope(c, {.kind = Coll::bcast, .bytes = bytes, .root = root});
  NodeShared* const ns = scope.ns();
  auto algo = choose<BcastAlgo>(Coll::bcast, c, bytes, ns != nullptr);
  const PathChoice path(c, algo == BcastAlgo::shm ? ns : nullptr, Coll::bcast, bytes,
                        bcast_decider(c, ns, root));
  if (path.p2p()) {
    scope.watch_p2p();  // its waits are point-to-point ones
    algo = choose<BcastAlgo>(Coll::bcast, c, bytes);
  }
  if (path.direct()) algo = BcastAlgo::shm_direct;
  switch (algo) {
    case BcastAlgo::binomial:
      return bcast_binomial(c, buf, bytes, root);
    case BcastAlgo::scatter_allgather:
      return bcast_scatter_allgather(c, buf, bytes, root);
    case BcastAlgo::pipeline:
      return bcast_pipeline(c, buf, bytes, root);
    case BcastAlgo::shm:
      return shm_bcast(c, *ns, buf, bytes, root);
    case BcastAlgo::shm_direct:
      return shm_bcast_direct(c, *ns, buf, bytes, root);
  }
}

void reduce(const CommImpl& c, const void* in, void* out, std::size_t count, std::size_t esize,
            Type t, Op op, int root) {
  const std::size_t bytes = count * esize;
  CallScope scope(c, reduction(Coll::reduce, bytes, esize, t, op, root));
  NodeShared* const ns = scope.ns();
  auto algo = choose<ReduceAlgo>(Coll::reduce, c, bytes, ns != nullptr);
  // Floating sums and products are not associative: the node-shared reduce and the tree
  // algorithms combine in different orders, so choosing between them by measurement would
  // let two equal calls return different bits. A floating reduce chooses between the two
  // node-shared paths only (both combine in rank order).
  const bool exact = t != Type::f32 && t != Type::f64 && t != Type::c32 && t != Type::c64;
  const PathChoice path(c, algo == ReduceAlgo::shm ? ns : nullptr, Coll::reduce, bytes, root,
                        exact);
  if (path.p2p()) {
    scope.watch_p2p();  // its waits are point-to-point ones
    algo = choose<ReduceAlgo>(Coll::reduce, c, bytes);
  }
  if (path.direct()) algo = ReduceAlgo::shm_direct;
  switch (algo) {
    case ReduceAlgo::binomial:
      return reduce_binomial(c, in, out, count, esize, t, op, root);
    case ReduceAlgo::rabenseifner:
      return reduce_rabenseifner(c, in, out, count, esize, t, op, root);
    case ReduceAlgo::shm:
      return shm_reduce(c, *ns, in, out, count, esize, t, op, root);
    case ReduceAlgo::shm_direct:
      return shm_reduce_direct(c, *ns, in, out, count, esize, t, op, root);
  }
}

void allreduce(const CommImpl& c, const void* in, void* out, std::size_t count, std::size_t esize,
               Type t, Op op) {
  const std::size_t bytes = count * esize;
  CallScope scope(c, reduction(Coll::allreduce, bytes, esize, t, op));
  NodeShared* const ns = scope.ns();
  auto algo = choose<AllreduceAlgo>(Coll::allreduce, c, bytes, ns != nullptr);
  const PathChoice path(c, algo == AllreduceAlgo::shm ? ns : nullptr, Coll::allreduce, bytes, 0);
  if (path.direct()) algo = AllreduceAlgo::shm_direct;
  switch (algo) {
    case AllreduceAlgo::recursive_doubling:
      return allreduce_recursive_doubling(c, in, out, count, esize, t, op);
    case AllreduceAlgo::rabenseifner:
      return allreduce_rabenseifner(c, in, out, count, esize, t, op);
    case AllreduceAlgo::ring:
      return allreduce_ring(c, in, out, count, esize, t, op);
    case AllreduceAlgo::shm:
      return shm_allreduce(c, *ns, in, out, count, esize, t, op);
    case AllreduceAlgo::shm_direct:
      return shm_allreduce_direct(c, *ns, in, out, count, esize, t, op);
  }
}

void allreduce(const CommImpl& c, const void* in, void* out, std::size_t count, std::size_t esize,
               Type t, Op op, Compression comp) {
  if (comp == Compression::none) return allreduce(c, in, out, count, esize, t, op);
  CallSig s = reduction(Coll::allreduce, count * esize, esize, t, op);
  s.comp = static_cast<int>(comp);
  CallScope scope(c, s);
  if (NodeShared* ns = scope.ns())
    return shm_allreduce_compressed(c, *ns, in, out, count, esize, t, op, comp);
  allreduce_compressed(c, in, out, count, esize, t, op, comp);
}

void gather(const CommImpl& c, const void* in, void* out, std::size_t bytes, int root) {
  const Layout all = Layout::uniform(bytes);
  const std::size_t total = bytes * static_cast<std::size_t>(c.size());
  switch (choose<RootedAlgo>(Coll::gather, c, total)) {
    case RootedAlgo::binomial:
      return gather_binomial(c, in, bytes, out, all, true, root);
    case RootedAlgo::linear:
      return gather_linear(c, in, bytes, out, all, root);
  }
}

void gatherv(const CommImpl& c, const void* in, std::size_t count, void* out, sizes counts,
             sizes displs, std::size_t esize, int root) {
  const Layout all(counts, displs, esize);  // read at the root only
  // Non-roots do not know the other ranks' counts: the choice depends on the size only.
  switch (choose<RootedAlgo>(Coll::gatherv, c, 0)) {
    case RootedAlgo::binomial:
      return gather_binomial(c, in, count * esize, out, all, false, root);
    case RootedAlgo::linear:
      return gather_linear(c, in, count * esize, out, all, root);
  }
}

void scatter(const CommImpl& c, const void* in, void* out, std::size_t bytes, int root) {
  const Layout all = Layout::uniform(bytes);
  const std::size_t total = bytes * static_cast<std::size_t>(c.size());
  switch (choose<RootedAlgo>(Coll::scatter, c, total)) {
    case RootedAlgo::binomial:
      return scatter_binomial(c, in, all, out, bytes, true, root);
    case RootedAlgo::linear:
      return scatter_linear(c, in, all, out, bytes, root);
  }
}

void scatterv(const CommImpl& c, const void* in, sizes counts, sizes displs, void* out,
              std::size_t count, std::size_t esize, int root) {
  const Layout all(counts, displs, esize);  // read at the root only
  switch (choose<RootedAlgo>(Coll::scatterv, c, 0)) {
    case RootedAlgo::binomial:
      return scatter_binomial(c, in, all, out, count * esize, false, root);
    case RootedAlgo::linear:
      return scatter_linear(c, in, all, out, count * esize, root);
  }
}

namespace {

void allgather_with(const CallSig& s, const CommImpl& c, const void* in, void* out, const Layout& l,
                    std::size_t total) {
  const Coll k = s.kind;
  CallScope scope(c, s);
  NodeShared* const ns = scope.ns();
  auto algo = choose<AllgatherAlgo>(k, c, total, ns != nullptr);
  const PathChoice path(c, algo == AllgatherAlgo::shm ? ns : nullptr, k,
                        total / static_cast<std::size_t>(c.size()), 0);
  if (path.p2p()) {
    scope.watch_p2p();  // its waits are point-to-point ones
    algo = choose<AllgatherAlgo>(k, c, total);
  }
  if (path.direct()) algo = AllgatherAlgo::shm_direct;
  switch (algo) {
    case AllgatherAlgo::recursive_doubling:
      return allgather_recursive_doubling(c, in, out, l);
    case AllgatherAlgo::bruck:
      return allgather_bruck(c, in, out, l);
    case AllgatherAlgo::ring:
      return allgather_ring(c, in, out, l);
    case AllgatherAlgo::shm:
      return shm_allgather(c, *ns, in, out, l);
    case AllgatherAlgo::shm_direct:
      return shm_allgather_direct(c, *ns, in, out, l);
  }
}

}  // namespace

void allgather(const CommImpl& c, const void* in, void* out, std::size_t bytes) {
  const std::size_t total = bytes * static_cast<std::size_t>(c.size());
  allgather_with({.kind = Coll::allgather, .bytes = bytes}, c, in, out, Layout::uniform(bytes),
                 total);
}

void allgatherv(const CommImpl& c, const void* in, std::size_t, void* out, sizes counts,
                sizes displs, std::size_t esize) {
  std::size_t total = 0;  // counts are the same on every rank (displs need not be)
  for (int i = 0; i < c.size(); ++i) total += counts[static_cast<std::size_t>(i)];
  allgather_with({.kind = Coll::allgatherv,
                  .bytes = total * esize,
                  .esize = static_cast<std::uint32_t>(esize),
                  .counts = weighted_counts(counts, c.size())},
                 c, in, out, Layout(counts, displs, esize), total * esize);
}

void alltoall(const CommImpl& c, const void* in, void* out, std::size_t bytes) {
  const Layout l = Layout::uniform(bytes);
  const std::size_t total = bytes * static_cast<std::size_t>(c.size());
  // (Not CallScope's own choice of state: the chunks must also hold a block per rank pair.)
  NodeShared* ns = may_use_node_shared(Coll::alltoall, c) ? node_shared(c) : nullptr;
  if (ns && !shm_alltoall_fits(c, *ns)) ns = nullptr;
  CallScope scope(c, ns, {.kind = Coll::alltoall, .bytes = bytes});
  auto algo = choose<AlltoallAlgo>(Coll::alltoall, c, total, ns != nullptr);
  const PathChoice path(c, algo == AlltoallAlgo::shm ? ns : nullptr, Coll::alltoall, bytes, 0);
  if (path.p2p()) {
    scope.watch_p2p();  // its waits are point-to-point ones
    algo = choose<AlltoallAlgo>(Coll::alltoall, c, total);
  }
  if (path.direct()) algo = AlltoallAlgo::shm_direct;
  switch (algo) {
    case AlltoallAlgo::pairwise:
      return alltoall_pairwise(c, in, l, out, l);
    case AlltoallAlgo::bruck:
      return alltoall_bruck(c, in, l, out, l, true);
    case AlltoallAlgo::shm:
      return shm_alltoall(c, *ns, in, out, bytes);
    case AlltoallAlgo::shm_direct:
      return shm_alltoall_direct(c, *ns, in, out, bytes);
  }
}

void alltoallv(const CommImpl& c, const void* in, sizes scounts, sizes sdispls, void* out,
               sizes rcounts, sizes rdispls, std::size_t esize) {
  const Layout sl(scounts, sdispls, esize), rl(rcounts, rdispls, esize);
  switch (choose<AlltoallAlgo>(Coll::alltoallv, c, 0)) {
    case AlltoallAlgo::pairwise:
      return alltoall_pairwise(c, in, sl, out, rl);
    case AlltoallAlgo::bruck:
      return alltoall_bruck(c, in, sl, out, rl, false);
    case AlltoallAlgo::shm:  // not in alltoallv's table: its block sizes are not known to all
    case AlltoallAlgo::shm_direct:
      break;
  }
}

void reduce_scatter(const CommImpl& c, const void* in, void* out, sizes counts, std::size_t esize,
                    Type t, Op op, bool block) {
  // Which call it is, not whether the counts are equal: a reduce_scatter of equal counts took
  // RMP_REDUCE_SCATTER_BLOCK_ALGO's algorithm, not the one its own variable forced.
  std::size_t total = 0;
  for (int i = 0; i < c.size(); ++i) total += counts[static_cast<std::size_t>(i)];
  const Coll k = block ? Coll::reduce_scatter_block : Coll::reduce_scatter;
  CallSig s = reduction(k, total * esize, esize, t, op);
  s.counts = weighted_counts(counts, c.size());
  CallScope scope(c, s);
  NodeShared* const ns = scope.ns();
  switch (choose<ReduceScatterAlgo>(k, c, total * esize, ns != nullptr)) {
    case ReduceScatterAlgo::recursive_halving:
      return reduce_scatter_recursive_halving(c, in, out, counts, esize, t, op);
    case ReduceScatterAlgo::ring:
      return reduce_scatter_ring(c, in, out, counts, esize, t, op);
    case ReduceScatterAlgo::shm:
      return shm_reduce_scatter(c, *ns, in, out, counts, esize, t, op);
  }
}

void scan(const CommImpl& c, const void* in, void* out, std::size_t count, std::size_t esize,
          Type t, Op op, bool exclusive) {
  switch (choose<ScanAlgo>(exclusive ? Coll::exscan : Coll::scan, c, count * esize)) {
    case ScanAlgo::recursive_doubling:
      return scan_recursive_doubling(c, in, out, count, esize, t, op, exclusive);
    case ScanAlgo::chain:
      return scan_chain(c, in, out, count, esize, t, op, exclusive);
  }
}

}  // namespace rmp::coll
