// Allgather(v): recursive doubling (log2 P rounds over the Fold; for power-of-two rank
// counts), Bruck (⌈log2 p⌉ rounds for any p, plus one local rotation; small messages on
// other rank counts) and the segmented ring of ring.cpp (large messages). Blocks are laid
// out by a Layout: every rank knows every count (displacements are each rank's own).
#include <vector>

#include "collectives/algorithms.hpp"

namespace rmp::coll {

void allgather_recursive_doubling(const CommImpl& c, const void* in, void* out, const Layout& l) {
  const int n = c.size(), r = c.rank();
  const Fold f(n);
  // Ranges of ranks move as one piece when their blocks are adjacent in `out`, else packed
  // in rank order (each end decides for its own buffer; the bytes on the wire are the same).
  const bool direct = l.contiguous(0, n);
  int first_mask = 1;
  if (in && direct && n > 1 && !f.sits_out(r) && !f.folded(r)) {
    // The first step sends this rank's block alone: straight from `in`, posted before the
    // copy of `in` into `out`, so that the partner's rendezvous get of it (or its first
    // fragments) runs while this rank copies (2 ranks, 1 MiB blocks: the copy and the get
    // one after the other took 250 us).
    // Empty pieces go as no message at all, as in exchange().
    const int partner = f.survivor(f.newrank(r) ^ 1);
    const int plo = f.first_original(f.newrank(r) ^ 1);
    const std::size_t rbytes = l.bytes(plo, f.first_original((f.newrank(r) ^ 1) + 1));
    Requests rq(c);
    if (rbytes) rq.add(irecv(c, at(out, l.offset(plo)), rbytes, partner, kAllgather));
    if (l.size(r)) rq.add(isend(c, in, l.size(r), partner, kAllgather));
    copy_bytes(at(out, l.offset(r)), in, l.size(r));
    rq.wait_all();
    first_mask = 2;
  } else if (in) {
    copy_bytes(at(out, l.offset(r)), in, l.size(r));
  }
  if (n == 1) return;
  std::vector<std::byte> sbuf(direct ? 0 : l.bytes(0, n)), rbuf(sbuf.size());
  auto swap_ranges = [&](int sa, int sb, int ra, int rb, int peer) {
    const std::size_t sn = l.bytes(sa, sb), rn = l.bytes(ra, rb);
    if (!direct) pack(l, out, sa, sb, sbuf.data());
    exchange(c, direct ? at(out, l.offset(sa)) : sbuf.data(), sa < sb ? sn : 0, peer,
             direct ? at(out, l.offset(ra)) : rbuf.data(), ra < rb ? rn : 0, peer, kAllgather);
    if (!direct) unpack(l, out, ra, rb, rbuf.data());
  };
  if (f.sits_out(r)) {  // hand over this block, get everything back at the end
    swap_ranges(r, r + 1, 0, 0, r + 1);
    swap_ranges(0, 0, 0, n, r + 1);
    return;
  }
  if (f.folded(r)) swap_ranges(0, 0, r - 1, r, r - 1);
  const int nr = f.newrank(r);
  for (int mask = first_mask; mask < f.p2; mask <<= 1) {
    const int lo = nr & ~(mask - 1), plo = lo ^ mask;
    swap_ranges(f.first_original(lo), f.first_original(lo + mask), f.first_original(plo),
                f.first_original(plo + mask), f.survivor(nr ^ mask));
  }
  if (f.folded(r)) swap_ranges(0, n, 0, 0, r - 1);
}

void allgather_bruck(const CommImpl& c, const void* in, void* out, const Layout& l) {
  const int n = c.size(), r = c.rank();
  // Work in rotated order: position j holds block (r + j) mod n, so that what a round sends
  // (positions [0, cnt)) and receives (positions [d, d + cnt)) are single pieces.
  std::vector<std::size_t> rot(static_cast<std::size_t>(n) + 1, 0);
  for (int j = 0; j < n; ++j) rot[j + 1] = rot[j] + l.size((r + j) % n);
  Scratch tmp(rot[n]);
  copy_bytes(tmp.data(), in ? in : at(out, l.offset(r)), l.size(r));
  for (int d = 1; d < n; d <<= 1) {
    const int cnt = std::min(d, n - d);
    exchange(c, tmp.data(), rot[cnt], (r - d + n) % n, tmp.data() + rot[d], rot[d + cnt] - rot[d],
             (r + d) % n, kAllgather);
  }
  if (in) copy_bytes(at(out, l.offset(r)), in, l.size(r));
  for (int j = 1; j < n; ++j)
    copy_bytes(at(out, l.offset((r + j) % n)), tmp.data() + rot[j], rot[j + 1] - rot[j]);
}

void allgather_ring(const CommImpl& c, const void* in, void* out, const Layout& l) {
  if (in) copy_bytes(at(out, l.offset(c.rank())), in, l.size(c.rank()));
  ring_allgather(c, out, l, kAllgather);
}

}  // namespace rmp::coll
