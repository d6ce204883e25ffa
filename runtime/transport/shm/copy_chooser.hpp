// RMP_SHM_COPY=auto: which copy mechanism serves a rendezvous get of a given size, chosen
// from measurement. On this kind of machine the answer changes at run time: with both cores
// free and near each other the pipelined double copy runs 2-3x faster than one
// process_vm_readv; with the cores far apart, or a busy owner, the single copy wins. So the
// chooser keeps, per power-of-two size class, a moving average of the throughput each
// mechanism achieved, uses the faster, and keeps re-measuring the other now and then.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace rmp::rt::shm {

class CopyChooser {
public:
  enum class Mode : std::uint8_t { single, chunks };

  // Which mechanism to use for a get of `bytes`.
  Mode choose(std::size_t bytes) {
    Bucket& b = bucket(bytes);
    ++b.uses;
    for (int m = 0; m < 2; ++m)
      if (b.samples[m] < kWarmup) return static_cast<Mode>(m);
    const Mode best = b.rate[1] > b.rate[0] ? Mode::chunks : Mode::single;
    if (b.uses % kExplorePeriod == 0) return best == Mode::chunks ? Mode::single : Mode::chunks;
    return best;
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
  static constexpr int kWarmup = 2;               // samples of each before choosing
  static constexpr std::uint64_t kExplorePeriod = 16;  // 1 in 16 gets re-measures the other
  static constexpr double kWeight = 0.25;         // moving-average weight of a new sample

  struct Bucket {
    std::array<double, 2> rate{};
    std::array<std::uint32_t, 2> samples{};
    std::uint64_t uses = 0;
  };
  Bucket& bucket(std::size_t bytes) {
    const auto i = static_cast<std::size_t>(std::bit_width(bytes | 1));
    return buckets_[i < buckets_.size() ? i : buckets_.size() - 1];
  }
  std::array<Bucket, 48> buckets_{};
};

}  // namespace rmp::rt::shm
