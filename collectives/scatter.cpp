// Scatter and scatterv: binomial tree (⌈log2 p⌉ rounds, for many ranks) and linear (the root
// sends to every rank). In scatterv only the root knows the counts, so on the binomial tree a
// subtree of more than one rank first receives a header with its blocks' sizes (a single rank
// knows its own count).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "collectives/algorithms.hpp"

namespace rmp::coll {

namespace {

// The block from the parent (or root), straight into `out`; one longer than this rank's count
// (the root's counts and this rank's disagree) is consumed and reported as scatterv's. In
// scatterv (`counted`) empty blocks go as messages too, and a shorter one is reported as well
// (exchange.hpp, sendrecv_counted).
void recv_block(const CommImpl& c, void* out, std::size_t bytes, int from, bool counted) {
  if (!bytes && !counted) return;
  Requests rs(c);
  rs.add(irecv(c, out, bytes, from, kScatter));
  BlockCheck check("scatterv");
  check.wait_front(rs, from, bytes);
  check.throw_first();
}

}  // namespace

void scatter_linear(const CommImpl& c, const void* in, const Layout& all, void* out,
                    std::size_t bytes, int root) {
  const int n = c.size(), r = c.rank();
  const bool counted = !all.is_uniform();  // scatterv
  if (r != root) return recv_block(c, out, bytes, root, counted);
  Requests rs(c);
  for (int i = 0; i < n; ++i)
    if (i != root && (all.size(i) || counted))
      rs.add(isend(c, at(in, all.offset(i)), all.size(i), i, kScatter));
  copy_bytes(out, at(in, all.offset(root)), all.size(root));
  rs.wait_all();
}

void scatter_binomial(const CommImpl& c, const void* in, const Layout& all, void* out,
                      std::size_t bytes, bool sizes_known, int root) {
  const int n = c.size(), vr = rel(c.rank(), root, n);
  const int sz = subtree_size(vr, n);
  const int parent = vr == 0 ? root : abs_rank(vr - lowbit(vr), root, n);  // root: itself
  // Sizes of this subtree's blocks in relative order, and where they are: in `in` at the
  // root, packed in a scratch buffer elsewhere.
  std::vector<std::uint64_t> sizes(static_cast<std::size_t>(sz), bytes);
  std::vector<std::byte> held;
  if (vr == 0) {
    for (int j = 0; j < n; ++j) sizes[static_cast<std::size_t>(j)] = all.size(abs_rank(j, root, n));
  } else {
    if (sz == 1) return recv_block(c, out, bytes, parent, !sizes_known);  // a leaf: to `out`
    if (!sizes_known) recv(c, sizes.data(), sizes.size() * sizeof(std::uint64_t), parent, kSizes);
    std::size_t total = 0;
    for (std::uint64_t s : sizes) total += s;
    held.resize(total);
    if (total) recv(c, held.data(), total, parent, kScatter);
  }
  // Offsets of the blocks in `held` (non-root).
  std::vector<std::size_t> off(static_cast<std::size_t>(sz) + 1, 0);
  for (int j = 0; j < sz; ++j) off[j + 1] = off[j] + sizes[static_cast<std::size_t>(j)];

  // Children from the largest subtree down, so that the deepest branch starts first.
  // Root: subtrees that are not one piece of `in` (moving the outer vector keeps each buffer).
  std::vector<std::vector<std::byte>> packed;
  Requests rs(c);
  for (int mask = vr != 0 ? lowbit(vr) >> 1 : floor_pow2(n - 1); mask > 0; mask >>= 1) {
    const int ch = vr + mask;
    if (ch >= n) continue;
    const int k = subtree_size(ch, n), dest = abs_rank(ch, root, n);
    const std::size_t a = static_cast<std::size_t>(ch - vr);
    if (!sizes_known && k > 1)
      rs.add(
          isend(c, &sizes[a], static_cast<std::size_t>(k) * sizeof(std::uint64_t), dest, kSizes));
    const std::size_t len = off[a + static_cast<std::size_t>(k)] - off[a];
    if (!len && (sizes_known || k > 1)) continue;  // scatterv: an empty leaf's block still goes
    if (vr != 0) {
      rs.add(isend(c, held.data() + off[a], len, dest, kScatter));
    } else if (dest + k <= n && all.contiguous(dest, dest + k)) {
      rs.add(isend(c, at(in, all.offset(dest)), len, dest, kScatter));
    } else {
      std::vector<std::byte>& p = packed.emplace_back(len);
      std::byte* q = p.data();
      for (int j = 0; j < k; ++j) {
        const int b = abs_rank(ch + j, root, n);
        copy_bytes(q, at(in, all.offset(b)), all.size(b));
        q += all.size(b);
      }
      rs.add(isend(c, p.data(), len, dest, kScatter));
    }
  }
  // A block longer than this rank's count (the root's counts and this rank's disagree: only
  // the root's header tells a rank inside the tree) fills `out` with its first bytes and is
  // reported once the subtree has its blocks.
  copy_bytes(out, vr == 0 ? at(in, all.offset(root)) : held.data(),
             std::min<std::size_t>(sizes[0], bytes));
  rs.wait_all();
  BlockCheck check("scatterv");
  check.arrived(parent, bytes, sizes[0]);
  check.throw_first();
}

}  // namespace rmp::coll
