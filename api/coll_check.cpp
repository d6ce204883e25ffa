// RMP_COLL_CHECK (see coll_check.hpp): the exchange of call records and their judgement.
#include "api/coll_check.hpp"

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

// Bytes of count elements of esize (each rank checked that they do not overflow).
std::uint64_t bytes_of(const CallRecord& r) { return r.count * r.esize; }
std::string bytes_text(const CallRecord& r) {
  return std::to_string(r.count) + " elements of " + std::to_string(r.esize) + " bytes";
}

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
               "rank 0 called " + std::string(coll::coll_name(k)) + ", rank " + std::to_string(q) +
                   " called " + coll::coll_name(static_cast<Coll>(all[q].coll)));
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
  for (int q = 0; q < n; ++q) {
    const CallRecord& o = all[q];
    if (q == ref) continue;
    if (is_reduction(k)) {
      if (o.type != r0.type)
        disagree(Errc::invalid_argument, call,
                 "ranks disagree on the element type: " + rank_text(ref, root) + " passed " +
                     coll::type_name(static_cast<detail::Type>(r0.type)) + ", rank " +
                     std::to_string(q) + " " + coll::type_name(static_cast<detail::Type>(o.type)));
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
      if (k != Coll::reduce_scatter && o.count != r0.count)
        disagree(Errc::invalid_count, call,
                 "ranks disagree on the count: " + rank_text(ref, root) + " passed " +
                     std::to_string(r0.count) + ", rank " + std::to_string(q) + " " +
                     std::to_string(o.count));
    } else if (k != Coll::barrier && k != Coll::gatherv && k != Coll::scatterv &&
               k != Coll::allgatherv && k != Coll::alltoallv && bytes_of(o) != bytes_of(r0)) {
      disagree(Errc::invalid_count, call,
               std::string("ranks disagree on ") +
                   (k == Coll::bcast ? "the message size" : "the size of each rank's block") +
                   ": " + rank_text(ref, root) + " passed " + bytes_text(r0) + ", rank " +
                   std::to_string(q) + " " + bytes_text(o));
    }
    if ((k == Coll::reduce_scatter || k == Coll::allgatherv) && o.sum_a != r0.sum_a)
      disagree(Errc::invalid_count, call,
               "ranks disagree on 'counts': rank " + std::to_string(q) + "'s differ from rank " +
                   std::to_string(ref) + "'s");
  }
  if (k == Coll::gatherv || k == Coll::scatterv) {
    // The root's counts × esize against what each rank passes, through the weighted sums.
    std::uint64_t ranks = 0;
    for (int q = 0; q < n; ++q) ranks += pair_weight(root, q, n) * bytes_of(all[q]);
    if (ranks != r0.sum_a)
      disagree(Errc::invalid_count, call,
               "the root's 'counts' do not match the counts the ranks pass (in bytes)");
  }
  if (k == Coll::alltoallv) {
    std::uint64_t sent = 0, expected = 0;
    for (const CallRecord& o : all) sent += o.sum_a, expected += o.sum_b;
    if (sent != expected)
      disagree(Errc::invalid_count, call,
               "some rank's 'scounts' for a rank differ from that rank's 'rcounts' for it (in "
               "bytes)");
  }
}

}  // namespace

std::uint64_t pair_weight(int from, int to, int size) {
  // splitmix64 of the pair's index; odd, so that no difference is multiplied away mod 2^64
  std::uint64_t z = static_cast<std::uint64_t>(from) * static_cast<std::uint64_t>(size) +
                    static_cast<std::uint64_t>(to) + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return (z ^ (z >> 31)) | 1;
}

void agree(const detail::CommImpl& c, const char* call, const CallRecord& mine) {
  std::vector<CallRecord> all(static_cast<std::size_t>(c.size()));
  coll::allgather(c, &mine, all.data(), sizeof(CallRecord));
  if (mine.error == 0) judge(call, all);
}

}  // namespace rmp::api
