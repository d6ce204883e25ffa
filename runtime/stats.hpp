// Per-rank counters (RMP_STATS, tests). Plain integers bumped on the data path; no atomics:
// the engine is driven by one thread at a time. A counter that collectives bump from the
// caller's thread while a progress thread (RMP_PROGRESS_THREAD=1) may bump it too, or that
// waits of several application threads bump (idle yields, sleeps and naps), goes through
// count_shared.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace rmp::rt {

inline void count_shared(std::uint64_t& counter, std::uint64_t n) {
  std::atomic_ref<std::uint64_t>(counter).fetch_add(n, std::memory_order_relaxed);
}

struct Counters {
  std::uint64_t msgs_inline = 0, bytes_inline = 0;   // eager-inline sends
  std::uint64_t msgs_eager = 0, bytes_eager = 0;     // eager-copy sends
  std::uint64_t msgs_rndv = 0, bytes_rndv = 0;       // rendezvous sends
  std::uint64_t msgs_self = 0, bytes_self = 0;       // sends to own rank
  std::uint64_t credit_stalls = 0;        // eager sends sent as rendezvous for want of credits
  std::uint64_t credit_returns = 0;       // explicit credit-return messages sent
  std::uint64_t unexpected_msgs = 0;      // arrivals that found no posted receive
  std::uint64_t unexpected_peak = 0;      // most unexpected messages queued at once
  std::uint64_t unexpected_eager_bytes = 0;       // eager payload buffered now
  std::uint64_t unexpected_eager_bytes_peak = 0;  // most eager payload buffered at once
  std::uint64_t rndv_fragments = 0;       // get fragments completed (receiver side)
  // Rendezvous sends whose data the receiver read by a mechanism its transport was still trying
  // (RMP_SHM_COPY=auto: warm-up and re-measuring uses; sender side).
  std::uint64_t rndv_trial_gets = 0;
  std::uint64_t chunks_in_flight_peak = 0;  // most pipelined-copy chunks filled, not yet drained
  std::uint64_t ring_full = 0;            // sends that found the ring full and were queued
  std::uint64_t shm_gets_single = 0;      // gets served by cross-memory attach
  std::uint64_t shm_gets_chunks = 0;      // gets served by the pipelined chunk copy
  std::uint64_t shm_gets_streaming = 0;   // of those, with streaming stores into the chunks
  std::uint64_t shm_gets_split = 0;       // gets completed by the split copy (requester and owner
                                          // each copy a part with CMA; small ones, or all once the
                                          // owner could not write, the requester alone)
  std::uint64_t shm_split_helped = 0;     // pieces this rank wrote for a peer's split get
  std::uint64_t shm_gets_waited = 0;      // gets that waited for another mechanism's to end
  std::uint64_t shm_gets_both_ways = 0;   // gets started with traffic both ways (RMP_SHM_COPY=auto)
  std::uint64_t shm_gets_settled = 0;     // gets made settled (rt::GetHints): the sender's tuner
                                          // explored rendezvous with them
  std::uint64_t shm_huge_blocks = 0;      // 2 MiB blocks of buffers that others read or write
                                          // by cross-memory attach put on huge pages
  std::uint64_t shm_huge_refused = 0;     // asks for such blocks the kernel refused
  std::uint64_t shm_huge_deferred = 0;    // turns to ask put off, the time budget spent
  std::uint64_t shm_huge_us = 0;          // microseconds spent asking the kernel for them
  std::uint64_t shm_eager_streamed = 0;   // eager payloads stored with streaming stores
  std::uint64_t shm_eager_timed = 0;      // eager payloads timed for the store choice
  std::uint64_t shm_segments = 0;         // pair segments this rank mapped
  // Communicators' node segments (collectives/node_shared.cpp) this rank mapped new, and those
  // it took over from an ended communicator of the same members (counted at the first collective
  // that uses it); of the latter, those a dup or split agreed on as it made the communicator
  // (the others were agreed on at that first collective).
  std::uint64_t coll_segments = 0, coll_segments_reused = 0;
  std::uint64_t coll_segments_adopted = 0;
  std::uint64_t endpoints = 0;            // peers connected (on first use, or all at start)
  std::uint64_t idle_yields = 0;          // waits that gave the core away (sched_yield)
  std::uint64_t idle_sleeps = 0;          // waits that slept (wait_mode=block)
  std::uint64_t idle_naps = 0;            // moments given away by waits idle NapClock::kAfter
                                          // (10 ms) and by a busy progress thread (spin.hpp)
  std::uint64_t cpu_moves = 0;            // moves off a CPU crowded with ranks (unbound, when
                                          // ranks outnumber cores; collectives/node_shared.cpp)
  // Collective calls whose path was chosen by measurement (collectives/node_shared.hpp,
  // PathChoice): the node-shared path, the point-to-point algorithm, or the node-shared
  // direct path (reduce, allreduce, allgather(v), alltoall: cross-memory attach).
  std::uint64_t coll_shm_path = 0, coll_p2p_path = 0;
  std::uint64_t coll_direct_path = 0;
  // RMP_TUNE=adaptive (runtime/tuner.hpp): its decisions.
  std::uint64_t tune_explorations = 0;    // messages or gets sent with a neighbouring setting
  std::uint64_t tune_moves = 0;           // times a size bucket moved to a faster setting
  std::uint64_t tune_answers = 0;         // sends alone that answered the pair's leader in
                                          // kind, by another protocol than their bucket's
                                          // current one (p2p/protocol_tuner.hpp)
  std::uint64_t tune_eager_above = 0;     // eager sends larger than eager_threshold
  std::uint64_t tune_rndv_below = 0;      // rendezvous sends not larger than eager_threshold
  std::uint64_t tune_gets_retuned = 0;    // chunked gets with another chunk size or depth
};

// Counters of this process's default context (world()). Valid between Environment's
// construction and destruction.
Counters& counters();

// Every counter RMP_STATS reports, by name, in report order (the text line and the JSON object
// are both made from this list, so they cannot disagree).
struct CounterField {
  std::string_view name;
  std::uint64_t Counters::*member;
};
std::span<const CounterField> counter_fields();

// RMP_STATS=1: one line "rmp[R] stats: name=value …".
std::string format_stats_text(const Counters& c, int rank);
// RMP_STATS=json:PATH: {"rank": R, "size": N, "job": "…", "counters": {"name": value, …}}.
std::string format_stats_json(const Counters& c, int rank, int size, std::string_view job);

}  // namespace rmp::rt
