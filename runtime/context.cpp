#include "runtime/context.hpp"

#include <sched.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <thread>

#include <rmp/rmp.hpp>

#include "runtime/copy.hpp"
#include "runtime/cpu_place.hpp"
#include "runtime/huge_pages.hpp"
#include "runtime/log.hpp"
#include "runtime/spin.hpp"
#include "runtime/stats_path.hpp"
#include "runtime/transport/self/self_transport.hpp"
#include "runtime/transport/shm/shm_calibration.hpp"
#include "runtime/transport/shm/shm_transport.hpp"

namespace rmp::rt {
namespace {

Context* g_default = nullptr;

constexpr auto kAddressTimeout = std::chrono::seconds(120);

// Rank 0's values that shape a collective (Context::coll_params, coll_algos, coll_check), as
// a line of unsigned integers (the doubles by their bits: text in the locale's own notation
// would not parse in a rank that changed its locale).
constexpr std::string_view kCollParamsKey = "coll-params";

std::uint64_t bits_of(double d) { return std::bit_cast<std::uint64_t>(d); }

std::vector<std::byte> encode_coll_params(const Params& p, const ForcedAlgos& algos, bool check,
                                          double ranks_per_core) {
  std::vector<std::uint64_t> v = {p.fragment_size,
                                  p.pipeline_depth,
                                  p.eager_threshold,
                                  bits_of(p.link_bw),
                                  bits_of(p.link_rtt_us),
                                  bits_of(p.copy_bw),
                                  static_cast<std::uint64_t>(p.allreduce_compress),
                                  check ? 1u : 0u,
                                  bits_of(p.get_bw),
                                  bits_of(p.rndv_setup_us),
                                  bits_of(ranks_per_core)};
  for (signed char a : algos) v.push_back(static_cast<std::uint64_t>(a + 1));  // 0 = not forced
  std::string text;
  for (std::uint64_t x : v) text += (text.empty() ? "" : " ") + std::to_string(x);
  const auto* b = reinterpret_cast<const std::byte*>(text.data());
  return {b, b + text.size()};
}

void decode_coll_params(const std::vector<std::byte>& bytes, Params& p, ForcedAlgos& algos,
                        bool& check, double& ranks_per_core) {
  const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::vector<std::uint64_t> v;
  for (const char* at = text.data(); at != text.data() + text.size();) {
    std::uint64_t x = 0;
    const auto [end, ec] = std::from_chars(at, text.data() + text.size(), x);
    if (ec != std::errc()) break;
    v.push_back(x);
    at = end;
    if (at != text.data() + text.size() && *at++ != ' ') break;
  }
  constexpr std::size_t kFixed = 11;  // the values before the forced algorithms
  bool ok = v.size() == kFixed + algos.size() &&
            v[6] <= static_cast<std::uint64_t>(Compression::bf16) && v[7] <= 1 &&
            std::bit_cast<double>(v[10]) >= 1;
  for (std::size_t k = 0; ok && k < algos.size(); ++k)
    ok = v[kFixed + k] <= kCollAlgorithms[k].algos.size();
  if (!ok)
    throw Error(Errc::internal,
                "bootstrap: rank 0's collective parameters are malformed: '" + text + "'");
  p.fragment_size = v[0];
  p.pipeline_depth = v[1];
  p.eager_threshold = v[2];
  p.link_bw = std::bit_cast<double>(v[3]);
  p.link_rtt_us = std::bit_cast<double>(v[4]);
  p.copy_bw = std::bit_cast<double>(v[5]);
  p.allreduce_compress = static_cast<Compression>(v[6]);
  check = v[7] != 0;
  p.get_bw = std::bit_cast<double>(v[8]);
  p.rndv_setup_us = std::bit_cast<double>(v[9]);
  ranks_per_core = std::bit_cast<double>(v[10]);
  for (std::size_t k = 0; k < algos.size(); ++k)
    algos[k] = static_cast<signed char>(static_cast<int>(v[kFixed + k]) - 1);
}

// Address record published through bootstrap: a list of (transport id, length, bytes).
enum class TransportId : std::uint8_t { shm = 1 };

std::size_t next_pow2(std::size_t v) { return std::bit_ceil(std::max<std::size_t>(v, 1)); }

// Bytes of shared memory the shm rings may take on this node: a sixteenth of its memory and
// half of what /dev/shm has free, whichever is less (0 where either is unknown).
std::size_t shm_budget_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  struct statvfs fs {};
  if (::statvfs("/dev/shm", &fs) != 0) return 0;
  return std::min(static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) / 16,
                  static_cast<std::size_t>(fs.f_bavail) * fs.f_frsize / 2);
}

// A core's private cache (its L2), as the C library reads it from the CPU; 1 MiB where it says
// nothing. Within 256 KiB - 8 MiB: a ring twice its size is mapped for every pair of ranks.
std::size_t private_cache_bytes() {
  const long v = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
  constexpr std::size_t kUnknown = std::size_t{1} << 20;
  return v > 0 ? std::clamp<std::size_t>(static_cast<std::size_t>(v), std::size_t{1} << 18,
                                         std::size_t{1} << 23)
               : kUnknown;
}

}  // namespace

Context* default_context() { return g_default; }
void set_default_context(Context* c) { g_default = c; }

Counters& counters() {
  if (!g_default) throw Error(Errc::invalid_comm, "rmp::rt::counters: rmp is not initialised");
  return g_default->counters();
}

Context::Context(std::unique_ptr<Bootstrap> boot) : boot_(std::move(boot)) {
  ParamsInput in = params_input_from_environment();
  settings_ = resolve_env_settings(in);
  set_log(settings_.log_level, id().rank);
  // rlaunch counts the cores within its own CPU binding (taskset, a batch system's cpuset);
  // the machine's CPU count would call ranks crowded onto fewer cores not oversubscribed.
  // Without rlaunch's count: the CPUs this process may run on (taskset included).
  const long cores = id().local_cores > 0 ? id().local_cores
                     : usable_cpus() > 0  ? usable_cpus()
                                          : ::sysconf(_SC_NPROCESSORS_ONLN);
  local_cores_ = cores > 0 ? static_cast<int>(cores) : id().local_size;  // unknown: not crowded
  oversubscribed_ = id().local_size > local_cores_;
  endpoints_.assign(static_cast<std::size_t>(id().size), nullptr);
  // Checked at start-up, so that a typo is reported before the job runs, not lost at finalize.
  if (settings_.stats.starts_with("json:"))
    stats_path_ = checked_stats_path(settings_.stats, rank(), size(), id().job_id);
}

const Context::CollShape& Context::coll_shape() const {
  if (!coll_shape_) {
    CollShape c{params(), settings_.coll_algo, settings_.coll_check, ranks_per_core()};
    if (id().size > 1 && id().rank != 0)
      decode_coll_params(
          boot_->get(kCollParamsKey,
                     std::chrono::duration_cast<std::chrono::milliseconds>(kAddressTimeout)),
          c.params, c.algos, c.check, c.ranks_per_core);
    coll_shape_ = c;
  }
  return *coll_shape_;
}

TransportLimits Context::shm_limits(std::size_t am_header_bytes) {
  TransportLimits l = declared_limits("shm");
  const TransportCaps caps = shm_static_caps();
  // What fits in one ring line after the line header and the upper layer's header.
  l.single_unit_inline = caps.single_unit_inline > am_header_bytes
                             ? caps.single_unit_inline - am_header_bytes
                             : 0;
  l.max_inline = caps.max_inline > am_header_bytes ? caps.max_inline - am_header_bytes : 0;
  l.min_pipeline_depth = caps.min_pipeline_depth;
  l.get_fill_bytes = caps.get_fill_bytes;
  return l;
}

Context::~Context() {
  endpoints_.clear();
  shm_.reset();
  self_.reset();
}

void Context::start(AmSink& sink, std::size_t am_header_bytes) {
  ParamsInput in = params_input_from_environment();
  in.transport = "shm";
  in.limits = settled_limits(shm_limits(am_header_bytes), "shm", settings_);
  in.oversubscribed = oversubscribed_;
  // Both set and at odds: RMP_SHM_CMA=0 wins (as cross-memory attach refused by ptrace rules
  // does), said once, not settled quietly (job scripts may set one and a site profile the
  // other, so it is no error).
  if (!settings_.shm_cma &&
      (settings_.shm_copy == ShmCopy::single || settings_.shm_copy == ShmCopy::split) &&
      id().rank == 0)
    log_warn(std::string("RMP_SHM_COPY=") +
             (settings_.shm_copy == ShmCopy::single ? "single" : "split") +
             " needs cross-memory attach, which RMP_SHM_CMA=0 forbids: copying through shared "
             "chunks instead");
  // Link figures first: every formula below reads them, and all ranks must agree on them.
  const ShmConfig::Copy copy = settings_.shm_copy == ShmCopy::single   ? ShmConfig::Copy::single
                               : settings_.shm_copy == ShmCopy::chunks ? ShmConfig::Copy::chunks
                               : settings_.shm_copy == ShmCopy::split  ? ShmConfig::Copy::split
                               : settings_.shm_copy == ShmCopy::streaming
                                   ? ShmConfig::Copy::streaming
                                   : ShmConfig::Copy::automatic;
  calibration_ = calibrate_shm(*boot_, ShmCalibrationOptions{.enabled = settings_.calibrate,
                                                             .cma = settings_.shm_cma,
                                                             .streaming = shm_may_stream(copy),
                                                             .wait_for_cores = oversubscribed_});
  in.calibrated = calibration_.figures;
  in.not_calibrated_reason = calibration_.reason;
  params_ = resolve_params(in);
  am_header_bytes_ = am_header_bytes;
  self_ = make_self_transport(id().rank, sink);
  std::vector<std::byte> address;
  const auto& listed = settings_.transports;  // RMP_TRANSPORTS; empty: every one that starts
  if (id().local_size > 1 && !listed.empty() &&
      std::find(listed.begin(), listed.end(), "shm") == listed.end()) {
    std::string names;
    for (const std::string& t : listed) names += (names.empty() ? "" : ",") + t;
    throw Error(Errc::transport,
                "RMP_TRANSPORTS=" + names + ": no listed transport reaches the other " +
                    std::to_string(id().local_size - 1) +
                    " ranks on this node (this build has self and shm; tcp is not implemented "
                    "yet and verbs is not built): list shm");
  }
  if (id().local_size > 1) {
    const Params& p = params_.values;
    ShmConfig cfg;
    cfg.ring_lines = next_pow2(std::max<std::size_t>(p.sq_depth, 64));
    // Rings of payloads and of chunks span at least twice a core's private cache, so that a
    // part of either is written again only after its lines have left the reader's cache (while
    // they are there, every store into them waits for the reader's core to give the line up).
    // Eager windows, cores near, 5 interleaved pairs, a 2 MiB byte ring against 1 MiB (this
    // host's L2): bandwidth of 4, 16 and 32 KiB 1.39x, 2.3x and 1.39x, bidirectional 1.4x, 1.67x
    // and 1.28x, latency alike. Chunks: shm_transport.cpp (ring_chunks).
    // Only while every pair of the node's ranks, each with two rings of each kind that large,
    // fits in a sixteenth of the node's memory and in half of what /dev/shm has free (pair
    // segments are reserved and populated when mapped, an alltoall maps them all, and a
    // container's /dev/shm may hold 64 MiB): 128 ranks on a node take 8128 pairs.
    const std::size_t pairs = static_cast<std::size_t>(id().local_size) *
                              static_cast<std::size_t>(id().local_size - 1) / 2;
    const std::size_t wide = next_pow2(2 * private_cache_bytes());
    const std::size_t ring = pairs * 4 * wide <= shm_budget_bytes() ? wide : 0;
    // The byte ring holds what the eager credit lets a sender have in flight (rq_depth ×
    // eager_threshold), up to 1 MiB, at least four of the largest eager messages (and 64 KiB),
    // and `ring` (the eager credit then covers `ring` too: p2p/engine.cpp). A ring that held only
    // four let a window of 16-64 KiB sends stall on it: with 1 MiB instead of 512 KiB, bandwidth at
    // 16 and 64 KiB rose 1.3x (two cores near, interleaved, 10 pairs) and 4-64 KiB latency did not
    // suffer.
    const std::size_t eager = std::max<std::size_t>(p.eager_threshold, 1);
    cfg.data_bytes = next_pow2(std::max({std::min(p.rq_depth * eager, std::size_t(1) << 20),
                                         4 * eager, std::size_t(1) << 16, ring}));
    // Chunk geometry of the pipelined copy: fragment_size × pipeline_depth, clamped to what a
    // pair segment may reasonably hold (each pair maps 2 × nchunks × chunk_bytes).
    cfg.chunk_bytes = std::clamp<std::size_t>(p.fragment_size, 4096, std::size_t(1) << 20);
    cfg.nchunks = std::clamp<std::size_t>(p.pipeline_depth, 2, 16);
    // And a ring of at least `ring` bytes (shm_transport.cpp: ring_chunks).
    cfg.ring_bytes = ring;
    cfg.tune = p.tune_adaptive;
    cfg.cma = settings_.shm_cma;
    if (settings_.shm_cma && settings_.shm_hugepages)
      huge_pages_ = std::make_unique<HugePages>(true);
    cfg.huge_pages = huge_pages_.get();
    cfg.copy = copy;
    shm_ = make_shm_transport(id(), cfg, sink, counters_);
    std::vector<std::byte> a = shm_->address();
    address.push_back(static_cast<std::byte>(TransportId::shm));
    address.push_back(static_cast<std::byte>(a.size()));
    address.insert(address.end(), a.begin(), a.end());
  }
  if (id().size > 1) boot_->put("addr/" + std::to_string(id().rank), address);
  if (id().size > 1 && id().rank == 0)
    boot_->put(kCollParamsKey, encode_coll_params(params(), settings_.coll_algo,
                                                  settings_.coll_check, ranks_per_core()));

  // connect=eager: pre-warm every peer now (on shm: map every pair segment), so that no
  // first message pays for it. Needs only the peers' addresses, not their progress.
  if (params_.values.connect_eager)
    for (int peer = 0; peer < id().size; ++peer)
      if (peer != id().rank && !endpoints_[static_cast<std::size_t>(peer)]) connect(peer);
  if (settings_.print_params && id().rank == 0) {
    std::string t =
        "shm calibration: " +
        (calibration_.figures ? std::string("measured")
                              : "declared figures (" + calibration_.reason + ")") +
        ", " + std::to_string(static_cast<long>(calibration_.took_us)) + " us\n" +
        // Which kernel rank 0's large copies take (runtime/copy.cpp times both).
        "data copies: " +
        (copy_large_uses_movsb()
             ? "rep movsb (as fast as the vector loop; the loop near the 4 KiB aliasing cliff "
               "and out of memory a peer wrote)"
             : "vector loop") +
        "\n" + format_params(params_, false);
    std::fwrite(t.data(), 1, t.size(), stdout);
    std::fflush(stdout);
  }
}

Endpoint& Context::connect(int peer) {
  Endpoint* e = nullptr;
  if (peer == id().rank) {
    e = self_->connect(peer, {});
  } else {
    std::vector<std::byte> addr =
        boot_->get("addr/" + std::to_string(peer),
                   std::chrono::duration_cast<std::chrono::milliseconds>(kAddressTimeout));
    for (std::size_t i = 0; i + 2 <= addr.size() && !e;) {
      const auto tid = static_cast<TransportId>(addr[i]);
      const std::size_t len = static_cast<std::size_t>(addr[i + 1]);
      std::span<const std::byte> blob(addr.data() + i + 2, std::min(len, addr.size() - i - 2));
      if (tid == TransportId::shm && shm_) e = shm_->connect(peer, blob);
      i += 2 + len;
    }
  }
  if (!e)
    throw Error(Errc::transport,
                "no transport reaches rank " + std::to_string(peer) + " from rank " +
                    std::to_string(id().rank) +
                    " (only self and shm exist yet: ranks on other nodes need tcp or verbs)");
  endpoints_[static_cast<std::size_t>(peer)] = e;
  ++counters_.endpoints;
  return *e;
}

std::vector<ParamInfo> Context::effective_params(std::string_view transport) const {
  if (transport.empty() || transport == "shm") return params_.rows;
  ParamsInput in = params_input_from_environment();
  in.transport = std::string(transport);
  in.limits = settled_limits(declared_limits(transport), transport, settings_);  // not shm: above
  in.not_calibrated_reason = "no " + in.transport + " calibration yet";
  in.oversubscribed = oversubscribed_;
  return resolve_params(in).rows;
}

void Context::Idle::operator()() {
  const Params& p = c_.params();
  // Busy-polling (ranks have cores of their own): no pause between polls, which only delays
  // seeing the line another core wrote (8-byte ping-pong, cores near, 14 interleaved pairs:
  // 0.176 us with the pause, 0.164 without).
  if (p.wait_mode == WaitMode::poll) return;
  using Clock = std::chrono::steady_clock;
  if (idle_++ == 0) {
    since_ = Clock::now();
    return;
  }
  // Look at the clock only every few polls: it costs ~20 ns.
  const bool look = (idle_ & 15) == 0;
  if (!spun_) {
    if (!look) {
      cpu_relax();
      return;
    }
    if (Clock::now() - since_ < std::chrono::duration<double, std::micro>(p.spin_us)) return;
    spun_ = true;
  }
  // Past spin_us every idle poll gives the core away, not every few: when ranks outnumber
  // cores, the rank this one waits for may be queued behind it on the same core.
  if (p.wait_mode == WaitMode::block && look &&
      Clock::now() - since_ > std::chrono::milliseconds(1)) {
    // Long idle periods: let the core go entirely for a short while.
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    count_shared(c_.counters().idle_sleeps, 1);
    nap_.restart();
    return;
  }
  ::sched_yield();
  count_shared(c_.counters().idle_yields, 1);
}

void Context::Idle::keep_core() {
  using Clock = std::chrono::steady_clock;
  if (idle_++ == 0) {
    since_ = Clock::now();
    return;
  }
  if (!spun_) {
    if ((idle_ & 15) != 0 || Clock::now() - since_ < std::chrono::duration<double, std::micro>(
                                                         kKeepCore * c_.params().spin_us)) {
      cpu_relax();
      return;
    }
    // The window is over (and spin_us with it): from now on give the core away on every idle
    // poll, as operator() does past spin_us. (Handing over to operator() without saying so
    // gave nothing away: it looks at the clock only every 16th poll, and keep_core called it
    // only on such a poll, which operator()'s own count had moved past. A rank that kept its
    // core while the rank it waited for was queued behind it waited for the time slice to
    // end: 5 ms a round of a chunked bcast at 8 ranks on 2 cores, where a rank's CPU line
    // still named the core it had left.)
    spun_ = true;
  }
  (*this)();
}

const PeerFailure* Context::peer_failure() {
  if (!failure_) {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_failure_poll_) return nullptr;
    next_failure_poll_ = now + std::chrono::milliseconds(1);
    failure_ = boot_->poll_peer_failure();
    if (!failure_) return nullptr;
  }
  return &*failure_;
}

void Context::Idle::long_wait_tick() {
  if (nap_.tick()) count_shared(c_.counters().idle_naps, 1);
}

void Context::Idle::give_core() {
  ::sched_yield();
  count_shared(c_.counters().idle_yields, 1);
}

void Context::report_stats() const {
  if (stats_path_.empty()) {
    const std::string s = format_stats_text(counters_, rank());
    std::fwrite(s.data(), 1, s.size(), stderr);
    return;
  }
  const std::string s = format_stats_json(counters_, rank(), size(), id().job_id);
  std::FILE* f = std::fopen(stats_path_.c_str(), "w");
  bool ok = f && std::fwrite(s.data(), 1, s.size(), f) == s.size();
  int err = errno;
  if (f && std::fclose(f) != 0 && ok) ok = false, err = errno;
  if (!ok)
    log_warn("RMP_STATS=" + settings_.stats + ": cannot write " + stats_path_ + ": " +
             std::strerror(err) + "; counters not saved");
}

}  // namespace rmp::rt
