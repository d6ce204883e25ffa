// RMP_SHM_COPY=auto: which copy mechanism serves a rendezvous get of a given size, chosen
// from measurement (runtime/measured_choice.hpp). With both cores free and near each other
// the pipelined double copy runs 2-3x faster than one process_vm_readv; with the cores far
// apart the double copy's cache-line traffic between the cores collapses it, and the split
// single copy (both processes copying their share of the message with cross-memory attach)
// or the double copy with streaming stores (the chunks go through memory, not from cache to
// cache) wins.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "runtime/measured_choice.hpp"

namespace rmp::rt::shm {

class CopyChooser {
public:
  // single: one process_vm_readv by the requester; chunks: pipelined double copy through
  // shared chunks; split: requester (readv) and owner (writev) copy disjoint pieces at once;
  // streaming: chunks, the owner storing into them with non-temporal stores.
  enum class Mode : std::uint8_t { single, chunks, split, streaming };
  static constexpr int kModes = 4;
  static constexpr unsigned kChunkModes = 1u << 1 | 1u << 3;  // without cross-memory attach

  // Chooses among the modes whose bit is set in `enabled` (bit m for Mode m). A burst in
  // about every 256 gets (in a stream, 256 x its length / 4) re-measures another mechanism,
  // judged on its last three gets (in a stream, a long one on its second half's throughput): 4
  // gets, or as many as move 1 MiB after the first, up to 8; in a stream or both ways, where
  // the 7 after the first of 8 move less than half of that, as many as move it if at most 40
  // do, else 8 (Pace::burst_most). The double copy is pipelined, and its first gets after
  // another mechanism are slow (128 KiB, cores near, windows of 64: bursts at 20, 17, 13,
  // 12, 12 us a get and at 14, 13, 11, 8 us, 5.5 us once in use; with bursts of 4 it lost to
  // the split copy's 9.8 us); bursts of 8 for every size cost 1 and 4 MiB bandwidth 4-7 %.
  // It stays slow until its chunk ring (1 MiB) has gone round about once: 64 KiB gets in
  // windows of 64, cores at mid distance, ran at 2.4-3.5 us a get through a burst of 8 and at
  // 1.5-2.0 once held, where the split copy held at 2.5-2.7, so the split copy kept 64 KiB
  // windows at 23 GB/s where the chunks forced ran 34 (10 interleaved pairs). With bursts of
  // 17 gets at 64 KiB (and, under an earlier cap of 24, 24 at 32 KiB), rendezvous windows of
  // 32 and 64 KiB ran 1.27 and 1.29 times as fast as with bursts of 8 in runs where the split
  // copy had held (8 pairs), alike where both took the chunks (0.98-1.01, 8 pairs); with 33 at
  // 32 KiB, under RMP_TUNE=adaptive, 1.01 and 1.17 (8 pairs). Both ways (bibw), 1.20 at 32
  // KiB, 0.87 and 1.03 at 64 KiB (6 and 8 pairs). 16 KiB gets would need 65: bursts of 24
  // there (the earlier cap) made the adaptive tuner's 16 KiB windows 0.93 of the rate with
  // bursts of 8 (8 pairs, within that size's noise, and nothing to gain), so they keep 8; at
  // 128 KiB, where the 7 after the first move 896 KiB, bursts of 9 came out 0.82 and 0.89 of
  // the rate with bursts of 8 (6 and 8 pairs; single runs of 19-38 GB/s against 30-35), so
  // those keep 8 as well. Not gets alone, each of which pipelines within itself.
  // In the far placement the double copy runs at a quarter of the split copy's speed, and
  // every change of mechanism drains the gets in flight (shm_transport.cpp), so exploring more
  // often costs too much. The mechanism in use stays until another measures more than 10 %
  // faster: two of about the same speed otherwise took turns. Another takes over only once
  // measured faster in the same conditions (Pace::judge_alike: the whole machine slows down
  // for a while now and then). Until every mechanism's warm-up has a measurement the split
  // copy serves gets in a stream or alone (Pace::initial): in both placements it measured
  // among the fastest here.
  // Gets in a stream are judged on the bytes they move over their time (Pace::throughput),
  // a batch of split gets as one measurement: judged get by get as rates, streaming stores or
  // the chunks held 32 KiB rendezvous windows at 13-18 GB/s in most runs with the cores far
  // apart, where the split copy ran them at 20-23 (windows of 64 traced get by get). With it,
  // bandwidth of 32 and 64 KiB by rendezvous (eager_threshold 16384) ran 1.12 and 1.04 times as
  // fast (16 interleaved pairs, far). In a stream the single copy, which is not pipelined, is
  // re-measured in bursts of 4 (Pace::long_burst_modes), and the turns come further apart as
  // the others' bursts grow (Pace::turns_by_burst): bursts of 33 gets of 32 KiB every 256 on
  // average were an eighth of the gets, and with the cores at mid distance windows through the
  // chooser ran at 0.84 of the split copy forced (0.82 after the change above). With both,
  // 1.25 and 1.09 times as fast as before either (12 pairs, far), level with the split copy
  // forced (0.99); with bursts shorter than 33 gets judged on their median again (one stalled
  // get in a burst of 4 otherwise sank a mechanism), 1.14 and 1.09 (0.98 and 0.96 of the split
  // copy forced), 1 MiB 1.02.

  // What else the pair is doing when a get starts; each kind is chosen and judged apart.
  //  - stream: other gets of this direction running or waiting (a bandwidth window).
  //  - alone: none, and none when the get before started either (a ping-pong's): a chunked
  //    get is then cut into pieces that pipeline within it, where in a stream whole steps
  //    overlap the gets around them and split copies go in batches, and the faster mechanism
  //    differs (1 MiB gets, cores far apart: ping-pong 47 us with streaming stores into the
  //    chunks against 70 split; bandwidth windows 29 GB/s against 39, and 47-50 split once a
  //    rendezvous send no longer cost a system call). With one choice for both, a benchmark's
  //    ping-pong of a size left its mechanism to the bandwidth windows that followed (latency
  //    then bandwidth in one run, 4 interleaved pairs far: bandwidth 512 KiB 1.50x, 1 MiB
  //    1.08-1.58x, 4 MiB 1.00-1.08x apart; latency alike within the noise).
  //  - both_ways: the peer reads from this rank too, or this rank has a rendezvous send to it
  //    in flight (a bidirectional window, an exchange): each core has the other direction's
  //    share of work as well, and which mechanism is fastest differs again. Each process
  //    reading its own direction with cross-memory attach, which this kind of get always
  //    took before it was measured, is held from the warm-up on (Pace::initial); on the AMD
  //    EPYC host, cores near, bidirectional windows of 1 MiB ran 32-36 GB/s that way, 43-44
  //    through the chunks and 48-52 split.
  enum class Traffic : std::uint8_t { stream, alone, both_ways };
  static constexpr int kTraffics = 3;

  explicit CopyChooser(unsigned enabled = 0b1111)
      : choices_{MeasuredChoice<kModes>(enabled, pace(enabled, Mode::split, false, true)),
                 MeasuredChoice<kModes>(enabled, pace(enabled, Mode::split, true, false)),
                 MeasuredChoice<kModes>(enabled, pace(enabled, Mode::single, false, false))} {}

  Mode choose(std::size_t bytes, Traffic t = Traffic::stream) {
    return static_cast<Mode>(of(t).choose(bytes));
  }
  // A get the caller is itself trying out (GetHints::settled; MeasuredChoice::choose_settled):
  // the mechanism held for its size and traffic, else the guess for that traffic: for gets
  // alone the double copy, for the others the mechanism held from the warm-up on (initial).
  // Gets alone are what the adaptive tuner explores in a ping-pong, where eager is the static
  // rule's choice up to tens of KiB; measured there (static rendezvous ping-pongs of 32 and
  // 64 KiB, cores far apart, 4000 round trips, each rank's mean): the double copy held most
  // gets at 2.7-3.2 and 3.8-3.9 us, streaming stores the rest at 2.8-3.1 and 4.1-5.8; the
  // split copy's warm-up ran at 7.2-8.5 and the single copy's at 15-30 (its first touches),
  // and neither was taken up. With the cores near the double copy wins by 2-3x (above).
  // Served by the chooser's own warm-up order instead, the tuner's first four bursts of
  // rendezvous each went to another mechanism (32 KiB, cores far: gets of 4.4-5.9 us single,
  // 48-56 its first, 2.3-3.8 double copy, 5.4-22 split) and were judged on it. The transport
  // does not record such a get's time (MeasuredChoice::choose_settled).
  Mode choose_settled(std::size_t bytes, Traffic t) {
    const int guess = t == Traffic::alone ? static_cast<int>(Mode::chunks) : -1;  // else initial
    return static_cast<Mode>(of(t).choose_settled(bytes, guess));
  }
  // The pages under a buffer of gets of `bytes` went onto huge pages (huge_pages.hpp), on this
  // side or the peer's. Cross-memory attach pays per page, so the split copy's earlier figures
  // at this size say little now: unless held, it is measured again at the next get outside a
  // burst (MeasuredChoice::conditions_changed). A block goes over at its 16th use, when the
  // warm-up of a ping-pong's gets has just ended: measured again 16-31 gets later, the split copy
  // took over 4 MiB ping-pongs, which then took 0.59 of the time they took without the news (16
  // interleaved runs, cores far apart), and bandwidth windows of 2 and 4 MiB ran 1.42 and 1.12
  // times as fast (cores near); measured at the next get instead, 0.77 of the time that took (40
  // runs, far). Not for gets both ways, which hold the single copy from the start (bidirectional
  // windows of 2 and 4 MiB took 0.97 of the rate with them), nor for the single copy, slower than
  // the split copy once a get is large enough for huge pages. The chunk copies pay no such cost.
  void pages_changed(std::size_t bytes) {
    for (Traffic t : {Traffic::stream, Traffic::alone})
      of(t).conditions_changed(bytes, 1u << static_cast<int>(Mode::split));
  }
  // Whether the last choose() for traffic `t` gave a mechanism on trial (MeasuredChoice).
  bool last_was_trial(Traffic t) const { return of(t).last_was_trial(); }
  // `uses` gets of `bytes` each, measured together (a batch of split gets), took `seconds` each.
  void record(Mode mode, std::size_t bytes, double seconds, Traffic t = Traffic::stream,
              std::uint32_t uses = 1) {
    of(t).record(static_cast<int>(mode), bytes, seconds, uses);
  }
  double rate(Mode mode, std::size_t bytes, Traffic t = Traffic::stream) {
    return of(t).rate(static_cast<int>(mode), bytes);
  }

private:
  // `initial`: the mode served until every mode's warm-up has a measurement, when enabled
  // (else the last mode warmed up). `alone`: gets one at a time, whose held mechanism's steady rate
  // starts from its first uses once held (Pace::steady_recent). Not for gets in a stream, whose
  // first uses of a mechanism wait for the owner's sends now and then (64 KiB windows: a held
  // mechanism's rate went from 9 to 25 GB/s and back).
  static MeasuredChoice<kModes>::Pace pace(unsigned enabled, Mode initial, bool alone,
                                           bool stream) {
    return {.period = 256,
            .burst = 4,
            .hysteresis = 0.10,
            .burst_bytes = 1 << 20,
            .burst_most = alone ? 0 : 40,
            .long_burst_modes = stream ? ~(1u << static_cast<int>(Mode::single)) : ~0u,
            .turns_by_burst = stream,
            .rejudge_warmup = true,
            .initial = enabled >> static_cast<int>(initial) & 1 ? static_cast<int>(initial) : -1,
            .judge_alike = true,
            .steady_recent = alone,
            .throughput = stream};
  }
  MeasuredChoice<kModes>& of(Traffic t) { return choices_[static_cast<std::size_t>(t)]; }
  const MeasuredChoice<kModes>& of(Traffic t) const {
    return choices_[static_cast<std::size_t>(t)];
  }
  std::array<MeasuredChoice<kModes>, kTraffics> choices_;
};

}  // namespace rmp::rt::shm
