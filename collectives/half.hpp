// 16-bit wire formats of the compressed allreduce (DESIGN §5 "mixed precision"): IEEE
// binary16 (fp16: 11 significant bits, range ±65504) and bfloat16 (bf16: 8 significant bits,
// float's range). Conversions round to nearest, ties to even; the vector versions use the
// CPU's conversion instructions where it has them (F16C), which give the same bits as the
// scalar ones, so every rank and code path agrees. Doubles go through float (cvtsd2ss, then
// the 16-bit rounding): that may round twice, at most one 16-bit ulp/2 plus 2^-24 relative.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include <rmp/rmp.hpp>

namespace rmp::coll {

std::uint16_t float_to_fp16(float f);
float fp16_to_float(std::uint16_t h);
std::uint16_t float_to_bf16(float f);
float bf16_to_float(std::uint16_t h);

// n elements of type t (f32 or f64) to 16-bit values of format c (fp16 or bf16), and back.
// `streaming`: out is written with non-temporal stores where there is a vector path (then
// fenced), for a shared chunk another core reads next (NodeShared's streaming stores).
void encode_half(Compression c, detail::Type t, const void* in, std::uint16_t* out, std::size_t n,
                 bool streaming = false);
void decode_half(Compression c, detail::Type t, const std::uint16_t* in, void* out,
                 std::size_t n);
// acc[i] = op(acc[i], in[i] decoded) for n elements of type t: one pass, no decoded copy.
void reduce_half(Compression c, detail::Type t, Op op, const std::uint16_t* in, void* acc,
                 std::size_t n);
// One rank's share of the compressed allreduce in one pass: r = in[i] combined with the
// decoded others[0][i], others[1][i], … in that order (as copying `in` to `out`, then
// reduce_half of each, would), wire[i] = r encoded, out[i] = wire[i] decoded. `in` may be
// `out` (in place). `streaming`: wire is written with non-temporal stores (encode_half).
void reduce_encode_half(Compression c, detail::Type t, Op op, const void* in,
                        std::span<const std::uint16_t* const> others, void* out,
                        std::uint16_t* wire, std::size_t n, bool streaming);

}  // namespace rmp::coll
