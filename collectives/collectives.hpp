// Collective operations on a communicator, written against p2p's interface only (each rank
// of the communicator calls them in the same order). Buffers are raw bytes of `esize`-byte
// elements of type `t`; arguments were validated by the API layer.
//
// Each call picks one of several algorithms (select.hpp: α–β cost formulas, or
// RMP_<COLL>_ALGO) and runs it (dispatch.cpp; the algorithms: algorithms.hpp, one file per
// collective or algorithm; docs/algorithms.md). Every algorithm is correct at every rank
// count and size, and reductions give bit-identical results on every rank.
#pragma once

#include <cstddef>
#include <span>

#include <rmp/rmp.hpp>

#include "p2p/engine.hpp"

namespace rmp::coll {

using detail::CommImpl;
using detail::Type;
using sizes = std::span<const std::size_t>;

void barrier(const CommImpl& c);
void bcast(const CommImpl& c, void* buf, std::size_t bytes, int root);
// `in` == nullptr means in place (the input is in `out`).
void reduce(const CommImpl& c, const void* in, void* out, std::size_t count, std::size_t esize,
            Type t, Op op, int root);
void allreduce(const CommImpl& c, const void* in, void* out, std::size_t count, std::size_t esize,
               Type t, Op op);
// Mixed precision (t f32 or f64; op sum, min or max): comp fp16 or bf16 sends 16-bit values
// and reduces in full precision (allreduce_compressed.cpp); Compression::none is the above.
void allreduce(const CommImpl& c, const void* in, void* out, std::size_t count, std::size_t esize,
               Type t, Op op, Compression comp);
void gather(const CommImpl& c, const void* in, void* out, std::size_t bytes, int root);
void gatherv(const CommImpl& c, const void* in, std::size_t count, void* out, sizes counts,
             sizes displs, std::size_t esize, int root);
void scatter(const CommImpl& c, const void* in, void* out, std::size_t bytes, int root);
void scatterv(const CommImpl& c, const void* in, sizes counts, sizes displs, void* out,
              std::size_t count, std::size_t esize, int root);
void allgather(const CommImpl& c, const void* in, void* out, std::size_t bytes);
void allgatherv(const CommImpl& c, const void* in, std::size_t count, void* out, sizes counts,
                sizes displs, std::size_t esize);
void alltoall(const CommImpl& c, const void* in, void* out, std::size_t bytes);
void alltoallv(const CommImpl& c, const void* in, sizes scounts, sizes sdispls, void* out,
               sizes rcounts, sizes rdispls, std::size_t esize);
// `block`: the API's reduce_scatter_block (equal counts; RMP_REDUCE_SCATTER_BLOCK_ALGO), else
// reduce_scatter, whatever its counts (RMP_REDUCE_SCATTER_ALGO).
void reduce_scatter(const CommImpl& c, const void* in, void* out, sizes counts, std::size_t esize,
                    Type t, Op op, bool block = false);
void scan(const CommImpl& c, const void* in, void* out, std::size_t count, std::size_t esize,
          Type t, Op op, bool exclusive);

}  // namespace rmp::coll
