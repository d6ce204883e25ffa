// RMP_STATS=json:PATH: the file each rank writes. Apart from the counters (runtime/stats.hpp)
// because rlaunch checks the setting too, before the ranks start (it links the knob table's
// object library, which holds this, and no messaging code).
#pragma once

#include <string>
#include <string_view>

namespace rmp::rt {

// PATH of RMP_STATS=json:PATH with %r → rank, %j → job id, %% → %. Throws rmp::Error
// (invalid_argument) naming RMP_STATS for any other % sequence.
std::string expand_stats_path(std::string_view pattern, int rank, std::string_view job);

// The file `stats` ("json:PATH") names for `rank` of `size`. Throws rmp::Error
// (invalid_argument) naming RMP_STATS when the ranks would all write one file (no %r with more
// than one rank), for an unknown % sequence, or when the file's directory is not writable
// (not judged where the directory holds %j and `job` is empty: rlaunch, before it has one).
std::string checked_stats_path(std::string_view stats, int rank, int size, std::string_view job);

}  // namespace rmp::rt
