// Library logging: warnings only unless RMP_LOG asks for more (DESIGN §6). Messages go to
// stderr with the rank, one line each.
#pragma once

#include <string_view>

#include "runtime/params.hpp"  // LogLevel

namespace rmp::rt {

void set_log(LogLevel level, int rank);
LogLevel log_level();
void log_write(LogLevel level, std::string_view msg);

inline void log_warn(std::string_view m) {
  if (log_level() >= LogLevel::warn) log_write(LogLevel::warn, m);
}
inline void log_info(std::string_view m) {
  if (log_level() >= LogLevel::info) log_write(LogLevel::info, m);
}
inline void log_debug(std::string_view m) {
  if (log_level() >= LogLevel::debug) log_write(LogLevel::debug, m);
}

}  // namespace rmp::rt
