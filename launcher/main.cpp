// rlaunch: starts the ranks of one job on this node and serves their bootstrap (DESIGN §4,
// API.md "Command-line and environment contract"). This file turns the command line into a
// job and errors into exit statuses; job.cpp does the work.
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/errors.hpp"
#include "launcher/job.hpp"
#include "launcher/options.hpp"
#include "runtime/bootstrap/wire.hpp"
#include "runtime/params.hpp"
#include "runtime/stats_path.hpp"

extern char** environ;  // POSIX; no standard C++ header declares it

namespace {

using namespace rmp::launcher;

constexpr int kExitUsage = 2;
constexpr int kExitLauncherError = 1;

// A launcher started with stdin/stdout/stderr closed would hand those numbers out for its own
// pipes and sockets, and the ranks' dup2() onto 0-2 would then clobber them.
void ensure_standard_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      const int opened = ::open("/dev/null", O_RDWR);
      if (opened >= 0 && opened != fd) ::close(opened);  // cannot happen: lowest free number
    }
  }
}

// Three descriptors per rank (two pipes, one socket): lift the soft limit to the hard one so
// -n in the hundreds does not fail on the default 1024.
void raise_fd_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

JobSpec job_spec(const LaunchOptions& options) {
  JobSpec spec;
  spec.command = options.command;
  spec.np = options.np;
  spec.bind_to = options.bind_to;
  spec.tag_output = options.tag_output;
  spec.timeout = options.timeout;
  spec.timeout_text = options.timeout_text;
  spec.env = options.exports;
  if (options.profile) spec.env.emplace_back("RMP_PROFILE", *options.profile);
  if (!options.params.empty()) {
    std::string joined;  // "k=v;k=v", read back by the knob table (runtime/params.cpp)
    for (const auto& [key, value] : options.params)
      joined += (joined.empty() ? "" : ";") + key + "=" + value;
    spec.env.emplace_back(rmp::wire::kEnvCliParams, joined);
  }
  if (options.print_params) spec.env.emplace_back("RMP_PRINT_PARAMS", "1");
  return spec;
}

// Every rank checks its RMP_ variables and --param values at start-up and throws on a bad one;
// checked here first, with the library's own rules, a typo is one usage error instead of N
// aborted ranks. The input is what the ranks will see: rlaunch's RMP_ variables, then -x,
// --profile and --print-params over them, and --param as the command line's knobs. Resolved
// as the ranks resolve it on one node (the shm view, its declared limits).
void check_rank_settings(const LaunchOptions& options, const JobSpec& spec) {
  rmp::rt::ParamsInput in;
  const auto add = [&in](std::string_view name, std::string_view value) {
    // rlaunch sets RMP_CLI_PARAMS itself (from --param, below as in.cli).
    if (name.starts_with("RMP_") && name != rmp::wire::kEnvCliParams)
      in.env.insert_or_assign(std::string(name), std::string(value));
  };
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const auto eq = entry.find('=');
    if (eq != std::string_view::npos) add(entry.substr(0, eq), entry.substr(eq + 1));
  }
  for (const auto& [name, value] : spec.env) add(name, value);
  for (const auto& [key, value] : options.params) in.cli.insert_or_assign(key, value);
  in.transport = "shm";
  in.limits = rmp::rt::declared_limits("shm");
  // Syntax, ranges and names, and bounds of set values (cq_depth ≥ sq_depth + rq_depth with
  // a profile's depths); bounds that follow the link figures (the depths' formulas, through
  // pipeline_depth) are the ranks' to judge once they have measured them.
  // Where the ranks will not measure (RMP_CALIBRATE=0, one rank) they see the figures seen
  // here, so every bound is judged.
  try {
    const rmp::rt::EnvSettings settings = rmp::rt::resolve_env_settings(in);
    in.refuse_below_bound = spec.np == 1 || !settings.calibrate;
    (void)rmp::rt::resolve_params(in);
    if (settings.stats.starts_with("json:"))  // as rank 0 will check it (its directory too)
      (void)rmp::rt::checked_stats_path(settings.stats, 0, spec.np, "");
  } catch (const rmp::Error& e) {
    throw SettingsError(e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  ensure_standard_fds();
  try {
    LaunchOptions options = parse_command_line(std::vector<std::string>(argv + 1, argv + argc));
    if (options.help) {
      std::fputs(usage_text().c_str(), stdout);
      return 0;
    }
    if (const auto remote = first_remote_host(options)) {
      std::fprintf(stderr,
                   "rlaunch: multi-node launch is not implemented yet (host '%s' from %s is not "
                   "this node)\n",
                   remote->name.c_str(), remote->origin.c_str());
      return kExitUsage;
    }
    JobSpec spec = job_spec(options);
    check_rank_settings(options, spec);
    raise_fd_limit();
    return run_job(spec);
  } catch (const SettingsError& e) {
    std::fprintf(stderr, "rlaunch: %s\n", e.what());
    return kExitUsage;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "rlaunch: %s\nTry 'rlaunch --help' for usage.\n", e.what());
    return kExitUsage;
  } catch (const SystemError& e) {
    std::fprintf(stderr, "rlaunch: %s\n", e.what());
    return kExitLauncherError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rlaunch: %s\n", e.what());
    return kExitLauncherError;
  }
}
