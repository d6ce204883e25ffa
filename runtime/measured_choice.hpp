// A choice among a few interchangeable mechanisms (how a rendezvous get copies, how a
// collective stores into shared chunks), made from measurement because on this project's
// machines the answer changes at run time: with the two cores near each other a mechanism
// that moves cache lines from core to core wins by 2-3x; with them far apart the same line
// traffic collapses it and another mechanism wins. Per power-of-two size class it keeps the
// throughput each enabled mechanism achieved (a moving average for the one in use, its latest
// burst's median for the others, or with Pace::throughput their bytes over their time), uses
// the fastest, and now and then re-measures the others in a short burst.
// Pure: fed sizes and durations, it never reads a clock (unit tests drive it with synthetic
// rates: tests/unit/test_copy.cpp).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace rmp::rt {

template <int N>
class MeasuredChoice {
public:
  static constexpr int kModes = N;

  // How often the mechanisms not in use are re-measured: a burst of `burst` uses (more with
  // `burst_bytes`) after every period / 2 to 3 period / 2 uses, `period` on average. A
  // pipelined mechanism needs a burst of several (it is only as fast as it looks when the use
  // before it was the same mechanism); exploring more often costs more when the explored
  // mechanism is much slower. When period / 2 is shorter than a burst, two bursts may follow
  // each other.
  // `favour`: a mode that keeps being chosen unless another is more than `margin` faster
  // (-1: none), for a mode whose cost the measurement sees only in part.
  struct Pace {
    std::uint64_t period = 64;
    int burst = 4;
    int favour = -1;
    double margin = 0;
    // The mode in use stays until another is more than this much faster (0: the fastest
    // always), so that two mechanisms of about the same speed do not take turns.
    double hysteresis = 0;
    // Bursts of small uses grow until they move this many bytes besides their first use, up
    // to 2 x `burst` uses (more with burst_most; 0: always `burst`): a pipelined mechanism
    // warms up over bytes.
    std::size_t burst_bytes = 0;
    // Where the uses after the first of 2 x `burst` move less than half of burst_bytes, and
    // at most this many uses move all of it after their first, a burst takes as many as move
    // it (0: never): for a mechanism that warms up only once it has moved about burst_bytes.
    // Smaller uses, which would need more, keep 2 x `burst`: a longer burst that still ends
    // before the warm-up does costs more and measures no better.
    int burst_most = 0;
    // The modes whose bursts grow with burst_bytes and burst_most (bit m for mode m); the others'
    // are `burst` long: a mechanism that is not pipelined is measured as well in a few uses.
    unsigned long_burst_modes = ~0u;
    // Whether the ordinary turns to re-measure come `period` x (burst length at the size /
    // `burst`) uses apart on average, so that bursts made longer by burst_bytes take no larger a
    // share of the uses than bursts of `burst` in `period`: 32 KiB gets in a stream, bursts of
    // 33 every 256 gets on average were an eighth of all gets, through mechanisms up to 1.5x
    // slower than the held one (cores far apart: windows through the chooser at 0.85 of the
    // split copy forced; at mid distance 0.82). The bursts that come sooner than a turn (after
    // the warm-up, on a drift of the held mode's rate, to confirm a faster one) are not spaced
    // out; a mode far behind (kFarBehind) waits for every kFarBehindTurns-th of its turns, some
    // 17000 gets of 32 KiB.
    bool turns_by_burst = false;
    // Whether a mode needs a burst past its warm-up before it can be judged far behind (see
    // kFarBehind): for mechanisms whose warm-up is far slower than their steady speed. It
    // costs one more burst per size class, early in a run (node-shared allreduce, bcast and
    // allgather of 1 MiB, whose benchmark times 50 calls: 4-5 % slower with it). Modes known
    // from their warm-up alone are then also re-measured soon after it (warmup_only).
    bool rejudge_warmup = false;
    // The modes rejudge_warmup applies to (bit m for mode m): those whose warm-up is slower
    // than their steady speed. The others are judged on their warm-up as without it.
    unsigned rejudge_modes = ~0u;
    // How far behind the best a mode's warm-up may have run and still be re-measured soon
    // (warmup_only): within this factor of the best's rate (below Pace::burst_bytes).
    double warmup_behind = 2.0;
    // Bursts a mode needs before it can be judged far behind (kFarBehind; 0: none, and with
    // rejudge_warmup one). With 2, one burst that fell in a run's slow start does not condemn it.
    // For uses far more numerous than the turns (eager payloads), where one more burst costs
    // little: a run's first eager payloads of 16-32 KiB in a ping-pong, cores far apart, cost 30-80
    // us (both kinds of store alike, or by turns with 2 us), and a burst of streaming stores
    // measured then kept cached stores (3.5-5.5 us against 2.0-3.0) for ~2000 payloads, 40-80 %
    // of a benchmark's run.
    std::uint32_t far_bursts = 0;
    // The mode held for uses that start after every mode's warm-up has started but before
    // every mode has a measurement (-1: the last mode started, not held; with
    // warm_from_neighbour, only before anything was measured). A window of gets starts all of them
    // at once: without a measurement the rest of the window went to the last mode, at 4 MiB the
    // slowest by half (64 gets, the split copy's 16 GB/s against streaming stores' 7.8). Held, it
    // stays until another beats it as a held mode is beaten: slow first uses of it (page faults in
    // a new buffer) made way for a mode half as fast for the next window. Not only before any use
    // has ended: a window's first few gets may end before the others start (a window of eager sends
    // of 64 KiB under RMP_TUNE=adaptive, its last four gone by rendezvous as the receiver's eager
    // credit ran out). The warm-up's first mode was then the only one measured when the next window
    // began, and served the rest of it; the split copy's warm-up in that window, four gets waiting
    // for an owner still posting its sends, ran at 15 us a get, 11x slower than it runs held (1.3),
    // so it was re-measured only at its turn, ~700 gets in, and the chunks served until then at
    // half its speed (cores far apart: such runs at 13-24 GB/s where always-rendezvous ran at
    // 32-37). The hold ends at the latest kInitialHoldUses uses (a window) after the warm-up, so
    // that a mode whose uses go unrecorded does not keep it for ever.
    int initial = -1;
    // Whether rates are compared only as measured in like conditions: another mode takes
    // over from the held one only if it was faster than the held mode when it was measured
    // too (else it is measured again first), and the others are measured again soon when the
    // held mode's steady rate moves by kDrift. For long runs of uses whose speed changes with
    // the whole machine's (a bandwidth loop's gets: a 4 MiB split copy held at 16 GB/s fell
    // to 4.8 for a hundred gets, every mechanism with it; compared with rates measured before,
    // the chooser moved to a mechanism half as fast and stayed there for ~450 gets once the
    // slowdown was over). Not for a collective's paths: their benchmarks run ~50 calls a size,
    // and one interleaved run with it came out 0-15 % slower (about the noise there).
    bool judge_alike = false;
    // Whether a size class whose nearest class that has chosen holds a mode warms up that mode
    // alone and holds it, the others measured at their first turns (else every mode warms up
    // in turn from mode 0; with far_bursts 0 a mode never measured counts as far behind, and
    // is first measured on its kFarBehindTurns-th turn): for a choice that goes with conditions the
    // size hardly changes (where the cores sit), so that a new class's first uses are at that
    // mode's speed. Its first uses are what another chooser measuring through this one judges
    // first: the adaptive tuner's first bursts of eager sends at a size, which the warm-up's four
    // payloads of each kind of store filled (cores far apart, 64 KiB: round trips of 20 us
    // with cached stores against 12 with streaming ones). Eager stores, cores far apart,
    // ping-pongs of 16, 32 and 64 KiB in one run under RMP_TUNE=adaptive, interleaved with the
    // warm-up in fixed order, 8 pairs: 0.98, 0.97 and 0.87 of the time when the neighbour's
    // mode only came first; warmed up alone (and the tuner's gap rule at 16x), 64 KiB took 0.73
    // of the static rule's time, where eager throughout takes 0.70.
    bool warm_from_neighbour = false;
    // Whether the held mode's steady rate (what another mode's burst is judged against, and
    // whose drift says the conditions changed) starts from its first uses once taken up
    // (held_recent) instead of from the rate it was chosen on. For uses that come one at a
    // time (a ping-pong's gets), whose choice is made on a warm-up that may not describe the
    // run: both ranks of a ping-pong warm up the same mechanisms in step, and a mechanism's
    // speed depends on what the other direction uses. 1 MiB gets, cores far apart: streaming
    // stores into the chunks ran at 33 us a get in the warm-up, while both directions used
    // them, and at 58-62 once held, the peer's gets having gone split; judged against the 33 of
    // its warm-up, a burst of the split copy at 30-31 us did not take over, and in some runs
    // streaming served all ~100 gets of a benchmark's run.
    bool steady_recent = false;
    // Whether a mode's rate is its bytes over its time (the time per byte averaged), not an
    // average of its uses' rates, and a record of several uses measured together (a batch) is
    // one measurement: for uses in a stream, whose mechanisms are worth what they move in a
    // window. Averaged as rates, a mechanism whose uses are mostly fast with a few slow ones
    // looked faster than one measured a batch at a time, whose records each average a batch:
    // 32 KiB gets in windows of 64, cores far apart, streaming stores into the chunks held at a
    // moving average of 17-28 GB/s (their windows at 13-16) and the split copy at 14.7-30
    // (its windows at 20-23). A batch of 16 counted as 16 samples of the moving average (weight
    // 0.25) took it to that one batch's speed, and a burst was judged on its last batch alone.
    // With this:
    //  - the held mode is judged on its steady rate (rate_of), a moving average of time per byte
    //    over about a window of uses (kThroughputSteadyWeight a use, a batch weighing as its
    //    uses), and a mode given up keeps that rate until measured again: the moving average
    //    of its last uses fell with one slow batch, put it far behind (kFarBehind) and kept it
    //    from being measured again for ~2000 gets;
    //  - a burst is judged on the recorded uses of its second half together (its first half is
    //    a pipelined mechanism's warm-up: the double copy's ring) where that half has
    //    kThroughputUses uses, else on the median of its last three uses as without this;
    //  - a sample slower than kOutlier times the average (in a burst, its fastest so far) counts
    //    as that: one get that waited for a descheduled owner costs a 16-use half at most a
    //    fifth of its rate, not the mechanism its turn.
    bool throughput = false;
  };

  // Chooses among the modes whose bit is set in `enabled` (bit m for mode m).
  explicit MeasuredChoice(unsigned enabled = (1u << N) - 1, Pace pace = {})
      : enabled_(enabled), pace_(pace) {}

  // Which mode serves a use of `bytes`.
  int choose(std::size_t bytes) {
    trial_ = true;  // but where the held mode serves (below)
    Bucket& b = bucket(bytes);
    if (b.uses++ == 0 && pace_.warm_from_neighbour) {
      if (const int n = neighbour_held(bucket_of(bytes)); n >= 0) {
        // Only that mode warms up; the others are measured at their first turns.
        for (int m = 0; m < N; ++m)
          if (m != n) b.started[m] = kWarmup + 1;
      }
    }
    if (b.explore_left > 0) {
      --b.explore_left;
      return b.explore_mode;
    }
    // Warm-up: kWarmup + 1 uses of each mode in turn (the first of a run is not counted),
    // counted as they start: when many uses start before any ends (a window of gets), the
    // window is shared among the modes instead of all of it going to the first one.
    int best = -1, last = -1;
    for (int m = 0; m < N; ++m) {
      if (!enabled(m)) continue;
      if (b.started[m] <= kWarmup) {
        ++b.started[m];
        return m;
      }
      last = m;
      if (b.samples[m] > 0 && (best < 0 || score(b, m) > score(b, best))) best = m;
    }
    if (best < 0 || holds_initial(b)) {  // nothing measured yet, or not every mode
      if (pace_.initial < 0 || !enabled(pace_.initial)) return last;
      // The initial mode is held from here: another takes over as from a held one, first
      // judged on the rates the warm-up measured as they are (provisional).
      b.held = pace_.initial;
      b.provisional = true;
      return b.held;
    }
    if (b.provisional) {
      rebase(b, b.held);
      b.provisional = false;
    }
    if (const int held = b.held; held >= 0 && held != best && b.samples[held] > 0) {
      if (score(b, best) < score(b, held) * (1 + pace_.hysteresis)) {
        best = held;
      } else if (pace_.judge_alike && !beat_when_measured(b, best, held)) {
        // The held mode's rate fell below one measured in other conditions (before the whole
        // machine slowed down, say): measure that one again before changing over, so that
        // both are judged alike. Meanwhile the held mode stays.
        const int candidate = best;
        best = held;
        if (b.uses >= b.confirm_at) {
          b.confirm_at = b.uses + std::max<std::uint64_t>(pace_.period / 4, 1);
          return start_burst(b, candidate, bytes);
        }
      }
    }
    if (best != b.held) {
      // The mode given up is known by the steady rate it was judged on (Pace::throughput), not
      // by its moving average's last few uses.
      if (pace_.throughput && b.held >= 0 && b.steady > 0) b.rate[b.held] = b.steady;
      rebase(b, best);
    }
    b.held = best;
    // The first turn too, at random; soon after the warm-up when a mode rests on its warm-up
    // alone (warmup_only), at once when one's conditions changed (stale).
    if (b.next_explore == 0) b.next_explore = next_after(b, best, bytes, 0);
    // The held mode's rate moved far from where it was when another was measured: the
    // conditions changed (the cores' placement, a busy neighbour), and with them maybe which
    // mode is fastest. Measure the others again soon, not at their turns hundreds of uses away.
    if (N > 1 && pace_.judge_alike && b.next_explore > b.uses + pace_.period / 8 &&
        drifted(b, best) >= 0)
      b.next_explore = soon(b.uses);
    if (N > 1 && b.uses >= b.next_explore) {
      // Re-measure one of the others, each in turn; one far behind the best only every
      // kFarBehindTurns-th time its turn comes. The next turn comes after period / 2 to
      // 3 period / 2 uses, at random: with every `period` exactly, a bandwidth loop's windows
      // of 64 gets put every burst on the first gets of a window, which wait for the sender
      // to post its sends (the split copy's first get of each window: 27 us against 9.8), so
      // the mechanisms not in use were measured at their slowest and never taken up (128 KiB,
      // cores near: the split copy held at 13 GB/s, the double copy's burst 35, 15 and 11 us
      // a get, forced 4.8).
      const auto turn = static_cast<int>(b.turns++ % (N - 1));
      if (const int m = stale(b, best); m >= 0) {
        b.stale &= ~(1u << m);
        b.next_explore = next_after(b, best, bytes, b.uses);
        return start_burst(b, m, bytes);
      }
      if (const int m = warmup_only(b, best, bytes); m >= 0) {
        b.remeasured |= 1u << m;
        b.next_explore = next_after(b, best, bytes, b.uses);
        return start_burst(b, m, bytes);
      }
      if (const int m = pace_.judge_alike ? drifted(b, best) : -1; m >= 0) {
        b.remeasuring |= 1u << m;
        b.next_explore = drifted(b, best) >= 0 ? soon(b.uses) : next_turn(b.uses, bytes);
        return start_burst(b, m, bytes);
      }
      b.next_explore = next_turn(b.uses, bytes);
      for (int k = 0; k < N - 1; ++k) {
        const int m = (best + 1 + (turn + k) % (N - 1)) % N;
        if (!enabled(m) || m == best) continue;
        if ((!rejudges(m) || b.samples[m] > kWarmup) && b.bursts[m] >= pace_.far_bursts &&
            rate_of(b, best) > kFarBehind * b.rate[m] && ++b.passed[m] % kFarBehindTurns != 0) {
          trial_ = false;
          return best;
        }
        return start_burst(b, m, bytes);
      }
    }
    trial_ = false;
    return best;
  }

  // Which mode serves a use of `bytes` that the caller is itself trying out and judging (the
  // adaptive tuner's explored rendezvous sends): the held mode; Pace::initial while choose()
  // holds it provisionally (holds_initial), as the caller's other uses go then; before a mode
  // is held, the fastest measured so far, the mode held by the nearest size class that holds
  // one, `guess` (when enabled), Pace::initial (when enabled), or the first enabled mode. It takes
  // no warm-up turn, starts no burst and is not counted among the uses that pace them: a warm-up
  // turn or burst would put a mechanism on trial under the caller's trial. Nor is its time to be
  // recorded: a sample of another mode within a burst cuts the burst short, unjudged.
  // last_was_trial() says whether it rests on no measurement of this size class (the initial mode
  // held provisionally is none either).
  int choose_settled(std::size_t bytes, int guess) {
    trial_ = false;
    const Bucket& b = bucket(bytes);
    if (b.held >= 0 && !b.provisional) return b.held;
    if (b.held >= 0 && holds_initial(b)) {
      trial_ = true;
      return b.held;
    }
    int best = -1;
    for (int m = 0; m < N; ++m)
      if (enabled(m) && b.samples[m] > 0 && (best < 0 || score(b, m) > score(b, best))) best = m;
    if (best >= 0) return best;
    trial_ = true;
    if (const int n = neighbour_held(bucket_of(bytes)); n >= 0) return n;
    if (guess >= 0 && guess < N && enabled(guess)) return guess;
    if (pace_.initial >= 0 && enabled(pace_.initial)) return pace_.initial;
    for (int m = 0; m < N; ++m)
      if (enabled(m)) return m;
    return 0;
  }

  // The conditions under which `modes` (bit m for mode m) run at `bytes` changed, and what
  // they measured before no longer says how fast they are: those other than the held mode are
  // re-measured, each in a burst, from the next use outside a burst or the warm-up on (a
  // judge_alike confirmation burst due then comes first), ahead of every other turn and even if
  // far behind (one whose warm-up has not begun is left to it). The mark goes as the burst
  // starts: a burst cut short unjudged (by a sample of another mode, as a settled use's may be)
  // is not tried again. Where a marked mode is taken up before its burst, the turn due at once
  // goes to the others as an ordinary turn. Each piece of news may start a burst: news that
  // comes again after the burst (another block of the buffers moved) measures the mode again,
  // a burst at most per block moved.
  // The copy chooser's split copy once a buffer's pages went onto huge pages
  // (CopyChooser::pages_changed): gets of 1 MiB and more, where the tuner's settled gets,
  // explorations around the eager threshold, do not come. Such news comes when the split copy is
  // likely to have become the fastest by far, and every use until it is measured again may be
  // lost: measured `soon` instead (16-31 uses later), 4 MiB ping-pongs with the cores far apart
  // held streaming stores at 120-140 us a get for those uses, where the split copy then ran at
  // 63-67. Measured again at once, 4 MiB ping-pongs took 0.77 of the time (40 interleaved runs,
  // cores far apart).
  void conditions_changed(std::size_t bytes, unsigned modes) {
    Bucket& b = bucket(bytes);
    for (int m = 0; m < N; ++m)
      if ((modes >> m & 1) != 0 && enabled(m) && m != b.held && b.started[m] > 0)
        b.stale |= 1u << m;
    if (b.stale != 0 && b.next_explore > b.uses) b.next_explore = b.uses;  // (0: no turn yet)
  }

  // Whether the last choose() gave a mode on trial: one warming up, one re-measured in a burst,
  // or the initial mode held before every mode was measured; false where the held mode serves.
  bool last_was_trial() const { return trial_; }

  // A use of `bytes` by `mode` took `seconds`. The first use of a mode after another (or ever)
  // is not counted: it pays for what the other left behind (lines in another core's cache, an
  // empty pipeline) or for first touches of memory, and counted once it made the better mode
  // look worse for many uses (allgather of 1 MiB: 185 us chosen vs 109 us possible).
  // `uses` uses of `bytes` each, measured together, took `seconds` each on average (a batch;
  // without Pace::throughput the same as `uses` records of one).
  void record(int mode, std::size_t bytes, double seconds, std::uint32_t uses = 1) {
    if (seconds <= 0 || uses == 0) return;
    if (!pace_.throughput) {
      for (std::uint32_t i = 0; i < uses; ++i) record_one(mode, bytes, seconds);
      return;
    }
    Bucket& b = bucket(bytes);
    if (b.last_mode != mode) {
      b.last_mode = mode;
      b.burst_n[mode] = 0;  // a new run of this mode's uses: a new burst
      b.burst_bytes[mode] = b.burst_seconds[mode] = b.burst_fastest[mode] = 0;
      b.burst_recorded[mode] = b.burst_late[mode] = 0;
      if (uses == 1) return;
      --uses;  // a batch counts one use fewer, as a first use alone is not counted
    }
    const double per_byte = seconds / static_cast<double>(std::max<std::size_t>(bytes, 1));
    const double rate = 1 / per_byte;
    bool judged = true;
    if (b.samples[mode] < kWarmup || (b.provisional && mode == b.held)) {
      b.rate[mode] = std::max(b.rate[mode], rate);
    } else if (b.held >= 0 && mode != b.held && pace_.burst > kBurstSamples) {
      // The bytes over the time of the burst's second half (by uses recorded), each sample at
      // most kOutlier times the fastest's time, once that half has kThroughputUses uses; until
      // then (short bursts, or one resumed after another mode's use) the median of its last
      // kBurstSamples uses, a batch's uses each a sample: two or three uses over their time,
      // one of them a get that waited for a descheduled owner, would sink a mechanism.
      const std::uint32_t from = b.burst_recorded[mode];
      b.burst_recorded[mode] += uses;
      const std::uint32_t half = (b.burst_len[mode] > 1 ? b.burst_len[mode] - 1 : 0) / 2;
      const std::uint32_t late =
          b.burst_recorded[mode] - std::max(from, std::min(half, b.burst_recorded[mode]));
      b.burst_late[mode] += late;
      double& fastest = b.burst_fastest[mode];
      fastest = fastest > 0 ? std::min(fastest, per_byte) : per_byte;
      const double moved = static_cast<double>(late) * static_cast<double>(bytes);
      b.burst_bytes[mode] += moved;
      b.burst_seconds[mode] += moved * std::min(per_byte, kOutlier * fastest);
      double median = 0;
      for (std::uint32_t i = 0; i < std::min<std::uint32_t>(uses, kBurstSamples); ++i)
        median = burst_median(b, mode, rate, judged);
      if (b.burst_late[mode] >= kThroughputUses) {
        judged = true;
        b.rate[mode] = b.burst_bytes[mode] / b.burst_seconds[mode];
      } else if (judged) {
        b.rate[mode] = median;
      }
    } else {
      b.rate[mode] = time_average(b.rate[mode], per_byte, kWeight, uses);
    }
    b.samples[mode] += uses;
    if (mode == b.held)
      b.steady = b.steady > 0 ? time_average(b.steady, per_byte, kThroughputSteadyWeight, uses)
                              : b.rate[mode];
    if (judged && b.held >= 0 && mode != b.held) {
      b.basis[mode] = b.steady;
      b.remeasuring &= ~(1u << mode);
    }
  }

  // choose() for a caller that must tell others its choice (a collective's path, announced by
  // one rank): the mode for the next uses of `bytes` and how many of them (1 to `most`), so
  // that it tells them once a run instead of once a use. The run is the uses choose() would
  // give that mode while nothing is recorded: the rest of a warm-up turn or of a burst, or the
  // held mode until the next turn to re-measure; all are counted as begun. A change of the
  // fastest mode that records make meanwhile waits for the end of the run.
  struct Run {
    int mode;
    std::uint64_t uses;
  };
  Run choose_run(std::size_t bytes, std::uint64_t most) {
    return choose_run(bytes, [most](int) { return most; });
  }
  // The same, a run of mode m at most most(m) uses long (a caller whose modes differ in what
  // an announcement once a use is worth to them).
  template <class Most>
  requires std::is_invocable_r_v<std::uint64_t, Most, int> Run choose_run(std::size_t bytes,
                                                                          Most&& most_for) {
    const int m = choose(bytes);
    const std::uint64_t most = most_for(m);
    Bucket& b = bucket(bytes);
    std::uint64_t more = 0;
    if (b.explore_left > 0) {
      more = static_cast<std::uint64_t>(b.explore_left);  // the rest of a burst of m
    } else if (b.held < 0 || m != b.held) {
      // A warm-up turn: choose() gives m until it has started kWarmup + 1 uses of it.
      if (b.started[m] <= kWarmup) more = kWarmup + 1 - b.started[m];
    } else if (b.next_explore > b.uses + 1) {
      more = b.next_explore - b.uses - 1;  // the use at next_explore takes a turn
    }
    more = std::min(more, std::max<std::uint64_t>(most, 1) - 1);
    if (b.explore_left > 0) b.explore_left -= static_cast<int>(more);
    else if (b.held < 0 || m != b.held) b.started[m] += static_cast<std::uint32_t>(more);
    b.uses += more;
    return {m, 1 + more};
  }

  // The mode this size class uses outside warm-up and exploration (-1 during warm-up): a use
  // of another mode is a measurement.
  int held(std::size_t bytes) { return bucket(bytes).held; }

  // The size classes: powers of two, the last one open-ended. A caller keeping state of its
  // own per class indexes it with bucket_of.
  static constexpr std::size_t kBuckets = 48;
  static std::size_t bucket_of(std::size_t bytes) {
    const auto i = static_cast<std::size_t>(std::bit_width(bytes | 1));
    return i < kBuckets ? i : kBuckets - 1;
  }

  // The bytes per second `mode` achieved at this size (0: not measured): a moving average
  // while in use, else its latest burst's median (Pace::throughput: see there).
  double rate(int mode, std::size_t bytes) { return bucket(bytes).rate[mode]; }

private:
  static constexpr std::uint32_t kWarmup = 3;  // samples of each before choosing
  static constexpr std::uint64_t kInitialHoldUses = 64;  // Pace::initial's hold, at most
  static constexpr double kWeight = 0.25;      // moving-average weight of a new sample
  // A mode whose rate is below the best's by this factor is re-measured on every
  // kFarBehindTurns-th turn only: with four copy mechanisms, bursts of the slow ones cost the
  // fastest a fifth of its bandwidth (1 MiB gets, two cores near: 27 GB/s chosen, 34 forced).
  // With Pace::rejudge_warmup, only once it was measured past its warm-up: the warm-up's
  // uses come first in a run, with pages and caches cold and, for a window of gets, the
  // owner still posting its sends, and they are far from steady speeds (96 KiB gets, cores near:
  // the double copy's three at 15-18 us, 3.5 us later on; the split copy's at 9-11): judged far
  // behind on them, the fastest mechanism was tried again only after ~6000 gets, past the end of a
  // benchmark's run, which then ran at 11-13 GB/s instead of 28-34.
  static constexpr double kFarBehind = 1.5;
  static constexpr std::uint32_t kFarBehindTurns = 8;
  // How far the held mode's rate may move from where it was when another mode was measured
  // before that measurement counts as taken in other conditions (drifted). A whole-machine
  // slowdown took a held split copy of 4 MiB from 16 to 4.8 GB/s and back within a run; the
  // moving average of a steady mechanism stays within some 20 % of its mean.
  static constexpr double kDrift = 1.5;
  static constexpr double kSteadyWeight = 1.0 / 32;  // of a new sample in `steady`
  // Pace::throughput: a sample counts at most this many times the average's time per byte.
  static constexpr double kOutlier = 4.0;
  // Pace::throughput: a use's weight in `steady` (a window of 64 gets).
  static constexpr double kThroughputSteadyWeight = 1.0 / 64;
  // Pace::throughput: uses of a burst's second half from which it is judged on their bytes over
  // their time (a burst of 33 gets of 32 KiB has 16; one of 17 gets of 64 KiB, 8, is judged on
  // the median of its last three uses, as bursts are without Pace::throughput).
  static constexpr std::uint32_t kThroughputUses = 16;
  // `rate` (bytes/s) moved toward `uses` samples of `per_byte` seconds, each with `weight`,
  // averaged as time per byte (Pace::throughput), a sample at most kOutlier times the average.
  static double time_average(double rate, double per_byte, double weight, std::uint32_t uses) {
    if (rate <= 0) return 1 / per_byte;
    const double avg = 1 / rate;
    // (No pow for a single use: records come once a get.)
    const double w = uses == 1 ? weight : 1 - std::pow(1 - weight, static_cast<double>(uses));
    return 1 / (avg + w * (std::min(per_byte, kOutlier * avg) - avg));
  }

  // record() of one use, without Pace::throughput.
  void record_one(int mode, std::size_t bytes, double seconds) {
    Bucket& b = bucket(bytes);
    if (b.last_mode != mode) {
      b.last_mode = mode;
      b.burst_n[mode] = 0;  // a new run of this mode's uses: a new burst
      return;
    }
    const double rate = static_cast<double>(bytes) / seconds;
    // Until a mode has kWarmup samples its rate is the best of them: early uses still fault
    // pages in and find caches cold (a collective's chunks are used in turn, so the second
    // use of a mode may be the first in its chunk), and one such sample in the average made
    // the faster mode look slower for hundreds of uses (allgather of 64 KiB, two ranks near:
    // 12.7 us chosen vs 8.5 us possible).
    // So are the uses of the initial mode held before every mode was measured: at the end of
    // the first window its best is compared with the others' best.
    bool judged = true;  // whether the rate now stands on this sample
    if (b.samples[mode] < kWarmup || (b.provisional && mode == b.held))
      b.rate[mode] = std::max(b.rate[mode], rate);
    else if (b.held >= 0 && mode != b.held && pace_.burst > kBurstSamples)
      b.rate[mode] = burst_median(b, mode, rate, judged);
    else b.rate[mode] += kWeight * (rate - b.rate[mode]);
    ++b.samples[mode];
    if (mode == b.held) {
      if (pace_.steady_recent && b.recent_n < kRecent) b.steady = held_recent(b, rate);
      else b.steady = b.steady > 0 ? b.steady + kSteadyWeight * (rate - b.steady) : b.rate[mode];
    }
    // What the held mode achieved when this one was measured: the conditions of the
    // measurement (beat_when_measured, drifted).
    if (judged && b.held >= 0 && mode != b.held) {
      b.basis[mode] = b.steady;
      b.remeasuring &= ~(1u << mode);
    }
  }

  // A mode not in use is measured in bursts, seldom: its rate is the median of the last
  // kBurstSamples samples of its latest burst, not an average with what it measured hundreds
  // of uses before (in another placement of the cores, maybe) or during its warm-up. The
  // median, so that one sample that waited for a descheduled owner does not sink it (96 KiB
  // gets, cores near: a burst of the double copy at 114, 5.7 and 5.7 us, averaged into the
  // old rate, kept it below the streaming copy's 9.8 us per get for the rest of the run); the
  // last ones, so that a burst longer than that is judged on where a pipelined mechanism got
  // to, not on its first uses after another one. Bursts too short for three samples (the
  // first use of a burst is not one) keep the moving average: one sample alone, a store
  // choice's burst of 2, let streaming stores take over node-shared bcasts of 1 MiB with the
  // cores near whenever one call ran fast (60.8 us against 54.5, interleaved).
  static constexpr int kBurstSamples = 3;
  static constexpr int kRecent = 5;  // uses of the held mode behind Pace::steady_recent
  struct Bucket {
    std::array<double, N> rate{};
    std::array<std::array<double, kBurstSamples>, N> burst{};  // this burst's samples
    std::array<std::uint8_t, N> burst_n{};
    // Pace::throughput: this burst's bytes and (capped) seconds, and its fastest time per byte
    // (Pace::steady_recent does not apply there).
    std::array<double, N> burst_bytes{}, burst_seconds{}, burst_fastest{};
    std::array<std::uint32_t, N> burst_len{};       // uses the latest burst was started for
    std::array<std::uint32_t, N> burst_recorded{};  // uses recorded in this run of the mode
    std::array<std::uint32_t, N> burst_late{};      // of them in its burst's second half
    std::array<std::uint32_t, N> samples{};
    std::array<std::uint32_t, N> started{};  // uses begun during warm-up
    std::array<std::uint32_t, N> passed{};  // turns a far-behind mode was not re-measured
    std::array<std::uint32_t, N> bursts{};  // bursts begun (Pace::far_bursts)
    std::uint64_t uses = 0;
    std::uint64_t next_explore = 0;  // uses at which the next turn to re-measure comes
    std::uint64_t turns = 0;         // turns come so far
    int explore_left = 0;
    int explore_mode = 0;
    int last_mode = -1;  // mode of the last use recorded
    int held = -1;       // the mode chosen last outside warm-up and exploration
    unsigned remeasured = 0;  // modes re-measured soon after the warm-up (warmup_only)
    unsigned stale = 0;  // modes to re-measure at the next turn, due at once (conditions_changed)
    // The held mode's steady rate: a slow average of its uses' rates, steadier than `rate`
    // (uses of 64 KiB in windows of 64, the first ones waiting for the sender: `rate` went
    // from 9 to 25 GB/s and back within a few hundred uses, the conditions unchanged).
    double steady = 0;
    // The held mode's first kRecent uses since it was taken up (Pace::steady_recent) and how
    // many of them are in.
    std::array<double, kRecent> recent{};
    std::uint8_t recent_n = 0;
    // The held mode's steady rate when each other mode's rate was last judged.
    std::array<double, N> basis{};
    std::uint64_t confirm_at = 0;  // uses before which no other confirmation burst starts
    unsigned remeasuring = 0;      // drifted modes whose burst has begun but not been judged
    bool provisional = false;      // held is Pace::initial, held before every mode was measured
  };

  // The mode held by the size class nearest to class i that holds one (the smaller of two
  // as near), or -1.
  int neighbour_held(std::size_t i) const {
    auto holds = [this](std::size_t j) {
      return buckets_[j].held >= 0 && !buckets_[j].provisional;
    };
    for (std::size_t d = 1; d < kBuckets; ++d) {
      if (d <= i && holds(i - d)) return buckets_[i - d].held;
      if (i + d < kBuckets && holds(i + d)) return buckets_[i + d].held;
    }
    return -1;
  }

  // Whether `m` was faster than `held` when it was measured too, not only against the held
  // mode's rate now: a comparison within one set of conditions. A rate from the warm-up
  // alone, or from before the held mode took over, has no such comparison.
  bool beat_when_measured(const Bucket& b, int m, int held) const {
    return b.basis[m] > 0 && score(b, m) >= b.basis[m] * (1 + pace_.hysteresis) *
                                                (held == pace_.favour ? 1 + pace_.margin : 1);
  }
  // A new held mode: the others' rates, known at this moment, count as measured against it
  // now (those compared with the mode before say nothing of this one).
  static void rebase(Bucket& b, int best) {
    b.stale &= ~(1u << best);
    b.steady = b.rate[best];
    b.recent_n = 0;
    for (int m = 0; m < N; ++m) b.basis[m] = m == best ? 0 : b.steady;
  }
  // The mode other than `best` measured while the held mode's steady rate was kDrift times
  // higher or lower than it is now and not being measured again already (the fastest of them;
  // -1: none).
  int drifted(const Bucket& b, int best) const {
    if (b.held != best || b.samples[best] <= kWarmup) return -1;
    const double now = b.steady;
    int pick = -1;
    for (int m = 0; m < N; ++m) {
      if (!enabled(m) || m == best || (b.remeasuring >> m & 1) != 0 || b.basis[m] <= 0) continue;
      if (now > kDrift * b.basis[m] || b.basis[m] > kDrift * now)
        if (pick < 0 || b.rate[m] > b.rate[pick]) pick = m;
    }
    return pick;
  }

  // The held mode's steady rate over its first uses since it was taken up, with
  // Pace::steady_recent (`rate`: the latest one's): the second fastest of them (the only one
  // after one use). Slow outliers are common (gets of 1 MiB at 72-100 us once in ~20 against
  // 31-33, of 4 MiB at 170-270 us once in 3 or 4 against 118). From the kRecent-th use on the
  // steady rate moves on slowly from there, as without steady_recent: read from the last few
  // uses for a whole run, it let mechanisms within 10 % of each other take turns at 4 MiB.
  static double held_recent(Bucket& b, double rate) {
    b.recent[b.recent_n++] = rate;
    double first = 0, second = 0;
    for (int i = 0; i < b.recent_n; ++i) {
      const double r = b.recent[static_cast<std::size_t>(i)];
      if (r > first) second = first, first = r;
      else if (r > second) second = r;
    }
    return b.recent_n == 1 ? first : second;
  }
  static double median3(const std::array<double, kBurstSamples>& v) {
    return std::max(std::min(v[0], v[1]), std::min(std::max(v[0], v[1]), v[2]));
  }

  // A sample of a burst of `mode` (not in use): the mode's rate from it (see kBurstSamples).
  static double burst_median(Bucket& b, int mode, double rate, bool& judged) {
    auto& count = b.burst_n[mode];
    auto& v = b.burst[mode];
    v[count % kBurstSamples] = rate;
    if (++count == 2 * kBurstSamples) count = kBurstSamples;  // a ring of the last three
    // Until three are in, the rate stays: one or two samples are what the median is there
    // to avoid, and a choice made between them could take the mode up on them.
    judged = count >= kBurstSamples;
    if (!judged) return b.rate[mode];
    return median3(v);
  }

  bool enabled(int m) const { return (enabled_ >> m & 1) != 0; }
  double score(const Bucket& b, int m) const {
    return m == pace_.favour ? rate_of(b, m) * (1 + pace_.margin) : rate_of(b, m);
  }
  // The rate mode m is judged on: with Pace::throughput the held mode's steady rate, the one
  // the others' bursts are judged against when measured (beat_when_measured). Its moving average
  // follows the few records of a window (a batch of split gets each) and fell with the window's
  // first, slow ones: 32 KiB gets, cores far apart, where the split copy's windows ran at 20
  // GB/s, a burst of the chunks at 17 (their windows at 13) was faster than that average
  // and not than the steady rate, and a burst to confirm it followed every 64 gets (period / 4),
  // half the window through the chunks, for the rest of the run.
  double rate_of(const Bucket& b, int m) const {
    return pace_.throughput && m == b.held && b.steady > 0 ? b.steady : b.rate[m];
  }
  Bucket& bucket(std::size_t bytes) { return buckets_[bucket_of(bytes)]; }

  // The first use of a burst re-measuring `m`.
  int start_burst(Bucket& b, int m, std::size_t bytes) const {
    ++b.bursts[m];
    b.explore_mode = m;
    const int len = (pace_.long_burst_modes >> m & 1) != 0 ? burst_of(bytes) : pace_.burst;
    b.burst_len[m] = static_cast<std::uint32_t>(len);
    b.explore_left = len - 1;
    return m;
  }

  int burst_of(std::size_t bytes) const {
    if (pace_.burst_bytes == 0 || bytes == 0) return pace_.burst;
    const std::size_t want = (pace_.burst_bytes + bytes - 1) / bytes + 1;
    const auto most = static_cast<std::size_t>(std::max(pace_.burst_most, 0));
    const auto twice = 2 * static_cast<std::size_t>(std::max(pace_.burst, 1));
    if (bytes < pace_.burst_bytes / 2 / (twice - 1) && want <= most) return static_cast<int>(want);
    return static_cast<int>(std::clamp<std::size_t>(want, static_cast<std::size_t>(pace_.burst),
                                                    2 * static_cast<std::size_t>(pace_.burst)));
  }

  // With Pace::rejudge_warmup, the mode other than `best` whose rate still rests on its
  // warm-up alone and that was not re-measured yet (the fastest of them; -1: none): the turns
  // go to such modes first, and while there are any (the first turn too) each comes after
  // period / 16 to period / 8 uses (soon). Once each, or a window of gets that starts them
  // all before any ends would take the same mode again and again.
  // A run's first uses of a pipelined mechanism are far slower than its steady speed (a
  // ping-pong of 256 KiB gets, cores near: the double copy's warm-up at 31-34 us a get, its
  // first pass over a 1 MiB chunk ring, against 16-19 for the split copy and 12-14 for the
  // double copy once warm): re-measured only at the second or third turn of its size class,
  // 300-1000 gets in, it was not taken up within a benchmark's run (latency 19-25 us against
  // 13.5-15 forced). Any such mode only for uses smaller than Pace::burst_bytes (when set),
  // whose warm-up moves less than a pipeline warms up over: at 4 MiB, three early bursts of
  // slower mechanisms cost a benchmark's run of ~100 gets 10-15 % of its latency. Nor for a mode
  // whose warm-up ran at less than 1 / Pace::warmup_behind of the best's: the double copy's at 256
  // KiB with the cores near ran at 1.2-1.8 times the time of the best one's, with them far apart
  // (where it stays slower) at 2-2.5, and early bursts of such modes cost 512 KiB ping-pongs 10 %
  // there (interleaved, 7 pairs); they wait for their turns. From Pace::burst_bytes on, only a mode
  // whose warm-up came within the hysteresis of the best's is re-measured soon: there the warm-up
  // ranks two close mechanisms by chance, and the one it put second waited for its turn, 256 gets
  // away (1 MiB gets, cores far apart, a ping-pong then a bandwidth window in one run: streaming
  // stores into the chunks held at 31 GB/s on a warm-up of 31.2 against the split copy's 28.9,
  // where the split copy runs at 36-43 in the windows; 3 runs of 6).
  int warmup_only(const Bucket& b, int best, std::size_t bytes) const {
    if (!pace_.rejudge_warmup) return -1;
    const bool large = pace_.burst_bytes != 0 && bytes >= pace_.burst_bytes;
    const double behind = large ? 1 + pace_.hysteresis : pace_.warmup_behind;
    int pick = -1;
    for (int m = 0; m < N; ++m)
      if (enabled(m) && rejudges(m) && m != best && b.samples[m] <= kWarmup &&
          (b.remeasured >> m & 1) == 0 && rate_of(b, best) <= behind * b.rate[m] &&
          (pick < 0 || b.rate[m] > b.rate[pick]))
        pick = m;
    return pick;
  }
  // The fastest mode other than `best` whose conditions changed (-1: none).
  int stale(const Bucket& b, int best) const {
    int pick = -1;
    for (int m = 0; m < N; ++m)
      if ((b.stale >> m & 1) != 0 && m != best && (pick < 0 || b.rate[m] > b.rate[pick])) pick = m;
    return pick;
  }
  // When the next turn to re-measure comes: at the next use while a stale mode waits for it
  // (conditions_changed), soon while one known from its warm-up alone does, else at a turn
  // counted from `from` uses.
  std::uint64_t next_after(const Bucket& b, int best, std::size_t bytes, std::uint64_t from) {
    if (stale(b, best) >= 0) return b.uses;
    return warmup_only(b, best, bytes) >= 0 ? soon(b.uses) : next_turn(from, bytes);
  }
  // Whether Pace::initial is still held (or first taken up) because an enabled mode has no
  // measurement yet (choose() asks once every mode's warm-up has begun), within
  // kInitialHoldUses uses past the warm-up (kWarmup + 1 uses a mode).
  bool holds_initial(const Bucket& b) const {
    if (pace_.initial < 0 || !enabled(pace_.initial) || pace_.warm_from_neighbour ||
        (b.held >= 0 && !b.provisional))
      return false;
    std::uint64_t warmup = 0;
    bool waiting = false;
    for (int m = 0; m < N; ++m) {
      if (!enabled(m)) continue;
      warmup += kWarmup + 1;
      waiting = waiting || b.samples[m] == 0;
    }
    return waiting && b.uses <= warmup + kInitialHoldUses;
  }
  bool rejudges(int m) const { return pace_.rejudge_warmup && (pace_.rejudge_modes >> m & 1) != 0; }
  std::uint64_t soon(std::uint64_t uses) {
    const std::uint64_t period = std::max<std::uint64_t>(pace_.period, 16);
    return uses + period / 16 + next_random() % (period / 16);
  }

  std::uint64_t next_turn(std::uint64_t uses, std::size_t bytes) {
    std::uint64_t period = std::max<std::uint64_t>(pace_.period, 1);
    if (pace_.turns_by_burst && pace_.burst > 0)
      period = period * static_cast<std::uint64_t>(std::max(burst_of(bytes), pace_.burst)) /
               static_cast<std::uint64_t>(pace_.burst);
    return uses + period / 2 + next_random() % period;
  }

  // xorshift64: where the turns to re-measure fall (pure: the same sequence every run).
  std::uint64_t next_random() {
    random_ ^= random_ << 13;
    random_ ^= random_ >> 7;
    random_ ^= random_ << 17;
    return random_;
  }

  unsigned enabled_;
  Pace pace_;
  bool trial_ = false;                         // last_was_trial()
  std::uint64_t random_ = 0x9e3779b97f4a7c15;  // any nonzero seed
  std::array<Bucket, kBuckets> buckets_{};
};

}  // namespace rmp::rt
