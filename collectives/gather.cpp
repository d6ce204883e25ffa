// Gather and gatherv: binomial tree (⌈log2 p⌉ rounds, for many ranks) and linear (every rank
// sends straight to the root). In gatherv only the root knows the counts, so on the binomial
// tree each subtree's block sizes travel in a header message before its data (except to the
// root, which knows them).
#include <cstdint>
#include <utility>
#include <vector>

#include "collectives/algorithms.hpp"

namespace rmp::coll {

void gather_linear(const CommImpl& c, const void* in, std::size_t bytes, void* out,
                   const Layout& all, int root) {
  const int n = c.size(), r = c.rank();
  // gatherv: empty blocks go as messages too, so that counts that disagree are found
  // (exchange.hpp, sendrecv_counted).
  const bool counted = !all.is_uniform();
  if (r != root) {
    if (bytes || counted) send(c, in, bytes, root, kGather);
    return;
  }
  Requests rs(c);
  const auto receives = [&](int i) { return i != root && (all.size(i) || counted); };
  for (int i = 0; i < n; ++i)
    if (receives(i)) rs.add(irecv(c, at(out, all.offset(i)), all.size(i), i, kGather));
  if (in) copy_bytes(at(out, all.offset(root)), in, all.size(root));
  if (!counted) return rs.wait_all();
  BlockCheck check("gatherv");
  for (int i = 0; i < n; ++i)
    if (receives(i)) check.wait_front(rs, i, all.size(i));
  check.throw_first();
}

void gather_binomial(const CommImpl& c, const void* in, std::size_t bytes, void* out,
                     const Layout& all, bool sizes_known, int root) {
  const int n = c.size(), vr = rel(c.rank(), root, n);
  // Children vr + mask for mask below `span`, each bringing its subtree's blocks.
  const int span = vr == 0 ? floor_pow2(n - 1) * 2 : lowbit(vr);
  std::vector<int> children;
  for (int mask = 1; mask < span && vr + mask < n; mask <<= 1) children.push_back(vr + mask);

  if (vr == 0) {
    // The root knows every size. A subtree's blocks go straight to their place when they are
    // one piece of `out` (no wrap past rank n − 1, contiguous displacements); otherwise
    // through scratch.
    // gatherv: a subtree sends its blocks even when they are empty, and what arrives is
    // checked against the root's counts (gather_linear).
    std::vector<std::vector<std::byte>> staged(children.size());
    Requests rs(c);
    // The bytes of child i's subtree; true when they go straight into `out`.
    const auto subtree = [&](std::size_t i) -> std::pair<std::size_t, bool> {
      const int a = abs_rank(children[i], root, n), k = subtree_size(children[i], n);
      if (a + k <= n && all.contiguous(a, a + k)) return {all.bytes(a, a + k), true};
      std::size_t total = 0;
      for (int j = 0; j < k; ++j) total += all.size(abs_rank(children[i] + j, root, n));
      return {total, false};
    };
    for (std::size_t i = 0; i < children.size(); ++i) {
      const auto [len, direct] = subtree(i);
      const int a = abs_rank(children[i], root, n);
      if (!direct) staged[i].resize(len);
      if (len || !sizes_known)
        rs.add(irecv(c, direct ? at(out, all.offset(a)) : staged[i].data(), len, a, kGather));
    }
    if (in) copy_bytes(at(out, all.offset(root)), in, all.size(root));
    if (sizes_known) {
      rs.wait_all();
    } else {
      BlockCheck check("gatherv");
      for (std::size_t i = 0; i < children.size(); ++i)
        check.wait_front(rs, abs_rank(children[i], root, n), subtree(i).first,
                         subtree_size(children[i], n));
      check.throw_first();
    }
    for (std::size_t i = 0; i < children.size(); ++i) {
      const std::byte* p = staged[i].data();
      if (staged[i].empty()) continue;
      for (int j = 0; j < subtree_size(children[i], n); ++j) {
        const int b = abs_rank(children[i] + j, root, n);
        copy_bytes(at(out, all.offset(b)), p, all.size(b));
        p += all.size(b);
      }
    }
    return;
  }

  const int parent = abs_rank(vr - lowbit(vr), root, n);
  const bool header_up = !sizes_known && vr - lowbit(vr) != 0;
  const int sz = subtree_size(vr, n);
  // Sizes of this subtree's blocks in relative order: this rank's, then each child's.
  std::vector<std::uint64_t> sizes(static_cast<std::size_t>(sz), bytes);
  if (!sizes_known) {
    Requests rs(c);
    for (int ch : children)
      rs.add(irecv(c, &sizes[static_cast<std::size_t>(ch - vr)],
                   static_cast<std::size_t>(subtree_size(ch, n)) * sizeof(std::uint64_t),
                   abs_rank(ch, root, n), kSizes));
    rs.wait_all();
  }
  std::size_t total = 0;
  for (std::uint64_t s : sizes) total += s;
  if (children.empty()) {  // a leaf sends its input as it is
    if (header_up) send(c, sizes.data(), sizeof(std::uint64_t), parent, kSizes);
    if (bytes || !sizes_known) send(c, in, bytes, parent, kGather);
    return;
  }
  std::vector<std::byte> buf(total);
  {
    Requests rs(c);
    std::size_t off = bytes;
    for (int ch : children) {
      std::size_t len = 0;
      for (int j = 0; j < subtree_size(ch, n); ++j)
        len += sizes[static_cast<std::size_t>(ch - vr + j)];
      if (len || !sizes_known)
        rs.add(irecv(c, buf.data() + off, len, abs_rank(ch, root, n), kGather));
      off += len;
    }
    copy_bytes(buf.data(), in, bytes);
    rs.wait_all();
  }
  if (header_up) send(c, sizes.data(), sizes.size() * sizeof(std::uint64_t), parent, kSizes);
  if (total || !sizes_known) send(c, buf.data(), total, parent, kGather);
}

}  // namespace rmp::coll
