// Which bootstrap a process gets, decided from the variables rlaunch sets (DESIGN §4): none of
// them → a singleton; all of them → the launcher's store; anything in between is a broken
// launch and an error that says which variable is missing or malformed.
#include <charconv>
#include <cstdlib>
#include <string>
#include <vector>

#include <rmp/rmp.hpp>

#include "runtime/bootstrap/bootstrap.hpp"
#include "runtime/bootstrap/wire.hpp"

namespace rmp::rt {
namespace {

std::optional<std::string_view> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string_view(v);
}

int parse_int(const char* name, std::string_view text, int min, int max) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < min ||
      value > max) {
    throw Error(Errc::bootstrap, "bootstrap: " + std::string(name) + "='" + std::string(text) +
                                     "' is not an integer in [" + std::to_string(min) + ", " +
                                     std::to_string(max) + "]");
  }
  return value;
}

int optional_int(const char* name, int fallback, int min, int max) {
  const auto text = env(name);
  return text ? parse_int(name, *text, min, max) : fallback;
}

// The job id becomes part of /dev/shm names, so only characters safe in a file name.
void check_job_id(std::string_view id) {
  const bool ok =
      !id.empty() && id.size() <= 64 &&
      id.find_first_not_of("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_") ==
          std::string_view::npos;
  if (!ok) {
    throw Error(Errc::bootstrap, "bootstrap: " + std::string(wire::kEnvJobId) + "='" +
                                     std::string(id) + "' must be 1 to 64 letters, digits or '_'");
  }
}

}  // namespace

std::unique_ptr<Bootstrap> make_bootstrap_from_environment() {
  const char* const required[] = {wire::kEnvRank, wire::kEnvSize, wire::kEnvKvs,
                                  wire::kEnvJobToken};
  std::vector<std::string> set, unset;
  for (const char* name : required) (env(name) ? set : unset).emplace_back(name);
  if (set.empty()) return make_singleton_bootstrap();
  if (!unset.empty()) {
    std::string list;
    for (const auto& n : unset) list += (list.empty() ? "" : ", ") + n;
    throw Error(Errc::bootstrap,
                "bootstrap: " + set.front() + " is set but " + list +
                    (unset.size() == 1 ? " is" : " are") +
                    " not; start the program with rlaunch, or with none of these set "
                    "to run it as a single rank");
  }

  JobIdentity id;
  id.size = parse_int(wire::kEnvSize, *env(wire::kEnvSize), 1, 1 << 30);
  id.rank = parse_int(wire::kEnvRank, *env(wire::kEnvRank), 0, id.size - 1);
  id.local_size = optional_int(wire::kEnvLocalSize, id.size, 1, id.size);
  id.local_rank = optional_int(wire::kEnvLocalRank, id.rank, 0, id.local_size - 1);
  id.node_id = optional_int(wire::kEnvNodeId, 0, 0, id.size - 1);
  id.local_cores = optional_int(wire::kEnvLocalCores, 0, 1, 1 << 30);
  const auto job_id = env(wire::kEnvJobId);
  if (!job_id) {
    // Ranks must agree on it to find each other's segments, and it must not come from the
    // token, so there is nothing to fall back on.
    throw Error(Errc::bootstrap, "bootstrap: " + std::string(wire::kEnvKvs) + " is set but " +
                                     wire::kEnvJobId + " is not (rlaunch sets both)");
  }
  check_job_id(*job_id);
  id.job_id = std::string(*job_id);

  const auto token = *env(wire::kEnvJobToken);
  if (token.empty()) {
    throw Error(Errc::bootstrap, "bootstrap: " + std::string(wire::kEnvJobToken) + " is empty");
  }
  return connect_launcher_bootstrap(std::move(id), *env(wire::kEnvKvs), token);
}

}  // namespace rmp::rt
