// RMP_COLL_CHECK=1: before each blocking collective, the ranks of the communicator exchange
// what they were called with (an allgather of one fixed-size record each) and every rank
// throws the same rmp::Error when they disagree: different collectives, roots, element types,
// ops or counts, or one rank's own arguments rejected. Without it such a program (erroneous in
// MPI) throws on the node-shared paths only at the ranks that wait for the one that differs
// (collectives/node_shared.hpp: CallSig), and on point-to-point algorithms may hang or deliver
// part of the data. The check costs a small allgather per call, so it is off unless asked for
// (as MPICH's collective checking is); the setting is rank 0's (Context::coll_check), so that
// all ranks check or none does.
//
// Not checked: the non-blocking collectives (a blocking exchange at their start could
// deadlock a correct program), and collectives the library runs for itself inside a call (the
// exchanges of dup and split; the calls themselves are checked, as collectives of their own:
// kCallDup, kCallSplit). A collective that only some ranks call still waits for the others, as MPI
// allows. Unlike without the check, a rank whose own arguments are wrong does not throw at
// once: it first takes part in the exchange (so that the others throw too), and so waits for
// them to call a collective.
//
// What the errors name: the rank that differs and both values for the collective, root,
// element type, op, compression and count; for count arrays, the rank and entry that differ
// (gatherv, scatterv, alltoallv: found by a second exchange once the sums disagree) or
// which ranks' arrays differ (allgatherv, reduce_scatter). A rank that rejected its own
// arguments throws its own error; the others name it and its error code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>

#include <rmp/rmp.hpp>

#include "collectives/count_weights.hpp"
#include "collectives/select.hpp"
#include "p2p/engine.hpp"

namespace rmp::api {

// What one rank was called with. Plain bytes on the wire: every field has a fixed size.
struct CallRecord {
  std::uint32_t coll = 0;   // coll::Coll
  std::int32_t root = -1;   // rooted collectives; -1 otherwise
  std::uint64_t count = 0;  // elements
  std::uint64_t esize = 0;  // bytes per element
  std::int32_t type = -1;   // detail::Type; -1 for barrier
  std::int32_t op = -1;     // reductions: Op
  std::int32_t extra = 0;   // allreduce: Compression
  std::int32_t error = 0;   // 1 + Errc when this rank rejected its own arguments
  // Weighted sums (weights from the pair of ranks, so that one entry out of place changes
  // the sum) of count arrays, which cannot travel whole in a fixed-size record:
  //   reduce_scatter, allgatherv: this rank's counts (all ranks must hold the same);
  //   gatherv, scatterv: the root's counts, against the ranks' own counts;
  //   alltoallv: sum_a the send counts, sum_b the receive counts, each weighted by (sender,
  //   receiver): over all ranks the two sums are equal.
  std::uint64_t sum_a = 0, sum_b = 0;
};

// CallRecord::coll of the communicator calls, which are collective but no coll::Coll.
inline constexpr std::uint32_t kCallDup = 200, kCallSplit = 201;
// The record of dup or split, exchanged when checking: a rank calling a collective while
// another creates a communicator got messages of the other call (both use the communicator's
// collective channel) and hung or read them as its own.
void agree_comm_call(const detail::CommImpl& c, std::uint32_t call);

// The weight of entry (from, to) in the sums above.
using coll::pair_weight;

// Whether RMP_COLL_CHECK is on for this communicator's job.
inline bool checking(const detail::CommImpl& c) { return c.engine().context().coll_check(); }

// The count arrays a v-variant's check needs beyond the records: gatherv and scatterv the
// root's counts (a), alltoallv scounts (a) and rcounts (b).
struct CountArrays {
  std::span<const std::size_t> a, b;
};

// Exchanges `mine` with the other ranks' records and, unless `mine` marks this rank's own
// arguments rejected, judges them: throws rmp::Error naming the call, the rank that differs
// and both values. Every rank judges the same records, so all throw alike. Where the count
// arrays of gatherv, scatterv or alltoallv disagree (their weighted sums differ), a second
// small exchange finds the rank and the entry to name.
void agree(const detail::CommImpl& c, const char* call, const CallRecord& mine,
           CountArrays arrays = {});

// The checked form of a collective's argument validation: runs `validate` (this rank's own
// checks, returning what the caller needs), and when checking, `describe` (the record, built
// only from validated arguments; given validate's result when it takes one) and agree(). A
// rank whose own check throws still takes part in the exchange, marked rejected, and then
// rethrows its error: the others throw too instead of waiting for it in the collective.
template <class Validate, class Describe>
auto validated(const detail::CommImpl& c, const char* call, coll::Coll k, Validate&& validate,
               Describe&& describe, CountArrays arrays = {}) {
  if (!checking(c)) [[likely]]
    return validate();
  using Result = decltype(validate());
  std::optional<Result> result;
  CallRecord mine;
  const auto reject = [&](Errc code) {
    CallRecord rejected;
    rejected.coll = static_cast<std::uint32_t>(k);
    rejected.error = 1 + static_cast<std::int32_t>(code);
    agree(c, call, rejected);
  };
  try {
    result.emplace(validate());
    if constexpr (std::is_invocable_v<Describe&, const Result&>) mine = describe(*result);
    else mine = describe();
  } catch (const Error& e) {
    reject(e.code());
    throw;
  } catch (...) {  // std::bad_alloc and the like: still not a reason for the others to hang
    reject(Errc::internal);
    throw;
  }
  mine.coll = static_cast<std::uint32_t>(k);
  agree(c, call, mine, arrays);
  return *result;
}

}  // namespace rmp::api
