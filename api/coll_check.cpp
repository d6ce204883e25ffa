// RMP_COLL_CHECK (see coll_check.hpp): the exchange of call records and their judgement.
#include "api/coll_check.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "collectives/collectives.hpp"
#include "collectives/reduce_ops.hpp"

namespace rmp::api {
namespace {

static_assert(std::is_trivially_copyable_v<CallRecord> && sizeof(CallRecord) == 56);

using coll::Coll;

bool is_reduction(Coll k) {
  return k == Coll::reduce || k == Coll::allreduce || k == Coll::reduce_scatter ||
         k == Coll::reduce_scatter_block || k == Coll::scan || k == Coll::exscan;
}
bool is_rooted(Coll k) {
  return k == Coll::bcast || k == Coll::reduce || k == Coll::gather || k == Coll::gatherv ||
         k == Coll::scatter || k == Coll::scatterv;
}

std::string rank_text(int r, int root) {
  return "rank " + std::to_string(r) + (r == root ? " (the root)" : "");
}

const char* errc_text(std::int32_t e) {
  return e > 0 ? errc_name(static_cast<Errc>(e - 1)) : "none";
}

[[noreturn]] void disagree(Errc code, const char* call, const std::string& what) {
  throw Error(code, std::string(call) + ": " + what +
                        " (RMP_COLL_CHECK: every rank of a communicator must call the same "
                        "collective with matching arguments)");
}

std::string call_name(std::uint32_t k) {
  if (k == kCallDup) return "dup";
  if (k == kCallSplit) return "split";
  return k < coll::kCollCount ? coll::coll_name(static_cast<Coll>(k))
                              : "an unknown call (" + std::to_string(k) + ")";
}

std::string type_text(std::int32_t t) { return coll::type_name(static_cast<detail::Type>(t)); }

// The verdicts every rank reaches alike from the records; the count arrays of the v-variants
// (which travel as sums) are judged after this in agree().
void judge(const char* call, const std::vector<CallRecord>& all) {
  const int n = static_cast<int>(all.size());
  // A rank that rejected its own arguments: it throws its own error; the others say who.
  for (int q = 0; q < n; ++q)
    if (all[q].error > 0)
      throw Error(static_cast<Errc>(all[q].error - 1),
                  std::string(call) + ": rank " + std::to_string(q) + " rejected its arguments (" +
                      errc_text(all[q].error) + "; its own error says which) (RMP_COLL_CHECK)");
  const CallRecord& first = all[0];
  const auto k = static_cast<Coll>(first.coll);
  for (int q = 1; q < n; ++q)
    if (all[q].coll != first.coll)
      disagree(Errc::invalid_argument, call,
               "rank 0 called " + call_name(first.coll) + ", rank " + std::to_string(q) +
                   " called " + call_name(all[q].coll));
  int root = -1;
  if (is_rooted(k)) {
    root = first.root;
    for (int q = 1; q < n; ++q)
      if (all[q].root != root)
        disagree(Errc::invalid_rank, call,
                 "ranks disagree on the root: rank 0 passed " + std::to_string(root) + ", rank " +
                     std::to_string(q) + " passed " + std::to_string(all[q].root));
  }
  // The rank the others are compared with: the root where there is one.
  const int ref = root >= 0 ? root : 0;
  const CallRecord& r0 = all[static_cast<std::size_t>(ref)];
  const bool variable = k == Coll::gatherv || k == Coll::scatterv || k == Coll::allgatherv ||
                        k == Coll::alltoallv || k == Coll::reduce_scatter;
  for (int q = 0; q < n; ++q) {
    const CallRecord& o = all[q];
    if (q == ref) continue;
    // Element types match wherever there are elements (MPI: the type signatures must).
    if (k != Coll::barrier && o.type != r0.type)
      disagree(Errc::invalid_argument, call,
               "ranks disagree on the element type: " + rank_text(ref, root) + " passed " +
                   type_text(r0.type) + ", rank " + std::to_string(q) + " " + type_text(o.type));
    if (is_reduction(k)) {
      if (o.op != r0.op)
        disagree(Errc::invalid_argument, call,
                 "ranks disagree on the op: " + rank_text(ref, root) + " passed " +
                     coll::op_name(static_cast<Op>(r0.op)) + ", rank " + std::to_string(q) + " " +
                     coll::op_name(static_cast<Op>(o.op)));
      if (o.extra != r0.extra)
        disagree(Errc::invalid_argument, call,
                 "ranks disagree on the compression: rank " + std::to_string(ref) + " passed " +
                     std::to_string(r0.extra) + ", rank " + std::to_string(q) + " " +
                     std::to_string(o.extra) + " (0 none, 1 fp16, 2 bf16)");
    }
    if (k != Coll::barrier && !variable && o.count != r0.count)
      disagree(Errc::invalid_count, call,
               std::string("ranks disagree on the count") +
                   (k == Coll::gather || k == Coll::scatter || k == Coll::allgather ||
                            k == Coll::alltoall
                        ? " of each rank's block"
                        : "") +
                   ": " + rank_text(ref, root) + " passed " + std::to_string(r0.count) + ", rank " +
                   std::to_string(q) + " " + std::to_string(o.count));
    if ((k == Coll::reduce_scatter || k == Coll::allgatherv) && o.sum_a != r0.sum_a)
      disagree(Errc::invalid_count, call,
               "ranks disagree on 'counts': rank " + std::to_string(q) + "'s differ from rank " +
                   std::to_string(ref) + "'s");
  }
}

// gatherv, scatterv: whether the root's counts match what the ranks pass (through the weighted
// sums, alike on every rank); if not, the root finds the first rank that differs and tells
// the others, so that every rank throws the same error naming it.
void judge_rooted_v(const detail::CommImpl& c, const char* call, const std::vector<CallRecord>& all,
                    std::span<const std::size_t> root_counts) {
  const int n = c.size(), root = all[0].root;
  std::uint64_t ranks = 0;
  for (int q = 0; q < n; ++q) ranks += pair_weight(root, q, n) * all[q].count;
  if (ranks == all[static_cast<std::size_t>(root)].sum_a) return;
  std::int64_t found[3] = {-1, 0, 0};  // rank, its count, the root's counts[rank]
  if (c.rank() == root) {
    for (int q = 0; q < n && found[0] < 0; ++q)
      if (root_counts[static_cast<std::size_t>(q)] != all[q].count)
        found[0] = q, found[1] = static_cast<std::int64_t>(all[q].count),
        found[2] = static_cast<std::int64_t>(root_counts[static_cast<std::size_t>(q)]);
  }
  coll::bcast(c, found, sizeof found, root);
  disagree(Errc::invalid_count, call,
           found[0] < 0 ? std::string("the root's 'counts' do not match the counts the ranks pass")
                        : "rank " + std::to_string(found[0]) + " passed count " +
                              std::to_string(found[1]) + ", the root's counts[" +
                              std::to_string(found[0]) + "] is " + std::to_string(found[2]));
}

// alltoallv: whether every rank's scounts for a rank match that rank's rcounts for it (through
// the weighted sums); if not, the ranks exchange their scounts, each finds the first sender
// whose count differs from its rcounts, and all name the same pair.
void judge_alltoallv(const detail::CommImpl& c, const char* call,
                     const std::vector<CallRecord>& all, std::span<const std::size_t> scounts,
                     std::span<const std::size_t> rcounts) {
  const int n = c.size();
  std::uint64_t sent = 0, expected = 0;
  for (const CallRecord& o : all) sent += o.sum_a, expected += o.sum_b;
  if (sent == expected) return;
  const auto un = static_cast<std::size_t>(n);
  std::vector<std::uint64_t> mine(scounts.begin(),
                                  scounts.begin() + static_cast<std::ptrdiff_t>(un)),
      theirs(un);
  // theirs[q]: rank q's scounts for this rank.
  coll::alltoall(c, mine.data(), theirs.data(), sizeof(std::uint64_t));
  std::int64_t found[3] = {-1, 0, 0};  // sender, its scounts[this rank], rcounts[sender]
  for (std::size_t q = 0; q < un && found[0] < 0; ++q)
    if (theirs[q] != rcounts[q])
      found[0] = static_cast<std::int64_t>(q), found[1] = static_cast<std::int64_t>(theirs[q]),
      found[2] = static_cast<std::int64_t>(rcounts[q]);
  std::vector<std::int64_t> everyone(3 * un);
  coll::allgather(c, found, everyone.data(), sizeof found);
  for (int r = 0; r < n; ++r) {
    const std::int64_t* f = &everyone[3 * static_cast<std::size_t>(r)];
    if (f[0] < 0) continue;
    disagree(Errc::invalid_count, call,
             "rank " + std::to_string(f[0]) + "'s scounts[" + std::to_string(r) + "] is " +
                 std::to_string(f[1]) + ", rank " + std::to_string(r) + "'s rcounts[" +
                 std::to_string(f[0]) + "] is " + std::to_string(f[2]));
  }
  disagree(Errc::invalid_count, call,
           "the ranks' 'scounts' do not match the 'rcounts' of the ranks they send to");
}

}  // namespace

void agree(const detail::CommImpl& c, const char* call, const CallRecord& mine,
           CountArrays arrays) {
  std::vector<CallRecord> all(static_cast<std::size_t>(c.size()));
  coll::allgather(c, &mine, all.data(), sizeof(CallRecord));
  if (mine.error != 0) return;
  judge(call, all);
  // Only past judge(), which every rank passed alike: the follow-up exchanges below are then
  // entered by all or none.
  const auto k = static_cast<Coll>(mine.coll);
  if (k == Coll::gatherv || k == Coll::scatterv) judge_rooted_v(c, call, all, arrays.a);
  if (k == Coll::alltoallv) judge_alltoallv(c, call, all, arrays.a, arrays.b);
}

void agree_comm_call(const detail::CommImpl& c, std::uint32_t call) {
  CallRecord mine;
  mine.coll = call;
  agree(c, call_name(call).c_str(), mine);
}

}  // namespace rmp::api
