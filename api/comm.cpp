// Comm: argument validation (API.md §Errors) and the hand-off to p2p and the collectives.
#include <algorithm>
#include <array>
#include <bit>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <rmp/rmp.hpp>

#include "api/coll_check.hpp"
#include "api/state.hpp"
#include "collectives/collectives.hpp"
#include "collectives/node_shared.hpp"
#include "collectives/nonblocking.hpp"
#include "collectives/reduce_ops.hpp"

namespace rmp {

using api::CallRecord;
using api::check_buffer;
using api::check_rank;
using api::check_tag;
using api::checked_bytes;
using api::checked_total;
using api::comm_of;
using api::pair_weight;
using api::refuse_in_place;
using api::validated;
using coll::Coll;
using p2p::Channel;

namespace {

// Context ids: each communicator takes one base id (two channels), the same at every member;
// no two live communicators of a rank may share one. The world has 0. A communicator that
// ended at a rank gives its id back there once no receive is posted on it and no message waits
// unmatched in it (Engine::release_context: a receive posted before the free still waits for
// its message on that id; one withdrawn keeps the id out for good). A dup or split takes the
// id every member freed most recently when all propose the same one (the usual case: the same
// members made and freed the same communicators), else their lowest free one when that is the
// same everywhere, else (a second allreduce) the lowest of the first kWindow ids free at every
// member (agree_context), else a new one: the maximum of the members' next ids, fresh
// everywhere. So codes that make and free communicators in a loop keep reusing a few ids (and
// their matching queues go with them). New ids run out after kLastContext (base id x 2 +
// channel fills a header's 32 bits): dup and split then fail on every member alike.
std::uint32_t g_next_context = 1;
constexpr std::uint32_t kLastContext = (std::uint32_t{1} << 31) - 1;
// Ids of communicators that ended here: released (not checked yet, or busy when last checked)
// and free (reusable; the most recently freed last). The free ones kept are bounded; the oldest
// goes first. Guarded by g_ids_mu: a communicator may end on the progress thread (a non-blocking
// collective's hold on it), while the engine's lock is held there.
std::mutex g_ids_mu;
std::vector<std::uint32_t> g_released;
std::deque<std::uint32_t> g_free;
constexpr std::size_t kFreeKept = 4096;
constexpr std::uint32_t kWindow = 256;  // ids a second agreement looks at (agree_context)

// A communicator whose id goes back to released when it ends. Made before its members agree on
// the id (set_context), so that nothing after the agreement can fail at one member only; until
// then its id is 0, which is never released (the world's).
std::shared_ptr<detail::CommImpl> made_comm(detail::Engine& e, int rank,
                                            std::vector<int> world_of) {
  return std::shared_ptr<detail::CommImpl>(
      new detail::CommImpl(e, 0, rank, std::move(world_of)), [](detail::CommImpl* p) {
        const std::uint32_t id = p->base_context();
        delete p;
        if (id == 0) return;
        try {
          std::lock_guard<std::mutex> g(g_ids_mu);
          g_released.push_back(id);
        } catch (...) {  // no memory to note it: the id is not reused
        }
      });
}

// The ids this rank proposes for a new communicator (0: none), after checking the released
// ones: the one it freed most recently and its lowest free one. (The engine's lock is taken with
// g_ids_mu free: a communicator ending on the progress thread takes them the other way round.)
struct Proposal {
  std::uint32_t newest = 0, lowest = 0;
};
Proposal free_ids(detail::Engine& e) {
  std::vector<std::uint32_t> check;
  {
    std::lock_guard<std::mutex> g(g_ids_mu);
    check.swap(g_released);
  }
  std::vector<std::uint32_t> freed, busy;
  for (const std::uint32_t id : check) {
    const detail::Engine::Release r = e.release_context(id);
    if (r == detail::Engine::Release::free) freed.push_back(id);
    else if (r == detail::Engine::Release::busy) busy.push_back(id);
  }
  std::lock_guard<std::mutex> g(g_ids_mu);
  g_released.insert(g_released.end(), busy.begin(), busy.end());
  for (const std::uint32_t id : freed) {
    if (g_free.size() == kFreeKept) g_free.pop_front();
    g_free.push_back(id);
  }
  if (g_free.empty()) return {};
  return {g_free.back(), *std::min_element(g_free.begin(), g_free.end())};
}

struct Agreed {
  std::uint32_t context;
  bool same_offer;  // every member of this rank's group offered the same state, not 0
};

// The context id, and with it (the same allreduce) whether the members of each new
// communicator offered the same kept node-shared state (coll::KeptState; 0: none): a dup has one
// group, a split one per colour (`groups`; this rank's is `group`, none for a rank of colour
// undefined: pass `groups`). Each value v the members must have in common goes as v and ~v,
// a group's offers in that group's two slots (0 elsewhere, which the maximum ignores): the
// maximum holds the largest v and the complement of the smallest, equal to this member's v and
// ~v only if every member's is the same. The id: the free one every member freed most recently
// (a loop of dups), else the lowest free one of every member (members that freed communicators
// in different orders: their newest differ for good), else the lowest free at all in a window
// (a split that a rank left with colour undefined: that rank's lowest is one the others still
// use, and with the above its newest too), else a new one.
Agreed agree_context(const detail::CommImpl& c, const char* call, std::uint64_t offer = 0,
                     std::size_t groups = 1, std::size_t group = 0) {
  const Proposal p = free_ids(c.engine());
  constexpr std::size_t kOffers = 5;  // next, newest, ~newest, lowest, ~lowest
  std::vector<std::uint64_t> mine(kOffers + 2 * groups, 0), all(mine.size(), 0);
  mine[0] = g_next_context;
  mine[1] = p.newest;
  mine[2] = ~std::uint64_t{p.newest};
  mine[3] = p.lowest;
  mine[4] = ~std::uint64_t{p.lowest};
  if (group < groups) {
    mine[kOffers + 2 * group] = offer;
    mine[kOffers + 1 + 2 * group] = ~offer;
  }
  coll::allreduce(c, mine.data(), all.data(), mine.size(), sizeof mine[0], detail::Type::u64,
                  Op::max);
  auto same = [&](std::size_t i) {
    return mine[i] != 0 && all[i] == mine[i] && ~all[i + 1] == mine[i];
  };
  const bool same_offer = group < groups && same(kOffers + 2 * group);
  auto take = [](std::uint32_t id) {  // (g_free changes only here: the proposal is still in it)
    std::lock_guard<std::mutex> g(g_ids_mu);
    if (auto it = std::find(g_free.begin(), g_free.end(), id); it != g_free.end()) g_free.erase(it);
    return id;
  };
  if (same(1)) return {take(p.newest), same_offer};
  if (same(3)) return {take(p.lowest), same_offer};
  // No proposal agreed (every member knows it alike): the lowest id of the first kWindow that is
  // free at every member, in a second allreduce (bitwise and of the free ones).
  // Decided on agreed figures only (every member's lowest free id in the window), so that all
  // members take part or none.
  if (const std::uint64_t min_lowest = ~all[4]; min_lowest != 0 && all[3] <= kWindow) {
    std::array<std::uint64_t, kWindow / 64> bits{}, common{};
    {
      std::lock_guard<std::mutex> g(g_ids_mu);
      for (const std::uint32_t id : g_free)
        if (id >= 1 && id <= kWindow) bits[(id - 1) / 64] |= std::uint64_t{1} << ((id - 1) % 64);
    }
    coll::allreduce(c, bits.data(), common.data(), bits.size(), sizeof bits[0], detail::Type::u64,
                    Op::band);
    for (std::size_t w = 0; w < common.size(); ++w)
      if (common[w])
        return {take(static_cast<std::uint32_t>(w * 64 + std::countr_zero(common[w]) + 1)),
                same_offer};
  }
  if (all[0] > kLastContext)
    throw Error(Errc::internal, std::string(call) + ": no communicator context ids left (" +
                                    std::to_string(kLastContext) +
                                    " were given out in this job, and no ended communicator's "
                                    "id is free at every member)");
  g_next_context = static_cast<std::uint32_t>(all[0]) + 1;
  return {static_cast<std::uint32_t>(all[0]), same_offer};
}

void check_op(const char* call, Op op, detail::Type t) {
  if (!coll::op_applies(op, t))
    throw Error(Errc::invalid_argument,
                std::string(call) + ": argument 'op' = " + coll::op_name(op) +
                    " does not apply to elements of type " + coll::type_name(t));
}

// A count array needs an entry per rank. A longer one is accepted, its entries past size()
// unread, as MPI reads the first size() entries of its arrays: a program may pass arrays sized
// for the world to a call on a smaller communicator.
void check_counts(const char* call, const char* arg, std::span<const std::size_t> v, int size) {
  if (v.size() < static_cast<std::size_t>(size))
    throw Error(Errc::invalid_count,
                std::string(call) + ": argument '" + arg + "' has " + std::to_string(v.size()) +
                    " entries, the communicator has " + std::to_string(size) + " ranks");
}

// RMP_COLL_CHECK records (coll_check.hpp). A data-moving collective's: count and element type
// (and the root where there is one).
CallRecord moving(std::size_t count, std::size_t esize, detail::Type t, int root = -1) {
  return CallRecord{
      .root = root, .count = count, .esize = esize, .type = static_cast<std::int32_t>(t)};
}

// A reduction's: count, element type and op.
CallRecord reduction(std::size_t count, std::size_t esize, detail::Type t, Op op, int root = -1) {
  return CallRecord{.root = root,
                    .count = count,
                    .esize = esize,
                    .type = static_cast<std::int32_t>(t),
                    .op = static_cast<std::int32_t>(op)};
}

// gatherv, scatterv: every rank's own count; the root's also the weighted sum of its counts,
// which the others compare with the counts the ranks pass.
CallRecord rooted_v(const detail::CommImpl& c, std::size_t count, std::size_t esize, detail::Type t,
                    int root, std::span<const std::size_t> counts) {
  CallRecord r{.root = root, .count = count, .esize = esize, .type = static_cast<std::int32_t>(t)};
  if (c.rank() == root) r.sum_a = coll::weighted_counts(counts, c.size(), root);
  return r;
}

// Largest element index a (counts, displs) layout touches, checked for overflow.
std::size_t layout_extent(const char* call, const char* counts_arg, const char* displs_arg,
                          std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                          int size, std::size_t esize) {
  std::size_t end = 0;
  int last = 0;  // the rank whose block ends last
  for (int i = 0; i < size; ++i) {
    const std::size_t c = counts[static_cast<std::size_t>(i)],
                      d = displs[static_cast<std::size_t>(i)];
    if (c > SIZE_MAX - d)
      throw Error(Errc::invalid_count, std::string(call) + ": " + displs_arg + "[" +
                                           std::to_string(i) + "] = " + std::to_string(d) + " + " +
                                           counts_arg + "[" + std::to_string(i) +
                                           "] = " + std::to_string(c) + " overflows");
    if (c && c + d > end) {
      end = c + d;
      last = i;
    }
  }
  if (std::size_t bytes; api::bytes_overflow(end, esize, bytes)) {
    const auto at = static_cast<std::size_t>(last);
    throw Error(Errc::invalid_count,
                std::string(call) + ": " + displs_arg + "[" + std::to_string(last) +
                    "] = " + std::to_string(displs[at]) + " + " + counts_arg + "[" +
                    std::to_string(last) + "] = " + std::to_string(counts[at]) + " elements of " +
                    std::to_string(esize) + " bytes reaches beyond the address space");
  }
  return end;
}

// allgather, alltoall: one block of count elements per rank, in and out; the block's bytes.
std::size_t check_blocks(const detail::CommImpl& c, const char* call, const void* in, bool inplace,
                         const void* out, std::size_t count, std::size_t esize) {
  const std::size_t bytes = checked_bytes(call, "count", count, esize);
  checked_total(call, count, c.size(), esize);
  if (!inplace) check_buffer(call, "in", in, count);
  check_buffer(call, "out", out, count);
  return bytes;
}

// gatherv, scatterv on every rank: the root, this rank's count and its own buffer.
void check_rooted_v(const detail::CommImpl& c, const char* call, const char* arg, const void* buf,
                    std::size_t count, std::size_t esize, int root) {
  check_rank(call, "root", root, c.size(), false);
  checked_bytes(call, "count", count, esize);
  check_buffer(call, arg, buf, count);
}

// gatherv, scatterv at the root: one count and displacement per rank, the buffer `arg`
// holding their layout, and its own count where counts[root] says.
void check_root_layout(const detail::CommImpl& c, const char* call, const char* arg,
                       const void* buf, std::size_t count, std::span<const std::size_t> counts,
                       std::span<const std::size_t> displs, std::size_t esize) {
  check_counts(call, "counts", counts, c.size());
  check_counts(call, "displs", displs, c.size());
  check_buffer(call, arg, buf,
               layout_extent(call, "counts", "displs", counts, displs, c.size(), esize));
  const std::size_t at_root = counts[static_cast<std::size_t>(c.rank())];
  if (at_root != count)
    throw Error(Errc::invalid_count, std::string(call) + ": the root's count " +
                                         std::to_string(count) +
                                         " differs from counts[root] = " + std::to_string(at_root));
}

// Runs a collective's algorithm. A message longer than a rank's receive (the ranks called it with
// different counts) fails in point-to-point, whose error names an internal receive and tag: it
// is said again as the collective's, naming the argument. Errors that name the call already
// pass as they are; the block errors that scatter and alltoall share with scatterv and
// alltoallv (block_too_long) are said as this call's.
template <class Run>
void run_collective(const char* call, const char* arg, Run&& run) {
  try {
    run();
  } catch (const Error& e) {
    const std::string what = e.what();
    if (e.code() != Errc::truncate || what.starts_with(std::string(call) + ":")) throw;
    if (const std::string v = std::string(call) + "v:"; what.starts_with(v))
      throw Error(Errc::truncate, std::string(call) + ":" + what.substr(v.size()));
    throw Error(Errc::truncate, std::string(call) + ": " + arg +
                                    ": this rank got more data than its " + arg +
                                    " holds (did the ranks call " + call +
                                    " with different counts? RMP_COLL_CHECK=1 compares every "
                                    "call's): " +
                                    what);
  }
}

}  // namespace

namespace api {
ContextIds exchange_context_ids(ContextIds ids) {
  std::lock_guard<std::mutex> g(g_ids_mu);
  ContextIds before{g_next_context, std::vector<std::uint32_t>(g_free.begin(), g_free.end())};
  before.ended.insert(before.ended.end(), g_released.begin(), g_released.end());
  g_next_context = ids.next;
  g_released = std::move(ids.ended);
  g_free.clear();
  return before;
}
}  // namespace api

Comm::Comm() = default;
Comm::~Comm() = default;
Comm::Comm(const Comm&) = default;
Comm::Comm(Comm&&) noexcept = default;
Comm& Comm::operator=(const Comm&) = default;
Comm& Comm::operator=(Comm&&) noexcept = default;
Comm::Comm(std::shared_ptr<detail::CommImpl> impl) : impl_(std::move(impl)) {}

int Comm::rank() const { return comm_of(*this, "rank").rank(); }
int Comm::size() const { return comm_of(*this, "size").size(); }
// A handle kept past finalize names no usable communicator any more (every call on it throws).
bool Comm::valid() const { return impl_ != nullptr && !api::process().finalized; }

Comm Comm::dup() const {
  detail::CommImpl& c = comm_of(*this, "dup");
  if (api::checking(c)) [[unlikely]]
    api::agree_comm_call(c, api::kCallDup);
  std::vector<int> world_of(static_cast<std::size_t>(c.size()));
  for (int i = 0; i < c.size(); ++i) world_of[static_cast<std::size_t>(i)] = c.world_rank(i);
  auto d = made_comm(c.engine(), c.rank(), std::move(world_of));
  coll::KeptState kept(c);
  const Agreed a = agree_context(c, "dup", kept.id());
  d->set_context(a.context);
  if (a.same_offer) kept.adopt(*d);
  return Comm(std::move(d));
}

Comm Comm::split(int color, int key) const {
  detail::CommImpl& c = comm_of(*this, "split");
  if (api::checking(c)) [[unlikely]]
    api::agree_comm_call(c, api::kCallSplit);
  const auto n = static_cast<std::size_t>(c.size());
  std::vector<int> mine{color, key}, all(2 * n);
  coll::allgather(c, mine.data(), all.data(), 2 * sizeof(int));
  // A bad color is refused on every rank, after the exchange all of them join: refused before
  // it at its own rank only, it left the others waiting in the exchange until finalize gave up.
  auto bad = [](int col) { return col < 0 && col != undefined; };
  if (bad(color))
    throw Error(Errc::invalid_argument, "split: argument 'color' = " + std::to_string(color) +
                                            " must be non-negative or rmp::undefined");
  for (std::size_t i = 0; i < n; ++i)
    if (bad(all[2 * i]))
      throw Error(Errc::invalid_argument, "split: rank " + std::to_string(i) +
                                              " of the communicator passed argument " +
                                              "'color' = " + std::to_string(all[2 * i]) +
                                              ", which must be non-negative or rmp::undefined");
  // The groups that may offer kept state: colours (but undefined) of two ranks or more, in
  // order (a group of one has no node-shared state, so it needs no slot in the agreement).
  std::vector<int> given, colours;
  for (std::size_t i = 0; i < n; ++i)
    if (all[2 * i] != undefined) given.push_back(all[2 * i]);
  std::sort(given.begin(), given.end());
  for (std::size_t i = 1; i < given.size(); ++i)
    if (given[i] == given[i - 1] && (colours.empty() || colours.back() != given[i]))
      colours.push_back(given[i]);
  std::vector<int> world_of;  // this rank's group: ranks with its colour by key, then old rank
  int my_rank = 0;
  std::shared_ptr<detail::CommImpl> d;
  std::optional<coll::KeptState> kept;
  std::size_t group = colours.size();
  if (color != undefined) {
    std::vector<int> members;
    for (std::size_t i = 0; i < n; ++i)
      if (all[2 * i] == color) members.push_back(static_cast<int>(i));
    std::stable_sort(members.begin(), members.end(),
                     [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (members[i] == c.rank()) my_rank = static_cast<int>(i);
      world_of.push_back(c.world_rank(members[i]));
    }
    d = made_comm(c.engine(), my_rank, world_of);
    kept.emplace(c.engine(), std::move(world_of));
    if (auto it = std::lower_bound(colours.begin(), colours.end(), color);
        it != colours.end() && *it == color)
      group = static_cast<std::size_t>(it - colours.begin());
  }
  const Agreed a = agree_context(c, "split", kept ? kept->id() : 0, colours.size(), group);
  if (color == undefined) {  // the id serves the others; here it is free again at once
    std::lock_guard<std::mutex> g(g_ids_mu);
    g_released.push_back(a.context);
    return Comm();
  }
  d->set_context(a.context);
  if (a.same_offer) kept->adopt(*d);
  return Comm(std::move(d));
}

// ---------------------------------------------------------------------------------------------
// Point to point

void Comm::send_(const void* buf, std::size_t count, std::size_t esize, Type, int dest, int tag,
                 bool sync) const {
  const char* call = sync ? "ssend" : "send";
  detail::CommImpl& c = comm_of(*this, call);
  check_rank(call, "dest", dest, c.size(), false);
  check_tag(call, "tag", tag, false);
  const std::size_t bytes = checked_bytes(call, "count", count, esize);
  check_buffer(call, "buf", buf, count);
  if (dest == c.rank() && c.engine().self_send_would_block(c, Channel::user, bytes, tag, sync))
      [[unlikely]]
    throw Error(Errc::invalid_argument,
                std::string(call) + ": a blocking " + (sync ? "synchronous " : "") + "send of " +
                    std::to_string(bytes) + " bytes to this rank itself (dest " +
                    std::to_string(dest) + ", tag " + std::to_string(tag) +
                    ") would wait forever: it " +
                    (sync ? "completes"
                          : "is too large to buffer (or the eager credit is spent) "
                            "and completes") +
                    " only once a matching receive is posted, none is, and none can be while it "
                    "blocks (post the receive first with irecv, or use isend)");
  if (sync)
    c.engine().wait(c.engine().isend(c, Channel::user, buf, bytes, dest, tag, true, "ssend"));
  else c.engine().send(c, Channel::user, buf, bytes, dest, tag);
}

Status Comm::recv_(void* buf, std::size_t count, std::size_t esize, Type, int source,
                   int tag) const {
  detail::CommImpl& c = comm_of(*this, "recv");
  check_rank("recv", "source", source, c.size(), true);
  check_tag("recv", "tag", tag, true);
  const std::size_t bytes = checked_bytes("recv", "count", count, esize);
  check_buffer("recv", "buf", buf, count);
  return c.engine().wait(c.engine().irecv(c, Channel::user, buf, bytes, source, tag, "recv"));
}

Request Comm::isend_(const void* buf, std::size_t count, std::size_t esize, Type, int dest,
                     int tag) const {
  detail::CommImpl& c = comm_of(*this, "isend");
  check_rank("isend", "dest", dest, c.size(), false);
  check_tag("isend", "tag", tag, false);
  const std::size_t bytes = checked_bytes("isend", "count", count, esize);
  check_buffer("isend", "buf", buf, count);
  return Request(c.engine().isend(c, Channel::user, buf, bytes, dest, tag, false, "isend"));
}

Request Comm::irecv_(void* buf, std::size_t count, std::size_t esize, Type, int source,
                     int tag) const {
  detail::CommImpl& c = comm_of(*this, "irecv");
  check_rank("irecv", "source", source, c.size(), true);
  check_tag("irecv", "tag", tag, true);
  const std::size_t bytes = checked_bytes("irecv", "count", count, esize);
  check_buffer("irecv", "buf", buf, count);
  return Request(c.engine().irecv(c, Channel::user, buf, bytes, source, tag, "irecv"));
}

Status Comm::sendrecv_(const void* sbuf, std::size_t scount, int dest, int stag, void* rbuf,
                       std::size_t rcount, int source, int rtag, std::size_t esize, Type) const {
  detail::CommImpl& c = comm_of(*this, "sendrecv");
  check_rank("sendrecv", "dest", dest, c.size(), false);
  check_tag("sendrecv", "stag", stag, false);
  check_rank("sendrecv", "source", source, c.size(), true);
  check_tag("sendrecv", "rtag", rtag, true);
  const std::size_t sbytes = checked_bytes("sendrecv", "scount", scount, esize);
  const std::size_t rbytes = checked_bytes("sendrecv", "rcount", rcount, esize);
  check_buffer("sendrecv", "sbuf", sbuf, scount);
  check_buffer("sendrecv", "rbuf", rbuf, rcount);
  detail::Engine& e = c.engine();
  // The send first: when the partner's rendezvous message is already here, the receive's
  // read then starts knowing this rank has a message of its own in flight to it (traffic
  // both ways: each side copies its own direction, Endpoint::get).
  detail::RequestState* s = e.isend(c, Channel::user, sbuf, sbytes, dest, stag, false, "sendrecv");
  detail::RequestState* r = nullptr;
  try {
    r = e.irecv(c, Channel::user, rbuf, rbytes, source, rtag, "sendrecv");
  } catch (...) {
    e.wait(s);
    throw;
  }
  Status st;
  try {
    st = e.wait(r);
  } catch (...) {
    e.wait(s);
    throw;
  }
  e.wait(s);
  return st;
}

Status Comm::probe(int source, int tag) const {
  detail::CommImpl& c = comm_of(*this, "probe");
  check_rank("probe", "source", source, c.size(), true);
  check_tag("probe", "tag", tag, true);
  return c.engine().probe(c, Channel::user, source, tag);
}

std::optional<Status> Comm::iprobe(int source, int tag) const {
  detail::CommImpl& c = comm_of(*this, "iprobe");
  check_rank("iprobe", "source", source, c.size(), true);
  check_tag("iprobe", "tag", tag, true);
  return c.engine().iprobe(c, Channel::user, source, tag);
}

// ---------------------------------------------------------------------------------------------
// Collectives

// Each collective validates its arguments through api::validated (coll_check.hpp): its own
// checks, and with RMP_COLL_CHECK=1 the record the ranks compare.

void Comm::barrier() const {
  detail::CommImpl& c = comm_of(*this, "barrier");
  validated(
      c, "barrier", Coll::barrier, [] { return 0; }, [] { return CallRecord{}; });
  coll::barrier(c);
}

void Comm::bcast_(void* buf, bool inplace, std::size_t count, std::size_t esize, Type t,
                  int root) const {
  detail::CommImpl& c = comm_of(*this, "bcast");
  const std::size_t bytes = validated(
      c, "bcast", Coll::bcast,
      [&] {
        if (inplace) refuse_in_place("bcast", "buf");
        check_rank("bcast", "root", root, c.size(), false);
        const std::size_t b = checked_bytes("bcast", "count", count, esize);
        check_buffer("bcast", "buf", buf, count);
        return b;
      },
      [&] { return moving(count, esize, t, root); });
  run_collective("bcast", "count", [&] { coll::bcast(c, buf, bytes, root); });
}

void Comm::reduce_(const void* in, bool inplace, void* out, std::size_t count, std::size_t esize,
                   Type t, Op op, int root) const {
  detail::CommImpl& c = comm_of(*this, "reduce");
  validated(
      c, "reduce", Coll::reduce,
      [&] {
        check_rank("reduce", "root", root, c.size(), false);
        checked_bytes("reduce", "count", count, esize);
        check_op("reduce", op, t);
        const bool at_root = c.rank() == root;
        if (inplace && !at_root)
          throw Error(Errc::invalid_argument,
                      "reduce: in_place is allowed only at the root (rank " + std::to_string(root) +
                          "), this is rank " + std::to_string(c.rank()));
        if (!inplace) check_buffer("reduce", "in", in, count);
        if (at_root) check_buffer("reduce", "out", out, count);
        return 0;
      },
      [&] { return reduction(count, esize, t, op, root); });
  run_collective("reduce", "count",
                 [&] { coll::reduce(c, inplace ? nullptr : in, out, count, esize, t, op, root); });
}

void Comm::allreduce_(const void* in, bool inplace, void* out, std::size_t count, std::size_t esize,
                      Type t, Op op, Compression comp, bool explicit_compression) const {
  detail::CommImpl& c = comm_of(*this, "allreduce");
  comp = validated(
      c, "allreduce", Coll::allreduce,
      [&] {
        checked_bytes("allreduce", "count", count, esize);
        check_op("allreduce", op, t);
        if (!inplace) check_buffer("allreduce", "in", in, count);
        check_buffer("allreduce", "out", out, count);
        // An explicit Compression argument decides; otherwise the allreduce_compress knob
        // applies to the calls it can apply to (the same on every rank: rank 0's setting).
        const bool compressible =
            (t == Type::f32 || t == Type::f64) && (op == Op::sum || op == Op::min || op == Op::max);
        if (explicit_compression && comp != Compression::none && !compressible)
          throw Error(Errc::invalid_argument,
                      std::string("allreduce: argument 'compression' is ") +
                          (comp == Compression::fp16 ? "fp16" : "bf16") +
                          ", which applies to float/double with sum, min or max, not op " +
                          coll::op_name(op) + " on " + coll::type_name(t));
        if (explicit_compression) return comp;
        return compressible ? c.engine().context().coll_params().allreduce_compress
                            : Compression::none;
      },
      [&](Compression used) {
        CallRecord r = reduction(count, esize, t, op);
        r.extra = static_cast<std::int32_t>(used);  // explicit or the knob's: what will run
        return r;
      });
  run_collective("allreduce", "count", [&] {
    coll::allreduce(c, inplace ? nullptr : in, out, count, esize, t, op, comp);
  });
}

void Comm::gather_(const void* in, bool inplace, std::size_t count, void* out, std::size_t esize,
                   Type t, int root) const {
  detail::CommImpl& c = comm_of(*this, "gather");
  const std::size_t bytes = validated(
      c, "gather", Coll::gather,
      [&] {
        check_rank("gather", "root", root, c.size(), false);
        const std::size_t b = checked_bytes("gather", "count", count, esize);
        checked_total("gather", count, c.size(), esize);
        const bool at_root = c.rank() == root;
        if (inplace && !at_root)
          throw Error(Errc::invalid_argument,
                      "gather: in: in_place is allowed only at the root (rank " +
                          std::to_string(root) + "), this is rank " + std::to_string(c.rank()));
        if (!inplace) check_buffer("gather", "in", in, count);
        if (at_root) check_buffer("gather", "out", out, count);
        return b;
      },
      [&] { return moving(count, esize, t, root); });
  run_collective("gather", "count",
                 [&] { coll::gather(c, inplace ? nullptr : in, out, bytes, root); });
}

void Comm::scatter_(const void* in, bool inplace, std::size_t count, void* out, std::size_t esize,
                    Type t, int root) const {
  detail::CommImpl& c = comm_of(*this, "scatter");
  const std::size_t bytes = validated(
      c, "scatter", Coll::scatter,
      [&] {
        if (inplace) refuse_in_place("scatter", "in");
        check_rank("scatter", "root", root, c.size(), false);
        const std::size_t b = checked_bytes("scatter", "count", count, esize);
        checked_total("scatter", count, c.size(), esize);
        if (c.rank() == root) check_buffer("scatter", "in", in, count);
        check_buffer("scatter", "out", out, count);
        return b;
      },
      [&] { return moving(count, esize, t, root); });
  run_collective("scatter", "count", [&] { coll::scatter(c, in, out, bytes, root); });
}

void Comm::allgather_(const void* in, bool inplace, std::size_t count, void* out, std::size_t esize,
                      Type t) const {
  detail::CommImpl& c = comm_of(*this, "allgather");
  const std::size_t bytes = validated(
      c, "allgather", Coll::allgather,
      [&] { return check_blocks(c, "allgather", in, inplace, out, count, esize); },
      [&] { return moving(count, esize, t); });
  run_collective("allgather", "count",
                 [&] { coll::allgather(c, inplace ? nullptr : in, out, bytes); });
}

void Comm::alltoall_(const void* in, bool inplace, std::size_t count, void* out, std::size_t esize,
                     Type t) const {
  detail::CommImpl& c = comm_of(*this, "alltoall");
  const std::size_t bytes = validated(
      c, "alltoall", Coll::alltoall,
      [&] { return check_blocks(c, "alltoall", in, inplace, out, count, esize); },
      [&] { return moving(count, esize, t); });
  run_collective("alltoall", "count",
                 [&] { coll::alltoall(c, inplace ? nullptr : in, out, bytes); });
}

void Comm::reduce_scatter_block_(const void* in, bool inplace, void* out, std::size_t count,
                                 std::size_t esize, Type t, Op op) const {
  detail::CommImpl& c = comm_of(*this, "reduce_scatter_block");
  validated(
      c, "reduce_scatter_block", Coll::reduce_scatter_block,
      [&] {
        checked_total("reduce_scatter_block", count, c.size(), esize);
        check_op("reduce_scatter_block", op, t);
        if (!inplace) check_buffer("reduce_scatter_block", "in", in, count);
        check_buffer("reduce_scatter_block", "out", out, count);
        return 0;
      },
      [&] { return reduction(count, esize, t, op); });
  std::vector<std::size_t> counts(static_cast<std::size_t>(c.size()), count);
  run_collective("reduce_scatter_block", "count", [&] {
    coll::reduce_scatter(c, inplace ? nullptr : in, out, counts, esize, t, op, true);
  });
}

void Comm::scan_(const void* in, bool inplace, void* out, std::size_t count, std::size_t esize,
                 Type t, Op op, bool exclusive) const {
  const char* call = exclusive ? "exscan" : "scan";
  detail::CommImpl& c = comm_of(*this, call);
  validated(
      c, call, exclusive ? Coll::exscan : Coll::scan,
      [&] {
        checked_bytes(call, "count", count, esize);
        check_op(call, op, t);
        if (!inplace) check_buffer(call, "in", in, count);
        check_buffer(call, "out", out, count);
        return 0;
      },
      [&] { return reduction(count, esize, t, op); });
  run_collective(call, "count", [&] {
    coll::scan(c, inplace ? nullptr : in, out, count, esize, t, op, exclusive);
  });
}

void Comm::gatherv_(const void* in, bool inplace, std::size_t count, void* out, sizes counts,
                    sizes displs, std::size_t esize, Type t, int root) const {
  detail::CommImpl& c = comm_of(*this, "gatherv");
  validated(
      c, "gatherv", Coll::gatherv,
      [&] {
        // In place at the root, as gather (its block is already at its place in out).
        if (inplace && c.rank() != root)
          throw Error(Errc::invalid_argument,
                      "gatherv: in: in_place is allowed only at the root (rank " +
                          std::to_string(root) + "), this is rank " + std::to_string(c.rank()));
        check_rooted_v(c, "gatherv", inplace ? "out" : "in", inplace ? out : in, count, esize,
                       root);
        if (c.rank() == root)
          check_root_layout(c, "gatherv", "out", out, count, counts, displs, esize);
        return 0;
      },
      [&] { return rooted_v(c, count, esize, t, root, counts); }, {counts, {}});
  run_collective("gatherv", "counts", [&] {
    coll::gatherv(c, inplace ? nullptr : in, count, out, counts, displs, esize, root);
  });
}

void Comm::scatterv_(const void* in, bool inplace, sizes counts, sizes displs, void* out,
                     std::size_t count, std::size_t esize, Type t, int root) const {
  detail::CommImpl& c = comm_of(*this, "scatterv");
  validated(
      c, "scatterv", Coll::scatterv,
      [&] {
        if (inplace) refuse_in_place("scatterv", "in");
        check_rooted_v(c, "scatterv", "out", out, count, esize, root);
        if (c.rank() == root)
          check_root_layout(c, "scatterv", "in", in, count, counts, displs, esize);
        return 0;
      },
      [&] { return rooted_v(c, count, esize, t, root, counts); }, {counts, {}});
  run_collective("scatterv", "count",
                 [&] { coll::scatterv(c, in, counts, displs, out, count, esize, root); });
}

void Comm::reduce_scatter_(const void* in, bool inplace, void* out, sizes counts, std::size_t esize,
                           Type t, Op op) const {
  detail::CommImpl& c = comm_of(*this, "reduce_scatter");
  validated(
      c, "reduce_scatter", Coll::reduce_scatter,
      [&] {
        check_counts("reduce_scatter", "counts", counts, c.size());
        check_op("reduce_scatter", op, t);
        std::size_t total = 0;
        for (int i = 0; i < c.size(); ++i) {
          const std::size_t n = counts[static_cast<std::size_t>(i)];
          if (n > SIZE_MAX - total)
            throw Error(Errc::invalid_count, "reduce_scatter: the sum of 'counts' overflows");
          total += n;
        }
        checked_bytes("reduce_scatter", "counts", total, esize);
        if (!inplace) check_buffer("reduce_scatter", "in", in, total);
        // In place, `out` holds the input too: all of it.
        check_buffer("reduce_scatter", "out", out,
                     inplace ? total : counts[static_cast<std::size_t>(c.rank())]);
        return 0;
      },
      [&] {
        CallRecord r = reduction(0, esize, t, op);
        r.sum_a = coll::weighted_counts(counts, c.size());
        return r;
      });
  run_collective("reduce_scatter", "counts", [&] {
    coll::reduce_scatter(c, inplace ? nullptr : in, out, counts, esize, t, op);
  });
}

void Comm::allgatherv_(const void* in, bool inplace, std::size_t count, void* out, sizes counts,
                       sizes displs, std::size_t esize, Type t) const {
  detail::CommImpl& c = comm_of(*this, "allgatherv");
  validated(
      c, "allgatherv", Coll::allgatherv,
      [&] {
        check_counts("allgatherv", "counts", counts, c.size());
        check_counts("allgatherv", "displs", displs, c.size());
        checked_bytes("allgatherv", "count", count, esize);
        if (!inplace) check_buffer("allgatherv", "in", in, count);
        check_buffer(
            "allgatherv", "out", out,
            layout_extent("allgatherv", "counts", "displs", counts, displs, c.size(), esize));
        if (counts[static_cast<std::size_t>(c.rank())] != count)
          throw Error(Errc::invalid_count,
                      "allgatherv: this rank's count " + std::to_string(count) +
                          " differs from counts[rank] = " +
                          std::to_string(counts[static_cast<std::size_t>(c.rank())]));
        return 0;
      },
      [&] {
        CallRecord r = moving(count, esize, t);
        r.sum_a = coll::weighted_counts(counts, c.size());
        return r;
      });
  run_collective("allgatherv", "counts", [&] {
    coll::allgatherv(c, inplace ? nullptr : in, count, out, counts, displs, esize);
  });
}

void Comm::alltoallv_(const void* in, bool inplace, sizes scounts, sizes sdispls, void* out,
                      sizes rcounts, sizes rdispls, std::size_t esize, Type t) const {
  detail::CommImpl& c = comm_of(*this, "alltoallv");
  validated(
      c, "alltoallv", Coll::alltoallv,
      [&] {
        if (inplace) refuse_in_place("alltoallv", "in");
        check_counts("alltoallv", "scounts", scounts, c.size());
        check_counts("alltoallv", "sdispls", sdispls, c.size());
        check_counts("alltoallv", "rcounts", rcounts, c.size());
        check_counts("alltoallv", "rdispls", rdispls, c.size());
        check_buffer(
            "alltoallv", "in", in,
            layout_extent("alltoallv", "scounts", "sdispls", scounts, sdispls, c.size(), esize));
        check_buffer(
            "alltoallv", "out", out,
            layout_extent("alltoallv", "rcounts", "rdispls", rcounts, rdispls, c.size(), esize));
        return 0;
      },
      [&] {
        // Entry (sender, receiver): this rank's sends weighted as (me, q), its receives as
        // (q, me); over all ranks both sums weigh every pair once.
        const int n = c.size(), me = c.rank();
        CallRecord r = moving(0, esize, t);
        for (int q = 0; q < n; ++q) {
          const auto i = static_cast<std::size_t>(q);
          r.sum_a += pair_weight(me, q, n) * scounts[i];
          r.sum_b += pair_weight(q, me, n) * rcounts[i];
        }
        return r;
      },
      {scounts, rcounts});
  run_collective("alltoallv", "rcounts",
                 [&] { coll::alltoallv(c, in, scounts, sdispls, out, rcounts, rdispls, esize); });
}

// Non-blocking collectives: schedules driven by the progress engine.
Request Comm::ibarrier() const {
  detail::CommImpl& c = comm_of(*this, "ibarrier");
  return Request(c.engine().start(coll::ibarrier(impl_)));
}

Request Comm::ibcast_(void* buf, bool inplace, std::size_t count, std::size_t esize, Type,
                      int root) const {
  detail::CommImpl& c = comm_of(*this, "ibcast");
  if (inplace) refuse_in_place("ibcast", "buf");
  check_rank("ibcast", "root", root, c.size(), false);
  const std::size_t bytes = checked_bytes("ibcast", "count", count, esize);
  check_buffer("ibcast", "buf", buf, count);
  return Request(c.engine().start(coll::ibcast(impl_, buf, bytes, root)));
}

Request Comm::iallreduce_(const void* in, bool inplace, void* out, std::size_t count,
                          std::size_t esize, Type t, Op op) const {
  detail::CommImpl& c = comm_of(*this, "iallreduce");
  checked_bytes("iallreduce", "count", count, esize);
  check_op("iallreduce", op, t);
  if (!inplace) check_buffer("iallreduce", "in", in, count);
  check_buffer("iallreduce", "out", out, count);
  return Request(
      c.engine().start(coll::iallreduce(impl_, inplace ? nullptr : in, out, count, esize, t, op)));
}

}  // namespace rmp
