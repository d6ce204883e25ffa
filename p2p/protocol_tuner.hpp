// RMP_TUNE=adaptive at the sender's protocol decision: per power-of-two size bucket around the
// eager threshold, eager-copy or rendezvous, moved by the hill-climbing tuner
// (runtime/tuner.hpp) toward what completed faster. Only point-to-point traffic of the user
// channel is tuned, one rank at a time: receivers handle either protocol, so ranks need not
// agree (DESIGN §2), and nothing that shapes a collective depends on it (DESIGN §5).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "runtime/tuner.hpp"

namespace rmp::p2p {

class ProtocolTuner {
public:
  // Buckets entirely inside (max(inline_threshold, eager_threshold / 4), reach] are tuned,
  // where reach is the larger of 2 × eager_threshold and `eager_reach` (Engine: a quarter of
  // the transports' eager buffer, so that four of the largest eager messages fit in it: the
  // shm byte ring of 1 MiB gives 256 KiB, the top of the static eager_threshold sweep the
  // tuner is judged against). A bucket starts where the static rule puts its smallest sizes.
  // Eager credits stay sized for 2 × eager_threshold: a larger eager message takes more of
  // the same pool, and goes by rendezvous when the pool is short. eager_threshold 0 (no
  // eager at all) tunes nothing.
  ProtocolTuner(std::size_t inline_threshold, std::size_t eager_threshold,
                std::size_t eager_reach = 0)
      : eager_threshold_(eager_threshold) {
    const std::size_t low = std::max(inline_threshold, eager_threshold / 4);
    const std::size_t high = eager_threshold == 0 ? 0 : std::max(2 * eager_threshold, eager_reach);
    for (std::size_t b = 1; b < rt::HillTuner::kBuckets - 1; ++b) {
      const std::size_t lo = std::size_t{1} << (b - 1), hi = std::size_t{1} << b;
      if (lo >= low && hi <= high) hill_.enable(b, {lo < eager_threshold ? kEager : kRndv, 0, 0});
    }
  }

  bool tunes(std::size_t bytes) const { return hill_.enabled(rt::HillTuner::bucket_of(bytes)); }

  struct Pick {
    bool eager;
    bool explore;
  };
  Pick pick(std::size_t bytes) {
    const rt::HillTuner::Choice c = hill_.choose(rt::HillTuner::bucket_of(bytes));
    return {c.setting[0] == kEager, c.explore};
  }

  // A send of `bytes` by the given protocol took `seconds` of the stream of sends (p2p/engine.cpp:
  // from its post or the previous send's completion); true when its bucket switched protocol.
  // An eager send completes once its payload is in the transport's buffer, but the message is
  // delivered only after the receiver has copied it out again, a copy of the same size: alone
  // (not `pipelined`: posted after the previous send had completed, as in a ping-pong) its
  // observation counts the measured time twice, so that both protocols are judged on
  // delivery. In a stream the receiver's copy of one message overlaps the sender's copy of the
  // next, and a full buffer makes the sender's completions wait for the receiver anyway.
  bool observe(std::size_t bytes, bool eager, double seconds, bool pipelined = false) {
    if (bytes == 0 || seconds < 0) return false;
    const double cost = (eager && !pipelined ? 2 * seconds : seconds) / static_cast<double>(bytes);
    return hill_.observe(rt::HillTuner::bucket_of(bytes), {eager ? kEager : kRndv, 0, 0}, cost);
  }

  std::size_t eager_threshold() const { return eager_threshold_; }

private:
  static constexpr std::uint8_t kRndv = 0, kEager = 1;
  std::size_t eager_threshold_;
  rt::HillTuner hill_{{2, 1, 1}};
};

}  // namespace rmp::p2p
