// rinfo: what this build of rmp can do here — version, which transports can start on this
// machine (and why not), the effective tuning parameters and the knob reference. It links only
// the knob table: nothing here needs a running job.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/params.hpp"

#ifndef RMP_VERSION
#error "RMP_VERSION must be defined by the build (PROJECT_VERSION)"
#endif

namespace {

constexpr std::string_view kUsage =
    "usage: rinfo                      version and transports available here\n"
    "       rinfo --params [--json] [--profile NAME] [--transport NAME]\n"
    "                                  effective parameters (declared link figures)\n"
    "       rinfo --knobs              reference of every knob (Markdown)\n"
    "       rinfo --devices            RDMA devices\n"
    "       rinfo --version | --help\n";

struct Availability {
  bool available;
  std::string why;
};

std::string errno_text(int err) { return std::strerror(err); }

// shm needs a writable /dev/shm and a working shm_open + mmap; try exactly that.
Availability probe_shm() {
  if (access("/dev/shm", W_OK) != 0)
    return {false, "/dev/shm is not writable: " + errno_text(errno)};
  const std::string name = "/rmp-rinfo-" + std::to_string(getpid());
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return {false, "shm_open(" + name + ") failed: " + errno_text(errno)};
  shm_unlink(name.c_str());
  Availability result{true, "/dev/shm writable, shm_open and mmap work"};
  if (ftruncate(fd, 4096) != 0) {
    result = {false, "ftruncate of a shm segment failed: " + errno_text(errno)};
  } else if (void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
             p == MAP_FAILED) {
    result = {false, "mmap of a shm segment failed: " + errno_text(errno)};
  } else {
    munmap(p, 4096);
  }
  close(fd);
  return result;
}

// Cross-memory attach: process_vm_readv on ourselves proves the kernel has it; reading a
// sibling rank also needs ptrace permission, which Yama's ptrace_scope may restrict.
Availability probe_cma(bool allowed_by_env) {
  if (!allowed_by_env) return {false, "disabled by RMP_SHM_CMA=0"};
  char source[16] = "rmp-cma-probe";
  char target[16] = {};
  iovec local{target, sizeof target};
  iovec remote{source, sizeof source};
  if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != static_cast<ssize_t>(sizeof source))
    return {false, "process_vm_readv failed: " + errno_text(errno)};
  std::string why = "process_vm_readv works";
  std::ifstream scope_file("/proc/sys/kernel/yama/ptrace_scope");
  int scope = 0;
  if (scope_file >> scope) {
    if (scope >= 2)
      return {false,
              "kernel.yama.ptrace_scope=" + std::to_string(scope) + " forbids reading other ranks"};
    if (scope == 1) why += " (ptrace_scope=1: ranks must allow each other as ptracer)";
  }
  return {true, why};
}

void print_transports() {
  bool cma_allowed = true;
  try {
    cma_allowed = rmp::rt::resolve_env_settings(rmp::rt::params_input_from_environment()).shm_cma;
  } catch (const rmp::Error& e) {
    std::cerr << "rinfo: warning: " << e.what() << "\n";
  }
  const Availability shm = probe_shm();
  const Availability cma = probe_cma(cma_allowed);
  struct Row {
    std::string_view name;
    Availability state;
  };
  const std::vector<Row> rows{
      {"self", {true, "always"}},
      {"shm", shm},
      {"  cma", cma},
      {"tcp", {false, "not implemented yet (later issue)"}},
      {"verbs", {false, "not built (later issue)"}},
  };
  std::cout << "transports:\n";
  for (const Row& r : rows) {
    std::string name(r.name);
    name.resize(8, ' ');
    std::cout << "  " << name << (r.state.available ? "available      " : "not available  ")
              << r.state.why << "\n";
  }
}

int usage_error(const std::string& message) {
  std::cerr << "rinfo: " << message << "\n" << kUsage;
  return 2;
}

bool is_one_of(std::string_view word, const std::vector<std::string_view>& words) {
  for (std::string_view w : words)
    if (w == word) return true;
  return false;
}

std::string joined(const std::vector<std::string_view>& words) {
  std::string out;
  for (std::string_view w : words) {
    if (!out.empty()) out += '|';
    out += w;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  enum class Mode { overview, params, knobs, devices, version, help } mode = Mode::overview;
  bool json = false;
  std::string profile, transport;
  bool profile_given = false;
  std::string_view mode_flag;  // the flag that chose `mode`, for messages

  const std::vector<std::string_view> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    // --flag=value and --flag value are both accepted for the flags that take a value
    std::string_view inline_value;
    bool has_inline_value = false;
    if (const std::size_t eq = arg.find('=');
        arg.starts_with("--") && eq != std::string_view::npos) {
      inline_value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_inline_value = true;
    }
    auto value = [&](std::string& out) -> bool {
      if (has_inline_value) {
        out = inline_value;
        return true;
      }
      if (i + 1 >= args.size()) return false;
      out = args[++i];
      return true;
    };
    auto set_mode = [&](Mode m) -> bool {
      if (mode != Mode::overview && mode != m) return false;
      mode = m;
      mode_flag = arg;
      return true;
    };
    auto exclusive = [&] {
      return usage_error(std::string(arg) + " cannot be combined with " + std::string(mode_flag));
    };
    if (has_inline_value && arg != "--profile" && arg != "--transport")
      return usage_error(std::string(arg) + " takes no value");
    if (arg == "--params") {
      if (!set_mode(Mode::params)) return exclusive();
    } else if (arg == "--knobs") {
      if (!set_mode(Mode::knobs)) return exclusive();
    } else if (arg == "--devices") {
      if (!set_mode(Mode::devices)) return exclusive();
    } else if (arg == "--version") {
      if (!set_mode(Mode::version)) return exclusive();
    } else if (arg == "--help" || arg == "-h") {
      mode = Mode::help;
    } else if (arg == "--json") {
      json = true;
    } else if (arg == "--profile") {
      const auto profiles = rmp::rt::profile_names();
      if (!value(profile)) return usage_error("--profile needs a NAME (" + joined(profiles) + ")");
      if (!is_one_of(profile, profiles))
        return usage_error("--profile " + profile + ": unknown profile (allowed " +
                           joined(profiles) + ")");
      profile_given = true;
    } else if (arg == "--transport") {
      const auto transports = rmp::rt::transport_names();
      if (!value(transport))
        return usage_error("--transport needs a NAME (" + joined(transports) + ")");
      if (!is_one_of(transport, transports))
        return usage_error("--transport " + transport + ": unknown transport (allowed " +
                           joined(transports) + ")");
    } else {
      return usage_error("unknown option " + std::string(args[i]));
    }
  }
  if (mode == Mode::help) {
    std::cout << kUsage;
    return 0;
  }
  if ((json || profile_given || !transport.empty()) && mode != Mode::params)
    return usage_error("--json, --profile and --transport go with --params");

  try {
    switch (mode) {
      case Mode::help:
      case Mode::version:
        std::cout << "rmp " << RMP_VERSION << "\n";
        return 0;
      case Mode::overview:
        std::cout << "rmp " << RMP_VERSION << "\n";
        print_transports();
        return 0;
      case Mode::knobs:
        std::cout << rmp::rt::format_knob_reference();
        return 0;
      case Mode::devices:
        std::cout << "no RDMA support built yet\n";
        return 0;
      case Mode::params: {
        // This environment's settings (RMP_*, RMP_CLI_PARAMS) apply, as they would to a rank;
        // link figures are the declared ones since rinfo runs no calibration.
        rmp::rt::ParamsInput in = rmp::rt::params_input_from_environment();
        if (profile_given) in.env.insert_or_assign("RMP_PROFILE", profile);
        in.transport = transport;
        // The other RMP_ settings (RMP_STATS, RMP_CALIBRATE, ...): refused here as a rank
        // would refuse them at start-up; and they settle the transport's limits as a rank's.
        const rmp::rt::EnvSettings settings = rmp::rt::resolve_env_settings(in);
        in.limits =
            rmp::rt::settled_limits(rmp::rt::declared_limits(transport), transport, settings);
        in.calibrated.reset();
        in.not_calibrated_reason = "rinfo measures nothing; ranks calibrate at start-up";
        const rmp::rt::ParamSet set = rmp::rt::resolve_params(in);
        if (!json) {
          std::cout << "rmp " << RMP_VERSION << " parameters: transport "
                    << (transport.empty() ? "(all)" : transport) << ", profile "
                    << (set.profile.empty() ? "(none)" : set.profile)
                    << ", link figures declared (no calibration)\n";
        }
        std::cout << rmp::rt::format_params(set, json);
        return 0;
      }
    }
  } catch (const rmp::Error& e) {
    std::cerr << "rinfo: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
