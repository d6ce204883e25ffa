// POSIX shared-memory segments (shm transport, node-local collectives): created 0600, mapped
// by the ranks of a node, and unlinked by the last rank to map them so that a crashed job
// leaves nothing in /dev/shm (rlaunch also removes /dev/shm/rmp-<job id>-* at job end).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace rmp::rt::shm {

class Mapping {
public:
  Mapping() = default;
  Mapping(void* addr, std::size_t len) : addr_(addr), len_(len) {}
  Mapping(Mapping&& o) noexcept : addr_(o.addr_), len_(o.len_) { o.addr_ = nullptr; o.len_ = 0; }
  Mapping& operator=(Mapping&& o) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();
  void* data() const { return addr_; }
  std::size_t size() const { return len_; }
  explicit operator bool() const { return addr_ != nullptr; }

private:
  void* addr_ = nullptr;
  std::size_t len_ = 0;
};

// Whether a mapping's pages are faulted in when it is made (MAP_POPULATE), rather than as
// they are first touched.
enum class Populate : bool { no, yes };

// Creates `name` exclusively and maps `size` bytes of it. Returns an empty mapping when the
// name exists already (another rank won the race); throws rmp::Error(transport) otherwise.
Mapping create_segment(const std::string& name, std::size_t size, Populate pop = Populate::no);

// Opens an existing segment whose first `header_size` bytes hold a header with a ready flag;
// `ready_size` reads that header and returns the full size once the creator published it
// (0 while not ready). Waits up to `timeout` for the name, the size and the flag.
Mapping open_segment(const std::string& name, std::size_t header_size,
                     std::size_t (*ready_size)(const void* header),
                     std::chrono::milliseconds timeout, Populate pop = Populate::no);

void unlink_segment(const std::string& name);

// Writes every page of `m` once from this process, leaving its contents as they are (also
// while another process writes them), so that this process's first writes on the data path do
// not pay for it (shared_memory.cpp says what that cost).
void touch_for_writes(const Mapping& m);

// Cross-memory attach: copies len bytes between `local` and the address `remote` in process
// `pid` (process_vm_writev when `write`, else process_vm_readv), resuming after partial
// transfers and EINTR. Returns 0, or the errno that stopped it (EPERM where ptrace rules
// forbid it).
int cross_memory_copy(int pid, std::byte* local, std::uint64_t remote, std::size_t len, bool write);

// The same for several spans in one system call (more only after a partial transfer): each
// call costs about a microsecond before it copies anything, so a batch of short copies pays
// it once. Spans of no bytes are skipped.
struct CmaSpan {
  std::byte* local;
  std::uint64_t remote;
  std::size_t len;
};
int cross_memory_copy(int pid, std::span<const CmaSpan> spans, bool write);

}  // namespace rmp::rt::shm
