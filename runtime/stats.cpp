// RMP_STATS reports: the counter list and its two renderings (text line, JSON object).
#include "runtime/stats.hpp"

#include "runtime/params.hpp"

namespace rmp::rt {
namespace {

// unexpected_eager_bytes (buffered now) is left out: at finalize it is 0 by construction.
constexpr CounterField kFields[] = {
    {"msgs_inline", &Counters::msgs_inline},
    {"bytes_inline", &Counters::bytes_inline},
    {"msgs_eager", &Counters::msgs_eager},
    {"bytes_eager", &Counters::bytes_eager},
    {"msgs_rndv", &Counters::msgs_rndv},
    {"bytes_rndv", &Counters::bytes_rndv},
    {"msgs_self", &Counters::msgs_self},
    {"bytes_self", &Counters::bytes_self},
    {"credit_stalls", &Counters::credit_stalls},
    {"credit_returns", &Counters::credit_returns},
    {"unexpected_msgs", &Counters::unexpected_msgs},
    {"unexpected_peak", &Counters::unexpected_peak},
    {"unexpected_eager_bytes_peak", &Counters::unexpected_eager_bytes_peak},
    {"rndv_fragments", &Counters::rndv_fragments},
    {"rndv_trial_gets", &Counters::rndv_trial_gets},
    {"chunks_in_flight_peak", &Counters::chunks_in_flight_peak},
    {"ring_full", &Counters::ring_full},
    {"shm_gets_single", &Counters::shm_gets_single},
    {"shm_gets_chunks", &Counters::shm_gets_chunks},
    {"shm_gets_streaming", &Counters::shm_gets_streaming},
    {"shm_gets_split", &Counters::shm_gets_split},
    {"shm_split_helped", &Counters::shm_split_helped},
    {"shm_gets_waited", &Counters::shm_gets_waited},
    {"shm_gets_both_ways", &Counters::shm_gets_both_ways},
    {"shm_gets_settled", &Counters::shm_gets_settled},
    {"shm_huge_blocks", &Counters::shm_huge_blocks},
    {"shm_huge_refused", &Counters::shm_huge_refused},
    {"shm_huge_deferred", &Counters::shm_huge_deferred},
    {"shm_huge_us", &Counters::shm_huge_us},
    {"shm_eager_streamed", &Counters::shm_eager_streamed},
    {"shm_eager_timed", &Counters::shm_eager_timed},
    {"shm_segments", &Counters::shm_segments},
    {"coll_segments", &Counters::coll_segments},
    {"coll_segments_reused", &Counters::coll_segments_reused},
    {"coll_segments_adopted", &Counters::coll_segments_adopted},
    {"endpoints", &Counters::endpoints},
    {"idle_yields", &Counters::idle_yields},
    {"idle_sleeps", &Counters::idle_sleeps},
    {"idle_naps", &Counters::idle_naps},
    {"cpu_moves", &Counters::cpu_moves},
    {"coll_shm_path", &Counters::coll_shm_path},
    {"coll_p2p_path", &Counters::coll_p2p_path},
    {"coll_direct_path", &Counters::coll_direct_path},
    {"tune_explorations", &Counters::tune_explorations},
    {"tune_moves", &Counters::tune_moves},
    {"tune_answers", &Counters::tune_answers},
    {"tune_eager_above", &Counters::tune_eager_above},
    {"tune_rndv_below", &Counters::tune_rndv_below},
    {"tune_gets_retuned", &Counters::tune_gets_retuned},
};

}  // namespace

std::span<const CounterField> counter_fields() { return kFields; }

std::string format_stats_text(const Counters& c, int rank) {
  std::string s = "rmp[" + std::to_string(rank) + "] stats:";
  for (const CounterField& f : kFields)
    s += " " + std::string(f.name) + "=" + std::to_string(c.*f.member);
  return s + "\n";
}

std::string format_stats_json(const Counters& c, int rank, int size, std::string_view job) {
  std::string s = "{\"rank\": " + std::to_string(rank) + ", \"size\": " + std::to_string(size) +
                  ", \"job\": " + json_quoted(job) + ", \"counters\": {";
  for (std::size_t i = 0; i < std::size(kFields); ++i)
    s += (i ? ",\n  " : "\n  ") + json_quoted(kFields[i].name) + ": " +
         std::to_string(c.*kFields[i].member);
  return s + "\n}}\n";
}

}  // namespace rmp::rt
