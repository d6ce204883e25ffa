// RMP_SHM_COPY=auto: which copy mechanism serves a rendezvous get of a given size, chosen
// from measurement. On this kind of machine the answer changes at run time: with both cores
// free and near each other the pipelined double copy runs 2-3x faster than one
// process_vm_readv; with the cores far apart the double copy's cache-line traffic between the
// cores collapses it, and the split single copy (both processes copying their share of the
// message with cross-memory attach) wins. So the chooser keeps, per power-of-two size class,
// a moving average of the throughput each enabled mechanism achieved, uses the fastest, and
// keeps re-measuring the others now and then.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace rmp::rt::shm {

class CopyChooser {
public:
  // single: one process_vm_readv by the requester; chunks: pipelined double copy through
  // shared chunks; split: requester (readv) and owner (writev) copy disjoint pieces at once.
  enum class Mode : std::uint8_t { single, chunks, split };
  static constexpr int kModes = 3;

  // Chooses among the modes whose bit is set in `enabled` (bit m for Mode m).
  explicit CopyChooser(unsigned enabled = 0b111) : enabled_(enabled) {}

  // Which mechanism to use for a get of `bytes`.
  Mode choose(std::size_t bytes) {
    Bucket& b = bucket(bytes);
    ++b.uses;
    if (b.explore_left > 0) {
      --b.explore_left;
      return b.explore_mode;
    }
    int best = -1;
    for (int m = 0; m < kModes; ++m) {
      if (!(enabled_ >> m & 1)) continue;
      if (b.samples[m] < kWarmup) return static_cast<Mode>(m);
      if (best < 0 || b.rate[m] > b.rate[best]) best = m;
    }
    if (b.uses % kExplorePeriod == 0) {
      // Re-measure one of the others, each in turn, for a short burst: a pipelined
      // mechanism is only as fast as it looks when the get before it used it too.
      const auto turn = static_cast<int>(b.uses / kExplorePeriod % (kModes - 1));
      for (int k = 0, seen = 0; k < kModes - 1; ++k) {
        const int m = (best + 1 + (turn + k) % (kModes - 1)) % kModes;
        if ((enabled_ >> m & 1) && seen++ == 0) {
          b.explore_mode = static_cast<Mode>(m);
          b.explore_left = kBurst - 1;
          return b.explore_mode;
        }
      }
    }
    return static_cast<Mode>(best);
  }

  // A get of `bytes` by `mode` took `seconds`.
  void record(Mode mode, std::size_t bytes, double seconds) {
    if (seconds <= 0) return;
    Bucket& b = bucket(bytes);
    const int m = static_cast<int>(mode);
    const double rate = static_cast<double>(bytes) / seconds;
    b.rate[m] = b.samples[m] == 0 ? rate : b.rate[m] + kWeight * (rate - b.rate[m]);
    ++b.samples[m];
  }

  double rate(Mode mode, std::size_t bytes) { return bucket(bytes).rate[static_cast<int>(mode)]; }

private:
  static constexpr int kWarmup = 2;                    // samples of each before choosing
  // A burst of 4 gets in 64 re-measures another mechanism: the placement of the two cores
  // changes every few tens of seconds, and a mechanism that lost may have become the faster;
  // exploring more often costs too much (the double copy in the far placement runs at a
  // quarter of the split copy's speed).
  static constexpr std::uint64_t kExplorePeriod = 64;
  static constexpr int kBurst = 4;
  static constexpr double kWeight = 0.25;              // moving-average weight of a new sample

  struct Bucket {
    std::array<double, kModes> rate{};
    std::array<std::uint32_t, kModes> samples{};
    std::uint64_t uses = 0;
    int explore_left = 0;
    Mode explore_mode = Mode::single;
  };
  Bucket& bucket(std::size_t bytes) {
    const auto i = static_cast<std::size_t>(std::bit_width(bytes | 1));
    return buckets_[i < buckets_.size() ? i : buckets_.size() - 1];
  }
  unsigned enabled_;
  std::array<Bucket, 48> buckets_{};
};

}  // namespace rmp::rt::shm
