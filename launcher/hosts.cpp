// Host list parsing (hosts.hpp).
#include "launcher/hosts.hpp"

#include <unistd.h>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <fstream>
#include <string>

#include "launcher/errors.hpp"

namespace rmp::launcher {
namespace {

std::optional<int> parse_slots(std::string_view text) {
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < 1)
    return std::nullopt;
  return v;
}

bool valid_host_name(std::string_view name) {
  return !name.empty() && name.find_first_of(" \t,:=#") == std::string_view::npos;
}

std::string_view trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::string_view short_name(std::string_view name) { return name.substr(0, name.find('.')); }

std::string lowered(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

}  // namespace

std::vector<HostSlots> parse_hosts_option(std::string_view text) {
  std::vector<HostSlots> hosts;
  if (text.empty()) throw UsageError("--hosts: empty host list");
  std::size_t start = 0;
  for (;;) {
    const auto comma = text.find(',', start);
    const auto entry = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    HostSlots h{std::string(entry), std::nullopt, "--hosts"};
    if (const auto colon = entry.rfind(':'); colon != std::string_view::npos) {
      h.name = std::string(entry.substr(0, colon));
      h.slots = parse_slots(entry.substr(colon + 1));
      if (!h.slots) {
        throw UsageError("--hosts: '" + std::string(entry) +
                         "': slots must be a positive integer (HOST:SLOTS)");
      }
    }
    if (!valid_host_name(h.name)) {
      throw UsageError("--hosts: '" + std::string(entry) +
                       "' is not a host name (expected HOST or HOST:SLOTS)");
    }
    hosts.push_back(std::move(h));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return hosts;
}

std::vector<HostSlots> read_hostfile(const std::string& path) {
  errno = 0;
  std::ifstream in(path);
  if (!in) {
    throw UsageError("--hostfile: cannot read '" + path +
                     "': " + std::strerror(errno != 0 ? errno : EIO));
  }
  std::vector<HostSlots> hosts;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::string_view rest = line;
    rest = trim(rest.substr(0, rest.find('#')));
    if (rest.empty()) continue;
    const std::string origin = path + ":" + std::to_string(number);
    const auto space = rest.find_first_of(" \t");
    HostSlots h{std::string(rest.substr(0, space)), std::nullopt, origin};
    if (!valid_host_name(h.name)) {
      throw UsageError("--hostfile " + origin + ": '" + h.name +
                       "' is not a host name (expected NAME [slots=S])");
    }
    if (space != std::string_view::npos) {
      const auto attr = trim(rest.substr(space));
      if (!attr.starts_with("slots=") || !(h.slots = parse_slots(attr.substr(6)))) {
        throw UsageError("--hostfile " + origin +
                         ": expected 'NAME [slots=S]' with S a positive integer, got '" +
                         std::string(rest) + "'");
      }
    }
    hosts.push_back(std::move(h));
  }
  if (in.bad()) throw UsageError("--hostfile: error reading '" + path + "'");
  if (hosts.empty()) throw UsageError("--hostfile: '" + path + "' names no host");
  return hosts;
}

std::string this_host_name() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

// Host names are compared without case, as DNS compares them (LOCALHOST, Node7).
bool is_this_node(std::string_view given) {
  const std::string lower = lowered(given);
  const std::string_view name(lower);
  if (name == "localhost" || name == "localhost.localdomain" || name == "::1" ||
      name.starts_with("127.")) {
    return true;
  }
  char buf[HOST_NAME_MAX + 1] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return false;
  const std::string self_lower = lowered(buf);
  const std::string_view self(self_lower);
  if (name == self) return true;
  // "node7" and "node7.cluster" are the same machine; "node7.a" and "node7.b" may not be.
  const bool name_is_short = name.find('.') == std::string_view::npos;
  const bool self_is_short = self.find('.') == std::string_view::npos;
  return (name_is_short || self_is_short) && short_name(name) == short_name(self);
}

}  // namespace rmp::launcher
