// The shm transport's segments refuse a rank whose library lays them out otherwise (another rmp
// build in one job): the segment's magic word differs, and the rank that maps it gets rmp::Error
// naming the segment instead of reading the other's lines as its own. Both "ranks" are
// transports of this process, as local ranks 0 and 1 of one node. The node segment is mapped
// at start; a pair segment when one rank first connects to the other, by that rank (creating
// it) and by the other at its next progress (mapping it).
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <rmp/rmp.hpp>

#include "runtime/shared_memory.hpp"
#include "runtime/transport/shm/shm_transport.hpp"

namespace {

using rmp::rt::JobIdentity;

struct NullSink final : rmp::rt::AmSink {
  void on_am(int, rmp::rt::AmId, std::span<const std::byte>, std::span<const std::byte>) override {}
};

// Removes a segment name when the test ends, passed or not.
struct Unlink {
  std::string name;
  ~Unlink() { ::shm_unlink(name.c_str()); }
};

// Local ranks 0 and 1 of a two-rank job on one node, as transports of this process.
struct TwoLocalRanks {
  explicit TwoLocalRanks(const std::string& job) : job_id(job + std::to_string(::getpid())) {}
  std::unique_ptr<rmp::rt::Transport> make(int local_rank) {
    const JobIdentity id{.rank = local_rank,
                         .size = 2,
                         .local_rank = local_rank,
                         .local_size = 2,
                         .node_id = 0,
                         .local_cores = 2,
                         .job_id = job_id};
    return rmp::rt::make_shm_transport(id, cfg, sink, counters);
  }
  std::string job_id;
  Unlink node{"/rmp-" + job_id + "-n0"};      // the node segment local rank 0 creates
  Unlink pair{"/rmp-" + job_id + "-n0-0-1"};  // the pair segment of local ranks 0 and 1
  NullSink sink;
  rmp::rt::Counters counters;
  rmp::rt::ShmConfig cfg;
};

// Flips bits of the 32-bit word at `offset` of the named segment.
void corrupt_word(const std::string& name, std::size_t offset) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0) << name;
  void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(p, MAP_FAILED);
  *reinterpret_cast<std::uint32_t*>(static_cast<std::byte*>(p) + offset) ^= 0x5a5a5a5au;
  ::munmap(p, 4096);
}

TEST(ShmSegments, NodeSegmentOfAnotherLayout_RefusedNamingIt) {
  TwoLocalRanks job("magic");
  auto creator = job.make(0);  // creates the node segment
  // The node segment's header (shm_transport.cpp's NodeHeader): two 32-bit counters, then the
  // magic word.
  corrupt_word(job.node.name, 8);
  try {
    auto other = job.make(1);
    FAIL() << "a node segment with another magic word was mapped without an error";
  } catch (const rmp::Error& e) {
    EXPECT_EQ(e.code(), rmp::Errc::transport);
    const std::string what = e.what();
    EXPECT_NE(what.find(job.node.name), std::string::npos) << what;
    EXPECT_NE(what.find("laid out by another rmp build"), std::string::npos) << what;
  }
}

// The same segment untouched is mapped by local rank 1, and its name is gone from /dev/shm
// once both have mapped it.
TEST(ShmSegments, NodeSegmentOfThisLayout_MappedAndUnlinked) {
  TwoLocalRanks job("magicok");
  auto creator = job.make(0);
  auto other = job.make(1);
  const int fd = ::shm_open(job.node.name.c_str(), O_RDONLY, 0);
  EXPECT_LT(fd, 0) << job.node.name << " still exists after both local ranks mapped it";
  if (fd >= 0) ::close(fd);
}

// Local rank 0 connects to rank 1, creating their pair segment; rank 1 maps it at its next
// progress. With the pair's magic word flipped in between, rank 1's progress throws
// Errc::transport naming the pair. Untouched, it maps the pair and the name is gone.
void connect_pair(TwoLocalRanks& job, rmp::rt::Transport& zero, rmp::rt::Transport& one) {
  const std::vector<std::byte> where = one.address();
  ASSERT_NE(zero.connect(1, where), nullptr) << "local rank 0 could not connect to rank 1";
  const int fd = ::shm_open(job.pair.name.c_str(), O_RDONLY, 0);
  ASSERT_GE(fd, 0) << job.pair.name << " was not created by the connecting rank";
  ::close(fd);
}

TEST(ShmSegments, PairSegmentOfAnotherLayout_RefusedNamingIt) {
  TwoLocalRanks job("pmagic");
  auto zero = job.make(0);
  auto one = job.make(1);
  connect_pair(job, *zero, *one);
  // PairHeader (shm_transport.cpp): two 32-bit counters, then the magic word.
  corrupt_word(job.pair.name, 8);
  try {
    for (int i = 0; i < 100; ++i) one->progress();
    FAIL() << "a pair segment with another magic word was mapped without an error";
  } catch (const rmp::Error& e) {
    EXPECT_EQ(e.code(), rmp::Errc::transport);
    const std::string what = e.what();
    EXPECT_NE(what.find("pair segment with local rank 0"), std::string::npos) << what;
    EXPECT_NE(what.find("laid out by another rmp build"), std::string::npos) << what;
  }
}

TEST(ShmSegments, PairSegmentOfThisLayout_MappedAndUnlinked) {
  TwoLocalRanks job("pmagicok");
  auto zero = job.make(0);
  auto one = job.make(1);
  connect_pair(job, *zero, *one);
  for (int i = 0; i < 100; ++i) one->progress();
  EXPECT_EQ(job.counters.shm_segments, 2u) << "both ranks should have attached the pair";
  const int fd = ::shm_open(job.pair.name.c_str(), O_RDONLY, 0);
  EXPECT_LT(fd, 0) << job.pair.name << " still exists after both local ranks mapped it";
  if (fd >= 0) ::close(fd);
}

// touch_for_writes writes every page once (an atomic OR of zero, shared_memory.cpp): what the
// creator stored before the other side mapped and touched it, on every page and up to the last
// byte of a size that ends inside a page, is still there on both sides.
TEST(ShmSegments, TouchedMappingKeepsWhatTheCreatorWrote) {
  const Unlink seg{"/rmp-populate-" + std::to_string(::getpid())};
  const long page = ::sysconf(_SC_PAGESIZE);
  const std::size_t size = 3 * static_cast<std::size_t>(page) + 100;
  namespace shm = rmp::rt::shm;
  shm::Mapping created = shm::create_segment(seg.name, size, shm::Populate::yes);
  ASSERT_TRUE(created);
  auto* a = static_cast<unsigned char*>(created.data());
  for (std::size_t i = 8; i < size; ++i) EXPECT_EQ(a[i], 0) << "byte " << i;
  for (std::size_t i = 8; i < size; ++i) a[i] = static_cast<unsigned char>(i * 7 + 3);
  const std::uint64_t total = size;  // the header: the size, once ready
  std::memcpy(a, &total, sizeof total);
  auto ready = [](const void* h) {
    std::uint64_t v;
    std::memcpy(&v, h, sizeof v);
    return static_cast<std::size_t>(v);
  };
  shm::Mapping opened =
      shm::open_segment(seg.name, sizeof total, ready, std::chrono::seconds(5), shm::Populate::yes);
  ASSERT_TRUE(opened);
  ASSERT_EQ(opened.size(), size);
  shm::touch_for_writes(opened);
  shm::touch_for_writes(created);
  const auto* b = static_cast<const unsigned char*>(opened.data());
  for (std::size_t i = 8; i < size; ++i) {
    ASSERT_EQ(b[i], static_cast<unsigned char>(i * 7 + 3)) << "byte " << i << " as mapped again";
    ASSERT_EQ(a[i], static_cast<unsigned char>(i * 7 + 3)) << "byte " << i << " as created";
  }
  EXPECT_EQ(std::memcmp(a, &total, sizeof total), 0);
}

}  // namespace

// /dev/shm without room for a segment (a container's small tmpfs): creating it fails with
// rmp::Error saying so, instead of a mapping whose untouched pages kill the process with
// SIGBUS when first written. In a child process with a mount namespace of its own and a
// 256 KiB tmpfs on /dev/shm (root only: the launcher's namespaces need it too).
TEST(ShmSegments, DevShmWithoutRoom_CreateFailsSayingSo) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to mount a small /dev/shm in a namespace";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Exit codes: 0 refused as expected, 1 created, 2 wrong error, 3 no namespace.
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=256k") != 0)
      ::_exit(3);
    try {
      rmp::rt::shm::Mapping m =
          rmp::rt::shm::create_segment("/rmp-test-no-room", std::size_t{4} << 20);
      ::_exit(1);
    } catch (const rmp::Error& e) {
      const std::string what = e.what();
      ::_exit(e.code() == rmp::Errc::transport && what.find("/dev/shm") != std::string::npos &&
                      what.find("No space left") != std::string::npos
                  ? 0
                  : 2);
    } catch (...) {
      ::_exit(2);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "1: created without room; 2: another error; 3: no mount namespace here";
}
