#include "runtime/node_segment.hpp"

#include <atomic>
#include <chrono>

#include <rmp/rmp.hpp>

#include "runtime/context.hpp"

namespace rmp::rt {
namespace {

struct Header {
  std::atomic<std::uint32_t> ready;
  std::atomic<std::uint32_t> mapped;
  std::uint64_t total;
};
constexpr std::size_t kHeaderBytes = 4096;  // keeps the data page-aligned

std::size_t ready_size(const void* h) {
  auto* p = static_cast<const Header*>(h);
  return p->ready.load(std::memory_order_acquire) == 1 ? p->total : 0;
}

std::string name_of(const Context& ctx, const std::string& key) {
  return "/rmp-" + ctx.id().job_id + "-n" + std::to_string(ctx.id().node_id) + "-" + key;
}

std::function<void(const Context&)>& open_fault() {
  static std::function<void(const Context&)> f;
  return f;
}

void count_mapping(Header* h, const std::string& name, int members) {
  if (h->mapped.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<std::uint32_t>(members))
    shm::unlink_segment(name);
}

}  // namespace

NodeSegment::NodeSegment(shm::Mapping m, std::size_t header)
    : map_(std::move(m)),
      data_(static_cast<std::byte*>(map_.data()) + header),
      size_(map_.size() - header) {}

std::unique_ptr<NodeSegment> NodeSegment::create(const Context& ctx, const std::string& key,
                                                 std::size_t bytes, int members) {
  const std::string name = name_of(ctx, key);
  shm::Mapping m = shm::create_segment(name, kHeaderBytes + bytes);
  if (!m) throw Error(Errc::transport, "node segment " + name + " exists already");
  auto* h = static_cast<Header*>(m.data());
  h->total = kHeaderBytes + bytes;
  h->mapped.store(0, std::memory_order_relaxed);
  h->ready.store(1, std::memory_order_release);
  count_mapping(h, name, members);
  return std::unique_ptr<NodeSegment>(new NodeSegment(std::move(m), kHeaderBytes));
}

std::unique_ptr<NodeSegment> NodeSegment::open(const Context& ctx, const std::string& key,
                                               int members) {
  if (open_fault()) open_fault()(ctx);
  const std::string name = name_of(ctx, key);
  shm::Mapping m = shm::open_segment(name, sizeof(Header), ready_size, std::chrono::seconds(60));
  count_mapping(static_cast<Header*>(m.data()), name, members);
  return std::unique_ptr<NodeSegment>(new NodeSegment(std::move(m), kHeaderBytes));
}

void NodeSegment::remove(const Context& ctx, const std::string& key) {
  shm::unlink_segment(name_of(ctx, key));
}

void NodeSegment::set_open_fault(std::function<void(const Context&)> fault) {
  open_fault() = std::move(fault);
}

int read_member_memory(int pid, const void* remote, void* local, std::size_t n) {
  return shm::cross_memory_copy(pid, static_cast<std::byte*>(local),
                                reinterpret_cast<std::uint64_t>(remote), n, false);
}

int write_member_memory(int pid, const void* local, void* remote, std::size_t n) {
  // (cross_memory_copy only reads `local` when writing.)
  return shm::cross_memory_copy(pid, const_cast<std::byte*>(static_cast<const std::byte*>(local)),
                                reinterpret_cast<std::uint64_t>(remote), n, true);
}

}  // namespace rmp::rt
