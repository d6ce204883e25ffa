// Alltoall(v): pairwise exchange (p − 1 rounds, each rank sending straight to its partner of
// the round: large messages) and Bruck (⌈log2 p⌉ rounds; in round d every rank forwards, to
// the rank d ahead, the blocks whose rotated index has bit d set: small messages). In
// alltoallv a rank cannot know the sizes of the blocks it forwards for others, so Bruck's
// rounds carry a header with them.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "collectives/algorithms.hpp"

namespace rmp::coll {

void alltoall_pairwise(const CommImpl& c, const void* in, const Layout& sl, void* out,
                       const Layout& rl) {
  const int n = c.size(), r = c.rank();
  // In place, blocks received early would overwrite blocks still to be sent: send from a copy.
  std::vector<std::byte> staged;
  if (!in) {
    staged.assign(static_cast<const std::byte*>(out),
                  static_cast<const std::byte*>(out) + rl.bytes(0, n));
    in = staged.data();
  }
  // A block longer than its receive count (counts that disagree, which only its sender knows)
  // is reported once every round has run: the other ranks wait for this one's blocks. Its
  // place keeps what the receive kept of it (a truncated receive consumes its message, as in
  // MPI: an eager one's first bytes, nothing of a rendezvous one; its own block's first bytes).
  // In alltoallv every block goes as a message, empty ones too, so a shorter block is found
  // as well (sendrecv_counted).
  BlockCheck check("alltoallv");
  check.arrived(r, rl.size(r), sl.size(r));
  copy_bytes(at(out, rl.offset(r)), at(in, sl.offset(r)), std::min(sl.size(r), rl.size(r)));
  const bool counted = !sl.is_uniform();
  for (int k = 1; k < n; ++k) {
    const int to = (r + k) % n, from = (r - k + n) % n;
    const void* sbuf = at(in, sl.offset(to));
    void* rbuf = at(out, rl.offset(from));
    if (counted) {
      sendrecv_counted(c, sbuf, sl.size(to), to, rbuf, rl.size(from), from, kAlltoall, check);
      continue;
    }
    try {
      exchange(c, sbuf, sl.size(to), to, rbuf, rl.size(from), from, kAlltoall);
    } catch (const Error& e) {
      if (e.code() != Errc::truncate) throw;
      check.too_long(from, rl.size(from), e.what());
    }
  }
  check.throw_first();
}

void alltoall_bruck(const CommImpl& c, const void* in, const Layout& sl, void* out,
                    const Layout& rl, bool sizes_known) {
  const int n = c.size(), r = c.rank();
  const void* src = in ? in : out;  // in place: `out` is read until the final copies
  // Position j holds a block travelling towards rank r + j (initially this rank's block for
  // it); after the rounds it holds the block rank r − j sent to this rank. Blocks stay where
  // they arrived (in `kept`) and are copied once, at the end.
  struct Piece {
    const std::byte* data;
    std::size_t bytes;
  };
  std::vector<Piece> pos(static_cast<std::size_t>(n));
  for (int j = 0; j < n; ++j) pos[j] = {at(src, sl.offset((r + j) % n)), sl.size((r + j) % n)};
  std::vector<std::unique_ptr<std::byte[]>> kept;
  std::vector<int> idx;
  std::vector<std::uint64_t> out_sizes, in_sizes;
  std::vector<std::byte> sendbuf;
  for (int d = 1; d < n; d <<= 1) {
    idx.clear();
    for (int j = d; j < n; ++j)
      if (j & d) idx.push_back(j);
    const int to = (r + d) % n, from = (r - d + n) % n;
    out_sizes.clear();
    for (int j : idx) out_sizes.push_back(pos[j].bytes);
    in_sizes.assign(idx.size(), rl.size(0));  // sizes known: every block has the same size
    if (!sizes_known)
      sendrecv(c, out_sizes.data(), out_sizes.size() * sizeof(std::uint64_t), to, in_sizes.data(),
               in_sizes.size() * sizeof(std::uint64_t), from, kSizes);
    std::size_t sbytes = 0, rbytes = 0;
    for (std::uint64_t s : out_sizes) sbytes += s;
    for (std::uint64_t s : in_sizes) rbytes += s;
    sendbuf.resize(sbytes);
    std::byte* p = sendbuf.data();
    for (int j : idx) {
      copy_bytes(p, pos[j].data, pos[j].bytes);
      p += pos[j].bytes;
    }
    auto& got = kept.emplace_back(std::make_unique_for_overwrite<std::byte[]>(rbytes));
    exchange(c, sendbuf.data(), sbytes, to, got.get(), rbytes, from, kAlltoall);
    const std::byte* q = got.get();
    for (std::size_t i = 0; i < idx.size(); ++i) {
      pos[idx[i]] = {q, in_sizes[i]};
      q += in_sizes[i];
    }
  }
  // A block longer than its receive count fills its place with its first bytes and is
  // reported after the others are in theirs; one shorter than it is reported too.
  BlockCheck check("alltoallv");
  for (int j = 0; j < n; ++j) {
    const int from = (r - j + n) % n;
    check.arrived(from, rl.size(from), pos[j].bytes);
    copy_bytes(at(out, rl.offset(from)), pos[j].data, std::min(pos[j].bytes, rl.size(from)));
  }
  check.throw_first();
}

}  // namespace rmp::coll
