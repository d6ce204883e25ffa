// Reads the files RMP_STATS=json:PATH wrote for an N-rank job and checks them: valid JSON
// (tests/json_mini.hpp), the rank and size each file claims, every counter RMP_STATS=1 prints
// present as an integer, and traffic counted (the job sent messages).
// usage: rmp_stats_check N PATH_WITH_%r
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "runtime/stats.hpp"
#include "runtime/stats_path.hpp"
#include "tests/json_mini.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: rmp_stats_check N PATH_WITH_%%r\n");
    return 2;
  }
  const int n = std::atoi(argv[1]);
  int failures = 0;
  auto fail = [&](const std::string& file, const std::string& why) {
    std::fprintf(stderr, "FAIL %s: %s\n", file.c_str(), why.c_str());
    ++failures;
  };
  for (int r = 0; r < n; ++r) {
    const std::string file = rmp::rt::expand_stats_path(argv[2], r, "");
    std::ifstream f(file);
    if (!f) {
      fail(file, "missing");
      continue;
    }
    std::stringstream text;
    text << f.rdbuf();
    std::string error;
    const auto json = rmp::testing::MiniJson::parse(text.str(), &error);
    if (!json) {
      fail(file, error);
      continue;
    }
    auto get = [&](const std::string& key) -> std::string {
      auto it = json->find(key);
      return it == json->end() ? std::string() : it->second;
    };
    if (get("rank") != std::to_string(r)) fail(file, "rank is '" + get("rank") + "'");
    if (get("size") != std::to_string(n)) fail(file, "size is '" + get("size") + "'");
    std::size_t counters = 0;
    for (const auto& [key, value] : *json) counters += key.starts_with("counters.");
    if (counters != rmp::rt::counter_fields().size())
      fail(file, std::to_string(counters) + " counters, RMP_STATS=1 prints " +
                     std::to_string(rmp::rt::counter_fields().size()));
    unsigned long long sent = 0;
    for (const rmp::rt::CounterField& c : rmp::rt::counter_fields()) {
      const std::string v = get("counters." + std::string(c.name));
      if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos) {
        fail(file, "counter " + std::string(c.name) + " is '" + v + "'");
        continue;
      }
      if (c.name.starts_with("msgs_")) sent += std::stoull(v);
    }
    if (n > 1 && sent == 0) fail(file, "no message counted, yet the job sent some");
    if (failures == 0) std::printf("ok %s: rank %d of %d, %llu messages\n", file.c_str(), r, n, sent);
  }
  return failures == 0 ? 0 : 1;
}
