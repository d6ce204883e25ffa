// The knob table (DESIGN §5, STYLE "Knobs in one table"): every tunable declared once, its
// effective value resolved from cli > env > profile > formula > default, each value carrying
// its source. The data path reads the plain `Params` record; rinfo, RMP_PRINT_PARAMS and
// docs/tuning.md read the rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <rmp/rmp.hpp>

#include "runtime/coll_algorithms.hpp"

namespace rmp::rt {

enum class Source : std::uint8_t { default_value, profile, formula, calibrated, env, cli };
const char* source_name(Source s);

enum class WaitMode : std::uint8_t { poll, yield, block };

// Limits a transport imposes; values above them are clamped for that transport.
struct TransportLimits {
  std::size_t single_unit_inline = 44;  // largest inline payload in one unit (shm: declared_limits)
  std::size_t max_inline = 1024;        // hard inline limit (verbs: max_inline_data)
  std::size_t max_rd_atom = 64;         // verbs max_qp_rd_atom; 64 elsewhere
  std::size_t min_pipeline_depth = 2;   // 1 where the NIC moves data, 2 for chunked copies
  std::size_t get_fill_bytes = 0;       // TransportCaps::get_fill_bytes (shm: 16 KiB)
  // Every get goes through the chunks (shm with RMP_SHM_CMA=0 or the chunks forced:
  // settled_limits): no single copy, so its set-up (rndv_setup_us) is no get's start.
  bool chunked_gets_only = false;
};

// Link figures measured at start-up (calibration, tuning-model issue) or declared.
// A figure of 0 was not measured (its knob falls back to the declared value).
struct LinkFigures {
  double bw_Bps = 0;
  double rtt_us = 0;
  double copy_bw_Bps = 0;
  double rndv_setup_us = 0;
  double get_bw_Bps = 0;
};

// Effective values used on the data path.
struct Params {
  std::size_t lanes = 1;
  std::size_t sq_depth = 0;
  std::size_t rq_depth = 0;
  std::size_t cq_depth = 0;
  std::size_t srq_size = 0;
  bool srq = true;
  std::size_t inline_threshold = 0;
  std::size_t eager_threshold = 0;
  std::size_t fragment_size = 0;
  std::size_t header_overhead = 0;
  std::size_t pipeline_depth = 0;
  std::size_t signal_interval = 0;
  std::size_t signal_size = 0;
  std::size_t rndv_read_contexts = 0;
  std::size_t expected_concurrency = 0;
  double spin_us = 0;
  WaitMode wait_mode = WaitMode::poll;
  bool connect_eager = false;
  int traffic_class = 0;
  double link_bw = 0;      // bytes/s
  double link_rtt_us = 0;  // µs
  double post_recv_per_s = 0;
  double max_rtt_ms = 0;
  double srq_safety = 0;
  double copy_bw = 0;  // bytes/s
  double rndv_setup_us = 0;  // µs
  double get_bw = 0;         // bytes/s
  bool tune_adaptive = false;  // RMP_TUNE=adaptive (runtime/tuner.hpp)
  Compression allreduce_compress = Compression::none;
};

struct ParamsInput {
  std::map<std::string, std::string, std::less<>> env;  // every RMP_* variable, name → value
  std::map<std::string, std::string, std::less<>> cli;  // knob name → value (rlaunch --param)
  std::string transport;  // "" = global view; "self", "shm", "tcp", "verbs"
  TransportLimits limits;
  std::optional<LinkFigures> calibrated;  // figures measured at start-up, if any
  // Why link figures are declared rather than measured ("singleton", "RMP_CALIBRATE=0", …);
  // shown in the rows' notes. Empty: no reason given (rinfo, tests).
  std::string not_calibrated_reason;
  bool oversubscribed = false;            // more local ranks than cores
  // false: an explicit value below an invariant's bound that follows a formula or a
  // calibrated figure is kept, not refused (rlaunch checks the ranks' settings before they
  // measure the link figures such bounds follow); below a bound of set values alone it is
  // refused all the same.
  bool refuse_below_bound = true;
};

struct ParamSet {
  Params values;
  std::vector<ParamInfo> rows;  // one per knob, table order; value "n/a" where not applicable
  std::string profile;          // "" when none
  // Parallel to `rows` (ParamInfo is public API and has no such field): why a value is not
  // what its source alone would give — "raised from 256", "clamped from 1024" — or "".
  std::vector<std::string> notes;
  std::string transport;  // the view resolved: "" = global
};

// Resolves every knob. Throws rmp::Error(Errc::invalid_argument) naming the knob, the value and
// the allowed range for a malformed or out-of-range value, an unknown profile, an explicit
// value that breaks an invariant, or an unknown RMP_ variable close to a known one.
ParamSet resolve_params(const ParamsInput& in);

// Environment of this process as ParamsInput.env / .cli (RMP_CLI_PARAMS="k=v;k=v" is how
// rlaunch --param reaches the ranks).
ParamsInput params_input_from_environment();

// Formulas (DESIGN §5), exposed for tests and the tuner. Results rounded up, not clamped.
std::size_t pipeline_depth_formula(double bw_Bps, double rtt_s, std::size_t fragment_size,
                                   std::size_t header_overhead, std::size_t min_depth);
std::size_t sq_depth_formula(std::size_t expected_concurrency, std::size_t pipeline_depth,
                             std::size_t lanes);
std::size_t rq_depth_formula(std::size_t sq_depth);
std::size_t srq_size_formula(std::size_t rq_depth, std::size_t lanes, double srq_safety);
std::size_t cq_depth_formula(double post_recv_per_s, double max_rtt_ms, std::size_t sq_depth,
                             std::size_t rq_depth);
double spin_us_formula(double link_rtt_us);
// The size where rendezvous starts to pay. Eager moves the payload through a buffer: a copy
// into it (size / copy_bw) and the transfer out of it (size / link_bw), one after the other.
// Rendezvous pays a handshake instead (RTS out, the get's request back: one round trip) and a
// start: a single copy's set-up (rndv_setup_us, a system call on shm), or, where the transport
// has chunked gets, the first piece going through both copies before the reader has any of it
// (2 × get_fill_bytes / link_bw), whichever is less; then it moves the payload once, at the
// get's speed (size / get_bw; on shm the fastest of the pipelined chunk copy, whose two copies
// overlap, the single and the split copy). The start and the speed may be two mechanisms'
// (params.cpp says why that pairing stays: it matches the measured crossovers). Equal at
//   eager_threshold = (link_rtt_us + start) × 1e-6 / (1/copy_bw + 1/link_bw − 1/get_bw),
//   start = min(rndv_setup_us, 2 × get_fill_bytes / link_bw × 1e6)   (rndv_setup_us alone
//           where get_fill_bytes = 0; the piece alone where chunked_gets_only)
// With get_bw = link_bw (a NIC's read; shm when the chunk copy is the faster) that is
// copy_bw × (link_rtt_us + start): the handshake against the copy into the buffer.
std::size_t eager_threshold_formula(double copy_bw_Bps, double link_bw_Bps, double get_bw_Bps,
                                    double link_rtt_us, double rndv_setup_us,
                                    std::size_t get_fill_bytes = 0, bool chunked_gets_only = false);

// Names of every knob (for the launcher's --param validation and rinfo).
std::vector<std::string_view> knob_names();
// Valid values of RMP_PROFILE / --profile, and of ParamsInput::transport / --transport.
std::vector<std::string_view> profile_names();
std::vector<std::string_view> transport_names();

// ---- Presentation (rinfo, RMP_PRINT_PARAMS) ----------------------------------------------

// A readable table (name, value, unit, source, note) or, with json, a JSON array of objects
// {"name", "value", "unit", "source"[, "note"]}.
std::string format_params(const ParamSet& set, bool json);

// Reference of every knob (type, unit, default, range, per-transport meaning, help) as
// Markdown, generated from the table so that docs and code cannot disagree.
std::string format_knob_reference();

// s as a JSON string literal, quotes and escapes included (rinfo --json, RMP_STATS=json:).
std::string json_quoted(std::string_view s);

// Limits a transport declares before it has opened a device (rinfo, tests); a running
// transport replaces them with what it measured.
TransportLimits declared_limits(std::string_view transport);

// ---- Non-knob environment settings --------------------------------------------------------

enum class ShmCopy : std::uint8_t { auto_, single, chunks, split, streaming };
enum class CollStore : std::uint8_t { auto_, cached, streaming };
enum class LogLevel : std::uint8_t { off, warn, info, debug };

struct EnvSettings {
  bool shm_cma = true;                  // RMP_SHM_CMA=0|1
  bool shm_hugepages = true;            // RMP_SHM_HUGEPAGES=0|1
  ShmCopy shm_copy = ShmCopy::auto_;    // RMP_SHM_COPY=auto|single|chunks|split
  CollStore coll_store = CollStore::auto_;  // RMP_COLL_STORE=auto|cached|streaming
  bool calibrate = true;                // RMP_CALIBRATE=0|1
  LogLevel log_level = LogLevel::warn;  // RMP_LOG=off|warn|info|debug
  bool progress_thread = false;         // RMP_PROGRESS_THREAD=0|1
  bool print_params = false;            // RMP_PRINT_PARAMS=0|1
  std::vector<std::string> transports;  // RMP_TRANSPORTS in order; empty = default choice
  std::string stats;                    // RMP_STATS as given: "" (off), "0", "1" or "json:PATH"
  ForcedAlgos coll_algo{};              // RMP_<COLL>_ALGO, by collective (coll_algorithms.hpp)
  bool coll_check = false;              // RMP_COLL_CHECK=0|1 (api/coll_check.hpp)
};

// Validates and decodes the non-knob RMP_ variables above. Throws rmp::Error
// (Errc::invalid_argument) naming the variable, the value and the allowed values, or for an
// unknown RMP_ variable close to a known one (as resolve_params does).
EnvSettings resolve_env_settings(const ParamsInput& in);

// A transport's limits as its settings leave them (a rank's Context::start, rinfo --params and
// rmp::effective_params alike, so that they cannot disagree): on shm, gets forced onto the
// single or split copy never go through the chunks (get_fill_bytes 0), and without
// cross-memory attach, or with the chunks forced, every get does (chunked_gets_only).
TransportLimits settled_limits(TransportLimits limits, std::string_view transport,
                               const EnvSettings& s);

}  // namespace rmp::rt
