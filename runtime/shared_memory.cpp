#include "runtime/shared_memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include <rmp/rmp.hpp>

namespace rmp::rt::shm {
namespace {

[[noreturn]] void fail(const std::string& what, int err) {
  throw Error(Errc::transport, "shm: " + what + " failed: " + std::strerror(err) +
                                   (err == ENOSPC || err == ENOMEM ? " (is /dev/shm full?)" : ""));
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Mapping& Mapping::operator=(Mapping&& o) noexcept {
  if (this != &o) {
    if (addr_) ::munmap(addr_, len_);
    addr_ = o.addr_;
    len_ = o.len_;
    o.addr_ = nullptr;
    o.len_ = 0;
  }
  return *this;
}

Mapping::~Mapping() {
  if (addr_) ::munmap(addr_, len_);
}

namespace {
int map_flags(Populate pop) { return MAP_SHARED | (pop == Populate::yes ? MAP_POPULATE : 0); }
}  // namespace

Mapping create_segment(const std::string& name, std::size_t size, Populate pop) {
  Fd f;
  f.fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (f.fd < 0) {
    if (errno == EEXIST) return {};
    fail("shm_open of " + name, errno);
  }
  if (::ftruncate(f.fd, static_cast<off_t>(size)) != 0) {
    int err = errno;
    ::shm_unlink(name.c_str());
    fail("ftruncate of " + name + " to " + std::to_string(size) + " bytes", err);
  }
  // The pages reserved now: ftruncate reserves none on tmpfs, and a page /dev/shm had no room
  // for when first touched killed the rank with SIGBUS in the middle of a call (a container's
  // 64 MiB /dev/shm holds a few communicators' segments). A file system that cannot reserve
  // (EOPNOTSUPP, EINVAL) is left as it was.
  if (const int err = ::posix_fallocate(f.fd, 0, static_cast<off_t>(size));
      err != 0 && err != EOPNOTSUPP && err != EINVAL) {
    ::shm_unlink(name.c_str());
    fail("reserving " + std::to_string(size) + " bytes of /dev/shm for " + name, err);
  }
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, map_flags(pop), f.fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    ::shm_unlink(name.c_str());
    fail("mmap of " + std::to_string(size) + " bytes segment " + name, err);
  }
  return Mapping(p, size);
}

Mapping open_segment(const std::string& name, std::size_t header_size,
                     std::size_t (*ready_size)(const void* header),
                     std::chrono::milliseconds timeout, Populate pop) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto expired = [&] { return std::chrono::steady_clock::now() > deadline; };
  Fd f;
  while ((f.fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0)) < 0) {
    if (errno != ENOENT) fail("shm_open of " + name, errno);
    if (expired())
      throw Error(Errc::timeout, "shm: segment " + name + " did not appear within " +
                                     std::to_string(timeout.count()) + " ms");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  struct stat st {};
  for (;;) {
    if (::fstat(f.fd, &st) != 0) fail("fstat of " + name, errno);
    if (static_cast<std::size_t>(st.st_size) >= header_size) break;
    if (expired()) throw Error(Errc::timeout, "shm: segment " + name + " was never sized");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  void* h = ::mmap(nullptr, header_size, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd, 0);
  if (h == MAP_FAILED) fail("mmap of the header of " + name, errno);
  Mapping header(h, header_size);
  std::size_t size = 0;
  // The creator marks it ready right after sizing it: yield at first; past that, sleep as the
  // loops above do, for a core polled without sleeping may be one the kernel needs
  // (runtime/spin.hpp).
  for (int polls = 0; (size = ready_size(h)) == 0; ++polls) {
    if (expired()) throw Error(Errc::timeout, "shm: segment " + name + " never became ready");
    if (polls < 256) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, map_flags(pop), f.fd, 0);
  if (p == MAP_FAILED) fail("mmap of " + std::to_string(size) + " bytes segment " + name, errno);
  return Mapping(p, size);
}

// Each page written once by this process with an atomic OR of zero: the contents stay as
// they are, even while another process writes the same word. On this project's VMs (the host
// apparently shadows the guest's page tables) a process's first read of a page cost ~2 us and
// its first write 5-7 us, and neither MAP_POPULATE nor MADV_POPULATE_WRITE paid that ahead:
// after both, a page's first write by each process still cost 4.5-6.5 us; after a write by the
// process itself, 0.03 us. The first pass through a pair's 1 MiB eager ring cost 240-300 us a
// 64 KiB ping-pong, 16 of them, where a warm one takes 10-20, and the choosers judging those
// first messages (eager stores, copy mechanisms, the adaptive tuner's protocol) judged a
// warm-up, not the mechanism. Touched, the pages cost ~6.5 us each once, when the pair is
// mapped (a pair of 4.2 MB: ~7 ms a side, both sides at once; on bare metal a fraction of a
// microsecond a page): 2 ranks, lazy connect, first message 5.5-7.4 ms against 3.0-3.3
// untouched, start-up with calibration 20-24 ms against 15. Interleaved with the untouched
// mappings, 6 pairs with the cores far apart: bandwidth 4 KiB 1.12x, 16 KiB 1.14x, 1 MiB
// 1.12x, 64 KiB and 4 MiB 0.99x; latency 4 KiB 0.86, 4 MiB 0.95 of the time.
void touch_for_writes(const Mapping& m) {
  auto* p = static_cast<std::byte*>(m.data());
  const std::size_t size = m.size();
  const long page = ::sysconf(_SC_PAGESIZE);
  const std::size_t step = page > 0 ? static_cast<std::size_t>(page) : 4096;
  for (std::size_t off = 0; off + sizeof(std::uint64_t) <= size; off += step)
    std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(p + off))
        .fetch_or(0, std::memory_order_relaxed);
}

void unlink_segment(const std::string& name) { ::shm_unlink(name.c_str()); }

int cross_memory_copy(int pid, std::byte* local, std::uint64_t remote, std::size_t len,
                      bool write) {
  std::size_t off = 0;
  while (off < len) {
    iovec l{local + off, len - off};
    iovec r{reinterpret_cast<void*>(remote + off), len - off};
    const ssize_t n = write ? ::process_vm_writev(pid, &l, 1, &r, 1, 0)
                            : ::process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EFAULT;
    off += static_cast<std::size_t>(n);
  }
  return 0;
}

int cross_memory_copy(int pid, std::span<const CmaSpan> spans, bool write) {
  constexpr std::size_t kMax = 64;  // iovecs per call (IOV_MAX is 1024)
  std::size_t i = 0, skip = 0;      // the first span not copied yet, and its bytes copied
  while (i < spans.size()) {
    iovec l[kMax], r[kMax];
    std::size_t k = 0;
    for (std::size_t j = i; j < spans.size() && k < kMax; ++j) {
      const std::size_t from = j == i ? skip : 0;
      if (spans[j].len == from) continue;
      l[k] = {spans[j].local + from, spans[j].len - from};
      r[k] = {reinterpret_cast<void*>(spans[j].remote + from), spans[j].len - from};
      ++k;
    }
    if (k == 0) return 0;
    const ssize_t n =
        write ? ::process_vm_writev(pid, l, k, r, k, 0) : ::process_vm_readv(pid, l, k, r, k, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EFAULT;
    // Past the bytes copied: whole spans, then part of one.
    auto left = static_cast<std::size_t>(n);
    while (i < spans.size() && left >= spans[i].len - skip)
      left -= spans[i].len - skip, ++i, skip = 0;
    skip += left;
  }
  return 0;
}

}  // namespace rmp::rt::shm
