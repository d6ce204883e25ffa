// RMP_STATS reports: the text line and the JSON object carry the same counters, the JSON is
// valid (read back by a minimal parser), and PATH expansion and its errors.
#include <gtest/gtest.h>

#include <string>

#include "runtime/params.hpp"
#include "runtime/stats.hpp"
#include "runtime/stats_path.hpp"
#include "tests/json_mini.hpp"

namespace rmp::rt {
namespace {

// Every counter a different value, so a field printed under the wrong name shows.
Counters numbered() {
  Counters c;
  std::uint64_t v = 1000;
  for (const CounterField& f : counter_fields()) c.*f.member = v++;
  return c;
}

TEST(Stats, Json_ParsesBackWithEveryCounter) {
  const Counters c = numbered();
  const std::string text = format_stats_json(c, 3, 8, "job-\"x\"");
  std::string error;
  const auto json = rmp::testing::MiniJson::parse(text, &error);
  ASSERT_TRUE(json) << error << "\n" << text;
  EXPECT_EQ(json->at("rank"), "3");
  EXPECT_EQ(json->at("size"), "8");
  EXPECT_EQ(json->at("job"), "job-\"x\"");  // escaped in the file, intact when read
  std::size_t counters = 0;
  for (const auto& [key, value] : *json) counters += key.starts_with("counters.");
  EXPECT_EQ(counters, counter_fields().size()) << text;
  for (const CounterField& f : counter_fields())
    EXPECT_EQ(json->at("counters." + std::string(f.name)), std::to_string(c.*f.member)) << f.name;
}

TEST(Stats, Text_SameCountersAsJson) {
  const Counters c = numbered();
  const std::string line = format_stats_text(c, 5);
  EXPECT_EQ(line.rfind("rmp[5] stats:", 0), 0u) << line;
  for (const CounterField& f : counter_fields())
    EXPECT_NE(line.find(" " + std::string(f.name) + "=" + std::to_string(c.*f.member)),
              std::string::npos)
        << f.name << " in " << line;
}

TEST(Stats, MiniJson_RejectsBrokenText) {
  for (const char* bad : {"{", "{\"a\": }", "{\"a\": 1,}", "[1 2]", "{\"a\": 01}", "nul"})
    EXPECT_FALSE(rmp::testing::MiniJson::parse(bad)) << bad;
  EXPECT_TRUE(rmp::testing::MiniJson::parse(R"({"a": [1, -2.5e3, "x", true, null], "b": {}})"));
}

TEST(Stats, Path_ExpandsRankAndJob) {
  EXPECT_EQ(expand_stats_path("/tmp/s.%r.json", 7, "j1"), "/tmp/s.7.json");
  EXPECT_EQ(expand_stats_path("%j/%r-%%", 0, "abc"), "abc/0-%");
  EXPECT_EQ(expand_stats_path("plain", 2, "j"), "plain");
}

TEST(Stats, Path_UnknownPercent_ErrorNamesVariable) {
  for (const char* bad : {"/tmp/s.%x", "/tmp/s.%"}) {
    try {
      expand_stats_path(bad, 0, "j");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const rmp::Error& e) {
      EXPECT_EQ(e.code(), Errc::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(std::string("RMP_STATS=json:") + bad),
                std::string::npos)
          << e.what();
    }
  }
}

// The file every rank of a job writes, as rlaunch and each rank check it at start-up.
TEST(Stats, CheckedPath_OneFilePerRank_WritableDirectory) {
  EXPECT_EQ(checked_stats_path("json:/tmp/s.%r.json", 1, 4, "j"), "/tmp/s.1.json");
  EXPECT_EQ(checked_stats_path("json:/tmp/s.json", 0, 1, "j"), "/tmp/s.json");  // one rank
  auto error_for = [](const char* stats, int size, const char* job) -> std::string {
    try {
      checked_stats_path(stats, 0, size, job);
    } catch (const rmp::Error& e) {
      EXPECT_EQ(e.code(), Errc::invalid_argument);
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_for("json:/tmp/s.json", 2, "j").find("all 2 ranks would write the same file"),
            std::string::npos);
  // "%%r" is a literal "%r": still one file for all.
  EXPECT_NE(error_for("json:/tmp/s.%%r.json", 2, "j").find("the same file"), std::string::npos);
  EXPECT_NE(error_for("json:/nonexistent-dir/s.%r.json", 2, "j").find("not writable"),
            std::string::npos);
  // A directory named after the job id: not judged before there is one (rlaunch), judged after.
  EXPECT_EQ(error_for("json:/tmp/%j/s.%r.json", 2, ""), "");
  EXPECT_NE(error_for("json:/tmp/%j/s.%r.json", 2, "no-such-job-dir").find("not writable"),
            std::string::npos);
}

TEST(Stats, Setting_BadValue_ErrorNamesVariableAndValue) {
  ParamsInput in;
  in.env["RMP_STATS"] = "foo";
  try {
    resolve_env_settings(in);
    ADD_FAILURE() << "RMP_STATS=foo was accepted";
  } catch (const rmp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("RMP_STATS=foo"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("json:PATH"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rmp::rt
