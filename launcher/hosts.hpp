// Host lists for --hosts / --hostfile (API.md). Multi-node launch comes with a later issue; until
// then rlaunch parses and validates them and refuses any list naming another node, rather than
// silently running everything here.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rmp::launcher {

struct HostSlots {
  std::string name;
  std::optional<int> slots;  // nullopt: not given
  std::string origin;        // "--hosts" or "FILE:LINE", for messages
};

// "H1:S1,H2:S2,…" (":S" optional). Throws UsageError naming the bad entry.
std::vector<HostSlots> parse_hosts_option(std::string_view text);
// One host a line, "NAME [slots=S]", '#' starts a comment. Throws UsageError naming FILE:LINE,
// or the file and errno text when it cannot be read.
std::vector<HostSlots> read_hostfile(const std::string& path);

// Whether name denotes the machine rlaunch runs on: localhost, a loopback address, or this
// host's name (full or up to the first dot). No DNS lookup: start-up must not hang on a
// resolver, and a name that only DNS could tie to this node is treated as another node.
bool is_this_node(std::string_view name);

// This machine's host name (as failure messages name it).
std::string this_host_name();

}  // namespace rmp::launcher
