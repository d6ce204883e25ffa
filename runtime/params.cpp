// The knob table (DESIGN §5, STYLE "Knobs in one table"): every tunable declared once — type,
// unit, default, range, profile values, formula, what it means on each transport, help — and
// the resolver that picks each knob's value from cli > env > profile > formula > default
// (link figures: cli > env > calibrated > default), recording where it came from.
#include "runtime/params.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <span>
#include <type_traits>
#include <utility>
#include <variant>

#include "runtime/bootstrap/wire.hpp"

extern char** environ;  // POSIX; not declared by any standard C++ header

namespace rmp::rt {
namespace {

// ---------------------------------------------------------------------------------------------
// Vocabulary of the table

// Knob identities, in table (= display) order. The table below is checked at compile time to
// list them in exactly this order, so kKnobs[index(k)] is knob k.
enum class Knob : std::size_t {
  lanes,
  sq_depth,
  rq_depth,
  cq_depth,
  srq,
  srq_size,
  inline_threshold,
  eager_threshold,
  fragment_size,
  header_overhead,
  pipeline_depth,
  signal_interval,
  signal_size,
  rndv_read_contexts,
  spin_us,
  wait_mode,
  connect,
  traffic_class,
  link_bw,
  link_rtt_us,
  expected_concurrency,
  post_recv_per_s,
  max_rtt_ms,
  srq_safety,
  copy_bw,
  get_bw,
  rndv_setup_us,
  tune,
  allreduce_compress,
  count  // also "none" where a table field may name a knob
};
constexpr std::size_t kKnobCount = static_cast<std::size_t>(Knob::count);
constexpr std::size_t index(Knob k) { return static_cast<std::size_t>(k); }

// size: unsigned integer (K/M/G suffixes accepted); real: decimal number; choice and flag:
// one word out of `choices`, stored as its index (flag = the two-word choice off|on).
enum class Type : std::uint8_t { size, real, choice, flag };

constexpr std::size_t kTransportCount = 4;
constexpr std::array<std::string_view, kTransportCount> kTransportNames{"self", "shm", "tcp",
                                                                        "verbs"};
constexpr std::size_t kProfileCount = 3;
constexpr std::array<std::string_view, kProfileCount> kProfileNames{"latency", "storage",
                                                                    "training"};

// Choice words; a value's index is what the table stores and what Params receives.
constexpr std::string_view kOffOn[] = {"off", "on"};
constexpr std::string_view kWaitModes[] = {"poll", "yield", "block"};
constexpr std::string_view kConnectModes[] = {"lazy", "eager"};  // index 1 == connect_eager
constexpr std::string_view kTuneModes[] = {"static", "adaptive"};  // index 1 == tune_adaptive
constexpr std::string_view kCompressions[] = {"none", "fp16", "bf16"};
constexpr double kOn = 1, kPoll = 0, kYield = 1, kLazy = 0;
static_assert(static_cast<int>(Compression::none) == 0 && static_cast<int>(Compression::fp16) == 1 &&
                  static_cast<int>(Compression::bf16) == 2,
              "kCompressions must list rmp::Compression in its declaration order");
static_assert(static_cast<int>(WaitMode::poll) == kPoll &&
                  static_cast<int>(WaitMode::yield) == kYield &&
                  static_cast<int>(WaitMode::block) == 2,
              "kWaitModes must list WaitMode in its declaration order");

class Resolver;
using Formula = double (*)(Resolver&);

// A lower bound a knob must respect whatever set it. A profile value below it is raised (the
// source becomes formula); an explicit env/cli value below it is an error when the bound is
// about correctness (binds_explicit), else it is kept with a note.
struct Invariant {
  Formula lower_bound = nullptr;
  std::string_view bound_name;  // how messages name the bound
  std::string_view why;
  bool binds_explicit = true;
};

using Field = std::variant<std::size_t Params::*, double Params::*, bool Params::*, int Params::*,
                           WaitMode Params::*, Compression Params::*>;

template <class T>
using PerTransport = std::array<T, kTransportCount>;                  // self, shm, tcp, verbs
using PerProfile = std::array<std::optional<double>, kProfileCount>;  // latency, storage, training

struct KnobDef {
  Knob id;
  std::string_view name;
  Type type;
  std::string_view unit;
  Field field;                  // where the effective value goes in Params
  double default_value = 0;     // choice/flag: index into choices; unused when formula is set
  double min = 0, max = 0;      // allowed range (numeric knobs)
  Knob min_plus = Knob::count;  // when set, the minimum is that knob's value + min
  std::span<const std::string_view> choices = {};
  PerProfile profile = {};                            // DESIGN §5 profile table; nullopt = not set
  Formula formula = nullptr;                          // fills the knob when nothing above sets it
  std::string_view formula_text = {};                 // the formula as the reference shows it
  PerTransport<std::optional<double>> declared = {};  // per-transport default (link figures)
  double LinkFigures::*calibrated = nullptr;  // measured at start-up; outranks profile/default
  std::size_t TransportLimits::*hard_limit = nullptr;  // values above it are clamped
  Invariant invariant = {};
  PerTransport<std::string_view> meaning = {};  // what it means there; empty = n/a
  std::string_view help = {};
};

// The one place that says how the effective value of a knob is found; declared here so that
// the formulas in the table can call it.
class Resolver {
public:
  Resolver(const ParamsInput& in, std::optional<std::size_t> profile,
           std::optional<std::size_t> transport)
      : in_(in), profile_(profile), transport_(transport) {}

  double get(Knob k);  // resolved on first use
  std::size_t size(Knob k) { return static_cast<std::size_t>(get(k)); }
  std::size_t lanes_in_use();  // 1 where lanes are n/a
  const TransportLimits& limits() const { return in_.limits; }
  bool oversubscribed() const { return in_.oversubscribed; }
  bool applies(const KnobDef& d) const { return !transport_ || !d.meaning[*transport_].empty(); }

  struct Resolved {
    double value = 0;
    Source source = Source::default_value;
    std::string note;
  };
  const Resolved& resolved(Knob k) {
    get(k);
    return slots_[index(k)].result;
  }

private:
  struct Range {
    double min, max;
  };
  struct Explicit {
    double value;
    Source source;
    std::string who;  // "RMP_CQ_DEPTH" or "--param cq_depth", for messages
    std::string text;
  };
  enum class State : std::uint8_t { pending, resolving, done };
  struct Slot {
    State state = State::pending;
    Resolved result;
    // An implicit link figure, or a value computed from one: calibration at start-up may
    // change it (rlaunch judges settings before that).
    bool follows_link = false;
  };

  void resolve(Knob k);
  Range range_of(const KnobDef& d);
  std::optional<Explicit> explicit_value(const KnobDef& d, Range range);

  const ParamsInput& in_;
  std::optional<std::size_t> profile_;
  std::optional<std::size_t> transport_;
  std::array<Slot, kKnobCount> slots_{};
  // Set when get() returned a value that follows the link figures (see Slot): read around a
  // resolve and an invariant's bound.
  bool follows_link_read_ = false;
};

// Rounds a formula result up. The tiny relative slack absorbs the last-bit error of decimal
// factors (10 × 1.2 is 12.000000000000002 in binary), which would otherwise add one.
double round_up(double x) { return std::ceil(x - std::abs(x) * 1e-12); }

std::size_t to_size(double x) {
  constexpr double kMax = 9.0e15;  // integers stay exact in a double below 2^53
  return x <= 0 ? 0 : static_cast<std::size_t>(std::min(x, kMax));
}

// ---------------------------------------------------------------------------------------------
// The table

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;

// Laid out by hand, a few fields a line, so that a knob reads as one block.
// clang-format off
constexpr std::array<KnobDef, kKnobCount> kKnobs{{
    {.id = Knob::lanes, .name = "lanes", .type = Type::size, .unit = "", .field = &Params::lanes,
     .default_value = 1, .min = 1, .max = 16,
     .profile = {1.0, 8.0, 4.0},
     .meaning = {"", "", "connections per peer", "queue pairs per peer"},
     .help = "Parallel channels per peer (1-16). Lane 0 carries control and eager traffic in "
             "order; rendezvous payload is striped over lanes 1..n-1."},
    {.id = Knob::sq_depth, .name = "sq_depth", .type = Type::size, .unit = "entries",
     .field = &Params::sq_depth, .min = 1, .max = 32768,
     .profile = {128.0, 1024.0, 768.0},
     .formula = [](Resolver& r) -> double {
       return static_cast<double>(sq_depth_formula(r.size(Knob::expected_concurrency),
                                                   r.size(Knob::pipeline_depth), r.lanes_in_use()));
     },
     .formula_text = "max(expected_concurrency x 1.2, pipeline_depth x lanes)",
     .meaning = {"", "ring slots per peer", "frames queued per connection", "send WRs per QP"},
     .help = "Send queue depth (1-32768): sends a lane may have outstanding before further "
             "ones are queued."},
    {.id = Knob::rq_depth, .name = "rq_depth", .type = Type::size, .unit = "entries",
     .field = &Params::rq_depth, .min = 1, .max = 65536,
     .formula = [](Resolver& r) -> double {
       return static_cast<double>(rq_depth_formula(r.size(Knob::sq_depth)));
     },
     .formula_text = "sq_depth x 1.5",
     .meaning = {"", "eager credits per peer", "eager credits per peer",
                 "receive WRs (eager credits) per peer"},
     .help = "Receive credits per peer (1-65536): eager messages a sender may have in flight "
             "before it waits for the receiver to return credits."},
    {.id = Knob::cq_depth, .name = "cq_depth", .type = Type::size, .unit = "entries",
     .field = &Params::cq_depth, .min = 1, .max = 4194304,
     .profile = {256.0, 2048.0, std::nullopt},
     .formula = [](Resolver& r) -> double {
       return static_cast<double>(cq_depth_formula(r.get(Knob::post_recv_per_s),
                                                   r.get(Knob::max_rtt_ms), r.size(Knob::sq_depth),
                                                   r.size(Knob::rq_depth)));
     },
     .formula_text = "max(32, post_recv_per_s x max_rtt_ms / 1000, sq_depth + rq_depth)",
     .invariant = {.lower_bound = [](Resolver& r) -> double {
                     return r.get(Knob::sq_depth) + r.get(Knob::rq_depth);
                   },
                   .bound_name = "sq_depth + rq_depth",
                   .why = "a lane's CQ must hold all its send and receive completions"},
     .meaning = {"", "", "", "CQ entries per lane"},
     .help = "Completion queue depth (1-4194304, at least sq_depth + rq_depth so the CQ cannot "
             "overflow)."},
    {.id = Knob::srq, .name = "srq", .type = Type::flag, .unit = "", .field = &Params::srq,
     .default_value = kOn, .choices = kOffOn,
     .profile = {kOn, kOn, kOn},
     .meaning = {"", "", "", "receive buffers from one shared receive queue"},
     .help = "on|off: post receive buffers to a shared receive queue instead of one per peer, "
             "so memory grows with traffic, not with the number of peers."},
    {.id = Knob::srq_size, .name = "srq_size", .type = Type::size, .unit = "entries",
     .field = &Params::srq_size, .min = 1, .max = 4194304,
     .profile = {std::nullopt, 8192.0, std::nullopt},
     .formula = [](Resolver& r) -> double {
       return static_cast<double>(srq_size_formula(r.size(Knob::rq_depth), r.lanes_in_use(),
                                                   r.get(Knob::srq_safety)));
     },
     .formula_text = "rq_depth x lanes x srq_safety",
     .meaning = {"", "", "", "shared receive queue WRs"},
     .help = "Shared receive queue size (1-4194304)."},
    {.id = Knob::inline_threshold, .name = "inline_threshold", .type = Type::size,
     .unit = "bytes", .field = &Params::inline_threshold, .min = 0, .max = 1024,
     .profile = {256.0, 0.0, std::nullopt},
     .formula = [](Resolver& r) -> double {
       return static_cast<double>(r.limits().single_unit_inline);
     },
     .formula_text = "the transport's single-unit inline payload (shm: one cache line)",
     .hard_limit = &TransportLimits::max_inline,
     .meaning = {"", "payload carried in the ring lines themselves",
                 "payload carried in the header frame", "IBV_SEND_INLINE payload"},
     .help = "Messages up to this size travel inline with their header (0-1024; 0 = off). "
             "Values above the device's limit are clamped."},
    {.id = Knob::eager_threshold, .name = "eager_threshold", .type = Type::size, .unit = "bytes",
     .field = &Params::eager_threshold, .min = 0, .max = 1 * MiB,
     .formula = [](Resolver& r) -> double {
       return static_cast<double>(eager_threshold_formula(
           r.get(Knob::copy_bw), r.get(Knob::link_bw), r.get(Knob::get_bw),
           r.get(Knob::link_rtt_us), r.get(Knob::rndv_setup_us), r.limits().get_fill_bytes,
           r.limits().chunked_gets_only));
     },
     // Measured on shm (2 ranks, interleaved, near / far placement of the two cores): the
     // earlier form link_bw x (rtt + setup) gave ~30 KB near and ~12 KB far; eager up to 128
     // KiB was then 0.6-0.9x rendezvous's latency at 16-128 KiB near, while far eager above
     // ~16 KiB was 1.4-2.9x slower (the single copy outruns the cores' cache traffic there).
     // This form gives ~80 KB near and ~17 KB far from the same calibration.
     // With rndv_setup_us alone as the get's start (a 64-byte process_vm_readv, 2.7-3.6 us
     // here) it gave 237-340 KB with the cores near and 78-199 KB far, where eager and
     // rendezvous cross at 64-66 KB and 80-95 KB: a ping-pong's gets go through the chunks
     // (128 KiB: 590 of 646), which make no system call but pay their first piece through both
     // copies. With that start, the same calibrations give ~89 KB near and 53-103 KB far; jobs
     // after the change calibrated 75-91 KB near and 51-178 KB far (docs/performance.md, runs
     // of 2026-12-04 13:23-15:30). The start and get_bw may come from different mechanisms (the
     // chunks start first, the split copy may run fastest): no one mechanism's cost, an
     // empirical pairing; costing each mechanism on its own gave ~150 KB far.
     .formula_text = "(link_rtt_us + min(rndv_setup_us, 2 x get_fill_bytes / link_bw x 1e6)) / "
                     "1e6 / (1/copy_bw + 1/link_bw - 1/get_bw): where rendezvous's extra "
                     "handshake and start cost less than eager's extra copy (get_fill_bytes: "
                     "shm 16 KiB, 0 with RMP_SHM_COPY=single|split and cross-memory attach, whose "
                     "start is rndv_setup_us; where every get goes through the chunks, "
                     "RMP_SHM_CMA=0 or RMP_SHM_COPY=chunks|streaming, the piece alone, no "
                     "single copy's set-up)",
     .meaning = {"unexpected sends up to it are buffered", "eager-copy through ring slots",
                 "eager-copy through the socket", "eager-copy through bounce buffers"},
     .help = "Messages up to this size are copied eagerly; larger ones use rendezvous-get "
             "(0-1 MiB)."},
    {.id = Knob::fragment_size, .name = "fragment_size", .type = Type::size, .unit = "bytes",
     .field = &Params::fragment_size, .default_value = 128 * KiB, .min = 64, .max = 64 * MiB,
     .min_plus = Knob::header_overhead,
     // shm: the double copy through chunks ran at 12-19 GB/s with 128 KiB chunks and 28-35
     // GB/s with 512 KiB (1 and 4 MiB messages, two cores sharing a cache, this machine).
     .declared = {std::nullopt, 512 * KiB, std::nullopt, std::nullopt},
     .meaning = {"", "chunk size of the pipelined copy", "fragment of an emulated get",
                 "size of one RDMA read"},
     .help = "Rendezvous / segmented-collective fragment (header_overhead + 64 .. 64 MiB); "
             "plays the role of the MTU in the pipeline formula."},
    {.id = Knob::header_overhead, .name = "header_overhead", .type = Type::size,
     .unit = "bytes", .field = &Params::header_overhead, .default_value = 64, .min = 0,
     .max = 4096,
     .meaning = {"", "chunk header", "frame header", "per-fragment header"},
     .help = "Bytes of each fragment taken by headers (0-4096); only the rest carries data."},
    {.id = Knob::pipeline_depth, .name = "pipeline_depth", .type = Type::size,
     .unit = "fragments", .field = &Params::pipeline_depth, .min = 1, .max = 64,
     .formula = [](Resolver& r) -> double {
       return static_cast<double>(pipeline_depth_formula(
           r.get(Knob::link_bw), r.get(Knob::link_rtt_us) * 1e-6, r.size(Knob::fragment_size),
           r.size(Knob::header_overhead), r.limits().min_pipeline_depth));
     },
     .formula_text = "max(min_depth, link_bw x link_rtt / (fragment_size - header_overhead))",
     .meaning = {"", "chunks in flight", "fragments in flight", "RDMA reads in flight"},
     .help = "Fragments a rendezvous or segmented collective keeps in flight to fill the pipe "
             "(1-64)."},
    {.id = Knob::signal_interval, .name = "signal_interval", .type = Type::size,
     .unit = "sends", .field = &Params::signal_interval, .default_value = 16, .min = 1,
     .max = 1024,
     .meaning = {"", "", "", "every n-th small send is signalled"},
     .help = "Unsignalled small sends between two signalled ones (1-1024; keep it below "
             "sq_depth so the send queue is reclaimed in time)."},
    {.id = Knob::signal_size, .name = "signal_size", .type = Type::size, .unit = "bytes",
     .field = &Params::signal_size, .default_value = 8 * KiB, .min = 0, .max = 64 * MiB,
     .meaning = {"", "", "", "sends above it are always signalled"},
     .help = "Sends larger than this are signalled individually (0-64 MiB)."},
    {.id = Knob::rndv_read_contexts, .name = "rndv_read_contexts", .type = Type::size,
     .unit = "reads", .field = &Params::rndv_read_contexts, .min = 1, .max = 64,
     .profile = {std::nullopt, 16.0, 32.0},
     .formula = [](Resolver& r) -> double { return r.get(Knob::pipeline_depth); },
     .formula_text = "pipeline_depth",
     .hard_limit = &TransportLimits::max_rd_atom,
     .meaning = {"", "", "", "outstanding RDMA reads per QP (max_qp_rd_atom)"},
     .help = "RDMA reads outstanding per queue pair (1-64, clamped to the device's "
             "max_qp_rd_atom)."},
    {.id = Knob::spin_us, .name = "spin_us", .type = Type::real, .unit = "us",
     .field = &Params::spin_us, .min = 0, .max = 1e6,
     .profile = {1.0, std::nullopt, std::nullopt},
     .formula = [](Resolver& r) -> double { return spin_us_formula(r.get(Knob::link_rtt_us)); },
     .formula_text = "max(1, 2 x link_rtt_us)",
     .meaning = {"spin before wait_mode", "spin before wait_mode", "spin before wait_mode",
                 "spin before wait_mode (interrupt moderation)"},
     .help = "Time a waiting call polls before it yields or blocks (0-1e6 us)."},
    {.id = Knob::wait_mode, .name = "wait_mode", .type = Type::choice, .unit = "",
     .field = &Params::wait_mode, .choices = kWaitModes,
     .profile = {kPoll, kYield, kYield},
     .formula = [](Resolver& r) -> double { return r.oversubscribed() ? kYield : kPoll; },
     .formula_text = "poll, or yield when ranks outnumber cores",
     .invariant = {.lower_bound = [](Resolver& r) -> double {
                     return r.oversubscribed() ? kYield : kPoll;
                   },
                   .bound_name = "the oversubscribed minimum",
                   .why = "ranks spinning on shared cores starve each other",
                   .binds_explicit = false},
     .meaning = {"after spin_us", "after spin_us", "after spin_us", "after spin_us"},
     .help = "poll|yield|block: what a waiting call does after spin_us. Oversubscribed jobs "
             "never poll unless told to explicitly. A wait idle for 10 ms lets its core go for "
             "~70 us, and again every 10 ms (RMP_STATS: idle_naps)."},
    {.id = Knob::connect, .name = "connect", .type = Type::choice, .unit = "",
     .field = &Params::connect_eager, .default_value = kLazy, .choices = kConnectModes,
     .meaning = {"", "map pair segments at start", "open connections at start",
                 "connect QPs at start"},
     .help = "lazy|eager: connect peers on first use (scales to 100 000 ranks) or pre-warm "
             "every peer at start (small latency-critical jobs)."},
    {.id = Knob::traffic_class, .name = "traffic_class", .type = Type::size, .unit = "",
     .field = &Params::traffic_class, .default_value = 0, .min = 0, .max = 255,
     .meaning = {"", "", "IP_TOS", "GRH traffic class"},
     .help = "Traffic class / DSCP byte for the job's packets (0-255)."},
    {.id = Knob::link_bw, .name = "link_bw", .type = Type::real, .unit = "bytes/s",
     .field = &Params::link_bw, .default_value = 12.5e9, .min = 1e6, .max = 1e13,
     .declared = {std::nullopt, 20e9, std::nullopt, std::nullopt},
     .calibrated = &LinkFigures::bw_Bps,
     .meaning = {"", "copy bandwidth between ranks", "link bandwidth", "link bandwidth"},
     .help = "Link bandwidth (1e6-1e13 bytes/s): calibrated at start-up, else declared per "
             "transport. Feeds pipeline_depth."},
    {.id = Knob::link_rtt_us, .name = "link_rtt_us", .type = Type::real, .unit = "us",
     .field = &Params::link_rtt_us, .default_value = 2, .min = 0, .max = 1e6,
     .declared = {std::nullopt, 0.5, std::nullopt, std::nullopt},
     .calibrated = &LinkFigures::rtt_us,
     .meaning = {"", "round trip between ranks", "round trip", "round trip"},
     .help = "Round-trip time (0-1e6 us): calibrated at start-up, else declared per "
             "transport. Feeds pipeline_depth, spin_us, max_rtt_ms and, measured or set, the "
             "adaptive tuner's price of rendezvous streams."},
    {.id = Knob::expected_concurrency, .name = "expected_concurrency", .type = Type::size,
     .unit = "requests", .field = &Params::expected_concurrency, .default_value = 16, .min = 1,
     .max = 65536,
     .meaning = {"", "sizes sq_depth", "sizes sq_depth", "sizes sq_depth"},
     .help = "Requests a rank expects to have outstanding to one peer (1-65536); sizes "
             "sq_depth."},
    {.id = Knob::post_recv_per_s, .name = "post_recv_per_s", .type = Type::real, .unit = "1/s",
     .field = &Params::post_recv_per_s, .default_value = 1e6, .min = 0, .max = 1e9,
     .meaning = {"", "", "", "sizes cq_depth"},
     .help = "Receive completions per second a lane must absorb (0-1e9); sizes cq_depth."},
    {.id = Knob::max_rtt_ms, .name = "max_rtt_ms", .type = Type::real, .unit = "ms",
     .field = &Params::max_rtt_ms, .min = 0, .max = 60000,
     .formula = [](Resolver& r) -> double { return 4 * r.get(Knob::link_rtt_us) / 1000; },
     .formula_text = "4 x link_rtt_us / 1000",
     .meaning = {"", "", "", "sizes cq_depth"},
     .help = "Worst round trip the CQ must ride out (0-60000 ms); sizes cq_depth."},
    {.id = Knob::srq_safety, .name = "srq_safety", .type = Type::real, .unit = "",
     .field = &Params::srq_safety, .default_value = 1.4, .min = 1.3, .max = 1.5,
     .meaning = {"", "", "", "sizes srq_size"},
     .help = "Head-room factor of srq_size over the lanes' receive credits (1.3-1.5)."},
    {.id = Knob::copy_bw, .name = "copy_bw", .type = Type::real, .unit = "bytes/s",
     .field = &Params::copy_bw, .default_value = 10e9, .min = 1e6, .max = 1e13,
     .declared = {std::nullopt, 40e9, std::nullopt, std::nullopt},
     .calibrated = &LinkFigures::copy_bw_Bps,
     .meaning = {"memcpy bandwidth", "memcpy bandwidth", "memcpy bandwidth",
                 "memcpy bandwidth (bounce buffers)"},
     .help = "Memory-copy bandwidth (1e6-1e13 bytes/s), calibrated at start-up; used by the "
             "cost model to choose between copy paths."},
    {.id = Knob::get_bw, .name = "get_bw", .type = Type::real, .unit = "bytes/s",
     .field = &Params::get_bw, .min = 1e6, .max = 1e13,
     .formula = [](Resolver& r) -> double { return r.get(Knob::link_bw); },
     .formula_text = "link_bw (the get moves the payload over the link once)",
     .calibrated = &LinkFigures::get_bw_Bps,
     .meaning = {"", "the fastest of the chunk copy, the single copy (process_vm_readv) and the split copy (both processes copying half)",
                 "speed of an emulated get", "speed of an RDMA read"},
     .help = "Speed of a rendezvous get (1e6-1e13 bytes/s): calibrated on shm, else link_bw. "
             "Feeds eager_threshold."},
    {.id = Knob::rndv_setup_us, .name = "rndv_setup_us", .type = Type::real, .unit = "us",
     .field = &Params::rndv_setup_us, .default_value = 1, .min = 0, .max = 1e6,
     .declared = {std::nullopt, 1.0, std::nullopt, std::nullopt},
     .calibrated = &LinkFigures::rndv_setup_us,
     .meaning = {"", "start of a get (a process_vm_readv call)", "start of an emulated get",
                 "registration and start of an RDMA read"},
     .help = "Fixed cost of starting a rendezvous get beyond the handshake's round trip "
             "(0-1e6 us): calibrated at start-up, else declared. Feeds eager_threshold."},
    {.id = Knob::tune, .name = "tune", .type = Type::choice, .unit = "",
     .field = &Params::tune_adaptive, .default_value = 0, .choices = kTuneModes,
     .meaning = {"", "eager/rendezvous switch, chunk size and chunks in flight per size bucket",
                 "", ""},
     .help = "static|adaptive: adaptive moves each rank's point-to-point eager/rendezvous "
             "switch, get fragment size and pipeline depth per message-size bucket toward the "
             "fastest observed setting (settings that shape collectives are never tuned)."},
    {.id = Knob::allreduce_compress, .name = "allreduce_compress", .type = Type::choice,
     .unit = "", .field = &Params::allreduce_compress, .default_value = 0,
     .choices = kCompressions,
     .meaning = {"", "16-bit wire values of float/double allreduce", "16-bit wire values of "
                 "float/double allreduce", "16-bit wire values of float/double allreduce"},
     .help = "none|fp16|bf16: float/double allreduce with sum, min or max (called without a "
             "Compression argument) sends 16-bit values and reduces in full precision; "
             "other types and ops stay exact."},
}};
// clang-format on

constexpr const KnobDef& def(Knob k) { return kKnobs[index(k)]; }

// The table is the single source of truth; these make a mis-ordered row or a profile value
// outside its own range a compile error instead of a surprise at start-up.
constexpr bool table_in_enum_order() {
  for (std::size_t i = 0; i < kKnobCount; ++i)
    if (index(kKnobs[i].id) != i) return false;
  return true;
}
static_assert(table_in_enum_order(), "kKnobs must list the knobs in enum Knob order");

constexpr bool fixed_values_in_range() {
  for (const KnobDef& d : kKnobs) {
    const bool numeric = d.type == Type::size || d.type == Type::real;
    const double lo = numeric ? d.min : 0;
    const double hi = numeric ? d.max : static_cast<double>(d.choices.size()) - 1;
    auto inside = [&](double v) { return v >= lo && v <= hi; };
    if (!inside(d.default_value) && !d.formula) return false;
    for (const auto& v : d.profile)
      if (v && !inside(*v)) return false;
    for (const auto& v : d.declared)
      if (v && !inside(*v)) return false;
  }
  return true;
}
static_assert(fixed_values_in_range(), "a default or profile value lies outside its range");

// ---------------------------------------------------------------------------------------------
// Text helpers

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return out;
}

std::string env_name(const KnobDef& d) { return "RMP_" + upper(d.name); }

std::string join(std::span<const std::string_view> words, std::string_view sep) {
  std::string out;
  for (std::string_view w : words) {
    if (!out.empty()) out += sep;
    out += w;
  }
  return out;
}

// Integral values print as integers (12500000000, not 1.25e+10) so that rows read well and
// paste back as input; others print in their shortest exact form.
std::string format_number(double v) {
  if (std::abs(v) < 1e15 && v == std::floor(v)) return std::to_string(static_cast<long long>(v));
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

std::string format_value(const KnobDef& d, double v) {
  if (d.type == Type::choice || d.type == Type::flag) {
    const auto i = static_cast<std::size_t>(v);
    return i < d.choices.size() ? std::string(d.choices[i]) : format_number(v);
  }
  return format_number(v);
}

std::string allowed_text(const KnobDef& d, double min, double max) {
  if (d.type == Type::choice || d.type == Type::flag) return join(d.choices, "|");
  std::string s = format_number(min) + ".." + format_number(max);
  if (!d.unit.empty()) s += " " + std::string(d.unit);
  return s;
}

// Optimal-string-alignment distance: Levenshtein plus adjacent transpositions, the usual
// typing slips (RMP_EAGER_TRESHOLD, RMP_LANSE).
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// The candidate closest to `name` (compared upper-case) if within `max_distance`.
std::optional<std::string> closest(std::string_view name, const std::vector<std::string>& known,
                                   std::size_t max_distance) {
  const std::string key = upper(name);
  std::optional<std::string> best;
  std::size_t best_distance = max_distance + 1;
  for (const std::string& k : known) {
    const std::size_t dist = edit_distance(key, upper(k));
    if (dist < best_distance) {
      best_distance = dist;
      best = k;
    }
  }
  return best;
}

[[noreturn]] void invalid(const std::string& message) {
  throw Error(Errc::invalid_argument, message);
}

// ---------------------------------------------------------------------------------------------
// Parsing one value. Each returns "" on success or what is wrong with the text.

std::string parse_size(std::string_view text, double& out) {
  if (text.empty()) return "empty value";
  if (text.front() == '-') return "negative";
  std::uint64_t v = 0;
  const char* first = text.data();
  const char* last = first + text.size();
  auto [ptr, ec] = std::from_chars(first, last, v);
  if (ec == std::errc::result_out_of_range) return "too large";
  if (ec != std::errc() || ptr == first) {
    double d = 0;
    auto real = std::from_chars(first, last, d);
    return real.ec == std::errc() && real.ptr == last ? "not an integer" : "not a number";
  }
  std::string_view rest(ptr, static_cast<std::size_t>(last - ptr));
  if (!rest.empty() && (rest.front() == '.' || rest.front() == 'e' || rest.front() == 'E')) {
    double d = 0;
    if (auto real = std::from_chars(first, last, d); real.ec == std::errc() && real.ptr == last)
      return "not an integer";
  }
  // Binary multiples: K/KiB = 2^10, M/MiB = 2^20, G/GiB = 2^30 (either case of the letter).
  std::uint64_t scale = 1;
  if (!rest.empty()) {
    const std::string_view unit =
        rest.size() == 3 && rest.substr(1) == "iB" ? rest.substr(0, 1) : rest;
    if (unit == "K" || unit == "k") scale = std::uint64_t{1} << 10;
    else if (unit == "M" || unit == "m") scale = std::uint64_t{1} << 20;
    else if (unit == "G" || unit == "g") scale = std::uint64_t{1} << 30;
    else
      return "unexpected '" + std::string(rest) +
             "' after the number (suffixes: K, M, G or KiB, MiB, GiB: binary multiples)";
  }
  if (v > std::numeric_limits<std::uint64_t>::max() / scale) return "too large";
  out = static_cast<double>(v * scale);
  return "";
}

std::string parse_real(std::string_view text, double& out) {
  if (text.empty()) return "empty value";
  if (text.front() == '-') return "negative";
  const char* first = text.data();
  const char* last = first + text.size();
  double v = 0;
  auto [ptr, ec] = std::from_chars(first, last, v);
  if (ec == std::errc::result_out_of_range) return "too large";
  if (ec != std::errc() || !std::isfinite(v)) return "not a number";
  if (ptr != last) return "unexpected '" + std::string(ptr, last) + "' after the number";
  out = v;
  return "";
}

std::string parse_choice(const KnobDef& d, std::string_view text, double& out) {
  for (std::size_t i = 0; i < d.choices.size(); ++i)
    if (d.choices[i] == text) {
      out = static_cast<double>(i);
      return "";
    }
  return "unknown value";
}

// ---------------------------------------------------------------------------------------------
// Resolution

Resolver::Range Resolver::range_of(const KnobDef& d) {
  if (d.type == Type::choice || d.type == Type::flag)
    return {0, static_cast<double>(d.choices.size()) - 1};
  const double base = d.min_plus == Knob::count ? 0 : get(d.min_plus);
  return {base + d.min, d.max};
}

std::optional<Resolver::Explicit> Resolver::explicit_value(const KnobDef& d, Range range) {
  auto parse = [&](Source source, std::string who, const std::string& text) -> Explicit {
    double v = 0;
    std::string problem = d.type == Type::size   ? parse_size(text, v)
                          : d.type == Type::real ? parse_real(text, v)
                                                 : parse_choice(d, text, v);
    if (problem.empty() && (v < range.min || v > range.max)) problem = "out of range";
    if (!problem.empty())
      invalid(who + "=" + text + ": " + problem + " (allowed " +
              allowed_text(d, range.min, range.max) + ")");
    return Explicit{v, source, std::move(who), text};
  };
  // Both are parsed even when cli hides env: a malformed value is never silently ignored.
  std::optional<Explicit> from_env;
  const std::string var = env_name(d);
  if (auto it = in_.env.find(var); it != in_.env.end())
    from_env = parse(Source::env, var, it->second);
  if (auto it = in_.cli.find(d.name); it != in_.cli.end())
    return parse(Source::cli, "--param " + std::string(d.name), it->second);
  return from_env;
}

double Resolver::get(Knob k) {
  resolve(k);
  const Slot& slot = slots_[index(k)];
  follows_link_read_ = follows_link_read_ || slot.follows_link;
  return slot.result.value;
}

std::size_t Resolver::lanes_in_use() { return applies(def(Knob::lanes)) ? size(Knob::lanes) : 1; }

void Resolver::resolve(Knob k) {
  Slot& slot = slots_[index(k)];
  if (slot.state == State::done) return;
  const KnobDef& d = def(k);
  if (slot.state == State::resolving)
    throw Error(Errc::internal, "params: the formulas of " + std::string(d.name) + " form a cycle");
  slot.state = State::resolving;
  const bool outer_follows = std::exchange(follows_link_read_, false);

  const Range range = range_of(d);
  Resolved r;
  const std::optional<Explicit> given = explicit_value(d, range);
  if (given) {
    r.value = given->value;
    r.source = given->source;
  } else {
    const double calibrated = d.calibrated && in_.calibrated ? (*in_.calibrated).*d.calibrated : 0;
    if (calibrated > 0) {  // 0 = that figure was not measured
      r.value = calibrated;
      r.source = Source::calibrated;
    } else if (profile_ && d.profile[*profile_]) {
      r.value = *d.profile[*profile_];
      r.source = Source::profile;
    } else if (d.formula) {
      r.value = d.formula(*this);
      if (d.type == Type::size) r.value = round_up(r.value);
      r.source = Source::formula;
    } else {
      const auto declared = transport_ ? d.declared[*transport_] : std::nullopt;
      r.value = declared.value_or(d.default_value);
      // DESIGN §5: running on declared link figures (singleton, RMP_CALIBRATE=0, no partner)
      // is something the printout must say.
      if (d.calibrated)
        r.note = in_.not_calibrated_reason.empty()
                     ? "declared, not calibrated"
                     : "declared, not calibrated (" + in_.not_calibrated_reason + ")";
    }
    // Only implicit values are clamped: an explicit one out of range was an error above.
    if (r.value < range.min || r.value > range.max) {
      r.note = "clamped from " + format_value(d, r.value);
      r.value = std::clamp(r.value, range.min, range.max);
    }
  }

  // A hard limit of the transport clamps whatever set the value, explicit included (DESIGN
  // §5): the job-wide setting stays valid for transports that can honour it.
  if (d.hard_limit) {
    const double limit = static_cast<double>(in_.limits.*d.hard_limit);
    if (r.value > limit) {
      r.note = "clamped from " + format_value(d, r.value);
      r.value = limit;
    }
  }

  if (d.invariant.lower_bound) {
    const bool before_bound = std::exchange(follows_link_read_, false);
    const double bound = d.invariant.lower_bound(*this);
    // A bound that no link figure moves is final before start-up too.
    const bool bound_final = !follows_link_read_;
    follows_link_read_ = before_bound || follows_link_read_;
    if (r.value < bound) {
      const std::string bound_text =
          std::string(d.invariant.bound_name) + " = " + format_value(d, bound);
      if (given && d.invariant.binds_explicit && (in_.refuse_below_bound || bound_final))
        invalid(given->who + "=" + given->text + ": below " + bound_text + " (" +
                std::string(d.invariant.why) + "; allowed " + allowed_text(d, bound, range.max) +
                ")");
      if (given) {
        r.note = "kept below " + bound_text + ": set explicitly";
      } else {
        r.note = "raised from " + format_value(d, r.value) + " to " + bound_text;
        r.value = bound;
        r.source = Source::formula;
      }
    }
  }

  slot.follows_link = !given && (follows_link_read_ || (d.calibrated != nullptr));
  follows_link_read_ = outer_follows;
  slot.result = std::move(r);
  slot.state = State::done;
}

void store(Params& p, const Field& field, double v) {
  std::visit(
      [&](auto member) {
        using T = std::remove_reference_t<decltype(p.*member)>;
        if constexpr (std::is_same_v<T, bool>) p.*member = v != 0;
        else if constexpr (std::is_enum_v<T>) p.*member = static_cast<T>(static_cast<int>(v));
        else p.*member = static_cast<T>(v);
      },
      field);
}

// ---------------------------------------------------------------------------------------------
// Variables: which RMP_ names exist

// The settings read outside the knob table (resolve_env_settings, Context, the calibration);
// the ones rlaunch sets for each rank are wire::kLauncherSetVariables.
constexpr std::string_view kOtherVariables[] = {
    "RMP_TRANSPORTS", "RMP_PROFILE",         "RMP_CALIBRATE",    "RMP_SHM_CMA",
    "RMP_SHM_COPY",   "RMP_PROGRESS_THREAD", "RMP_PRINT_PARAMS", "RMP_STATS",
    "RMP_LOG",        "RMP_COLL_STORE",      "RMP_COLL_CHECK",   "RMP_SHM_HUGEPAGES"};

const std::vector<std::string>& known_variables() {
  static const std::vector<std::string> known = [] {
    std::vector<std::string> v(std::begin(kOtherVariables), std::end(kOtherVariables));
    v.insert(v.end(), std::begin(wire::kLauncherSetVariables),
             std::end(wire::kLauncherSetVariables));
    for (const KnobDef& d : kKnobs) v.push_back(env_name(d));
    for (const CollAlgorithms& c : kCollAlgorithms) v.emplace_back(c.variable);
    return v;
  }();
  return known;
}

// An unknown RMP_ variable one or two typing slips from a known one is almost certainly a
// mistake the user would otherwise never notice; farther ones may belong to someone else.
void check_variable_names(const ParamsInput& in) {
  const auto& known = known_variables();
  for (const auto& [name, value] : in.env) {
    if (!name.starts_with("RMP_") || std::find(known.begin(), known.end(), name) != known.end())
      continue;
    if (auto suggestion = closest(name, known, 2))
      invalid("unknown variable " + name + " (did you mean " + *suggestion + "?)");
  }
}

void check_cli_names(const ParamsInput& in) {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const KnobDef& d : kKnobs) v.emplace_back(d.name);
    return v;
  }();
  for (const auto& [name, value] : in.cli) {
    if (std::find(names.begin(), names.end(), name) != names.end()) continue;
    const auto suggestion = closest(name, names, 2);
    invalid("--param " + name + "=" + value + ": unknown parameter" +
            (suggestion ? " (did you mean " + *suggestion + "?)" : " (rinfo --params lists them)"));
  }
}

std::optional<std::size_t> find_word(std::span<const std::string_view> words, std::string_view w) {
  for (std::size_t i = 0; i < words.size(); ++i)
    if (words[i] == w) return i;
  return std::nullopt;
}

// The variable's value, empty when set to nothing; nullopt when unset.
std::optional<std::string> env_value(const ParamsInput& in, std::string_view var) {
  auto it = in.env.find(var);
  return it == in.env.end() ? std::nullopt : std::optional<std::string>(it->second);
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public entry points

const char* source_name(Source s) {
  switch (s) {
    case Source::default_value:
      return "default";
    case Source::profile:
      return "profile";
    case Source::formula:
      return "formula";
    case Source::calibrated:
      return "calibrated";
    case Source::env:
      return "env";
    case Source::cli:
      return "cli";
  }
  return "?";
}

std::size_t pipeline_depth_formula(double bw_Bps, double rtt_s, std::size_t fragment_size,
                                   std::size_t header_overhead, std::size_t min_depth) {
  if (fragment_size <= header_overhead)
    invalid("pipeline_depth: fragment_size " + std::to_string(fragment_size) +
            " must exceed header_overhead " + std::to_string(header_overhead));
  const double payload = static_cast<double>(fragment_size - header_overhead);
  return std::max(min_depth, to_size(round_up(bw_Bps * rtt_s / payload)));
}

std::size_t sq_depth_formula(std::size_t expected_concurrency, std::size_t pipeline_depth,
                             std::size_t lanes) {
  return std::max(to_size(round_up(static_cast<double>(expected_concurrency) * 1.2)),
                  pipeline_depth * lanes);
}

std::size_t rq_depth_formula(std::size_t sq_depth) {
  return to_size(round_up(static_cast<double>(sq_depth) * 1.5));
}

std::size_t srq_size_formula(std::size_t rq_depth, std::size_t lanes, double srq_safety) {
  return to_size(round_up(static_cast<double>(rq_depth) * static_cast<double>(lanes) * srq_safety));
}

std::size_t cq_depth_formula(double post_recv_per_s, double max_rtt_ms, std::size_t sq_depth,
                             std::size_t rq_depth) {
  return std::max({std::size_t{32}, to_size(round_up(post_recv_per_s * max_rtt_ms / 1000)),
                   sq_depth + rq_depth});
}

double spin_us_formula(double link_rtt_us) { return std::max(1.0, 2 * link_rtt_us); }

std::size_t eager_threshold_formula(double copy_bw_Bps, double link_bw_Bps, double get_bw_Bps,
                                    double link_rtt_us, double rndv_setup_us,
                                    std::size_t get_fill_bytes, bool chunked_gets_only) {
  // Per byte, what eager pays beyond rendezvous; ≥ 1/copy_bw > 0 while get_bw ≥ link_bw.
  const double extra = 1 / copy_bw_Bps + 1 / link_bw_Bps - 1 / std::max(get_bw_Bps, link_bw_Bps);
  const double fill_us = 2 * static_cast<double>(get_fill_bytes) / link_bw_Bps * 1e6;
  const double start_us = get_fill_bytes == 0 ? rndv_setup_us
                          : chunked_gets_only ? fill_us
                                              : std::min(rndv_setup_us, fill_us);
  return to_size(round_up((link_rtt_us + start_us) * 1e-6 / extra));
}
std::string json_quoted(std::string_view s) { return json_string(s); }

std::vector<std::string_view> knob_names() {
  std::vector<std::string_view> names;
  for (const KnobDef& d : kKnobs) names.push_back(d.name);
  return names;
}

std::vector<std::string_view> profile_names() {
  return {kProfileNames.begin(), kProfileNames.end()};
}

std::vector<std::string_view> transport_names() {
  return {kTransportNames.begin(), kTransportNames.end()};
}

ParamSet resolve_params(const ParamsInput& in) {
  check_variable_names(in);
  check_cli_names(in);

  std::optional<std::size_t> transport;
  if (!in.transport.empty()) {
    transport = find_word(kTransportNames, in.transport);
    if (!transport)
      invalid("transport " + in.transport + ": unknown (allowed " + join(kTransportNames, "|") +
              ")");
  }
  std::optional<std::size_t> profile;
  const std::optional<std::string> profile_var = env_value(in, "RMP_PROFILE");
  const std::string profile_name = profile_var.value_or("");
  if (profile_var) {
    // Set but empty is no profile name either: an error as for every other knob (a job
    // script whose variable expanded to nothing should hear of it, not run without the
    // profile).
    if (profile_name.empty())
      invalid("RMP_PROFILE=: empty value (allowed " + join(kProfileNames, "|") +
              "; unset it for none)");
    profile = find_word(kProfileNames, profile_name);
    if (!profile)
      invalid("RMP_PROFILE=" + profile_name + ": unknown profile (allowed " +
              join(kProfileNames, "|") + ")");
  }

  Resolver resolver(in, profile, transport);
  ParamSet set;
  set.profile = profile_name;
  set.transport = in.transport;
  for (const KnobDef& d : kKnobs) {
    const Resolver::Resolved& r = resolver.resolved(d.id);
    store(set.values, d.field, r.value);
    const bool applies = resolver.applies(d);
    set.rows.push_back(ParamInfo{std::string(d.name), applies ? format_value(d, r.value) : "n/a",
                                 std::string(d.unit), source_name(r.source)});
    set.notes.push_back(applies ? r.note : std::string());
  }
  return set;
}

ParamsInput params_input_from_environment() {
  ParamsInput in;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    if (!entry.starts_with("RMP_")) continue;
    const std::size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    in.env.insert_or_assign(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  // rlaunch --param k=v reaches the ranks as RMP_CLI_PARAMS="k=v;k=v" (values never contain
  // ';'); a later duplicate wins, as a later flag does on a command line.
  if (auto it = in.env.find(wire::kEnvCliParams); it != in.env.end()) {
    std::string_view rest = it->second;
    while (!rest.empty()) {
      const std::size_t semi = rest.find(';');
      const std::string_view item = rest.substr(0, semi);
      rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
      if (item.empty()) continue;
      const std::size_t eq = item.find('=');
      if (eq == std::string_view::npos || eq == 0)
        invalid("RMP_CLI_PARAMS=" + it->second + ": '" + std::string(item) + "' is not KEY=VALUE");
      in.cli.insert_or_assign(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1)));
    }
  }
  return in;
}

EnvSettings resolve_env_settings(const ParamsInput& in) {
  check_variable_names(in);
  // One word out of a fixed list; the index of the word, or `fallback` when unset.
  auto word = [&](std::string_view var, std::span<const std::string_view> allowed,
                  std::size_t fallback) -> std::size_t {
    auto it = in.env.find(var);
    if (it == in.env.end()) return fallback;
    if (auto i = find_word(allowed, it->second)) return *i;
    invalid(std::string(var) + "=" + it->second + ": unknown value (allowed " + join(allowed, "|") +
            ")");
  };
  static constexpr std::string_view kZeroOne[] = {"0", "1"};
  static constexpr std::string_view kShmCopy[] = {"auto", "single", "chunks", "split", "streaming"};
  static constexpr std::string_view kCollStore[] = {"auto", "cached", "streaming"};
  static constexpr std::string_view kLog[] = {"off", "warn", "info", "debug"};

  EnvSettings s;
  s.shm_cma = word("RMP_SHM_CMA", kZeroOne, 1) == 1;
  s.shm_hugepages = word("RMP_SHM_HUGEPAGES", kZeroOne, 1) == 1;
  s.shm_copy = static_cast<ShmCopy>(word("RMP_SHM_COPY", kShmCopy, 0));
  s.coll_store = static_cast<CollStore>(word("RMP_COLL_STORE", kCollStore, 0));
  s.calibrate = word("RMP_CALIBRATE", kZeroOne, 1) == 1;
  s.log_level = static_cast<LogLevel>(word("RMP_LOG", kLog, 1));
  s.progress_thread = word("RMP_PROGRESS_THREAD", kZeroOne, 0) == 1;
  s.print_params = word("RMP_PRINT_PARAMS", kZeroOne, 0) == 1;
  s.coll_check = word("RMP_COLL_CHECK", kZeroOne, 0) == 1;

  const std::optional<std::string> transports_var = env_value(in, "RMP_TRANSPORTS");
  const std::string transports = transports_var.value_or("");
  if (transports_var && transports.empty())
    invalid("RMP_TRANSPORTS=: empty value (allowed a comma-separated list of " +
            join(kTransportNames, ", ") + "; unset it for all of them)");
  // Every name between commas, an empty one after a trailing comma too (refused below).
  const std::string_view list = transports;
  for (std::size_t at = transports.empty() ? list.npos : 0; at != list.npos;) {
    const std::size_t comma = list.find(',', at);
    const std::string_view name = list.substr(at, comma - at);
    at = comma == std::string_view::npos ? comma : comma + 1;
    if (!find_word(kTransportNames, name))
      invalid("RMP_TRANSPORTS=" + transports + ": unknown transport '" + std::string(name) +
              "' (allowed a comma-separated list of " + join(kTransportNames, ", ") + ")");
    if (std::find(s.transports.begin(), s.transports.end(), name) != s.transports.end())
      invalid("RMP_TRANSPORTS=" + transports + ": '" + std::string(name) + "' listed twice");
    s.transports.emplace_back(name);
  }

  // RMP_<COLL>_ALGO: reduce_scatter_block takes RMP_REDUCE_SCATTER_ALGO when its own is unset.
  s.coll_algo.fill(-1);
  for (std::size_t k = 0; k < kCollectiveCount; ++k) {
    const CollAlgorithms& c = kCollAlgorithms[k];
    auto it = in.env.find(c.variable);
    if (it == in.env.end()) continue;
    const auto i = find_word(c.algos, it->second);
    if (!i)
      invalid(std::string(c.variable) + "=" + it->second + ": not an algorithm of " +
              std::string(c.name) + " (valid: " + join(c.algos, ", ") + ")");
    s.coll_algo[k] = static_cast<signed char>(*i);
  }
  constexpr std::size_t kRs = 12, kRsBlock = 13;
  static_assert(kCollAlgorithms[kRs].name == "reduce_scatter" &&
                kCollAlgorithms[kRsBlock].name == "reduce_scatter_block");
  if (s.coll_algo[kRsBlock] < 0) s.coll_algo[kRsBlock] = s.coll_algo[kRs];

  const std::optional<std::string> stats = env_value(in, "RMP_STATS");
  s.stats = stats.value_or("");
  if (stats && s.stats != "0" && s.stats != "1" &&  // set, even empty
      !(s.stats.starts_with("json:") && s.stats.size() > 5))
    invalid("RMP_STATS=" + s.stats + ": unknown value (allowed 0|1|json:PATH)");
  return s;
}

TransportLimits declared_limits(std::string_view transport) {
  TransportLimits limits;
  // The NIC moves verbs data itself, so one fragment in flight already overlaps both ends;
  // chunked copies (shm, tcp) need two so the two ranks' copies overlap.
  if (transport == "verbs") limits.min_pipeline_depth = 1;
  // What a rank computes (Context::shm_limits): a 64-byte ring line less its 20-byte line
  // header and p2p's 16-byte eager header. (rinfo and rlaunch link neither; test
  // KnobEffects.InlineThreshold_DeclaredIsWhatAJobUses holds the two together.)
  if (transport == "shm") limits.single_unit_inline = 28;
  // A chunked get's first piece (shm: kMinPiece; the same test holds the two together).
  if (transport == "shm") limits.get_fill_bytes = 16 * 1024;
  return limits;
}

TransportLimits settled_limits(TransportLimits limits, std::string_view transport,
                               const EnvSettings& s) {
  if (transport != "shm") return limits;
  const bool single_or_split = s.shm_copy == ShmCopy::single || s.shm_copy == ShmCopy::split;
  if (s.shm_cma && single_or_split) limits.get_fill_bytes = 0;
  else if (!s.shm_cma || s.shm_copy == ShmCopy::chunks || s.shm_copy == ShmCopy::streaming)
    limits.chunked_gets_only = true;
  return limits;
}

std::string format_params(const ParamSet& set, bool json) {
  const auto note_of = [&](std::size_t i) -> const std::string& {
    static const std::string none;
    return i < set.notes.size() ? set.notes[i] : none;
  };
  std::string out;
  if (json) {
    out = "[";
    for (std::size_t i = 0; i < set.rows.size(); ++i) {
      const ParamInfo& r = set.rows[i];
      out += i ? ",\n " : "\n ";
      out += "{\"name\": " + json_string(r.name) + ", \"value\": " + json_string(r.value) +
             ", \"unit\": " + json_string(r.unit) + ", \"source\": " + json_string(r.source);
      if (!note_of(i).empty()) out += ", \"note\": " + json_string(note_of(i));
      out += "}";
    }
    return out + "\n]\n";
  }

  const std::array<std::string_view, 5> header{"name", "value", "unit", "source", "note"};
  std::array<std::size_t, 4> width{};  // the note column is last and not padded
  for (std::size_t c = 0; c < width.size(); ++c) width[c] = header[c].size();
  for (const ParamInfo& r : set.rows) {
    width[0] = std::max(width[0], r.name.size());
    width[1] = std::max(width[1], r.value.size());
    width[2] = std::max(width[2], r.unit.size());
    width[3] = std::max(width[3], r.source.size());
  }
  auto line = [&](std::array<std::string_view, 5> cells) {
    std::string l;
    for (std::size_t c = 0; c < width.size(); ++c) {
      l += cells[c];
      l.append(width[c] - cells[c].size() + 2, ' ');
    }
    l += cells[4];
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  };
  line(header);
  for (std::size_t i = 0; i < set.rows.size(); ++i) {
    const ParamInfo& r = set.rows[i];
    line({r.name, r.value, r.unit, r.source, note_of(i)});
  }
  return out;
}

std::string format_knob_reference() {
  std::string out =
      "# rmp tuning knobs\n\n"
      "Generated from the knob table (runtime/params.cpp). Each knob is set by, highest "
      "first: `rlaunch --param NAME=VALUE` (cli) > `RMP_NAME` (env) > `--profile` / "
      "`RMP_PROFILE` > formula > default; link figures: cli > env > calibrated > default.\n";
  for (const KnobDef& d : kKnobs) {
    out += "\n## `" + std::string(d.name) + "`";
    if (!d.unit.empty()) out += " (" + std::string(d.unit) + ")";
    out += "\n\n" + std::string(d.help) + "\n\n";
    out += "- variable: `" + env_name(d) + "`\n";
    if (d.type == Type::choice || d.type == Type::flag) {
      out += "- values: " + join(d.choices, " | ") + "\n";
    } else {
      out += "- range: ";
      if (d.min_plus != Knob::count)
        out += std::string(def(d.min_plus).name) + " + " + format_number(d.min);
      else out += format_number(d.min);
      out += " .. " + format_number(d.max) + "\n";
    }
    if (d.formula) out += "- default: formula `" + std::string(d.formula_text) + "`\n";
    else out += "- default: " + format_value(d, d.default_value);
    if (!d.formula) {
      for (std::size_t t = 0; t < kTransportCount; ++t)
        if (d.declared[t])
          out +=
              " (" + std::string(kTransportNames[t]) + ": " + format_value(d, *d.declared[t]) + ")";
      out += d.calibrated ? "; calibrated at start-up when possible\n" : "\n";
    }
    std::string profiles;
    for (std::size_t p = 0; p < kProfileCount; ++p)
      if (d.profile[p]) {
        if (!profiles.empty()) profiles += ", ";
        profiles += kProfileNames[p];
        profiles += ' ';
        profiles += format_value(d, *d.profile[p]);
      }
    if (!profiles.empty()) out += "- profiles: " + profiles + "\n";
    if (d.hard_limit) out += "- clamped to the transport's device limit\n";
    if (d.invariant.lower_bound)
      out += "- at least " + std::string(d.invariant.bound_name) + ": " +
             std::string(d.invariant.why) + "\n";
    for (std::size_t t = 0; t < kTransportCount; ++t)
      out += "- " + std::string(kTransportNames[t]) + ": " +
             (d.meaning[t].empty() ? std::string("n/a") : std::string(d.meaning[t])) + "\n";
  }
  return out;
}

}  // namespace rmp::rt
