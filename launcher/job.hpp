// One job on this node: start the ranks, serve their key-value store, forward their I/O, watch
// them exit, and stop them all within a bounded time when one fails (DESIGN §4).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/binding.hpp"

namespace rmp::launcher {

struct JobSpec {
  std::vector<std::string> command;  // PROGRAM ARGS…
  int np = 1;
  std::optional<BindTo> bind_to;  // nullopt: the contract's default
  bool tag_output = false;
  std::optional<std::chrono::milliseconds> timeout;
  std::string timeout_text;
  // Added to (or replacing in) every rank's environment: -x, RMP_PROFILE, RMP_CLI_PARAMS, …
  std::vector<std::pair<std::string, std::string>> env;
};

// Grace periods of the shutdown. A failure is detected at t0; every other rank gets SIGTERM
// (or the signal rlaunch caught) at t0, SIGKILL at t0 + kTermGrace, and rlaunch exits by
// t0 + kStopLimit whatever remains — under the 5 s the contract allows.
inline constexpr std::chrono::milliseconds kTermGrace{2000};
inline constexpr std::chrono::milliseconds kStopLimit{4000};
// When a rank fails, the others are told at once (Errc::peer_failed ends the calls that wait
// for it) and get this long to report it before the stop signal. (300 ms was too short for
// ranks that share the cores with another job's: rmp_peer_failed lost the reports of ranks
// stopped before they ran, 6 times in 30 beside an 8-rank job on 2 cores.) kNoticeGrace +
// kStopLimit stays under the contract's 5 s.
inline constexpr std::chrono::milliseconds kNoticeGrace{700};
static_assert(kNoticeGrace + kStopLimit < std::chrono::milliseconds{5000});
// After the last rank has exited, how long to wait for its output pipes to reach EOF (a
// background child of a rank may hold them open forever).
inline constexpr std::chrono::milliseconds kOutputDrain{1000};
// After the job: how long helpers that are just ending may take before they count as left
// running (Job::stop_leftovers).
inline constexpr std::chrono::milliseconds kLeftoverGrace{100};

// Runs the job to its end and returns rlaunch's exit status (API.md):
//   0    every rank exited 0, and every rank that said HELLO also finalised;
//   S    the first failing rank exited with status S;
//   128+N  the first failing rank was killed by signal N, or rlaunch caught signal N
//        (SIGINT, SIGTERM, SIGHUP, SIGQUIT) before any rank had failed;
//   1    the first failing rank exited 0 without finalising after HELLO; or the ranks all
//        succeeded but writing their output failed (ENOSPC: rlaunch says so);
//   code a rank called abort(code) first (1 for abort(0));
//   124  --timeout passed first;
//   127  PROGRAM could not be executed.
// Only the first of these events counts and is reported; later ones are consequences of the
// shutdown it started. Throws SystemError when rlaunch itself cannot set the job up.
int run_job(const JobSpec& spec);

}  // namespace rmp::launcher
