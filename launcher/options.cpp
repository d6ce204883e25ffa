// rlaunch command-line parsing (options.hpp).
#include "launcher/options.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "launcher/errors.hpp"
#include "runtime/bootstrap/wire.hpp"
#include "runtime/params.hpp"

namespace rmp::launcher {
namespace {

// Upper bound on -n for one node: far above any real core count, low enough that a typo
// (-n 1000000) is an error rather than a fork storm.
constexpr int kMaxRanks = 65536;
// --timeout above this is a typo, and would overflow the deadline arithmetic.
constexpr double kMaxTimeoutSeconds = 365.0 * 24 * 3600;

enum class Flag {
  np,
  hosts,
  hostfile,
  agent,
  export_var,
  tag_output,
  timeout,
  bind_to,
  profile,
  param,
  print_params,
  help
};

struct FlagSpec {
  std::string_view long_name;  // without "--"
  char short_name;             // 0: none
  bool takes_value;
  Flag flag;
};

constexpr FlagSpec kFlags[] = {
    {"np", 'n', true, Flag::np},
    {"hosts", 0, true, Flag::hosts},
    {"hostfile", 0, true, Flag::hostfile},
    {"agent", 0, true, Flag::agent},
    {"", 'x', true, Flag::export_var},  // -x only, as in the contract
    {"tag-output", 0, false, Flag::tag_output},
    {"timeout", 0, true, Flag::timeout},
    {"bind-to", 0, true, Flag::bind_to},
    {"profile", 0, true, Flag::profile},
    {"param", 0, true, Flag::param},
    {"print-params", 0, false, Flag::print_params},
    {"help", 'h', false, Flag::help},
};

bool valid_variable_name(std::string_view name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return c == '_' || std::isalnum(static_cast<unsigned char>(c));
  });
}

int parse_np(std::string_view text) {
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < 1 ||
      v > kMaxRanks) {
    throw UsageError("-n: '" + std::string(text) +
                     "' is not a number of ranks (an integer from 1 to " +
                     std::to_string(kMaxRanks) + ")");
  }
  return v;
}

std::chrono::milliseconds parse_timeout(std::string_view text) {
  double seconds = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
      !std::isfinite(seconds) || seconds <= 0) {
    throw UsageError("--timeout: '" + std::string(text) + "' is not a positive number of seconds");
  }
  if (seconds > kMaxTimeoutSeconds)
    throw UsageError("--timeout: '" + std::string(text) +
                     "' seconds is more than a year (at most " +
                     std::to_string(static_cast<long long>(kMaxTimeoutSeconds)) + ")");
  return std::chrono::milliseconds(std::max<long long>(1, std::llround(seconds * 1000)));
}

BindTo parse_bind_to(std::string_view text) {
  if (text == "core") return BindTo::core;
  if (text == "numa") return BindTo::numa;
  if (text == "none") return BindTo::none;
  throw UsageError("--bind-to: '" + std::string(text) + "' is not one of core, numa, none");
}

std::string join(const std::vector<std::string_view>& names) {
  std::string out;
  for (const auto n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

std::string parse_profile(std::string_view text) {
  const auto names = rt::profile_names();
  if (std::find(names.begin(), names.end(), text) == names.end()) {
    throw UsageError("--profile: '" + std::string(text) + "' is not one of " + join(names));
  }
  return std::string(text);
}

std::pair<std::string, std::string> parse_param(std::string_view text) {
  const auto eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    throw UsageError("--param: '" + std::string(text) + "' is not KEY=VALUE");
  }
  const auto key = text.substr(0, eq);
  const auto value = text.substr(eq + 1);
  const auto names = rt::knob_names();  // the knob table: the same names as rinfo --params
  if (std::find(names.begin(), names.end(), key) == names.end()) {
    throw UsageError("--param: unknown parameter '" + std::string(key) +
                     "' (known: " + join(names) + ")");
  }
  // ';' separates entries in RMP_CLI_PARAMS; an empty value is never a valid setting.
  if (value.empty() || value.find(';') != std::string_view::npos) {
    throw UsageError("--param " + std::string(key) + ": value '" + std::string(value) +
                     "' must be non-empty and must not contain ';'");
  }
  return {std::string(key), std::string(value)};
}

std::pair<std::string, std::string> parse_export(std::string_view text) {
  const auto eq = text.find('=');
  const std::string name(text.substr(0, eq));
  if (!valid_variable_name(name)) {
    throw UsageError("-x: '" + std::string(text) +
                     "' is not VAR or VAR=VALUE with VAR a variable name");
  }
  if (std::find(std::begin(wire::kLauncherSetVariables), std::end(wire::kLauncherSetVariables),
                name) != std::end(wire::kLauncherSetVariables)) {
    throw UsageError("-x " + name + ": rlaunch sets this variable itself for every rank");
  }
  if (eq != std::string_view::npos) return {name, std::string(text.substr(eq + 1))};
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) {
    throw UsageError("-x " + name + ": " + name + " is not set in rlaunch's environment (use -x " +
                     name + "=VALUE)");
  }
  return {name, value};
}

const FlagSpec* find_long(std::string_view name) {
  for (const auto& f : kFlags) {
    if (!f.long_name.empty() && f.long_name == name) return &f;
  }
  return nullptr;
}

const FlagSpec* find_short(char name) {
  for (const auto& f : kFlags) {
    if (f.short_name != 0 && f.short_name == name) return &f;
  }
  return nullptr;
}

}  // namespace

LaunchOptions parse_command_line(const std::vector<std::string>& args) {
  LaunchOptions o;
  bool np_given = false, hosts_given = false, hostfile_given = false;
  std::size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // PROGRAM: everything from here is the rank's

    // Which flag, and its value if attached ("--np=4", "-n4", "-xVAR=1").
    const FlagSpec* spec = nullptr;
    std::optional<std::string_view> attached;
    std::string shown;  // the flag as the user wrote it, for messages
    if (arg.starts_with("--")) {
      const auto body = arg.substr(2);
      const auto eq = body.find('=');
      spec = find_long(body.substr(0, eq));
      shown = "--" + std::string(body.substr(0, eq));
      if (eq != std::string_view::npos) attached = body.substr(eq + 1);
    } else {
      spec = find_short(arg[1]);
      shown = std::string(arg.substr(0, 2));
      if (arg.size() > 2) attached = arg.substr(2);
    }
    if (spec == nullptr) throw UsageError("unknown option '" + std::string(arg) + "'");
    std::string_view value;
    if (spec->takes_value) {
      if (attached) {
        value = *attached;
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        throw UsageError(shown + " needs a value");
      }
    } else if (attached) {
      throw UsageError(shown + " takes no value");
    }

    switch (spec->flag) {
      case Flag::np:
        if (np_given) throw UsageError("-n/--np given more than once");
        o.np = parse_np(value);
        np_given = true;
        break;
      case Flag::hosts:
        if (hosts_given) throw UsageError("--hosts given more than once");
        hosts_given = true;
        o.hosts = parse_hosts_option(value);
        break;
      case Flag::hostfile:
        if (hostfile_given) throw UsageError("--hostfile given more than once");
        hostfile_given = true;
        o.hosts = read_hostfile(std::string(value));
        break;
      case Flag::agent:
        if (value.find("{host}") == std::string_view::npos) {
          throw UsageError("--agent: '" + std::string(value) + "' must contain {host}");
        }
        o.agent = std::string(value);
        break;
      case Flag::export_var:
        o.exports.push_back(parse_export(value));
        break;
      case Flag::tag_output:
        o.tag_output = true;
        break;
      case Flag::timeout:
        o.timeout = parse_timeout(value);
        o.timeout_text = std::string(value);
        break;
      case Flag::bind_to:
        o.bind_to = parse_bind_to(value);
        break;
      case Flag::profile:
        o.profile = parse_profile(value);
        break;
      case Flag::param: {
        auto [key, v] = parse_param(value);
        const auto same = std::find_if(o.params.begin(), o.params.end(),
                                       [&](const auto& p) { return p.first == key; });
        if (same != o.params.end()) {
          same->second = std::move(v);  // a later flag wins, as everywhere on a command line
        } else {
          o.params.emplace_back(std::move(key), std::move(v));
        }
        break;
      }
      case Flag::print_params:
        o.print_params = true;
        break;
      case Flag::help:
        o.help = true;
        return o;
    }
  }
  o.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());

  if (hosts_given && hostfile_given) throw UsageError("--hosts and --hostfile cannot be combined");
  if (o.agent && o.hosts.empty()) {
    throw UsageError(
        "--agent is only used with --hosts or --hostfile (it starts rlaunch on the other hosts)");
  }
  if (o.command.empty()) throw UsageError("missing PROGRAM to run");

  // Slots bound the ranks only when every host states them.
  const bool all_slots =
      !o.hosts.empty() && std::all_of(o.hosts.begin(), o.hosts.end(),
                                      [](const HostSlots& h) { return h.slots.has_value(); });
  long long slots = 0;
  for (const auto& h : o.hosts) slots += h.slots.value_or(0);
  if (!np_given) {
    if (!all_slots) throw UsageError("-n N is required (the number of ranks)");
    if (slots > kMaxRanks)
      throw UsageError("the host list gives " + std::to_string(slots) + " slots, more than " +
                       std::to_string(kMaxRanks) + " ranks");
    o.np = static_cast<int>(slots);
  } else if (all_slots && o.np > slots) {
    throw UsageError("-n " + std::to_string(o.np) + " is more than the " + std::to_string(slots) +
                     " slots the host list gives");
  }
  return o;
}

std::optional<HostSlots> first_remote_host(const LaunchOptions& options) {
  for (const auto& h : options.hosts) {
    if (!is_this_node(h.name)) return h;
  }
  return std::nullopt;
}

std::string usage_text() {
  return R"(Usage: rlaunch -n N [options] PROGRAM [ARGS...]

Starts N ranks of PROGRAM on this node and serves their bootstrap.

  -n, --np N                 number of ranks
  --hosts H1:S1,H2:S2,...    hosts and slots (this node only, for now)
  --hostfile FILE            one host a line: "NAME [slots=S]"; '#' starts a comment
  --agent 'CMD ... {host}'   remote-shell template for multi-node launch
  -x VAR[=VALUE]             export VAR (with VALUE, or rlaunch's own value) to every rank
  --tag-output               prefix every output line with [rank]
  --timeout SECONDS          stop the job after SECONDS; exit status 124
  --bind-to core|numa|none   default: core when ranks <= cores, else none
  --profile NAME             tuning profile: latency, storage or training
  --param KEY=VALUE          set one tuning parameter (names as in rinfo --params)
  --print-params             rank 0 prints the effective parameters at start
  -h, --help                 this text

Output goes out whole lines at a time, so ranks' lines never mix; a line still unfinished
after 64 KiB is passed on in 64 KiB lines (rlaunch adds the newlines; each is tagged with
--tag-output).

Exit status: 0 when every rank exits 0 (and every rank that initialised rmp finalised);
otherwise that of the first rank to fail: its exit code, 128+signal, or 1 for an exit 0
without finalize (or without init while other ranks use rmp). 124: --timeout.
2: bad arguments. 127: PROGRAM cannot be executed.
128+signal: rlaunch itself was interrupted (SIGINT, SIGTERM, SIGHUP) before any rank failed;
the signal reaches every rank first. One ignored when rlaunch starts (nohup, a script's
background job) stays ignored by rlaunch and the ranks.
Processes a rank leaves running in the background end with the job (SIGTERM, then SIGKILL).
)";
}

}  // namespace rmp::launcher
