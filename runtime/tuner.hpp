// The adaptive tuner (RMP_TUNE=adaptive, DESIGN §5): for each message-size bucket it keeps a
// window of recent completion costs of the setting in use and moves that setting, one step of
// one knob at a time, toward the fastest observed one. Mostly it exploits (a burst of kBurst
// uses in kExplorePeriod tries a neighbouring setting, less and less often while every
// neighbour keeps losing); a neighbour replaces the current setting when,
// over a full window of its costs, the median ratio to the current setting's latest cost
// before each is below 1 - kMargin. Pairing each exploration with a sample taken just before
// it compares the two under the same conditions, so a machine whose speed drifts (other jobs,
// cores changing placement) does not make a setting look better than it is.
// Pure: it is fed observations and never reads a clock, so a unit test drives it with a
// synthetic cost model (tests/unit/test_tuner.cpp).
//
// A setting is one index per dimension into a list of candidate values the owner keeps (e.g.
// dimension 0 = fragment size {32K, 64K, 128K, 256K}). Steps are ±1 along one dimension, so
// the climb finds the optimum of costs that fall monotonically toward a unique minimum along
// each dimension, which is the shape of the protocol and pipeline costs it tunes.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace rmp::rt {

class HillTuner {
public:
  static constexpr std::size_t kMaxDims = 3;
  static constexpr std::size_t kBuckets = 65;  // bucket_of() of any size_t
  static constexpr std::size_t kWindow = 8;    // observations per judged window
  // An exploration is a burst of kBurst consecutive uses of the neighbour, one burst per
  // kExplorePeriod uses; its first use is not judged (except a model's left tried once:
  // enable's `left_once`). A pipelined setting (chunks in flight)
  // only shows its cost once the uses before it ran with it too: single explored gets in a
  // stream of the current setting's all cost the same, so noise decided, and the tuner
  // drifted to smaller windows that lost half the throughput at 64 KiB once used throughout
  // (measured with benchmarks/tune-proof). Likewise the first use of the current setting
  // after a burst is not judged.
  static constexpr std::uint32_t kBurst = 4;
  static constexpr std::uint32_t kExplorePeriod = 64;
  // At an optimum every neighbour loses, and exploring it costs a burst of its slower uses
  // every period forever: with rendezvous 2-3x slower than eager at 64 KiB, 4 uses in 64 made
  // the tuned ping-pong 15 % slower than the static rule (benchmarks/tune-proof, 9 pairs).
  // Once each valid step from the current setting has lost in a row, the period doubles, up to
  // kExplorePeriod << kMaxBackoff; a move resets it.
  static constexpr std::uint32_t kMaxBackoff = 4;
  static constexpr double kMargin = 0.03;  // a neighbour must be 3 % faster to win
  // A neighbour whose every judged use of a burst cost at least this multiple of the
  // current's loses at once (see observe()). 1.3, not 1.5: rendezvous ping-pongs of 64 KiB ran at
  // 1.21-1.66x eager's round trips (cores far), so the judgement took three bursts of four,
  // seven bursts a rank in a benchmark's 1271 sends, and the tuned ping-pong cost 1.064x the
  // static rule's (tune-proof, calibrated figures, 10 pairs).
  static constexpr double kClearlyWorse = 1.3;
  // A neighbour whose every judged use of a burst cost at most this fraction of the current's
  // wins at once, without the rest of its window (see observe()).
  static constexpr double kClearlyBetter = 0.85;
  static constexpr double kFarWorse = 2;  // a neighbour this far behind backs off at once,
  static constexpr std::uint32_t kFarWorseSamples = 3;  // on at least this many uses (or a
                                                        // whole burst)
  // The model's left tried once (enable's `left_once`), clearly worse, is tried again
  // after this many doublings of the period, not kMaxBackoff: a stream tuner's model prices
  // eager streams from a short copy at calibration, and with the cores near it put 16 KiB
  // eager windows behind rendezvous ones that they outran once warm (eager's first judged
  // window at 17.6 GB/s against rendezvous's 22.9, then 28-31). At the stream pace the next
  // try comes 32 windows on: past a benchmark's 22 windows of 64 KiB, within its 52 of 16 KiB.
  static constexpr std::uint32_t kModelLeftBackoff = 2;

  using Setting = std::array<std::uint8_t, kMaxDims>;

  // The defaults above suit observations of single messages. A caller whose observations are
  // whole streams of messages (p2p/protocol_tuner.hpp: a window of sends, each at one setting)
  // sees far fewer of them and none is shaped by the setting before it: it judges on shorter
  // windows and bursts, explores more often, and judges a burst's first observation too.
  struct Pace {
    std::uint32_t window = kWindow;  // at most kWindow
    std::uint32_t burst = kBurst;    // at least 2 when edges are skipped
    std::uint32_t period = kExplorePeriod;
    bool skip_edges = true;  // the first use of a burst, and of the current setting after one
    std::uint32_t first = kExplorePeriod;  // the use of a bucket that first explores
    // > 1: nothing is explored until the current setting's last two judged costs lie within
    // this factor of each other (0: no such wait). A candidate is judged against the latest
    // cost before it, and one judged against a run's first, still falling costs looks better
    // than it is (p2p/protocol_tuner.hpp).
    double settled = 0;
    // The candidate's costs are judged against the median of the current setting's last
    // `reference` costs since its last move, rounded down to an odd number (1: the latest
    // alone, paired, see the top of this file; so is a bucket with fewer than 3, as at a
    // stream's first try, and one whose last costs lie more than `settled` apart, still
    // warming up: a median reaching back to a slow window of the warm-up, 2.0 then 1.5 then
    // 1.25 of the steady cost, made a neighbour at 1.3x look 13 % faster). A caller whose
    // observations are whole streams judges one candidate stream against one of the
    // current's; each varies by +-20 % from the next (64 KiB bandwidth windows, cores far
    // apart: 22-47 GB/s with one setting throughout), and with eager windows of 32 KiB at
    // 1.27x the speed of rendezvous ones (cores at mid distance) the one judged rendezvous
    // window came out faster than the eager one before it in 2 runs of 19, which then moved
    // and stayed there at 0.69-0.72 of the static rule's rate. At most kWindow.
    std::uint32_t reference = 1;
    // A neighbour that loses with a judged cost at least this multiple of the reference (and
    // not far worse: kFarWorse) doubles the period between explorations twice, not once (0:
    // once, whatever it cost). For a pace that judges one observation a burst, where each loss
    // is one sample (with several steps, the round's last loss decides). Simulated benchmark
    // runs of 27 windows, costs within +-20 % of their means (tests/unit/test_tuner.cpp): with
    // the stream pace's reference of 3 and this at 1.15, a neighbour at 1.27x costs 3.3 % of
    // the run where it cost 5.0 % (its second burst came half-way through), one at 1.15x 2.9 %
    // instead of 3.8 %. A faster neighbour, which the noise sometimes makes lose its first
    // burst, waits longer for its second: at 0.9x it ends 375 runs of 2000 on the slower
    // setting instead of 312, and costs 0.13 % more of the run (at 0.8x, alike).
    double double_step_at = 0;
  };

  // Power-of-two bucket of a size: sizes in (2^(b-1), 2^b] share bucket b (0 → 0, 1 → 0), so
  // a power-of-two threshold is the top of its bucket.
  static std::size_t bucket_of(std::size_t bytes) {
    return bytes <= 1 ? 0 : static_cast<std::size_t>(std::bit_width(bytes - 1));
  }

  // `extent[d]` candidates along dimension d (1 = the dimension is fixed; unused dimensions
  // keep extent 1).
  HillTuner(std::array<std::uint8_t, kMaxDims> extent, Pace pace)
      : extent_(extent), pace_(valid(pace)) {}
  explicit HillTuner(std::array<std::uint8_t, kMaxDims> extent) : HillTuner(extent, Pace{}) {}

  // Buckets are static (never explored) until enabled here with their starting setting.
  // `left`: a setting the caller's model already put behind the start, which the bucket
  // counts as the one it last moved away from (clearly worse again, it backs off to the
  // longest period at once). `left_once`: `left` is first tried for one use, judged as it
  // comes (no edge skipped), and clearly worse there it is tried again only
  // kModelLeftBackoff doublings of the period later (see choose() and observe()). Meant for
  // paces that judge each use (Pace::window 1, as a stream tuner's): with a longer window a
  // try that is neither clearly worse nor clearly better waits for more such tries.
  void enable(std::size_t bucket, Setting start, std::optional<Setting> left = std::nullopt,
              bool left_once = false) {
    Bucket& b = buckets_[bucket];
    b = Bucket{};
    b.enabled = true;
    b.current = start;
    b.next_explore = pace_.first;
    if (left) {
      b.left = *left;
      b.has_left = true;
      b.left_unmeasured = left_once;
    }
  }
  bool enabled(std::size_t bucket) const { return buckets_[bucket].enabled; }
  const Setting& current(std::size_t bucket) const { return buckets_[bucket].current; }

  struct Choice {
    Setting setting;
    bool explore;
  };
  // The setting to use for the next message of this bucket.
  [[gnu::always_inline]] Choice choose(std::size_t bucket) {
    Bucket& b = buckets_[bucket];
    if (!b.enabled) return {b.current, false};
    ++b.uses;
    if (b.burst_left > 0 && b.has_candidate) {
      --b.burst_left;
      return {b.candidate, true};
    }
    if (b.uses < b.next_explore || b.now.count < pace_.window || !settled(b))
      return {b.current, false};
    b.next_explore = b.uses + explore_period_of(b);  // (again from the judgement, below)
    if (!b.has_candidate && !pick_candidate(b)) return {b.current, false};
    ++explorations_;
    // The model's `left`, first tried (enable's `left_once`): one use, and that one judged.
    // Its price is the model's already, and the burst's first use costs as much again where
    // the model is right: with 64 KiB windows that the model started rendezvous (cores far
    // apart), the two eager windows of a stream burst ran at 22-30 GB/s against rendezvous's
    // 42-46, and explored twice in a benchmark's 22 windows (windows 3, 4, 20 and 21) they
    // held the tuner at 0.90-0.94 of always-rendezvous's speed; one window, 0.97. The edge skipped
    // elsewhere is a rendezvous burst's first gets (p2p/protocol_tuner.hpp), not an eager one's.
    const bool once = single_try(b);
    b.burst_left = once ? 0 : pace_.burst - 1;
    b.unjudged_cand += once ? 0 : pace_.skip_edges;  // the burst's first use
    b.cand_pending += once ? 1 : pace_.burst;        // observations of this burst still to come
    return {b.candidate, true};
  }

  // A message of this bucket sent with `s` cost `cost` (any unit, lower is better; callers
  // use seconds per byte so that sizes within a bucket compare). True when this observation
  // moved the bucket to a new setting.
  bool observe(std::size_t bucket, const Setting& s, double cost) {
    Bucket& b = buckets_[bucket];
    if (!b.enabled) return false;
    if (s == b.current) {
      if (b.unjudged_current > 0) {
        --b.unjudged_current;
        return false;
      }
      b.now.add(cost);
      b.before_latest = b.latest;
      b.latest = cost;
      return false;
    }
    if (!b.has_candidate || s != b.candidate) return false;  // stale: from before a move
    if (b.cand_pending > 0 && --b.cand_pending == 0) b.unjudged_current = pace_.skip_edges;
    if (b.unjudged_cand > 0) {
      --b.unjudged_cand;
      if (b.latest > 0) b.edge_ratio = cost / reference(b);
      return false;
    }
    if (b.latest <= 0) return false;
    b.cand.add(cost / reference(b));
    // A neighbour whose every judged use so far cost kClearlyWorse times the current's loses
    // at once, without the rest of its window: in noise of ±10 % three uses that high in a
    // row are no accident, and judging it on a full window took three bursts of its slow uses.
    // (Not on their median: a burst that straddled a change of the machine's speed then lost
    // at once where its neighbour was the better, and a climb that should have reached the
    // optimum within 40 windows of uses took 140, and left it once (Tuner.DriftingMachineSpeed_*).)
    // The setting the bucket last moved away from (or its owner's model put behind the
    // start) is judged so on the median of the burst's uses: its cost is known from before,
    // so one burst is no accident either. (Rendezvous ping-pongs of 64 KiB among eager ones,
    // where the eager threshold came from the calibrated model, ran at 1.2-1.7x eager's round
    // trips, single uses as low as 1.03: seven bursts a rank were judged on full windows in a
    // benchmark's 1271 sends, the tuned ping-pong at 1.054x the static rule's time where
    // exploring nothing gave 1.011.)
    const bool once = single_try(b);
    const bool burst_judged = b.cand.count >= (once ? 1 : pace_.burst - pace_.skip_edges);
    const bool left_again = b.has_left && b.candidate == b.left;
    const bool clearly_worse =
        burst_judged && (left_again ? b.cand.median() : b.cand.min()) >= kClearlyWorse;
    // Likewise one whose every judged use cost at most kClearlyBetter of the current's wins at
    // once: noise of ±10 % puts three uses in a row that low by chance once in thousands of
    // bursts, and a full window took three bursts and their periods, most of a benchmark's
    // run (ping-pongs of 16 KiB, rendezvous at 0.72 of eager's time: the tuner at 1.27 of
    // the best static setting).
    const bool clearly_better = burst_judged && b.cand.max() <= kClearlyBetter;
    if (b.cand.count < pace_.window && !clearly_worse && !clearly_better) return false;
    const bool better = b.cand.median() < 1 - kMargin;
    if (left_again || better) b.left_unmeasured = false;
    if (better) {
      b.left = b.current;
      b.has_left = true;
      b.current = b.candidate;
      b.now = Window{};  // the new setting's own costs start the next comparisons
      b.latest = 0;
      b.before_latest = 0;
      ++moves_;
      b.losses = 0;
      b.backoff = 0;
      // Keep going the way that paid (momentum): try the same step again first.
    } else {
      b.next_step = (b.next_step + 1) % (2 * kMaxDims);
      // The setting the bucket last moved away from, clearly worse again, backs off alike:
      // its cost is known from all its uses before the move, so one window is no accident
      // either (16 KiB windows: eager at 1.6x rendezvous's time after the move, explored
      // every 8, 16, 32 windows in a benchmark's 52, a tenth of them).
      // The burst's unjudged first use counts as a sample here when it too was far worse: a
      // stream tuner's burst has one judged use (p2p/protocol_tuner.hpp), and two windows of
      // a burst both at 2x are no accident either (16 KiB windows, rendezvous among eager
      // ones at 2.7-4.3x: explored again 16 windows later, 5 % of a benchmark's run).
      const std::uint32_t far_samples = b.cand.count + (b.edge_ratio >= kFarWorse ? 1u : 0u);
      const bool far_worse =
          b.cand.median() >= kFarWorse && far_samples >= std::min(kFarWorseSamples, pace_.burst);
      if (clearly_worse && (far_worse || left_again)) {
        // Far worse: tried again only after the longest period. Eager sends of 256 KiB in a
        // ping-pong that runs at 11 us one way by rendezvous cost ~75 us each; three bursts
        // of them in a benchmark's 333 sends made it 28 % slower than the static rule. At
        // 2 x, not 3: eager 64 KiB ping-pongs at ~2.5 x rendezvous were explored in 4-6
        // bursts of a benchmark's 1271 sends, 23 sends in all, and made it 5-8 % slower. Not
        // on fewer samples: one slow window of a stream (a receiver descheduled) would stop
        // the stream tuner's exploring for the rest of a benchmark's run.
        // The model's left on its one window, though, only kModelLeftBackoff doublings: one slow
        // window is no proof that the model is right (see kModelLeftBackoff).
        b.losses = 0;
        b.backoff = once ? kModelLeftBackoff : kMaxBackoff;
      } else if (++b.losses >= valid_steps(b.current)) {
        b.losses = 0;
        const bool clear_loss = pace_.double_step_at > 0 && b.cand.median() >= pace_.double_step_at;
        b.backoff = std::min(b.backoff + (clear_loss ? 2 : 1), kMaxBackoff);
      }
    }
    // The next exploration a whole period after this one's judgement: counted from the
    // judgement, a doubled period delays it (counted as multiples of the period, a loss at use
    // 8 of period 8 brought the next exploration at use 16 all the same: a bandwidth run of
    // 22 windows explored 2 eager windows of 64 KiB sends, 14 % slower than rendezvous alone).
    end_exploration(b);
    b.unjudged_current = pace_.skip_edges;  // the first use after it
    return better;
  }

  // A use of this bucket with `s` that the caller leaves unjudged (a send alone whose time says
  // nothing of its setting: p2p/protocol_tuner.hpp): counted as observe() counts a use, without
  // a cost. Left uncounted, each burst added its uses to the ones still to come and its first to
  // the ones not judged, and once a few bursts went unjudged the next burst's judged uses were
  // thrown away as edges and the current setting's first use after a burst was judged again.
  [[gnu::always_inline]] void skip(std::size_t bucket, const Setting& s) {
    Bucket& b = buckets_[bucket];
    if (!b.enabled) return;
    if (s == b.current) {
      if (b.unjudged_current > 0) --b.unjudged_current;
      return;
    }
    if (!b.has_candidate || s != b.candidate) return;
    if (b.cand_pending > 0 && --b.cand_pending == 0) b.unjudged_current = pace_.skip_edges;
    if (b.unjudged_cand > 0) --b.unjudged_cand;
  }

  // The caller's own model rules out the candidate choose() has just given (explore true),
  // before any use of it: it is treated as a far worse neighbour (tried again only after the
  // longest period), and the use goes to the current setting.
  void reject(std::size_t bucket) {
    Bucket& b = buckets_[bucket];
    if (!b.enabled || !b.has_candidate) return;
    b.next_step = (b.next_step + 1) % (2 * kMaxDims);
    b.losses = 0;
    b.backoff = kMaxBackoff;
    end_exploration(b);
    --explorations_;
  }

  // Whether observations of this bucket's next uses feed a judgement: those of the current
  // setting until it has a window of them, of its last `lead` uses before an exploration, of
  // an exploration's burst and of the first use after it (counted unjudged), and while a
  // settled wait holds (Pace::settled). Elsewhere a caller may leave its uses unjudged
  // (skip()): the picks come out the same, since the current setting's costs count only
  // through the latest one before a burst and the window's fill.
  bool judging_soon(std::size_t bucket, std::uint32_t lead) const {
    const Bucket& b = buckets_[bucket];
    return b.enabled &&
           (b.now.count < pace_.window || b.uses + lead >= b.next_explore || b.has_candidate ||
            b.burst_left > 0 || b.cand_pending > 0 || b.unjudged_current > 0 || !settled(b));
  }

  std::uint64_t explorations() const { return explorations_; }
  std::uint64_t moves() const { return moves_; }
  // Uses between explorations of this bucket now.
  std::uint64_t explore_period(std::size_t bucket) const {
    return explore_period_of(buckets_[bucket]);
  }

private:
  // The last kWindow costs, oldest overwritten first.
  struct Window {
    std::array<double, kWindow> v{};
    std::size_t count = 0, next = 0;
    void add(double x) {
      v[next] = x;
      next = (next + 1) % kWindow;
      count = std::min(count + 1, kWindow);
    }
    double min() const {
      return *std::min_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(count));
    }
    double max() const {
      return *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(count));
    }
    double median() const { return median_of_last(count); }
    // The largest of the last k costs added over the smallest (k at most count).
    double spread_of_last(std::size_t k) const {
      double lo = v[(next + kWindow - 1) % kWindow], hi = lo;
      for (std::size_t i = 1; i < k; ++i) {
        const double x = v[(next + kWindow - 1 - i) % kWindow];
        lo = std::min(lo, x);
        hi = std::max(hi, x);
      }
      return lo > 0 ? hi / lo : 0;
    }
    // The median of the last k costs added (k at most count).
    double median_of_last(std::size_t k) const {
      std::array<double, kWindow> s{};
      for (std::size_t i = 0; i < k; ++i) s[i] = v[(next + kWindow - 1 - i) % kWindow];
      auto mid = s.begin() + static_cast<std::ptrdiff_t>(k / 2);
      std::nth_element(s.begin(), mid, s.begin() + static_cast<std::ptrdiff_t>(k));
      return *mid;
    }
  };
  struct Bucket {
    bool enabled = false;
    bool has_candidate = false;
    Setting current{};
    Setting candidate{};
    std::uint8_t next_step = 0;  // step = dimension × 2 + (0: down, 1: up)
    std::uint64_t uses = 0;
    std::uint64_t next_explore = 0;      // uses before which nothing is explored
    std::uint32_t burst_left = 0;        // uses of the candidate left in this burst
    std::uint32_t unjudged_cand = 0;     // candidate observations to skip (burst starts)
    std::uint32_t cand_pending = 0;      // candidate observations still to come
    std::uint32_t unjudged_current = 0;  // current observations to skip (after a burst)
    std::uint32_t losses = 0;            // neighbours that lost in a row since the last move
    std::uint32_t backoff = 0;           // explore period = kExplorePeriod << backoff
    Setting left{};                      // the setting of before the last move (has_left)
    bool has_left = false;
    bool left_unmeasured = false;  // left came from enable(), left_once, not judged since
    double latest = 0;  // the current setting's latest cost
    double before_latest = 0;  // and the one before it (0: none since the last move)
    Window now, cand;          // now: costs of current; cand: candidate / reference(), paired
    double edge_ratio = 0;     // the burst's unjudged first use / reference() (0: none)
  };

  // What a candidate's cost is judged against (Pace::reference): the median of an odd number
  // of the current setting's last costs where they lie within Pace::settled of each other,
  // else the latest (observe() judges only once there is one).
  double reference(const Bucket& b) const {
    std::size_t k = std::min<std::size_t>(pace_.reference, b.now.count);
    if (k % 2 == 0 && k > 0) --k;
    if (k <= 1) return b.latest;
    if (pace_.settled > 1 && b.now.spread_of_last(k) > pace_.settled) return b.latest;
    return b.now.median_of_last(k);
  }

  // A pace the counting above works with: a window the Window holds, a burst of at least one
  // judged use, a period of at least one use.
  static Pace valid(Pace p) {
    p.window = std::clamp<std::uint32_t>(p.window, 1, kWindow);
    p.reference = std::clamp<std::uint32_t>(p.reference, 1, kWindow);
    p.burst = std::max<std::uint32_t>(p.burst, p.skip_edges ? 2 : 1);
    p.period = std::max<std::uint32_t>(p.period, 1);
    return p;
  }

  // The candidate is judged (or rejected): the next exploration a whole period from now, and
  // what is left of its burst is stale.
  void end_exploration(Bucket& b) const {
    b.next_explore = b.uses + explore_period_of(b);
    b.has_candidate = false;
    b.cand = Window{};
    b.edge_ratio = 0;
    b.burst_left = 0;
    b.unjudged_cand = 0;
    b.cand_pending = 0;
  }

  // Whether the candidate under way is the model's left on its one use (enable's left_once).
  static bool single_try(const Bucket& b) {
    return b.left_unmeasured && b.has_left && b.candidate == b.left;
  }

  // Whether the current setting's costs have settled (Pace::settled).
  bool settled(const Bucket& b) const {
    if (pace_.settled <= 1) return true;
    if (b.before_latest <= 0 || b.latest <= 0) return false;
    const double r = b.latest / b.before_latest;
    return r <= pace_.settled && r * pace_.settled >= 1;
  }

  std::uint64_t explore_period_of(const Bucket& b) const {
    return std::uint64_t{pace_.period} << b.backoff;
  }

  // ±1 steps from s that stay inside the grid.
  std::uint32_t valid_steps(const Setting& s) const {
    std::uint32_t n = 0;
    for (std::size_t d = 0; d < kMaxDims; ++d) n += (s[d] > 0) + (s[d] + 1 < extent_[d]);
    return n;
  }

  // The next valid ±1 step from current, in round-robin order from next_step.
  bool pick_candidate(Bucket& b) const {
    for (std::size_t i = 0; i < 2 * kMaxDims; ++i) {
      const std::size_t step = (b.next_step + i) % (2 * kMaxDims);
      const std::size_t d = step / 2;
      const bool up = step % 2 == 1;
      const std::uint8_t at = b.current[d];
      if (up ? at + 1 >= extent_[d] : at == 0) continue;
      b.candidate = b.current;
      b.candidate[d] = static_cast<std::uint8_t>(up ? at + 1 : at - 1);
      b.next_step = static_cast<std::uint8_t>(step);
      b.has_candidate = true;
      return true;
    }
    return false;
  }

  std::array<std::uint8_t, kMaxDims> extent_;
  Pace pace_;
  std::array<Bucket, kBuckets> buckets_{};
  std::uint64_t explorations_ = 0, moves_ = 0;
};

}  // namespace rmp::rt
