// Segmented rings (Patarasuk & Yuan; the shape NCCL and Gloo use): n − 1 steps in which every
// rank passes a block to its right neighbour, cut into segments of fragment_size bytes with
// pipeline_depth receives posted ahead, each segment passed on as soon as it has arrived (and,
// in the reduce-scatter, been combined) — so the reduction of one segment overlaps the
// transfer of the next, and step s + 1 starts before step s has ended.
#include "collectives/algorithms.hpp"
#include "collectives/reduce_ops.hpp"

namespace rmp::coll {
namespace {

// Walks the segments of the blocks a rank receives, in the order its left neighbour sends
// them: step s brings block block_at(s) for s = 0 … n − 2, each in segments of seg units.
template <class BlockAt, class Units>
class RingCursor {
public:
  RingCursor(int n, std::size_t seg, BlockAt block_at, Units units)
      : n_(n), seg_(seg), block_at_(block_at), units_(units) {
    skip_empty();
  }
  bool done() const { return step_ >= n_ - 1; }
  int step() const { return step_; }
  int block() const { return block_at_(step_); }
  // Units [offset, offset + length) of the block.
  std::size_t offset() const { return k_ * seg_; }
  std::size_t length() const { return std::min(seg_, units_(block()) - offset()); }
  void next() {
    if ((++k_) * seg_ >= units_(block())) ++step_, k_ = 0, skip_empty();
  }

private:
  void skip_empty() {
    while (!done() && units_(block()) == 0) ++step_;
  }
  int n_, step_ = 0;
  std::size_t seg_, k_ = 0;
  BlockAt block_at_;
  Units units_;
};

}  // namespace

void ring_reduce_scatter(const CommImpl& c, std::byte* work, const Blocks& blocks,
                         std::size_t esize, Type t, Op op, int tag) {
  const int n = c.size(), r = c.rank();
  if (n == 1) return;
  const int right = (r + 1) % n, left = (r - 1 + n) % n;
  const std::size_t seg = std::max<std::size_t>(1, segment_bytes(c) / esize);  // elements
  const std::size_t depth = segments_in_flight(c);
  auto block_at = [&](int s) { return (r - s - 2 + 2 * n) % n; };
  auto units = [&](int b) { return blocks.count(b); };
  auto data = [&](int b, std::size_t off) { return work + (blocks.start(b) + off) * esize; };

  std::size_t largest = 0;
  for (int b = 0; b < n; ++b) largest = std::max(largest, blocks.count(b));
  const std::size_t slot = std::min(seg, largest);  // elements per receive slot
  Scratch slots(depth * slot * esize);
  auto slot_at = [&](std::size_t i) { return slots.data() + (i % depth) * slot * esize; };

  Requests sends(c), recvs(c);
  // Step 0 sends this rank's own data of block r − 1; every later send is a segment that just
  // arrived and was combined here. Block r − 1 is never received, so nothing sent is changed.
  {
    const int own = (r - 1 + n) % n;
    for (std::size_t off = 0; off < blocks.count(own); off += seg)
      sends.add(
          isend(c, data(own, off), std::min(seg, blocks.count(own) - off) * esize, right, tag));
  }
  RingCursor post(n, seg, block_at, units), got(n, seg, block_at, units);
  std::size_t posted = 0, arrived = 0;
  auto post_more = [&] {
    for (; !post.done() && posted - arrived < depth; ++posted, post.next())
      recvs.add(irecv(c, slot_at(posted), post.length() * esize, left, tag));
  };
  post_more();
  while (!got.done()) {
    recvs.wait_front();
    std::byte* mine = data(got.block(), got.offset());
    reduce_apply(op, t, slot_at(arrived), mine, got.length());
    if (got.step() < n - 2) sends.add(isend(c, mine, got.length() * esize, right, tag));
    sends.reap();
    ++arrived, got.next();
    post_more();  // after the combine: the slot just read is the one reused
  }
  sends.wait_all();
}

void ring_allgather(const CommImpl& c, void* buf, const Layout& l, int tag) {
  const int n = c.size(), r = c.rank();
  if (n == 1) return;
  const int right = (r + 1) % n, left = (r - 1 + n) % n;
  const std::size_t seg = segment_bytes(c), depth = segments_in_flight(c);
  auto block_at = [&](int s) { return (r - s - 1 + n) % n; };
  auto units = [&](int b) { return l.size(b); };
  auto data = [&](int b, std::size_t off) { return at(buf, l.offset(b) + off); };

  Requests sends(c), recvs(c);
  for (std::size_t off = 0; off < l.size(r); off += seg)
    sends.add(isend(c, data(r, off), std::min(seg, l.size(r) - off), right, tag));
  // Blocks arrive straight into their place and are forwarded from there.
  RingCursor post(n, seg, block_at, units), got(n, seg, block_at, units);
  std::size_t posted = 0, arrived = 0;
  auto post_more = [&] {
    for (; !post.done() && posted - arrived < depth; ++posted, post.next())
      recvs.add(irecv(c, data(post.block(), post.offset()), post.length(), left, tag));
  };
  post_more();
  while (!got.done()) {
    recvs.wait_front();
    if (got.step() < n - 2)
      sends.add(isend(c, data(got.block(), got.offset()), got.length(), right, tag));
    sends.reap();
    ++arrived, got.next();
    post_more();
  }
  sends.wait_all();
}

}  // namespace rmp::coll
