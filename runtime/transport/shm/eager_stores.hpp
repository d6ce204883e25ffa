// How a sender stores an eager payload into the pair's byte ring: with ordinary (cached)
// stores, or with streaming (non-temporal) ones that send the lines to memory. With the two
// cores near each other (sharing a cache) the receiver copies cached lines out 2-3x faster
// than it reads them from memory; with the cores far apart every cached line it reads is
// pulled out of the sender's cache one by one and streaming stores win by about as much
// (this project's machine, forced either way: 4 KiB ping-pong 2.6x slower with streaming
// stores near; 4-48 KiB, cores far, the measured choice against cached stores only: latency
// 0.36-0.61x at 16-48 KiB, bandwidth 2.3-3.3x). The placement changes at run time, so the
// choice is measured (runtime/measured_choice.hpp) per size class.
//
// What is measured is what the mode costs the message as the receiver sees it (shm_ring.hpp,
// TimedDelivery): from the sender's first store to the end of the delivery, or the delivery
// alone when the payload waited behind another; the receiver sends it back (shm_transport.cpp).
// The sender alone cannot judge: its streaming copy looks as fast either way, while the reader
// pays, and after streaming stores the message becomes visible only once the payload is in
// memory. While the mode in use holds, one payload in kTimedEvery is timed and the chooser
// hears only of those (the others take a decrement and a branch; asking the chooser about
// every payload and timing one in 8 cost 4-5 % of the latency of 4-16 KiB messages with the
// cores near, against forced cached stores); while the other mode is measured, every one.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "runtime/measured_choice.hpp"
#include "runtime/transport/shm/shm_ring.hpp"

namespace rmp::rt::shm {

class EagerStores {
public:
  enum class Force : std::uint8_t { none, cached, streaming };
  // Smaller payloads keep cached stores: at 4-8 KiB the two modes measured alike with the
  // cores far apart (the receiver's cost 2.2-2.9 against 2.0-2.8 GB/s), and choosing cost
  // 4 KiB ping-pong 3-10 % with them near.
  static constexpr std::size_t kMinBytes = kMinPickedBytes;
  static constexpr std::uint32_t kTimedEvery = 32;

  // The chooser counts the payloads it is asked about, one in kTimedEvery while a mode holds:
  // after every 4 to 11 it is asked about (8 on average) comes a burst of 4 of the other mode
  // (about 4 payloads in 120, 3 %, while the two are within 1.5x of each other; once the
  // other is further behind, as streaming stores in the placement that does not suit them are
  // at 2-3x, one turn in 8: 4 in ~2000), judged on the median of its last three; the mode in
  // use stays until the other measures more than 10 % faster. (Against fixed turns and the
  // average, interleaved with the cores near: 16-48 KiB bandwidth 1.00-1.02x, latency
  // 0.97-1.07x in two runs of 8 and 10 pairs.)
  // A mode known from its warm-up alone is not judged far behind on it (rejudge_warmup): a
  // run's first payloads cost 30-80x their steady time (a bandwidth loop of 64 KiB, cores near:
  // 110-160 us each before the receives are posted, then 1.5-1.7 us cached and 2.4-3.0
  // streaming), and cached stores, judged on those, were tried again only after ~2000
  // payloads, past a benchmark's run (20 GB/s against 38 forced). Interleaved against that, 10
  // pairs with the cores near: bandwidth 64 KiB 1.39x, bibw 32 KiB 1.49x, latency 16 KiB 0.96
  // and 64 KiB 1.03 of the time; 24 pairs far apart, where streaming holds, 0.99-1.04.
  // Nor is a mode judged far behind on one burst (far_bursts): that start can last past the
  // warm-up and the first burst after it (measured_choice.hpp).
  explicit EagerStores(Force force = Force::none)
      : force_(force),
        choice_(0b11, {.period = 8,
                       .burst = 4,
                       .hysteresis = 0.10,
                       .rejudge_warmup = true,
                       .far_bursts = 2,
                       .warm_from_neighbour = true}) {}

  StorePick pick(std::size_t bytes) {
    if (bytes < kMinBytes || force_ == Force::cached) return {};
    if (force_ == Force::streaming) return {true, false};
    Held& h = held_[Choice::bucket_of(bytes)];
    if (h.untimed > 0) {
      --h.untimed;
      return {h.streaming, false};
    }
    const int m = choice_.choose(bytes);
    if (m == choice_.held(bytes)) {
      h.untimed = kTimedEvery - 1;
      h.streaming = m == kStreaming;
    }
    return {m == kStreaming, true};
  }

  // A timed payload of `bytes` cost `seconds`, as the receiver saw it. One that cost kOutlier
  // times the cheapest recent payload of its class, of either mode, is left out: it waited for
  // a receiver busy elsewhere, which the receiver cannot always tell. In a bidirectional
  // window of 32 KiB with the cores far apart (osu_bibw) every second payload of a burst
  // measured 80-130 us against 1.1-1.5: a receiver copies its own window into the other ring
  // between polls. The bursts' medians then sank streaming stores, cached ones were held at
  // 5-7 us a payload, and the bandwidth fell to 1.4-5 GB/s where either mode alone gave 8
  // (cached) or 15-26 (streaming). The cheapest cost relaxes by kRelax a payload, so that a
  // lasting slowdown of the whole machine is taken in after some 60 payloads.
  void record(bool streaming, std::size_t bytes, double seconds) {
    if (bytes == 0 || seconds <= 0) return;
    double& cheapest = cheapest_[Choice::bucket_of(bytes)];
    const double per_byte = seconds / static_cast<double>(bytes);
    cheapest = cheapest > 0 ? std::min(cheapest * kRelax, per_byte) : per_byte;
    if (per_byte > kOutlier * cheapest) return;
    choice_.record(streaming ? kStreaming : kCached, bytes, seconds);
  }

private:
  static constexpr int kCached = 0, kStreaming = 1;
  struct Held {
    std::uint32_t untimed = 0;  // payloads left before the next one the chooser decides
    bool streaming = false;     // the mode in use
  };
  using Choice = MeasuredChoice<2>;
  static constexpr double kOutlier = 16, kRelax = 1.05;
  Force force_;
  Choice choice_;
  std::array<Held, Choice::kBuckets> held_{};  // per size class of the chooser
  std::array<double, Choice::kBuckets> cheapest_{};  // seconds per byte (record)
};

}  // namespace rmp::rt::shm
