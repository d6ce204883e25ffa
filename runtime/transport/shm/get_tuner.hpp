// RMP_TUNE=adaptive for the pipelined chunk copy: per power-of-two size bucket, which chunk
// size (fragment_size) and how many chunks in flight (pipeline_depth) a get uses, moved by the
// hill-climbing tuner (runtime/tuner.hpp) toward the fastest observed pair. The requester
// decides and tells the owner in its get request, so the two ranks of a pair need not agree
// beforehand; a pair segment is laid out for the largest candidates.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/tuner.hpp"

namespace rmp::rt::shm {

class GetTuner {
public:
  static constexpr std::size_t kMinFragment = 4096, kMaxFragment = std::size_t{1} << 20;
  static constexpr std::size_t kMinDepth = 2, kMaxDepth = 16;
  // Gets up to this size fit in one small chunk: nothing to tune.
  static constexpr std::size_t kMinTunedBytes = 16 * 1024;

  // `fragment` and `depth` are the static setting (the knobs); candidates are a factor of 4
  // below and 2 (fragment) or 4 (depth) above it, within the limits above, and fragments at
  // most half of `ring` bytes (the pair's chunk ring: two fragments in flight at least).
  GetTuner(std::size_t fragment, std::size_t depth, std::size_t ring, bool enabled)
      : fragments_(candidates(fragment, {4, 2}, kMinFragment,
                              std::clamp(ring / 2, kMinFragment, kMaxFragment))),
        depths_(candidates(depth, {4, 4}, kMinDepth, kMaxDepth)),
        hill_({static_cast<std::uint8_t>(fragments_.size()),
               static_cast<std::uint8_t>(depths_.size()), 1}) {
    start_ = {index_of(fragments_, std::clamp(fragment, kMinFragment, kMaxFragment)),
              index_of(depths_, std::clamp(depth, kMinDepth, kMaxDepth)), 0};
    if (!enabled) return;
    for (std::size_t b = HillTuner::bucket_of(kMinTunedBytes) + 1; b < HillTuner::kBuckets; ++b)
      hill_.enable(b, start_);
  }

  // Geometry a pair segment needs so that every candidate fits.
  std::size_t max_fragment() const { return fragments_.back(); }
  std::size_t max_depth() const { return depths_.back(); }

  struct Pick {
    std::size_t fragment, depth;
    HillTuner::Setting setting;
    bool tuned;    // an observation is wanted
    bool explore;  // a neighbour of the current setting
    bool retuned;  // differs from the static setting
  };
  // `settled` (GetHints): the bucket's current setting, neither explored nor observed.
  Pick pick(std::size_t bytes, bool settled = false) {
    const std::size_t b = HillTuner::bucket_of(bytes);
    if (!hill_.enabled(b))
      return {fragments_[start_[0]], depths_[start_[1]], start_, false, false, false};
    if (settled) {
      const HillTuner::Setting& s = hill_.current(b);
      return {fragments_[s[0]], depths_[s[1]], s, false, false, s != start_};
    }
    const HillTuner::Choice c = hill_.choose(b);
    return {fragments_[c.setting[0]], depths_[c.setting[1]], c.setting, true, c.explore,
            c.setting != start_};
  }
  // A get of `bytes` with `s` took `seconds`; true when the bucket moved to a new setting.
  bool observe(std::size_t bytes, const HillTuner::Setting& s, double seconds) {
    if (bytes == 0 || seconds <= 0) return false;
    return hill_.observe(HillTuner::bucket_of(bytes), s, seconds / static_cast<double>(bytes));
  }

private:
  struct Span {
    std::size_t below, above;
  };
  static std::vector<std::size_t> candidates(std::size_t v, Span f, std::size_t lo,
                                             std::size_t hi) {
    v = std::clamp(v, lo, hi);
    std::vector<std::size_t> c;
    for (std::size_t x = std::max(v / f.below, lo); x <= std::min(v * f.above, hi); x *= 2)
      c.push_back(x);
    if (std::find(c.begin(), c.end(), v) == c.end()) c.push_back(v);  // v not a power-of-2 step
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
    return c;
  }
  static std::uint8_t index_of(const std::vector<std::size_t>& c, std::size_t v) {
    return static_cast<std::uint8_t>(std::find(c.begin(), c.end(), v) - c.begin());
  }

  std::vector<std::size_t> fragments_, depths_;
  HillTuner hill_;
  HillTuner::Setting start_{};
};

}  // namespace rmp::rt::shm
