#include "runtime/log.hpp"

#include <cstdio>
#include <string>

namespace rmp::rt {
namespace {
LogLevel g_level = LogLevel::warn;
int g_rank = 0;
}  // namespace

void set_log(LogLevel level, int rank) {
  g_level = level;
  g_rank = rank;
}

LogLevel log_level() { return g_level; }

void log_write(LogLevel level, std::string_view msg) {
  static const char* names[] = {"", "warning", "info", "debug"};
  std::string line = "rmp[" + std::to_string(g_rank) + "] " + names[static_cast<int>(level)] +
                     ": " + std::string(msg) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace rmp::rt
