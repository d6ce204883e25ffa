#include "runtime/stats_path.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <rmp/rmp.hpp>

namespace rmp::rt {

std::string expand_stats_path(std::string_view pattern, int rank, std::string_view job) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') {
      out += pattern[i];
      continue;
    }
    const char next = i + 1 < pattern.size() ? pattern[i + 1] : '\0';
    if (next == 'r') out += std::to_string(rank);
    else if (next == 'j') out += job;
    else if (next == '%') out += '%';
    else
      throw Error(Errc::invalid_argument, "RMP_STATS=json:" + std::string(pattern) +
                                              ": unknown '%" +
                                              (next ? std::string(1, next) : std::string()) +
                                              "' in PATH (allowed %r = rank, %j = job id, %% = %)");
    ++i;
  }
  return out;
}

std::string checked_stats_path(std::string_view stats, int rank, int size, std::string_view job) {
  const std::string knob = "RMP_STATS=" + std::string(stats);
  const std::string_view pattern = stats.substr(stats.find(':') + 1);
  const std::string path = expand_stats_path(pattern, rank, job);
  // The expansion decides what PATH holds ("%%r" is a literal "%r", not the rank).
  if (size > 1 && expand_stats_path(pattern, 0, job) == expand_stats_path(pattern, 1, job))
    throw Error(Errc::invalid_argument, knob + ": all " + std::to_string(size) +
                                            " ranks would write the same file; put %r (the "
                                            "rank) in PATH");
  const std::size_t cut = pattern.rfind('/');
  if (job.empty() && cut != std::string_view::npos &&
      expand_stats_path(pattern.substr(0, cut), rank, "a") !=
          expand_stats_path(pattern.substr(0, cut), rank, "b"))
    return path;  // the directory is named after a job id not known yet
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw Error(Errc::invalid_argument, knob + ": directory " + dir + " of " + path +
                                            " is not writable (" + std::strerror(errno) + ")");
  return path;
}

}  // namespace rmp::rt
