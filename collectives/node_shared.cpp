#include "collectives/node_shared.hpp"

#include <atomic>
#include <cstring>
#include <string>

#include "collectives/reduce_ops.hpp"
#include "runtime/node_segment.hpp"

namespace rmp::coll {
namespace {

constexpr std::size_t kLine = 64;
constexpr std::size_t kInline = kLine - sizeof(std::uint64_t);  // data beside the flag
constexpr std::size_t kMaxBytes = 4096;                          // per rank and parity
constexpr int kSetupTag = 1 << 23;  // collective channel, clear of the algorithms' tags

// Per rank: two lines (flag + inline data), one per call parity, then two data blocks.
struct alignas(kLine) FlagLine {
  std::atomic<std::uint64_t> gen;
  std::byte data[kInline];
};
static_assert(sizeof(FlagLine) == kLine);
constexpr std::size_t kStride = 2 * sizeof(FlagLine) + 2 * kMaxBytes;

}  // namespace

class NodeShared {
public:
  explicit NodeShared(std::unique_ptr<rt::NodeSegment> seg) : seg_(std::move(seg)) {}

  FlagLine& flag(int rank, std::uint64_t gen) {
    return reinterpret_cast<FlagLine*>(seg_->data() + static_cast<std::size_t>(rank) * kStride)[gen & 1];
  }
  std::byte* block(int rank, std::uint64_t gen) {
    return seg_->data() + static_cast<std::size_t>(rank) * kStride + 2 * sizeof(FlagLine) +
           (gen & 1) * kMaxBytes;
  }
  // Each call takes the next generation; every member calls in the same order. Data of
  // generation g lives in parity g & 1: a rank that has seen everyone arrive at g - 1 knows
  // nobody still reads g - 2, whose buffers g reuses.
  std::uint64_t next_gen() { return ++gen_; }

  void arrive_and_wait(const detail::CommImpl& c, std::uint64_t g) {
    flag(c.rank(), g).gen.store(g, std::memory_order_release);
    const int n = c.size();
    int seen = 0;  // ranks below `seen` have arrived
    // Progress keeps running while we wait: a peer may need this rank's rendezvous data to
    // get here.
    c.engine().progress_until([&] {
      while (seen < n && flag(seen, g).gen.load(std::memory_order_acquire) >= g) ++seen;
      return seen == n;
    });
  }

private:
  std::unique_ptr<rt::NodeSegment> seg_;
  std::uint64_t gen_ = 0;
};

NodeShared* node_shared(const detail::CommImpl& c) {
  auto& state = c.collective_state();
  if (state) return static_cast<NodeShared*>(state.get());
  const rt::Context& ctx = c.engine().context();
  // One-node jobs only for now: then every communicator is node-local. (With several nodes
  // the members' node ids must be compared first: the multi-node work adds that.)
  if (c.size() < 2 || ctx.id().local_size != ctx.id().size) return nullptr;
  // The groups of one split share a context id; member 0's world rank tells them apart.
  const std::string key =
      "c" + std::to_string(c.base_context()) + "-" + std::to_string(c.world_rank(0));
  const std::size_t bytes = kStride * static_cast<std::size_t>(c.size());
  detail::Engine& e = c.engine();
  std::unique_ptr<rt::NodeSegment> seg;
  // Rank 0 creates the segment, then tells the others whether they can map it: a failure
  // there becomes an error on every member instead of a hang.
  std::uint8_t ok = 1;
  if (c.rank() == 0) {
    std::string why;
    try {
      seg = rt::NodeSegment::create(ctx, key, bytes, c.size());
    } catch (const Error& err) {
      ok = 0;
      why = err.what();
    }
    std::vector<detail::RequestState*> rs;
    for (int r = 1; r < c.size(); ++r)
      rs.push_back(e.isend(c, p2p::Channel::collective, &ok, 1, r, kSetupTag, false));
    for (auto* r : rs) e.wait(r);
    if (!ok) throw Error(Errc::transport, "collectives: " + why);
  } else {
    e.wait(e.irecv(c, p2p::Channel::collective, &ok, 1, 0, kSetupTag));
    if (!ok)
      throw Error(Errc::transport, "collectives: rank 0 could not create the node segment " + key);
    seg = rt::NodeSegment::open(ctx, key, c.size());
  }
  auto ns = std::make_shared<NodeShared>(std::move(seg));
  state = ns;
  return ns.get();
}

void shm_barrier(const detail::CommImpl& c, NodeShared& ns) { ns.arrive_and_wait(c, ns.next_gen()); }

std::size_t shm_allreduce_max_bytes() { return kMaxBytes; }

void shm_allreduce(const detail::CommImpl& c, NodeShared& ns, const void* in, void* out,
                   std::size_t count, std::size_t esize, detail::Type t, Op op) {
  const std::uint64_t g = ns.next_gen();
  const std::size_t bytes = count * esize;
  const bool inl = bytes <= kInline;
  auto slot = [&](int r) -> std::byte* { return inl ? ns.flag(r, g).data : ns.block(r, g); };
  if (bytes) std::memcpy(slot(c.rank()), in ? in : out, bytes);
  ns.arrive_and_wait(c, g);
  // Every rank reduces all contributions in rank order: the same bits everywhere.
  if (bytes) {
    std::memcpy(out, slot(0), bytes);
    for (int r = 1; r < c.size(); ++r) reduce_apply(op, t, slot(r), out, count);
  }
}

}  // namespace rmp::coll
