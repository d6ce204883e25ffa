// Environment (init/finalize), world(), wtime, abort, errors, effective_params.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include <rmp/rmp.hpp>

#include "api/state.hpp"
#include "runtime/bootstrap/bootstrap.hpp"
#include "runtime/bootstrap/wire.hpp"
#include "runtime/log.hpp"

namespace rmp {
namespace api {

Process g_process;

void throw_invalid_comm(const char* call, bool null_impl) {
  if (null_impl)
    throw Error(Errc::invalid_comm,
                std::string(call) +
                    ": invalid communicator (default-constructed, moved-from, or split with "
                    "color undefined)");
  throw Error(Errc::invalid_comm,
              std::string(call) + ": rmp is not initialised (no live rmp::Environment)");
}

void throw_total_overflow(const char* call, std::size_t count, int ranks, std::size_t esize) {
  throw Error(Errc::invalid_count,
              std::string(call) + ": argument 'count' = " + std::to_string(count) +
                  " elements of " + std::to_string(esize) + " bytes for each of " +
                  std::to_string(ranks) + " ranks overflows the address space");
}

void throw_bytes_overflow(const char* call, const char* arg, std::size_t count, std::size_t esize) {
  throw Error(Errc::invalid_count,
              std::string(call) + ": argument '" + arg + "' = " + std::to_string(count) +
                  " elements of " + std::to_string(esize) + " bytes overflows the address space");
}

void throw_null_buffer(const char* call, const char* arg, std::size_t count) {
  throw Error(Errc::invalid_argument, std::string(call) + ": argument '" + arg +
                                          "' is a null pointer with count " +
                                          std::to_string(count));
}

void throw_bad_rank(const char* call, const char* arg, int rank, int size) {
  throw Error(Errc::invalid_rank,
              std::string(call) + ": argument '" + arg + "' = " + std::to_string(rank) +
                  " is not a rank of the communicator [0, " + std::to_string(size) + ")" +
                  (rank == any_source ? " (any_source is for receives only)" : ""));
}

void throw_bad_tag(const char* call, const char* arg, int tag) {
  throw Error(Errc::invalid_tag, std::string(call) + ": argument '" + arg +
                                     "' = " + std::to_string(tag) +
                                     " is outside [0, tag_ub = " + std::to_string(tag_ub) + "]" +
                                     (tag == any_tag ? " (any_tag is for receives only)" : ""));
}

}  // namespace api

void detail::refuse_in_place(const char* call, const char* arg) {
  throw Error(Errc::invalid_argument,
              std::string(call) + ": argument '" + arg +
                  "' is rmp::in_place, which applies only to the input of allreduce, "
                  "iallreduce, reduce, gather and gatherv (at the root), scan, exscan, "
                  "allgather(v), alltoall and reduce_scatter(_block)");
}

const char* errc_name(Errc c) noexcept {
  switch (c) {
    case Errc::invalid_argument: return "invalid_argument";
    case Errc::invalid_rank: return "invalid_rank";
    case Errc::invalid_tag: return "invalid_tag";
    case Errc::invalid_count: return "invalid_count";
    case Errc::invalid_comm: return "invalid_comm";
    case Errc::truncate: return "truncate";
    case Errc::peer_failed: return "peer_failed";
    case Errc::timeout: return "timeout";
    case Errc::bootstrap: return "bootstrap";
    case Errc::transport: return "transport";
    case Errc::internal: return "internal";
  }
  return "unknown";
}

Environment::Environment() : Environment(ThreadLevel::serialized) {}

Environment::Environment(int& argc, char**& argv) : Environment(argc, argv, ThreadLevel::serialized) {}

Environment::Environment(int&, char**&, ThreadLevel required) : Environment(required) {}

Environment::Environment(ThreadLevel required) {
  if (required < ThreadLevel::single || required > ThreadLevel::multiple)
    throw Error(Errc::invalid_argument,
                "Environment: argument 'required' = " + std::to_string(static_cast<int>(required)) +
                    " is not a ThreadLevel (single 0, funneled 1, serialized 2, multiple 3)");
  api::Process& p = api::process();
  if (p.initialized)
    throw Error(Errc::invalid_argument,
                p.finalized ? "Environment: rmp cannot be initialised again after finalize"
                            : "Environment: rmp is already initialised in this process");
  p.context = std::make_unique<rt::Context>(rt::make_bootstrap_from_environment());
  p.engine = std::make_unique<detail::Engine>(*p.context);
  rt::set_default_context(p.context.get());
  const rt::Context& c = *p.context;
  p.world = Comm(std::make_shared<detail::CommImpl>(*p.engine, 0, c.rank(), c.size()));
  // Any thread may call, one at a time; `multiple` is later work (DESIGN §3).
  p.provided = required == ThreadLevel::multiple ? ThreadLevel::serialized : required;
  level_ = p.provided;
  if (c.settings().progress_thread) p.engine->start_progress_thread();
  p.initialized = true;
}

namespace {

// What finalize still waits for: "2 sends: ...; not yet matched by a receive; 1 non-blocking
// collective not finished" ("" when nothing is left).
std::string unfinished(detail::Engine& e, const char* sends_state) {
  std::string out = e.describe_outstanding_sends();
  if (!out.empty()) out += std::string("; ") + sends_state;
  if (const std::size_t n = e.unfinished_collectives(); n > 0)
    out += (out.empty() ? "" : "; ") + std::to_string(n) + " non-blocking collective" +
           (n == 1 ? "" : "s") + " not finished (every rank must start each one)";
  return out;
}

}  // namespace

Environment::~Environment() {
  api::Process& p = api::process();
  if (!p.initialized || p.finalized) return;
  try {
    detail::Engine& e = *p.engine;
    e.set_waiting_for("finalizing");
    using Clock = std::chrono::steady_clock;
    // Deliver what is still in flight (detached requests included), bounded in time. A
    // notice after a few seconds names what is still waiting for a receive (an erroneous
    // program: every send must be matched before finalize).
    constexpr auto kDeliver = std::chrono::seconds(60), kNotice = std::chrono::seconds(5);
    const auto start = Clock::now();
    bool noticed = false;
    e.progress_until([&] {
      if (e.drained()) return true;
      const auto waited = Clock::now() - start;
      if (!noticed && waited > kNotice) {
        noticed = true;
        const std::string left = unfinished(e, "not yet matched by a receive");
        if (!left.empty())
          rt::log_warn(
              "finalize: " + left + ", waiting " +
              std::to_string(std::chrono::ceil<std::chrono::seconds>(kDeliver - waited).count()) +
              " s more");
      }
      return waited > kDeliver;
    });
    if (const std::string left = unfinished(e, "never matched by a receive"); !left.empty())
      rt::log_warn("finalize: " + left + ", given up after " + std::to_string(kDeliver.count()) +
                   " s");
    // Everyone stops together (unless the wait below times out): nobody unmaps memory a peer
    // may still be reading. The barrier runs through the progress engine, so rendezvous data
    // keeps flowing while we wait. It is the non-blocking one (RMP_BARRIER_ALGO forces the
    // user's barriers, not this one), bounded too: a rank that never finalises (alive, but
    // stuck or still working) ends this wait with an error, and rlaunch then ends the job,
    // instead of a finalize that never returns. The bound covers another rank's delivery
    // above first: with one bound for both, a rank with an unmatched send and a rank waiting
    // here for it timed out together, and the waiting one, leaving first, was blamed.
    Request closing = p.world.ibarrier();
    auto reached = [&] { return closing.state_for_internal_use()->complete; };  // engine locked
    constexpr auto kArrive = kDeliver + std::chrono::seconds(60);
    const auto entered = Clock::now();
    e.progress_until([&] { return reached() || Clock::now() - entered > kArrive; });
    if (!e.is_complete(closing.state_for_internal_use())) {  // (the progress thread still runs)
      p.engine->stop_progress_thread();
      throw Error(Errc::timeout,
                  "the job's closing barrier: not every rank reached finalize "
                  "within " +
                      std::to_string(kArrive.count()) +
                      " s (one still running, or stuck?); leaving without "
                      "the others");
    }
    closing.wait();
    p.engine->stop_progress_thread();
    p.context->bootstrap().finalize();
    const auto& stats = p.context->settings().stats;
    if (!stats.empty() && stats != "0") p.context->report_stats();
  } catch (const std::exception& ex) {
    // A destructor cannot throw: said as a warning, which RMP_LOG=off silences (DESIGN §6).
    rt::log_warn(std::string("finalize: ") + ex.what());
  }
  p.finalized = true;
  p.world = Comm();
  rt::set_default_context(nullptr);
  p.engine.reset();
  p.context.reset();
}

ThreadLevel Environment::thread_level() const { return level_; }

Comm& world() {
  api::Process& p = api::process();
  if (!p.initialized || p.finalized)
    throw Error(Errc::invalid_comm, "world: rmp is not initialised (no live rmp::Environment)");
  return p.world;
}

double wtime() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void abort(int code, std::string_view why) {
  api::Process& p = api::process();
  if (p.context && !p.finalized) p.context->bootstrap().abort(code, why);
  rt::log_warn("abort(" + std::to_string(code) + "): " + std::string(why));
  std::fflush(stderr);
  ::_exit(wire::abort_exit_status(code));
}

bool initialized() { return api::process().initialized; }
bool finalized() { return api::process().finalized; }

std::vector<ParamInfo> effective_params(std::string_view transport) {
  api::Process& p = api::process();
  if (p.context && !p.finalized) return p.context->effective_params(transport);
  rt::ParamsInput in = rt::params_input_from_environment();
  in.transport = std::string(transport);
  if (!transport.empty())
    in.limits =
        rt::settled_limits(rt::declared_limits(transport), transport, rt::resolve_env_settings(in));
  return rt::resolve_params(in).rows;
}

}  // namespace rmp
