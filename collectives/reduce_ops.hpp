// Reduction kernels: every Op × element type API.md allows, as plain loops the compiler
// vectorises. inout[i] = inout[i] op in[i].
#pragma once

#include <cstddef>

#include <rmp/rmp.hpp>

namespace rmp::coll {

const char* op_name(Op op);
const char* type_name(detail::Type t);
// Whether API.md allows `op` on elements of type `t`.
bool op_applies(Op op, detail::Type t);
// `in` and `inout` must not overlap (the kernels are written with __restrict).
void reduce_apply(Op op, detail::Type t, const void* in, void* inout, std::size_t count);
// out[i] = a[i] op b[i], the same bits as copying `a` to `out` and then reduce_apply(b, out),
// in one pass. No two of the three may overlap.
void reduce_into(Op op, detail::Type t, const void* a, const void* b, void* out, std::size_t count);

}  // namespace rmp::coll
