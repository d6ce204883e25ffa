// The runtime context: one per job member (a process, or a thread in in-process tests). It
// owns the bootstrap, the effective parameters, the transports and the endpoint table, and
// drives progress. `Environment` creates the process's default context; nothing else is
// global.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/bootstrap/bootstrap.hpp"
#include "runtime/calibration.hpp"
#include "runtime/params.hpp"
#include "runtime/spin.hpp"
#include "runtime/stats.hpp"
#include "runtime/transport/transport.hpp"

namespace rmp::rt {

class HugePages;  // runtime/huge_pages.hpp

class Context {
public:
  // Reads the job identity and the non-knob settings (throws rmp::Error for bad RMP_* values).
  // Parameters are resolved and transports start in start().
  explicit Context(std::unique_ptr<Bootstrap> boot);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Resolves the parameters (throws rmp::Error for bad values) and creates the transports, delivering arriving messages to `sink`. `am_header_bytes` is the
  // upper layer's eager header, so that the inline formula counts only user payload.
  void start(AmSink& sink, std::size_t am_header_bytes);

  const JobIdentity& id() const { return boot_->identity(); }
  int rank() const { return id().rank; }
  int size() const { return id().size; }
  Bootstrap& bootstrap() { return *boot_; }
  // A rank the launcher reported failed, asking the bootstrap at most once a millisecond
  // (cheap enough for a waiting loop); nullptr while none has.
  const PeerFailure* peer_failure();
  const Params& params() const { return params_.values; }
  // The parameters a collective reads: this rank's, except that the values that shape one
  // (fragment_size, pipeline_depth, eager_threshold, the link, copy and get figures,
  // rndv_setup_us, allreduce_compress) are rank 0's, so that every rank picks the same algorithm
  // and path and cuts the same segments even when ranks were started with different settings
  // (point-to-point thresholds may differ per rank; DESIGN §2, §5). Rank 0 publishes them at
  // start(); another rank fetches them from the bootstrap on its first call.
  const Params& coll_params() const { return coll_shape().params; }
  // The algorithms RMP_<COLL>_ALGO forces, rank 0's for the same reason (with this rank's,
  // different ones would run different algorithms and wait for each other forever).
  const ForcedAlgos& coll_algos() const { return coll_shape().algos; }
  // RMP_COLL_CHECK, rank 0's: whether every collective first checks that all ranks called it
  // alike (ranks checking and ranks not checking would wait for each other forever).
  bool coll_check() const { return coll_shape().check; }
  // Ranks per core on rank 0's node (1 when they have cores of their own), rank 0's for the
  // same reason: the formulas and the node-shared paths' choices depend on it.
  double coll_ranks_per_core() const { return coll_shape().ranks_per_core; }
  const ParamSet& param_set() const { return params_; }
  const EnvSettings& settings() const { return settings_; }
  // How the link figures were obtained (measured or why not); valid after start().
  const Calibration& calibration() const { return calibration_; }
  std::vector<ParamInfo> effective_params(std::string_view transport) const;
  Counters& counters() { return counters_; }
  // Huge pages under buffers other ranks of this node read or write by cross-memory attach
  // (RMP_SHM_HUGEPAGES; runtime/huge_pages.hpp): null when off, or before start().
  HugePages* huge_pages() { return huge_pages_.get(); }
  bool oversubscribed() const { return oversubscribed_; }
  // This node's ranks per core: local ranks over cores when oversubscribed, else 1.
  double ranks_per_core() const {
    return oversubscribed_ ? static_cast<double>(id().local_size) / local_cores_ : 1.0;
  }
  // Cores this node's ranks share (the launcher's count, else the CPUs of this process's
  // affinity mask).
  int local_cores() const { return local_cores_; }

  // Endpoint of `peer` (a world rank), connected on first use through the first transport
  // that reaches it. Throws rmp::Error(transport) when none does.
  Endpoint& endpoint(int peer) {
    Endpoint* e = endpoints_[static_cast<std::size_t>(peer)];
    return e ? *e : connect(peer);
  }

  // The smallest eager buffer (TransportCaps::max_am_payload) of the transports that carry
  // traffic to other ranks, or 0 when there is none (a single rank).
  std::size_t eager_buffer_bytes() const { return shm_ ? shm_->caps().max_am_payload : 0; }

  // Polls every transport once; returns the number of events handled.
  int progress() {
    int n = shm_ ? shm_->progress() : 0;
    if (self_->may_have_work()) n += self_->progress();
    return n;
  }

  // Called by a waiting loop each time progress() found nothing: spins for spin_us, then
  // yields on every call (or sleeps briefly in `block` mode) so that oversubscribed ranks
  // share cores.
  class Idle {
  public:
    explicit Idle(Context& c) : c_(c) {}
    void operator()();
    void reset() { idle_ = 0, spun_ = false, nap_.restart(); }
    // Called by a blocking wait every 256th poll that found nothing to do: a wait that has
    // found nothing to do for NapClock::kAfter (from that first tick, ~25-250 us into it when
    // polling) lets its core go for a moment, and again every kAfter (runtime/spin.hpp), in
    // wait modes poll and yield; block sleeps anyway. Progress restarts the count, so a wait
    // that keeps receiving from other ranks does not nap: a spinner holds its core as long as
    // that stream lasts, plus kAfter.
    void long_wait_tick();
    // Whether operator() gives the core away once spin_us has passed (wait mode yield or
    // block, as when ranks outnumber cores).
    bool yields() const { return c_.params().wait_mode != WaitMode::poll; }
    // Instead of operator(), when the caller knows that the ranks it waits for are running on
    // other cores right now: keeps the core and polls, up to kKeepCore × spin_us since the
    // wait began, then behaves as operator(). Giving the core away would only hand it to a
    // rank that is itself waiting, and each such switch between processes costs ~2 us on
    // this project's VMs. The window bounds what a wrong guess costs: a rank that moved to
    // this core and is queued behind us still shows the core it left. 8 ranks on 2 cores,
    // bcast of 1 MiB: at 20 the readers gave the core away during the root's 512 KiB copies
    // (280 us a call against 180 at 100 and beyond); with 64 KiB chunks a wrong guess costs
    // 930 us a call at 20, 2.6 ms at 100, 8.2 ms at 300 (and 80 ms when the window never
    // closed).
    void keep_core();
    static constexpr double kKeepCore = 100;
    // Instead of operator(), when the caller knows that a rank it waits for is queued behind
    // this one on the same core: yields at once, without spinning first.
    void give_core();

    // What a waiting caller knows of the ranks it waits for (asked only when yields()).
    enum class Awaited : std::uint8_t {
      unknown,    // operator()
      elsewhere,  // all running on other cores: keep_core()
      behind_us,  // one of them queued on this core: give_core()
    };
    void operator()(Awaited a) {
      if (a == Awaited::unknown) return (*this)();
      if (a == Awaited::elsewhere) return keep_core();
      give_core();
    }

  private:
    Context& c_;
    std::uint64_t idle_ = 0;
    bool spun_ = false;  // spin_us has passed: yield on every idle poll
    std::chrono::steady_clock::time_point since_;
    NapClock nap_;
  };

  // RMP_STATS at finalize: the counters as a line on stderr (1) or a JSON file (json:PATH);
  // a file that cannot be written is a warning naming RMP_STATS.
  void report_stats() const;

private:
  Endpoint& connect(int peer);
  static TransportLimits shm_limits(std::size_t am_header_bytes);
  struct CollShape {
    Params params;
    ForcedAlgos algos;
    bool check;
    double ranks_per_core;
  };

  const CollShape& coll_shape() const;

  std::unique_ptr<Bootstrap> boot_;
  std::optional<PeerFailure> failure_;
  std::chrono::steady_clock::time_point next_failure_poll_{};
  std::size_t am_header_bytes_ = 0;
  ParamSet params_;
  mutable std::optional<CollShape> coll_shape_;
  Calibration calibration_;
  EnvSettings settings_;
  Counters counters_;
  bool oversubscribed_ = false;
  int local_cores_ = 1;
  std::string stats_path_;  // RMP_STATS=json:PATH expanded for this rank; "" otherwise
  std::unique_ptr<HugePages> huge_pages_;  // before the transports, which point to it
  std::unique_ptr<Transport> self_, shm_;
  std::vector<Endpoint*> endpoints_;  // by world rank; null until first use
};

// The process's default context (set by Environment); nullptr outside it.
Context* default_context();
void set_default_context(Context* c);

}  // namespace rmp::rt
