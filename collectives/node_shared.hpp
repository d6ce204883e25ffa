// Shared-memory fast paths for communicators whose ranks all run on this node: a flag barrier
// and a small-message allreduce through the runtime's node-local shared segment. One cache
// line per rank carries both the arrival flag and up to 56 bytes of data, so a 2-rank barrier
// or 8-byte allreduce costs one line transfer each way.
#pragma once

#include <cstddef>

#include <rmp/rmp.hpp>

#include "p2p/engine.hpp"

namespace rmp::coll {

class NodeShared;

// The communicator's node-shared state, created collectively at its first use; nullptr when
// shared memory cannot serve it (ranks on several nodes, a single rank).
NodeShared* node_shared(const detail::CommImpl& c);

void shm_barrier(const detail::CommImpl& c, NodeShared& ns);
// Largest payload shm_allreduce takes.
std::size_t shm_allreduce_max_bytes();
// `in` == nullptr: in place.
void shm_allreduce(const detail::CommImpl& c, NodeShared& ns, const void* in, void* out,
                   std::size_t count, std::size_t esize, detail::Type t, Op op);

}  // namespace rmp::coll
