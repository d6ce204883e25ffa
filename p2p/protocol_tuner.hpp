// RMP_TUNE=adaptive at the sender's protocol decision: per power-of-two size bucket around the
// eager threshold, eager-copy or rendezvous, moved by the hill-climbing tuner
// (runtime/tuner.hpp) toward what completed faster. Only point-to-point traffic of the user
// channel is tuned, one rank at a time: receivers handle either protocol, so ranks need not
// agree (DESIGN §2), and nothing that shapes a collective depends on it (DESIGN §5).
//
// A send alone (posted when every tuned send before it has completed and been waited for: a
// ping-pong) is judged on the time to the next send alone of its bucket: in a ping-pong, a
// round trip, which holds all that either protocol costs (the receiver's copy out of the eager
// buffer, the rendezvous handshake) and the reply. Sends posted while others are in flight or not
// yet waited for form a stream (a window of isends), and a stream is judged whole, on its bytes
// over its time (judge_stream), by a tuner of its own: the best protocol of a stream is
// not that of a ping-pong, and within a stream the sends' own times say nothing. An eager send
// completes once its payload is in the transport's buffer, a rendezvous send when the
// receiver has read it, so they complete out of order, the eager ones long before the
// receiver has copied them out. Charged per send, from the previous completion, a burst of
// rendezvous sends among eager ones cost almost nothing, and 32 KiB windows moved to
// rendezvous: 12.2 GB/s where eager ran at 18.5 (cores near, tune_rndv_below 1034 of 1560).
// A stream takes one setting from its first send, the stream tuner's, when the bucket's last
// use was a stream. Else its first send goes as a send alone, and from its second send on (one
// of the same bucket) the stream takes the stream tuner's setting, judged from there. Sends of
// other buckets in a stream keep their bucket's stream setting and leave it unjudged.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>

#include "runtime/tuner.hpp"

namespace rmp::p2p {

// What a rendezvous send costs, as the tuning model has it (Params: get_bw, rndv_setup_us,
// link_rtt_us), and what an eager one costs in a stream (link_bw: the transport's pipelined
// copy, the sender's copy into its buffer overlapping the receiver's copy out).
struct RndvModel {
  double get_bw = 0;    // bytes/s of the transport's get
  double setup_us = 0;  // µs to set one up, beyond the handshake's round trip
  double link_bw = 0;   // bytes/s of eager sends in a stream (0: unknown)
  // eager_threshold is the formula's crossover for a send alone over measured figures (these
  // and the transport's get start, runtime/params.hpp): the static rule is the model's choice
  // there.
  bool sets_threshold = false;
  double rtt_us = 0;  // µs of the link's round trip (0: unknown; see model_cost)
};

class ProtocolTuner {
public:
  // Buckets entirely inside (max(inline_threshold, eager_threshold / 8), reach] are tuned
  // (streams below it too where the model puts rendezvous close: see the constructor's body),
  // where reach is the larger of 2 × eager_threshold and `eager_reach` (Engine: a quarter of
  // the transports' eager buffer, so that four of the largest eager messages fit in it: the
  // shm byte ring of 1 MiB gives 256 KiB, the top of the static eager_threshold sweep the
  // tuner is judged against). A bucket starts where the static rule puts the size of its
  // first send (a bucket straddling eager_threshold: 64 KiB ping-pongs with eager_threshold
  // 60000 started eager, where the bucket's smallest sizes go, 8.0 us one way against 5.2 by
  // rendezvous, and took ~200 sends to move).
  // Sends alone are tuned in buckets that begin below 2 × eager_threshold only, streams up to
  // reach: above it a send alone pays the sender's copy into the eager buffer and the
  // receiver's copy out one after the other, where rendezvous copies once, and only in a
  // stream do the copies of successive sends overlap. (Explored there all the same, three
  // eager sends of 256 KiB among a ping-pong benchmark's 333 made it 4-10 % slower than the
  // static rule; with eager_threshold 60000 they run at ~42 us one way against 12 by
  // rendezvous.) The bucket holding 2 × eager_threshold is tuned: with the declared
  // eager_threshold of 30000, 64 KiB ping-pongs ran 0.93 of rendezvous's time eager on both
  // sides (cores far apart), and the tuner, which left (32 KiB, 64 KiB] alone, 1.16x the best
  // setting. (Whether it moves depends on the machine: here a burst of eager sends from one
  // side among rendezvous replies made round trips of 13-14 us against 11.)
  // Eager credits stay sized for 2 × eager_threshold: a larger eager message takes more of
  // the same pool, and goes by rendezvous when the pool is short. eager_threshold 0 (no
  // eager at all) tunes nothing.
  // `credit_bytes` (0: unknown): the eager credit a receiver grants. A stream on rendezvous
  // whose last stream of its bucket held more bytes does not explore eager: such a window is
  // eager only until the credit runs out, and the rest stalls (windows of 64 × 64 KiB against
  // 3.6 MB of credit: one explored window in a benchmark's 22 made it 9-15 % slower).
  // `rndv`: what a rendezvous costs (zeros: unknown; see model_puts_far_behind).
  // `rank`: this rank's world rank, which staggers when its buckets explore sends alone
  // (alone_pace).
  ProtocolTuner(std::size_t inline_threshold, std::size_t eager_threshold,
                std::size_t eager_reach = 0, std::size_t credit_bytes = 0, RndvModel rndv = {},
                int rank = 0)
      : eager_threshold_(eager_threshold),
        credit_bytes_(credit_bytes),
        rndv_(rndv),
        alone_({2, 1, 1}, alone_pace(rank)) {
    const std::size_t low = std::max(inline_threshold, eager_threshold / 8);
    const std::size_t high = eager_threshold == 0 ? 0 : std::max(2 * eager_threshold, eager_reach);
    // With the model known (it keeps streams the model puts far behind from being explored),
    // streams are tuned in a bucket that only reaches into the range: with a calibrated eager
    // threshold of 290-360 KB (link_bw measured at 21-22 GB/s in one run of four) the range
    // began at 36-45 KB and 64 KiB windows were left eager at 28 GB/s where rendezvous ran 40.
    // Below the range too, streams are tuned where the model puts rendezvous streams within
    // kModelWorse of eager ones (at the bucket's largest size): with a calibrated eager
    // threshold of 29-40 KB the range began at 3.6-5 KB, and 4 KiB windows stayed eager in the
    // runs where eager ran at 8-10 GB/s (cores at mid distance; 18-27 in others) and
    // rendezvous at 11-15. (Streams of a size that starts rendezvous by the model, among the
    // sends of a stream opened by another size, keep that setting unjudged, as every size does
    // there.)
    const bool model = rndv_.get_bw > 0 && rndv_.link_bw > 0;
    for (std::size_t b = 1; b < rt::HillTuner::kBuckets - 1; ++b) {
      const std::size_t lo = std::size_t{1} << (b - 1), hi = std::size_t{1} << b;
      if (hi > high || lo < inline_threshold) continue;
      // Its start is set at its first send (post).
      if (lo >= low && lo < 2 * eager_threshold) alone_.enable(b, {});
      const bool model_close = model && model_cost(false, hi) < kModelWorse * model_cost(true, hi);
      if (lo >= low || (model && hi > low) || model_close) stream_.enable(b, {});
    }
  }

  // A stream tuner's observation is a window of sends: a benchmark's bandwidth loop has tens
  // of them per size. It explores two streams in 8 and judges the second alone against the
  // median of the last three before the burst (the latest alone at a bucket's first try, and
  // while those three lie more than 1.25x apart; one stream, judged, for a first try of eager
  // where the model starts the bucket rendezvous: post): a benchmark's run is too short for
  // more. Windows of one setting vary by +-20 % (64 KiB, cores far apart: 22-47 GB/s), and
  // judged against the latest alone a 32 KiB rendezvous window, 1.27x eager's time on
  // average (cores at mid distance), moved the bucket in 2 runs of 19. A loss at 1.15x or
  // more waits two doublings of the period, not one (HillTuner::Pace::double_step_at): after one
  // it came back for a second burst half-way through a benchmark's 27 windows. The first
  // stream of a rendezvous burst pays for the transport's first gets of that size, which try each
  // copy mechanism in turn (shm: a window of 64 gets of 16 KiB, 59 single copies, 47 through the
  // chunks, 22 split); judged, it made rendezvous lose where its windows took 0.63-0.80 of
  // eager's time (tune-proof, 16 KiB windows, 18 pairs: tuner/defaults 1.048 and tuner/best
  // 1.455 judging the first stream, 0.930 and 1.244 judging the second).
  // A wrong move is undone at the next exploration.
  // The first exploration comes at a bucket's third stream, not its eighth: a bandwidth run
  // of 16 KiB windows has 52 of them, and its first 8 went eager where rendezvous ran at
  // 1.45x their speed (cores near). Nor before the current setting's last two windows took
  // within 1.25x of each other's time: a run's first windows are slow while pages and copy
  // choosers warm up (16 KiB, cores far: eager windows of 378, 437, 147, then 55-60 us), and
  // a candidate judged against one of them looks better than it is (rendezvous at 100 us
  // against the 147 moved the bucket, and 7 windows went at 1.5-2x eager's time).
  static constexpr rt::HillTuner::Pace kStreamPace{.window = 1,
                                                   .burst = 2,
                                                   .period = 8,
                                                   .skip_edges = true,
                                                   .first = 3,
                                                   .settled = 1.25,
                                                   .reference = 3,
                                                   .double_step_at = 1.15};

  bool tunes(std::size_t bytes) const { return stream_.enabled(rt::HillTuner::bucket_of(bytes)); }

  struct Pick {
    bool eager;
    bool explore;
    bool moved;  // judging the stream before this send moved its bucket to a new setting
    // A send alone whose protocol the bucket's tuner of sends alone picked (where this rank
    // leads the pair, its receiver answers it in kind), or that answered (`answer`).
    bool alone = false;
    // It answered (`answer`) by another protocol than the bucket's current one (answers go
    // unjudged and unexplored whatever their protocol).
    bool answered = false;
  };
  // The protocol of a send of `bytes` (tunes(bytes)) posted at `now_ns`. complete() and
  // release() must follow for each.
  // `answer` (-1: none; 1 eager, 0 rendezvous): the protocol of the destination's last send to
  // this rank in this bucket, where the destination leads the pair's protocol (Engine: the
  // lower rank of the two) and that send was one alone that its tuner picked. A send alone
  // answers it in kind, neither judged nor counted as a use here (so never exploring), so that
  // the leader's round trip holds its protocol both ways: a ping-pong's protocol is the two
  // ranks' joint setting, and the leader alone tunes it.
  // Judged each on its own, an eager send among rendezvous replies took 1.14-1.35x the round
  // trip it was judged against where eager both ways ran faster than rendezvous both ways
  // (64 KiB, cores far apart: 4.3 against 4.6 us one way), and neither rank could leave
  // rendezvous (docs/tuning.md). Answering only the leader's explorations was not enough: once
  // the explorer had moved to eager, the other rank's rendezvous replies made its eager round
  // trips the slowest of all, and its next exploration took it back (2 moves and back in 2 runs
  // of 2, 57-60 eager sends of 2542).
  Pick post(std::size_t bytes, std::int64_t now_ns, int answer = -1) {
    return post(
        bytes, [now_ns] { return now_ns; }, answer);
  }
  // The same, the time read from now() only where it is used (post_reads_clock).
  template <class Now>
  requires std::is_invocable_r_v<std::int64_t, Now>
  [[gnu::always_inline]] Pick post(std::size_t bytes, Now&& now, int answer = -1) {
    const std::size_t b = rt::HillTuner::bucket_of(bytes);
    if (!started_[b] && stream_.enabled(b)) {
      started_[b] = true;
      const rt::HillTuner::Setting start = setting(bytes <= eager_threshold_);
      // Where the model set the threshold, the protocol the rule does not take is one the
      // model put behind: clearly worse when tried, it backs off at once (HillTuner::enable).
      if (alone_.enabled(b))
        alone_.enable(b, start,
                      rndv_.sets_threshold
                          ? std::optional<rt::HillTuner::Setting>(setting(start[0] != kEager))
                          : std::nullopt);
      // A stream the model starts rendezvous (it prices eager streams above rendezvous ones
      // there) has eager put behind, as a setting it moved away from, where the static rule
      // sends rendezvous too, or where the model prices a rendezvous send by its get, not its
      // start (rndv_get_bound): a size where one copy against two decides. Where it prices it
      // by its get (above the threshold or below), eager is first tried for one window,
      // judged as it comes, and clearly worse it waits four periods, then is tried in a burst
      // of two, and clearly worse again waits the longest period (HillTuner::enable's
      // left_once). 64 KiB windows (far-apart thresholds of 46-297 KB, below 64 KiB in a fifth
      // of the runs), eager explored in bursts of two windows (22-30 GB/s against
      // rendezvous's 42-46) that backed off as any losing try does, held the tuner at
      // 0.90-0.94 of always-rendezvous's speed (compare, 16-24 pairs a set); one window,
      // 0.97. Not to the longest period at once: link_bw, calibrated at 10.5-15.5 GB/s on the Zen 4
      // VM, put eager streams of 4 and 16 KiB behind rendezvous ones, which they outran in many
      // runs (mid distance: 18-27 and 30-38 GB/s against 11-15 and ~29), and an eager window right
      // after rendezvous ones is a slow one (16 KiB, link_bw set to 15 GB/s, cores at mid distance:
      // 18-25 GB/s, the next 28-37, then 51 against rendezvous's 40). Nor at all where the start
      // prices a rendezvous send: far apart, 16 KiB streams start rendezvous where link_bw comes
      // out below ~15 GB/s, and with link_bw set to 15 the one-window tries held the tuner at 0.87
      // of the static rule's speed, bursts of two 0.97 (14 pairs).
      if (rndv_stream_faster(bytes)) {
        const bool get_bound = rndv_get_bound(bytes);
        stream_.enable(b, setting(false),
                       bytes > eager_threshold_ || get_bound
                           ? std::optional<rt::HillTuner::Setting>(setting(true))
                           : std::nullopt,
                       get_bound);
      } else {
        stream_.enable(b, start);
      }
    }
    if (in_flight_++ == 0 || s_.sends >= kSegment) {  // a new stream, maybe of one send
      const bool cut = in_flight_ > 1;
      const bool alone = !streamed_[b] && !cut && alone_.enabled(b);
      // An answer in kind, this tuner's choice left alone: no use of the bucket counted (nor a
      // burst begun: an exploration toward the leader would be judged on round trips of mixed
      // protocols, and put one into the leader's), and nothing judged.
      const bool answering = alone && answer >= 0;
      const bool own = !answering && (cut || times_own(b));  // this stream's (or send's) time
                                                             // is judged
      const std::int64_t now_ns = own || judges_last(b) ? now() : kUntimed;
      const bool alone_moved = !cut && judge_alone(b, now_ns);
      // The stream before this one: the part of a stream this post cuts, or the last one.
      if (cut) {
        streamed_[s_.bucket] = true;
        stream_bytes_[s_.bucket] = s_.bytes;
      }
      const bool moved = judge_stream(cut ? s_ : last_, b, now_ns);
      last_.judged = false;
      const bool beyond_credit =
          credit_bytes_ > 0 && stream_bytes_[b] > credit_bytes_ && stream_.current(b)[0] == kRndv;
      rt::HillTuner::Choice c =
          answering           ? rt::HillTuner::Choice{setting(answer == kEager), false}
          : streamed_[b]      ? (beyond_credit ? rt::HillTuner::Choice{stream_.current(b), false}
                                               : stream_.choose(b))
          : alone_.enabled(b) ? alone_.choose(b)
                              : rt::HillTuner::Choice{setting(bytes <= eager_threshold_), false};
      if (streamed_[b] && c.explore && model_puts_far_behind(b, bytes, c.setting[0] == kEager)) {
        stream_.reject(b);
        c = {stream_.current(b), false};
      }
      s_ = {.bucket = b,
            .eager = c.setting[0] == kEager,
            .explore = c.explore,
            .judged = own,
            .answered = answering,
            .cut = cut,
            .untimed = !own && !cut && !answering,
            .sends = 1,
            .bytes = bytes,
            .posted_ns = now_ns,
            .done_ns = now_ns};
      return {s_.eager, s_.explore, moved || alone_moved, alone,
              answering && c.setting != alone_.current(b)};
    }
    const bool to_stream = switches_to_stream(b);
    ++s_.sends;
    if (b != s_.bucket) {
      s_.judged = false;
      s_.untimed = false;
      return {stream_.current(b)[0] == kEager, false, false};
    }
    if (to_stream || s_.untimed) {
      // A stream whose first send took the protocol of a send alone (the bucket's last use was
      // not a stream) takes the stream tuner's from its second send on, and is judged from
      // there as that setting's (the first send keeps its own). Before, a bucket's first window
      // went by the rule for a send alone: with 32 KiB windows that the model starts rendezvous
      // and the static rule eager (cores far apart), the first window went eager, the
      // receiver's slow first rendezvous windows (its copy chooser warming up: 5, 12-15, then
      // 25 GB/s) one window later, among a benchmark's timed ones. The tuner against
      // always-rendezvous, two interleaved sets (24 and 16 pairs): 0.93 and 0.90 of its speed
      // before, 1.00 and 0.93 with this (1.03 and 1.02 of the speed before; 8-128 KiB
      // 0.99-1.03).
      // A stream whose first post went untimed (a send alone, it seemed) is likewise judged
      // from its second send on, as the streams of its bucket are.
      if (to_stream) {
        s_.eager = !s_.eager;
        s_.explore = false;
      }
      s_.untimed = false;
      s_.judged = true;
      s_.posted_ns = now();
      s_.bytes = 0;
    }
    s_.bytes += bytes;
    return {s_.eager, s_.explore, false};
  }

  // A send of post() completed at `now_ns`; `honoured`: it went by the protocol picked (an
  // eager pick goes by rendezvous when the receiver's eager credit is short). A send alone
  // that was not is not judged; a stream is: what eager picks cost in a window larger than
  // the eager credit (128 KiB windows of 8 MiB against 3.6 MB) is what that setting costs
  // there. Left unjudged, such explorations never lost, never backed off, and took one window
  // in eight.
  void complete(bool honoured, std::int64_t now_ns) {
    complete(honoured, [now_ns] { return now_ns; });
  }
  template <class Now>
  requires std::is_invocable_r_v<std::int64_t, Now>
  void complete(bool honoured, Now&& now) {
    if (!honoured) s_.honoured = false;  // (no store otherwise: release() copies s_ whole)
    if (complete_reads_clock()) s_.done_ns = std::max(s_.done_ns, now());
  }

  // Whether the next post() of `bytes`, or a complete() now, uses its time. A post only when
  // it starts a stream (its first send's post and the next stream's time it), and for a send
  // alone only when it judges the last one or its own time will be judged: near its bucket's
  // next exploration (HillTuner::judging_soon), not in between, where a send alone is left
  // unjudged (the picks are the same). A completion only in a stream of one send so far whose
  // post was timed (a send alone is judged on it). Elsewhere post() and complete() do not call
  // the clock they are given: two reads a send, ~27 ns each here, were 5-12 % of a 16 KiB
  // send's time in a window (0.5-1 us), and with the cheap clock (~11 ns) a ping-pong's send
  // alone still cost the tuner ~36 ns, 3-4 % of a 32 KiB round trip with the cores near
  // (~2.1 us); ~12 ns without the reads between explorations (and with the hot calls inlined:
  // small results built in memory and read back at once stalled; a loop of sends with 140 ns
  // of other work each).
  bool post_reads_clock(std::size_t bytes) const {
    if (in_flight_ > 0)
      return s_.sends >= kSegment || (rt::HillTuner::bucket_of(bytes) == s_.bucket &&
                                      (s_.untimed || switches_to_stream(s_.bucket)));
    const std::size_t b = rt::HillTuner::bucket_of(bytes);
    return !started_[b] || times_own(b) || judges_last(b);
  }
  bool complete_reads_clock() const { return s_.sends <= 1 && s_.judged; }

  // The user is done with a send of post() (waited for it, or let go of it) and it completed.
  // A send alone is judged when the next one of its bucket is posted (judge_alone).
  void release() {
    if (in_flight_ == 0 || --in_flight_ > 0) return;
    const std::size_t b = s_.bucket;
    if (s_.sends > 1) {  // judged when the next stream starts (judge_stream)
      streamed_[b] = true;
      stream_bytes_[b] = s_.bytes;
      last_ = s_;
      skip_alone();
      return;
    }
    streamed_[b] = false;
    last_.judged = false;
    alone_last_ = s_;
    alone_last_.judged = s_.judged && s_.honoured && !s_.cut && s_.bytes > 0;
    // An answer is no use of this tuner's (post) to skip.
    alone_fresh_ = !s_.answered;
  }

  std::size_t eager_threshold() const { return eager_threshold_; }

  // Whether the last use of the bucket of `bytes` was a stream (else the next stream's first
  // send goes as a send alone: post).
  bool last_use_streamed(std::size_t bytes) const {
    return streamed_[rt::HillTuner::bucket_of(bytes)];
  }

  // Tests: every send timed, as before the sampling (post_reads_clock), to compare picks.
  void time_every_send(bool on) { time_every_send_ = on; }

private:
  static constexpr std::uint8_t kRndv = 0, kEager = 1;
  // Sends after which a stream that has not drained is cut: its part so far is judged on its
  // bytes over the time to this post, and the next part takes a setting of its own. Sends
  // that never all complete and get waited for at once (isend i, then wait for i - 1), or a
  // send never waited for, would otherwise make one endless stream, never judged.
  static constexpr std::uint32_t kSegment = 256;
  // A send alone whose next post came more than this many times its own time after its
  // completion is not judged (judge_alone). In a ping-pong the reply takes about as long as
  // the send (rendezvous) or several times the sender's copy into the buffer (eager: at
  // 64 KiB with the cores far apart the copy took 1.3-1.5 us and the round trip 11.5-12.5;
  // with 8 here half the eager sends went unjudged, and the replying rank's first burst of
  // them had two judged uses instead of three, too few to move at once: it kept rendezvous
  // in one run of two).
  static constexpr std::int64_t kGapFactor = 16;
  // Sends alone are timed from this many uses of their bucket before an exploration (counted
  // before the send's own: the last three before the burst): the last judged one before the
  // burst is what the burst's costs are judged against, and one the gap rule leaves out
  // (judge_alone) leaves the one before it (post_reads_clock).
  static constexpr std::uint32_t kTimedLead = 4;
  static constexpr std::int64_t kUntimed = INT64_MIN;  // post(): the time was not read

  // Whether the next send of bucket b, joining the stream under way as its second, changes its
  // protocol to the stream tuner's (post): the stream's first send went as a send alone (the
  // bucket's last use was no stream, and it answered nothing), by another protocol.
  bool switches_to_stream(std::size_t b) const {
    return s_.sends == 1 && b == s_.bucket && !s_.answered && !streamed_[b] && stream_.enabled(b) &&
           (stream_.current(b)[0] == kEager) != s_.eager;
  }

  // Whether a send of bucket b posted with nothing in flight (a send alone, or a stream's
  // first) is to be timed: a stream's first send, in a bucket whose last stream had more than
  // one, and a send alone near an exploration. Not every send alone of a bucket whose sends
  // alone are not tuned: a ping-pong there paid two clock reads a send for nothing (4 KiB,
  // streams tuned below the range: latency 1.053x the static rule's, tune-proof, 9 pairs); a
  // stream that follows is judged from its second send (post: `untimed`).
  bool times_own(std::size_t b) const {
    return time_every_send_ || streamed_[b] || alone_.judging_soon(b, kTimedLead);
  }
  // Whether a post in bucket b judges the stream or send alone before it (then it reads the
  // clock for that).
  bool judges_last(std::size_t b) const {
    return (last_.judged && last_.bucket == b) || (alone_last_.judged && alone_last_.bucket == b);
  }

  struct Stream {
    std::size_t bucket = 0;
    bool eager = false, explore = false;
    bool judged = true;    // one bucket and one setting throughout, its first post timed
    bool honoured = true;  // every pick went by the protocol picked
    bool answered = false;  // a send alone that answered the pair's leader in kind
    bool cut = false;      // the rest of a stream cut after kSegment sends
    bool untimed = false;  // its first post was not timed, and no other is yet
    std::uint32_t sends = 0;
    std::size_t bytes = 0;
    std::int64_t posted_ns = 0;  // its first send's post
    std::int64_t done_ns = 0;    // its last completion
  };

  // The two settings, as constants: a setting built on the stack byte by byte and compared as a
  // word right after (HillTuner's comparisons) stalled the store's forwarding on every send.
  static constexpr rt::HillTuner::Setting kEagerSetting{kEager, 0, 0}, kRndvSetting{kRndv, 0, 0};
  static const rt::HillTuner::Setting& setting(bool eager) {
    return eager ? kEagerSetting : kRndvSetting;
  }

  // The default pace, with a bucket's first exploration of sends alone (rank × 23) mod 64
  // uses after the period's end (any two ranks closer than 64 apart differ): both ranks of a
  // ping-pong count the same uses, and at the same phase they explored at once, so that the
  // replying rank's last send before its burst was timed over a round trip holding the other
  // rank's first explored send (64 KiB, eager explored among rendezvous round trips of 6.5
  // us: that one took 16.7 us, and the burst's 23-26 us round trips, judged against it, looked
  // 1.5x, not 3.7x: far worse, at 2x, would have backed off at once; it explored again every
  // 64-128 sends instead, 4 bursts in a benchmark's 1271 sends where the other rank had 2).
  static rt::HillTuner::Pace alone_pace(int rank) {
    rt::HillTuner::Pace p;
    const auto period = static_cast<std::int64_t>(p.period);
    p.first =
        p.period + static_cast<std::uint32_t>((std::int64_t{rank} * 23 % period + period) % period);
    return p;
  }

  // The last send alone, when the next send alone is posted: judged on the time between the
  // two posts when both are of one bucket. Before, a send alone was judged on its own time
  // from post to completion, an eager one's doubled for the receiver's copy: on a VM where a
  // copy between cores cost more than the sender's copy into the buffer, 64 KiB ping-pongs
  // moved to eager at 8.0 us one way against 5.2 by rendezvous (tune-proof: 1.29 x the
  // defaults).
  // Not when the time from its completion to the next post is far longer than the send took
  // (kGapFactor times, or a microsecond for short ones): the application computed in
  // between, and that time, the same for both protocols, would drown their difference.
  bool judge_alone(std::size_t bucket, std::int64_t now_ns) {
    const Stream s = alone_last_;
    if (!s.judged || s.bucket != bucket || now_ns == kUntimed || now_ns <= s.posted_ns) {
      skip_alone();
      return false;
    }
    const std::int64_t took = std::max<std::int64_t>(s.done_ns - s.posted_ns, 1000);
    if (now_ns - s.done_ns > kGapFactor * took) {
      skip_alone();
      return false;
    }
    alone_last_.judged = false;
    alone_fresh_ = false;
    const double seconds = static_cast<double>(now_ns - s.posted_ns) * 1e-9;
    return alone_.observe(bucket, setting(s.eager), seconds / static_cast<double>(s.bytes));
  }

  // The last send alone goes unjudged: its bucket counts the use all the same (HillTuner::skip).
  void skip_alone() {
    if (std::exchange(alone_fresh_, false))
      alone_.skip(alone_last_.bucket, setting(alone_last_.eager));
    alone_last_.judged = false;
  }

  // A stream is judged on the time from its first post to the next stream's, when that one
  // is of the same bucket: its last completion is too early a mark for eager sends, which
  // complete while the receiver still has up to its eager buffer to copy out (a window of 64
  // eager sends of 32 KiB completed in 60 % of the time the window took). The time between
  // windows (the receiver's reply, what the application computes) counts for both protocols.
  // A stream cut after kSegment sends (still in flight) is judged on the time to the post
  // that cut it.
  bool judge_stream(const Stream& s, std::size_t bucket, std::int64_t now_ns) {
    if (!s.judged || s.bucket != bucket || s.bytes == 0 || now_ns == kUntimed ||
        now_ns <= s.posted_ns)
      return false;
    const double seconds = static_cast<double>(now_ns - s.posted_ns) * 1e-9;
    const double cost = seconds / static_cast<double>(s.bytes);
    if (setting(s.eager) == stream_.current(bucket)) {
      Recent& r = recent_[bucket];
      r.cost[r.next++ % r.cost.size()] = cost;
    }
    const bool moved = stream_.observe(bucket, setting(s.eager), cost);
    if (moved) recent_[bucket] = Recent{};  // the costs of the setting it left
    return moved;
  }

  // A stream's time per byte by the model (0: unknown). Rendezvous: each send costs its get at
  // get_bw or its start (stream_start_us), whichever is longer, since in a stream the setup of
  // one send overlaps the copies of those before it, as its handshake does. Eager: each byte
  // through the buffer at link_bw (the sender's copy in overlapping the receiver's copy out).
  // A rendezvous send's start in a stream is what its four messages cost (the rts, the
  // get's request, the chunk's notice and the fin, each a line moved from one core to the
  // other: half a round trip), where that is less than the setup: in a stream the transport
  // gets small messages through its chunks, with no set-up of a single copy a send. On the
  // setup alone (1.29 us, a 64-byte process_vm_readv on this VM) rendezvous streams of 4 KiB
  // were put at 3.2 GB/s and far behind eager ones, never explored; measured, cores at mid
  // distance, they took 0.26 us a send (15 GB/s), 1 KiB to 8 KiB 0.23-0.35 us, where
  // 2 × link_rtt_us is 0.22.
  double stream_start_us() const {
    return rndv_.rtt_us > 0 ? std::min(rndv_.setup_us, 2 * rndv_.rtt_us) : rndv_.setup_us;
  }
  // `overlapped` false: a rendezvous send's start added to its get instead, where
  // link_rtt_us is known (see model_puts_far_behind).
  double model_cost(bool eager, std::size_t bytes, bool overlapped = true) const {
    if (eager) return rndv_.link_bw > 0 ? 1 / rndv_.link_bw : 0;
    if (rndv_.get_bw <= 0 || bytes == 0) return 0;
    const double start = stream_start_us() * 1e-6 / static_cast<double>(bytes);
    if (!overlapped && rndv_.rtt_us > 0) return 1 / rndv_.get_bw + start;
    return std::max(1 / rndv_.get_bw, start);
  }

  // Whether a stream of the candidate protocol would take kModelWorse times the time per byte
  // the bucket's current streams took, by the model alone. Such a stream is not explored: a
  // window of sends is the smallest exploration there is, and one window of 16 KiB
  // rendezvous sends cost 2.5-4 eager windows with the cores far apart and ~9 with them near,
  // where a benchmark times 20-100 windows a size (bandwidth with RMP_TUNE=adaptive 0.53 of
  // the static rule's near, 0.83 far); likewise two windows of eager 64 KiB sends among
  // rendezvous ones at 1.4-1.5x their time cost the tuner 5-6 % of a benchmark's 20 windows.
  // Without link_rtt_us the start is the single copy's setup, and that added to the get
  // (5.4 us a 64 KiB send by the calibrated figures, get_bw 24 GB/s and setup 2.7 us, twice
  // eager's 2.7; hence the overlapped price there, below) kept 64 KiB windows from
  // rendezvous, which ran them in 0.74 of eager's time (2.1 us a send: in a stream the chunks
  // carry the gets, with no system call a send; tune-proof, cores far: the tuner at 1.22x the
  // best static setting). The current setting's time is the best of its last streams (Recent):
  // a run's first windows are slow (the pages and the receiver's copies warm up), and judged
  // on the latest one the model let a window of rendezvous through in one run of two. A model
  // that is wrong costs the tuner that bucket until the longest period has passed
  // (HillTuner::reject).
  // Not the protocol the static rule takes for the size, though: the model's eager streams at
  // link_bw are a guess (a short pipelined copy at calibration), and where it puts them behind
  // it must not keep a bucket from the defaults' own choice for good. Cores near, link_bw
  // calibrated at 11.8-12.3 GB/s where windows of 16 and 32 KiB eager sends ran at 25.8 and 27.6
  // (below the eager threshold: eager by the static rule), the model started those streams
  // rendezvous (19.5-20.8 GB/s) and, eager put 1.5x behind, never tried eager: the tuner at
  // 1.24 and 1.41 of the static rule's time (12 interleaved pairs). The 64 KiB eager windows
  // above, below a far-apart threshold of 46-297 KB, are tried, for one window at first
  // (post).
  // Rendezvous is priced here with its start added to its get, not overlapped (where
  // link_rtt_us is known): a small send's start overlaps little, and the overlapped price let
  // 16 KiB rendezvous be tried at mid distance, where it ran 1.5-3.8x slower than priced and a
  // try cost more than a benchmark's run allows. Against eager streams the reference is the
  // faster of them and the model's eager price: a run's first eager windows are still warming
  // up. Rendezvous is never kept out where the model itself starts the bucket's streams there
  // (rndv_stream_faster): a noisy window that moved such a bucket to eager would otherwise
  // keep it there for good. docs/tuning.md has the measurements.
  static constexpr double kModelWorse = 1.5;
  bool model_puts_far_behind(std::size_t bucket, std::size_t bytes, bool candidate_eager) const {
    if (candidate_eager == (bytes <= eager_threshold_)) return false;
    if (!candidate_eager && rndv_stream_faster(bytes)) return false;
    const Recent& r = recent_[bucket];
    const double model = model_cost(candidate_eager, bytes, /*overlapped=*/false);
    if (r.next == 0 || model <= 0) return false;
    double current = *std::min_element(
        r.cost.begin(),
        r.cost.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(r.next, r.cost.size())));
    if (const double eager = model_cost(true, bytes); !candidate_eager && eager > 0)
      current = std::min(current, eager);
    return model >= kModelWorse * current;
  }

  // Whether the model puts rendezvous streams of `bytes` ahead of eager ones: a bucket's
  // streams then start there. The eager threshold weighs a send alone, where rendezvous pays
  // its handshake and setup in full; in a stream those overlap the copies and each byte moves
  // once, at get_bw, against twice through the buffer at link_bw. With the cores far apart
  // (calibrated: get_bw 24 GB/s, setup 2.7 us, link_bw 15 GB/s, eager threshold 95-180 KB)
  // 64 KiB windows ran at 31-33 GB/s by rendezvous and 16-23 eager, where a benchmark's 22
  // windows a size were too few and too noisy (single windows of one setting 13-32 GB/s) for
  // the stream tuner to find rendezvous from eager: tune-proof put it at 1.22x the best static
  // setting. By the model streams go rendezvous where get_bw is above link_bw, from
  // stream_start_us() × link_bw up, and eager elsewhere, ties included: far apart
  // (link_rtt_us 0.45-0.60), 16 KiB streams start rendezvous only where link_bw comes out
  // below 14-18 GB/s. Measured there, 16 KiB rendezvous windows ran at 13-16.5 GB/s against
  // eager's 17-20. Eager is tried there in bursts of two that back off as any losing try
  // does; at get-bound sizes (32 KiB up far apart) one window first, then four periods (post).
  // No slack toward rendezvous: the 1.5x it had until 2026-12-06 started streams rendezvous
  // where eager ran faster (docs/tuning.md tells what it cost, and why it was there).
  bool rndv_stream_faster(std::size_t bytes) const {
    const double rndv = model_cost(false, bytes), eager = model_cost(true, bytes);
    return rndv > 0 && eager > 0 && rndv < eager;
  }
  // Whether the model prices a rendezvous send of `bytes` in a stream by its get, not its
  // start (model_cost): far apart (get_bw ~25 GB/s, a start of 2 x 0.5 us) from ~32 KiB up.
  bool rndv_get_bound(std::size_t bytes) const {
    return rndv_.get_bw > 0 &&
           static_cast<double>(bytes) / rndv_.get_bw >= stream_start_us() * 1e-6;
  }

  std::size_t eager_threshold_;
  std::size_t credit_bytes_;
  RndvModel rndv_;
  rt::HillTuner alone_;
  rt::HillTuner stream_{{2, 1, 1}, kStreamPace};
  std::array<bool, rt::HillTuner::kBuckets> streamed_{};  // the bucket's last stream had > 1 send
  std::array<bool, rt::HillTuner::kBuckets> started_{};   // the bucket has had a send
  std::array<std::size_t, rt::HillTuner::kBuckets> stream_bytes_{};  // its last stream's bytes
  // The costs (seconds per byte) of the current setting's last few judged streams.
  struct Recent {
    std::array<double, 4> cost{};
    std::size_t next = 0;  // streams recorded
  };
  std::array<Recent, rt::HillTuner::kBuckets> recent_{};
  std::uint32_t in_flight_ = 0;         // sends posted and not yet both complete and released
  Stream s_;                            // the stream of the sends in flight
  Stream last_{.judged = false};        // the last one of more than one send, until judged
  Stream alone_last_{.judged = false};  // the last send alone, until judged
  bool alone_fresh_ = false;            // alone_last_ neither judged nor skipped yet
  bool time_every_send_ = false;        // time_every_send()
};

}  // namespace rmp::p2p
