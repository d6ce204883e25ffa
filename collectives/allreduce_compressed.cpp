// Mixed-precision allreduce (DESIGN §5, API.md `Compression`): float/double vectors travel as
// 16-bit values (fp16 or bf16, half.hpp) and are reduced in full precision.
//
// Each element is rounded to 16 bits only twice: once as an input and once as a result.
//  1. Every rank encodes its vector and sends block q (the even split) straight to rank q
//     (pairwise exchange, p − 1 rounds), keeping its own block in full precision.
//  2. Rank q decodes the p − 1 blocks it received and combines them with its own, in full
//     precision and a fixed order (own block, then ranks 0, 1, … p − 1), then encodes the
//     result once.
//  3. A segmented ring allgather of the encoded results; every rank, the owner included,
//     decodes all blocks from the same 16 bits, so all ranks end with bit-identical values.
// Each rank sends and receives 2·(p − 1)/p of the vector as 16-bit values: half the bytes of
// the full-precision ring for float, a quarter for double. For sum with inputs in [−1, 1] the
// error is at most (p − 1)·u (inputs) + p·u (result) plus the full-precision additions, with
// u = 2^-11 (fp16) or 2^-8 (bf16): below p·2^-10 and p·2^-7. A partial sum rounded at every
// hop (a plain ring on 16-bit values) would instead grow as p²·u.
#include <cstdint>

#include "collectives/algorithms.hpp"
#include "collectives/half.hpp"
#include "collectives/reduce_ops.hpp"

namespace rmp::coll {

void allreduce_compressed(const CommImpl& c, const void* in, void* out, std::size_t count,
                          std::size_t esize, Type t, Op op, Compression comp) {
  const int n = c.size(), r = c.rank();
  copy_bytes(out, in ? in : out, count * esize);
  // One rank: nothing travels, so nothing is rounded.
  if (n == 1 || count == 0) return;
  constexpr std::size_t kWire = sizeof(std::uint16_t);
  const Blocks blocks = Blocks::even(count, n);
  const std::size_t mine = blocks.count(r);
  std::byte* acc = static_cast<std::byte*>(out) + blocks.start(r) * esize;

  Scratch wire_bytes(count * kWire);
  auto* wire = reinterpret_cast<std::uint16_t*>(wire_bytes.data());
  // Blocks for the other ranks (this rank's own is encoded after its reduction).
  encode_half(comp, t, out, wire, blocks.start(r));
  encode_half(comp, t, static_cast<const std::byte*>(out) + blocks.start(r + 1) * esize,
              wire + blocks.start(r + 1), count - blocks.start(r + 1));

  // 1. Block q of every rank to rank q: slot p of `got` holds rank p's block r.
  Scratch got_bytes(static_cast<std::size_t>(n) * mine * kWire);
  auto* got = reinterpret_cast<std::uint16_t*>(got_bytes.data());
  alltoall_pairwise(c, wire, blocks.layout(kWire), got, Layout::uniform(mine * kWire));

  // 2. Combine in full precision, in rank order after this rank's own (exact) block.
  Scratch decoded(mine * esize);
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    decode_half(comp, t, got + static_cast<std::size_t>(p) * mine, decoded.data(), mine);
    reduce_apply(op, t, decoded.data(), acc, mine);
  }
  encode_half(comp, t, acc, wire + blocks.start(r), mine);

  // 3. Everyone's encoded result to everyone; decode all of it, this rank's block included.
  ring_allgather(c, wire, blocks.layout(kWire), kAllreduce);
  decode_half(comp, t, wire, out, count);
}

}  // namespace rmp::coll
