// Per-peer state is created on first use: with many ranks (64 on 2 cores, oversubscribed)
// where every rank talks only to its two ring neighbours, each rank has connected at most
// 3 endpoints (left, right, itself), mapped at most 2 pair segments, and /proc/self/maps
// shows only a handful of rmp shared-memory mappings. Run as its own executable so that no
// other test (or collective) has touched more peers before the counters are read.
#include "harness.hpp"
#include "runtime/stats.hpp"

#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace {

using namespace itest;

TEST(Sparse, RingNeighboursOnly_PerPeerStateCreatedOnFirstUse) {
  const rmp::Comm& w = rmp::world();
  const int r = rank(), n = size();
  const int right = (r + 1) % n, left = (r - 1 + n) % n;
  const Knobs& k = knobs();
  std::vector<std::size_t> sizes = {0, 8, k.inline_threshold + 1, k.eager_threshold + 1,
                                    rndv_size((std::size_t{1} << 20) + 7)};
  std::uint64_t msg = 0;
  for (std::size_t s : sizes) {
    for (int dir = 0; dir < 2; ++dir, ++msg) {
      const int dst = dir ? left : right, src = dir ? right : left;
      const auto out = make_message<std::byte>(s, seed(r, dst, msg, 0x70));
      std::vector<std::byte> in(s);
      const rmp::Status st = w.sendrecv(out.data(), s, dst, 10, in.data(), s, src, 10);
      EXPECT_EQ(st.bytes, s);
      EXPECT_TRUE(matches(in.data(), s, seed(src, r, msg, 0x70))) << s << " B from " << who(src);
    }
  }
  const rmp::rt::Counters c = rmp::rt::counters();  // a snapshot
  EXPECT_LE(c.endpoints, 3u) << "endpoints connected though this rank only talked to ranks " << left
                             << " and " << right << " of " << n;
  EXPECT_LE(c.shm_segments, 2u) << "pair segments mapped for 2 neighbours (ranks " << left << ", "
                                << right << ") of " << n << "; endpoints " << c.endpoints;
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> paths;
  std::size_t lines = 0;
  for (std::string line; std::getline(maps, line);) {
    const auto at = line.find("/dev/shm/rmp-");
    if (at == std::string::npos) continue;
    ++lines;
    std::string path = line.substr(at);
    if (const auto d = path.find(" (deleted)"); d != std::string::npos) path.resize(d);
    paths.insert(path);
  }
  std::string listing;
  for (const std::string& path : paths) listing += "\n  " + path;
  EXPECT_LE(paths.size(), 4u) << "distinct /dev/shm/rmp-* mappings at " << n
                              << " ranks:" << listing;
  EXPECT_LE(lines, 8u) << "/dev/shm/rmp-* lines in /proc/self/maps at " << n << " ranks";
  // Keep every rank here until all have read their counters: a rank that went on to the
  // barrier after this test would connect to non-neighbours and show up in their counters.
  // Two laps of a token around the ring (neighbours only): the second starts after everyone
  // has finished the first, which each rank joins only after its checks.
  auto lap = [&](int tag) {
    if (n == 1) return;
    if (r == 0) {
      w.send<int>(nullptr, 0, right, tag);
      w.recv<int>(nullptr, 0, left, tag);
    } else {
      w.recv<int>(nullptr, 0, left, tag);
      w.send<int>(nullptr, 0, right, tag);
    }
  };
  lap(11);
  lap(12);
  if (r == 0)
    std::printf(
        "[rank 0] %d ranks: endpoints %llu, shm_segments %llu, rmp shm mappings %zu "
        "(%zu lines)\n",
        n, (unsigned long long)c.endpoints, (unsigned long long)c.shm_segments, paths.size(),
        lines);
}

}  // namespace
