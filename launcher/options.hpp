// rlaunch's command line (API.md "Command-line and environment contract"). Every flag is
// checked here, before anything is started: unknown flags and malformed values are errors
// (UsageError, exit 2), never ignored.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/binding.hpp"
#include "launcher/hosts.hpp"

namespace rmp::launcher {

struct LaunchOptions {
  bool help = false;
  int np = 0;
  std::vector<std::string> command;  // PROGRAM ARGS…
  // -x: resolved to name and value at parse time (a -x VAR without a value takes rlaunch's).
  std::vector<std::pair<std::string, std::string>> exports;
  bool tag_output = false;
  std::optional<std::chrono::milliseconds> timeout;
  std::string timeout_text;       // as given, for the "timed out after S s" message
  std::optional<BindTo> bind_to;  // nullopt: the contract's default
  std::optional<std::string> profile;
  std::vector<std::pair<std::string, std::string>>
      params;  // --param, first-seen order, last value wins
  bool print_params = false;
  std::vector<HostSlots> hosts;      // from --hosts or --hostfile; empty when neither
  std::optional<std::string> agent;  // --agent template
};

// args: argv without argv[0]. Throws UsageError.
LaunchOptions parse_command_line(const std::vector<std::string>& args);

// The first host of a --hosts/--hostfile list that is not this node, if any.
std::optional<HostSlots> first_remote_host(const LaunchOptions& options);

std::string usage_text();

}  // namespace rmp::launcher
