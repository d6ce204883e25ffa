#include "p2p/engine.hpp"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <new>
#include <optional>
#include <thread>
#include <utility>

#include "p2p/match.hpp"
#include "p2p/wire.hpp"
#include "runtime/copy.hpp"
#include "runtime/fast_clock.hpp"
#include "runtime/log.hpp"
#include "runtime/spin.hpp"

namespace rmp::detail {

using p2p::AckHeader;
using p2p::Am;
using p2p::CreditHeader;
using p2p::EagerHeader;
using p2p::RtsHeader;
using p2p::SyncHeader;

namespace {

// Eager credit is counted in bytes (rq_depth slots of eager_threshold bytes per peer): a
// message is charged its payload rounded up to a cache line plus a line for its record, so
// the bound holds for the memory an unexpected message really takes, while a flood of small
// messages does not fall back to rendezvous after rq_depth of them.
constexpr std::size_t kCreditUnit = 64;

std::size_t credit_charge(std::size_t bytes) {
  return (bytes + kCreditUnit - 1) / kCreditUnit * kCreditUnit + kCreditUnit;
}

std::string truncate_message(const char* call, int src, int tag, std::size_t msg, std::size_t cap) {
  return std::string(call) + ": message from rank " + std::to_string(src) + " with tag " +
         std::to_string(tag) + " has " + std::to_string(msg) +
         " bytes but the receive buffer holds " + std::to_string(cap) + " bytes (truncated)";
}

// Where a knob's value came from (std::nullopt: no such row).
std::optional<rt::Source> source_of(const rt::ParamSet& set, std::string_view knob) {
  for (const ParamInfo& row : set.rows)
    if (row.name == knob)
      for (const rt::Source s :
           {rt::Source::default_value, rt::Source::profile, rt::Source::formula,
            rt::Source::calibrated, rt::Source::env, rt::Source::cli})
        if (row.source == rt::source_name(s)) return s;
  return std::nullopt;
}

// Whether a knob's value was measured on this machine (calibrated) or set by the user: not a
// declared default nor a formula over one.
bool measured_or_set(const rt::ParamSet& set, std::string_view knob) {
  const std::optional<rt::Source> s = source_of(set, knob);
  return s == rt::Source::calibrated || s == rt::Source::env || s == rt::Source::cli;
}

}  // namespace

// A message that arrived before its receive was posted.
struct Engine::Unexpected {
  Unexpected* prev = nullptr;
  Unexpected* next = nullptr;
  Am kind = Am::eager;
  int peer = -1;
  EagerHeader h{};
  std::uint64_t sid = 0;
  // eager: the payload, copied out of the transport's buffer
  p2p::BufferCache::Buffer data;
  std::size_t size = 0;
  // rendezvous
  RtsHeader rts{};
};

// The queues of one context: the matching unit (p2p/match.hpp) over this engine's records.
struct Engine::MatchQueues : p2p::MatchQueues<RequestState, Unexpected> {};

// A message that found no room in the transport; kept in order per peer.
struct Engine::Pending {
  Am am;
  std::uint8_t hlen;
  bool inline_hint;
  std::array<std::byte, 64> hdr;
  std::span<const std::byte> payload;
  RequestState* req;  // the send it carries (failed if the transport rejects it), or nullptr
  bool completes;     // req completes once this message is sent (a plain eager send)
};

// A rendezvous read the transport had no room for (TStatus::retry): tried again by progress.
struct Engine::RetryGet {
  RequestState* r;
  std::uint64_t addr;
  rt::RemoteKey key;
};

struct Engine::Peer {
  rt::Endpoint* ep = nullptr;
  std::size_t credits = 0;      // eager bytes this rank may still send to the peer
  std::size_t owed = 0;         // eager bytes consumed here, not yet returned to the peer
  std::deque<Pending> control;  // acks and credit returns (no ordering with data)
  std::deque<Pending> data;     // eager and rendezvous starts, in send order
  bool listed = false;          // in pending_peers_
  std::uint32_t rndv_out = 0;   // rendezvous sends to the peer not yet finished (no FIN yet)
  // The answer in kind this rank owes the peer (note_answer): the protocol (1 eager, 0
  // rendezvous; -1 none) of its next tuned send alone to it in size bucket answer_bucket.
  std::int8_t answer = -1;
  std::uint8_t answer_bucket = 0;
  bool answer_explored = false;  // the message to answer was an exploration of the peer's

  // Whether an eager message of `bytes` fits this peer's remaining credit.
  bool has_credit_for(std::size_t bytes) const { return credits >= credit_charge(bytes); }
};

std::size_t Engine::eager_header_bytes() { return sizeof(EagerHeader); }

Engine::Engine(rt::Context& ctx) : ctx_(ctx) {
  ctx.start(*this, eager_header_bytes());
  const rt::Params& p = ctx.params();
  self_ = ctx.rank();
  inline_threshold_ = p.inline_threshold;
  eager_threshold_ = p.eager_threshold;
  // rq_depth eager slots of the largest eager message per peer (DESIGN §5: shm rq_depth =
  // eager credits per peer), counted in bytes so that small messages do not waste whole slots.
  // The largest eager message is eager_threshold, or twice that when RMP_TUNE=adaptive may
  // send eager above it (p2p/protocol_tuner.hpp): with slots of eager_threshold, a window of
  // 64 KiB messages the tuner sent eager above a 60 KB threshold fell back to rendezvous for
  // want of credit 797 times in 1409 sends (17 GB/s, where eager throughout gave 25).
  // And at least what the transport's eager buffer holds (shm: the byte ring, a power of two
  // at or above rq_depth × eager_threshold): with eager_threshold 24000 and 30 slots (720000 B),
  // a third of each window of 64 sends of 16 KiB went by rendezvous for want of credit while
  // the 1 MiB ring had room (1092 credit stalls in 3329 sends; 52 with the ring's credit,
  // bandwidth 1.04x, two cores near).
  const std::size_t largest_eager = (p.tune_adaptive ? 2 : 1) * eager_threshold_;
  credit_bytes_ = std::max(std::max<std::size_t>(p.rq_depth, 1) *
                               std::max({largest_eager, inline_threshold_, kCreditUnit}),
                           ctx.eager_buffer_bytes());
  peers_.resize(static_cast<std::size_t>(ctx.size()));
  // The rendezvous model keeps the tuner from exploring rendezvous streams it puts far behind
  // eager ones only where its figures describe this machine. Declared ones describe another:
  // here (get_bw 31 GB/s and 0.41 us a get measured, 12.5 and 1 declared) they put 16 KiB
  // windows of rendezvous sends 2.8x behind eager ones that ran at 0.79 of their time.
  if (p.tune_adaptive) {
    const rt::ParamSet& set = ctx.param_set();
    const bool model = measured_or_set(set, "get_bw") && measured_or_set(set, "rndv_setup_us");
    const bool link = measured_or_set(set, "link_bw");
    const bool threshold =
        model && link && source_of(set, "eager_threshold") == rt::Source::formula;
    tuner_ = std::make_unique<p2p::ProtocolTuner>(
        inline_threshold_, eager_threshold_, ctx.eager_buffer_bytes() / 4, credit_bytes_,
        model ? p2p::RndvModel{p.get_bw, p.rndv_setup_us, link ? p.link_bw : 0, threshold,
                               measured_or_set(set, "link_rtt_us") ? p.link_rtt_us : 0}
              : p2p::RndvModel{},
        ctx.rank());
  }
}

RequestState* Engine::alloc() {
  if (free_.empty()) {
    pool_.push_back(std::make_unique<RequestState>());
    free_.push_back(pool_.back().get());
  }
  RequestState* r = free_.back();
  free_.pop_back();
  // Built anew in place (free_request released what it owned). Assigning a fresh
  // RequestState{} instead zeroed a temporary on the stack and copied it over, reading back
  // what had just been stored there at other widths: a third of the time of a window of
  // 8-byte sends went to it. Default-initialised, not value-initialised (`RequestState{}`):
  // every member has its initialiser, and value-initialisation first zeroed all 200 bytes
  // with `rep stosq`, whose start-up on this AMD EPYC took 85 % of alloc's samples and alloc
  // 29 % of a window of 8-byte sends (perf); with the members' own stores, 1-8 B bandwidth
  // came out 1.13-1.15x and message rate 1.09x (8 interleaved pairs, cores near).
  r->~RequestState();
#ifndef NDEBUG
  // A member added without an initialiser would keep the last request's value; in a debug
  // build (the sanitizer build's tests) it holds this pattern instead, which they notice.
  std::memset(static_cast<void*>(r), 0xA5, sizeof *r);
#endif
  ::new (r) RequestState;
  r->engine = this;
  return r;
}

// Inlined, as are return_credit and deliver_eager below: each runs once per message on the
// 8-byte path, where a call's register saves and restores took ~20 instructions.
[[gnu::always_inline]] inline void Engine::free_request(RequestState* r) {
  if (r->tuned) {
    r->tuned = false;
    tuner_->release();
  }
  r->err_msg.reset();
  r->activity.reset();
  free_.push_back(r);
}

std::string Engine::describe_outstanding_sends(std::size_t max_listed) {
  Lock g(*this);
  std::vector<const RequestState*> unused(free_.begin(), free_.end());
  std::sort(unused.begin(), unused.end());
  std::string out;
  std::size_t n = 0;
  for (const auto& owned : pool_) {
    const RequestState* r = owned.get();
    if (r->kind != RequestState::Kind::send || r->complete ||
        std::binary_search(unused.begin(), unused.end(), r))
      continue;
    if (n++ < max_listed)
      out += std::string(out.empty() ? "" : "; ") + "to rank " + std::to_string(r->peer) +
             " (tag " + std::to_string(r->tag) + ", " + std::to_string(r->bytes) + " bytes)";
  }
  if (n > max_listed) out += "; and " + std::to_string(n - max_listed) + " more";
  return n == 0 ? out : std::to_string(n) + (n == 1 ? " send: " : " sends: ") + out;
}

void Engine::complete(RequestState* r) {
  r->complete = true;
  if (r->kind == RequestState::Kind::send) {
    --outstanding_sends_;
    if (r->tuned) tuned_send_completed(*r);
  }
  if (r->released) free_request(r);
}

void Engine::fail(RequestState* r, Errc e, std::string msg) {
  r->has_error = true;
  r->err = e;
  r->err_msg = std::make_unique<std::string>(std::move(msg));
}

Engine::Peer& Engine::new_peer(int world) {
  auto& p = peers_[static_cast<std::size_t>(world)];
  p = std::make_unique<Peer>();
  p->credits = credit_bytes_;
  return *p;
}

rt::Endpoint& Engine::endpoint_of(Peer& p, int world) {
  if (!p.ep) p.ep = &ctx_.endpoint(world);
  return *p.ep;
}

void Engine::route_through(int world, rt::Endpoint& e) {
  Lock g(*this);
  peer(world).ep = &e;
}

std::size_t Engine::credits_to(int world) {
  Lock g(*this);
  return peer(world).credits;
}

std::size_t Engine::owed_to(int world) {
  Lock g(*this);
  return peer(world).owed;
}

Engine::MatchQueues& Engine::new_queues(std::uint32_t ctx) {
  if (ctx >= queues_.size()) queues_.resize(ctx + 1);
  auto& q = queues_[ctx];
  q = std::make_unique<MatchQueues>();
  return *q;
}

Engine::Release Engine::release_context(std::uint32_t base) {
  Lock g(*this);
  const std::uint32_t first = base * 2, last = first + 1;
  for (std::uint32_t ctx = first; ctx <= last && ctx < queues_.size(); ++ctx) {
    const MatchQueues* q = queues_[ctx].get();
    if (q && q->withdrawn) return Release::never;
    if (q && (q->posted.head || q->unexpected.head)) return Release::busy;
  }
  for (std::uint32_t ctx = first; ctx <= last && ctx < queues_.size(); ++ctx) queues_[ctx].reset();
  return Release::free;
}

// The tuner's flags of a send's header (p2p/wire.hpp), from the last tune_pick(): eager (in the
// credit word) and rendezvous (the rts flags). An answer to the peer's exploration is part of
// that trial: its get is settled too.
[[gnu::always_inline]] inline std::uint32_t Engine::answer_flags() const {
  return tune_asks_answer_ ? p2p::kEagerAnswerInKind | (tune_explored_ ? p2p::kEagerExplored : 0)
                           : 0;
}
inline std::uint32_t Engine::rts_tune_flags() const {
  return (tune_explored_ || tune_answers_trial_ ? p2p::kRtsExplored : 0u) |
         (tune_asks_answer_ ? p2p::kRtsAnswerInKind : 0u);
}

// The size bucket an answer in kind is owed for (Peer::answer_bucket).
static std::uint8_t answer_bucket_of(std::size_t bytes) {
  return static_cast<std::uint8_t>(rt::HillTuner::bucket_of(bytes));
}

std::uint32_t Engine::take_owed(Peer& p) {
  const auto n = static_cast<std::uint32_t>(std::min<std::size_t>(p.owed, p2p::kCreditMask));
  p.owed -= n;
  return n;
}

// ---------------------------------------------------------------------------------------------
// Sending

void Engine::send_or_queue(Peer& p, int world, Am am, std::span<const std::byte> hdr,
                           std::span<const std::byte> payload, bool inline_hint, RequestState* req,
                           bool completes, bool control) {
  auto& q = control ? p.control : p.data;
  // Data keeps its order behind anything queued; control only waits for other control.
  const bool blocked = !q.empty() || (control ? false : !p.control.empty());
  if (!blocked) {
    const rt::TStatus s =
        endpoint_of(p, world).send_am(static_cast<rt::AmId>(am), hdr, payload, inline_hint);
    if (s == rt::TStatus::ok) {
      if (req && completes) complete(req);
      return;
    }
    if (s == rt::TStatus::error) {
      refused(p, am, hdr, req);
      return;
    }
    ++ctx_.counters().ring_full;
  }
  Pending pend{am, static_cast<std::uint8_t>(hdr.size()), inline_hint, {}, payload, req, completes};
  std::memcpy(pend.hdr.data(), hdr.data(), hdr.size());
  q.push_back(pend);
  if (!p.listed) {
    p.listed = true;
    pending_peers_.push_back(&p);
  }
}

// The transport refused a message (TStatus::error: not delivered, and never will be). The
// credit its header returned to the peer is owed again, and an eager message's own charge
// comes back. A send it carried (eager, synchronous eager, rendezvous start) ends here, failed,
// its memory no longer exposed: the peer will never answer it.
void Engine::refused(Peer& p, Am am, std::span<const std::byte> hdr, RequestState* r) {
  std::uint32_t returned = 0;  // every header starts with it (p2p/wire.hpp)
  std::memcpy(&returned, hdr.data(), std::min(hdr.size(), sizeof returned));
  p.owed += returned & p2p::kCreditMask;
  if (!r) return;
  if (am == Am::eager || am == Am::eager_sync) p.credits += credit_charge(r->bytes);
  if (r->registered) {
    std::span<const std::byte> region(static_cast<const std::byte*>(r->sbuf), r->bytes);
    p.ep->transport().deregister_memory(region, r->key);
    r->registered = false;
    if (p.rndv_out > 0) --p.rndv_out;
  }
  fail(r, Errc::transport,
       std::string(r->call) + ": the transport refused a message of " + std::to_string(r->bytes) +
           " bytes to rank " + std::to_string(r->dest));
  complete(r);
}

int Engine::flush_pending() {
  int n = 0;
  for (std::size_t i = 0; i < pending_peers_.size();) {
    Peer& p = *pending_peers_[i];
    for (auto* q : {&p.control, &p.data}) {
      while (!q->empty()) {
        Pending& m = q->front();
        const rt::TStatus s = p.ep->send_am(
            static_cast<rt::AmId>(m.am), std::span(m.hdr.data(), m.hlen), m.payload, m.inline_hint);
        if (s == rt::TStatus::retry) break;
        if (s == rt::TStatus::error) refused(p, m.am, std::span(m.hdr.data(), m.hlen), m.req);
        else if (m.req && m.completes) complete(m.req);
        q->pop_front();
        ++n;
      }
      if (!p.control.empty()) break;  // data waits behind control
    }
    if (p.control.empty() && p.data.empty()) {
      p.listed = false;
      pending_peers_[i] = pending_peers_.back();
      pending_peers_.pop_back();
    } else {
      ++i;
    }
  }
  return n;
}

void Engine::count_eager(std::size_t bytes, bool inl) {
  rt::Counters& c = ctx_.counters();
  if (inl) {
    ++c.msgs_inline;
    c.bytes_inline += bytes;
  } else {
    ++c.msgs_eager;
    c.bytes_eager += bytes;
  }
}

namespace {
// The tuner's clock (RMP_TUNE=adaptive): read once or twice a tuned send.
std::int64_t now_ns() { return rt::FastClock::now().time_since_epoch().count(); }
}  // namespace

RequestState* Engine::isend(const CommImpl& comm, p2p::Channel ch, const void* buf,
                            std::size_t bytes, int dest, int tag, bool sync, const char* call) {
  return isend_as(comm, ch, buf, bytes, dest, tag, sync, -1, call);
}

RequestState* Engine::isend_as(const CommImpl& comm, p2p::Channel ch, const void* buf,
                               std::size_t bytes, int dest, int tag, bool sync, int picked,
                               const char* call) {
  Lock g(*this);
  RequestState* r = alloc();
  r->kind = RequestState::Kind::send;
  r->call = call;
  r->sbuf = buf;
  r->bytes = bytes;
  r->tag = tag;
  r->dest = dest;
  const int world = comm.world_rank(dest);
  r->peer = world;
  ++outstanding_sends_;
  Peer& p = peer(world);
  rt::Counters& c = ctx_.counters();
  if (world == self_) {
    ++c.msgs_self;
    c.bytes_self += bytes;
  }

  EagerHeader e{0, comm.context(ch), tag, comm.rank()};
  // A tuned send's protocol comes from the tuner (send() may have asked it already).
  r->tuned = r->tune_honoured = picked >= 0 || tuned_send(ch, world, bytes, sync);
  const bool fits_eager = !r->tuned     ? eager_size(bytes)
                          : picked >= 0 ? picked == 1
                                        : tune_pick(p, world, bytes);
  if (fits_eager && p.has_credit_for(bytes)) {
    p.credits -= credit_charge(bytes);
    const bool inl = bytes <= inline_threshold_;
    count_eager(bytes, inl);
    e.credits = take_owed(p) | (r->tuned ? answer_flags() : 0);
    std::span<const std::byte> payload(static_cast<const std::byte*>(buf), bytes);
    if (sync) {
      SyncHeader h{e, reinterpret_cast<std::uint64_t>(r)};
      // Completes on sync_ack, not when sent.
      send_or_queue(p, world, Am::eager_sync, p2p::bytes_of(h), payload, inl, r, false, false);
    } else {
      send_or_queue(p, world, Am::eager, p2p::bytes_of(e), payload, inl, r, true, false);
    }
    return r;
  }
  if (fits_eager) {
    ++c.credit_stalls;
    r->tune_honoured = false;  // the tuner's eager pick did not happen
  }
  ++c.msgs_rndv;
  c.bytes_rndv += bytes;
  rt::Endpoint& ep = endpoint_of(p, world);
  std::span<const std::byte> region(static_cast<const std::byte*>(buf), bytes);
  r->key = ep.transport().register_memory(region);
  r->registered = true;
  e.credits = take_owed(p);
  RtsHeader h{e,
              bytes,
              r->tuned ? rts_tune_flags() : 0u,
              reinterpret_cast<std::uint64_t>(r),
              reinterpret_cast<std::uint64_t>(buf),
              r->key};
  ++p.rndv_out;
  send_or_queue(p, world, Am::rts, p2p::bytes_of(h), {}, false, r, false, false);
  return r;
}

bool Engine::self_send_would_block(const CommImpl& comm, p2p::Channel ch, std::size_t bytes,
                                   int tag, bool sync) {
  Lock g(*this);
  Peer& p = peer(self_);
  // Credit this rank's receives freed is owed to itself: it comes back with its next message
  // to itself or a credit message that only progress delivers. Taken back here, so that a
  // send after every earlier one was received is buffered again.
  if (!p.has_credit_for(bytes)) {
    p.credits += take_owed(p);
    if (!p.has_credit_for(bytes)) progress_locked();
  }
  // isend's choice for self (the tuner leaves self-sends alone): buffered when eager within
  // the credit, and not synchronous.
  const bool buffered = !sync && eager_size(bytes) && p.has_credit_for(bytes);
  return !buffered && !queues(comm.context(ch)).find_posted(comm.rank(), tag);
}

void Engine::send(const CommImpl& comm, p2p::Channel ch, const void* buf, std::size_t bytes,
                  int dest, int tag) {
  Lock g(*this);
  const int world = comm.world_rank(dest);
  Peer& p = peer(world);
  // A tuned send asks the tuner here and, picked eager, leaves without a request as any eager
  // send does (isend and wait took and freed one for each).
  const bool tuned = tuned_send(ch, world, bytes, false);
  const bool eager = tuned ? tune_pick(p, world, bytes) : eager_size(bytes);
  if (eager && p.has_credit_for(bytes) && p.data.empty() && p.control.empty()) {
    const bool inl = bytes <= inline_threshold_;
    const auto owed = static_cast<std::uint32_t>(std::min<std::size_t>(p.owed, p2p::kCreditMask));
    EagerHeader e{owed | (tuned ? answer_flags() : 0), comm.context(ch), tag, comm.rank()};
    std::span<const std::byte> payload(static_cast<const std::byte*>(buf), bytes);
    const rt::TStatus s = endpoint_of(p, world).send_am(static_cast<rt::AmId>(Am::eager),
                                                        p2p::bytes_of(e), payload, inl);
    if (s == rt::TStatus::ok) {
      p.owed -= owed;
      p.credits -= credit_charge(bytes);
      if (world == self_) {
        ++ctx_.counters().msgs_self;
        ctx_.counters().bytes_self += bytes;
      }
      count_eager(bytes, inl);
      if (tuned) {  // as a request's completion and release would
        tuner_->complete(true, now_ns);
        tuner_->release();
      }
      return;
    }
    if (s == rt::TStatus::retry) ++ctx_.counters().ring_full;
  }
  wait(isend_as(comm, ch, buf, bytes, dest, tag, false, tuned ? int{eager} : -1, "send"));
}

void Engine::send_ack(int world, Am am, std::uint64_t sid, std::uint32_t flags) {
  Peer& p = peer(world);
  AckHeader h{take_owed(p), flags, sid};
  send_or_queue(p, world, am, p2p::bytes_of(h), {}, true, nullptr, false, true);
}

[[gnu::always_inline]] inline void Engine::return_credit(Peer& p, int world, std::size_t bytes) {
  p.owed += credit_charge(bytes);
  // Return in batches of half the grant; most returns ride on traffic going back anyway.
  if (p.owed >= credit_bytes_ / 2) {
    CreditHeader h{take_owed(p)};
    ++ctx_.counters().credit_returns;
    send_or_queue(p, world, Am::credit, p2p::bytes_of(h), {}, true, nullptr, false, true);
  }
}

// ---------------------------------------------------------------------------------------------
// Adaptive protocol choice (RMP_TUNE=adaptive): the tuner is consulted at the decision above
// and told when each tuned send completes; it judges sends alone and streams of sends
// (p2p/protocol_tuner.hpp). The clock is read only for tuned sends, and only where the tuner
// uses the time.

bool Engine::tune_pick(Peer& p, int world, std::size_t bytes) {
  // The peer leads the pair's protocol and its last message of this bucket asked for an answer
  // in kind (on_am): spent on this send, whether it answers or not.
  const std::uint8_t bucket = answer_bucket_of(bytes);
  const int answer = p.answer >= 0 && p.answer_bucket == bucket ? p.answer : -1;
  const bool answer_explored = answer >= 0 && p.answer_explored;
  if (answer >= 0) p.answer = -1;
  const p2p::ProtocolTuner::Pick pick = tuner_->post(bytes, now_ns, answer);
  rt::Counters& c = ctx_.counters();
  c.tune_moves += pick.moved;
  c.tune_explorations += pick.explore;
  c.tune_answers += pick.answered;
  if (pick.eager && bytes > eager_threshold_) ++c.tune_eager_above;
  if (!pick.eager && bytes <= eager_threshold_) ++c.tune_rndv_below;
  tune_explored_ = pick.explore;
  // Its own pick or not, a send alone by the protocol of the peer's exploration answers it.
  tune_answers_trial_ = answer_explored && pick.alone && pick.eager == (answer == 1);
  // The lower rank of a pair leads its protocol of sends alone (ProtocolTuner::post).
  tune_asks_answer_ = pick.alone && self_ < world;
  return pick.eager;
}

// A message from peer p of `bytes` that the peer, leading the pair, asked to be answered in kind
// (`asks`, by protocol `eager`), or not: the answer this rank's next tuned send alone of its
// bucket owes it. A message of the bucket that does not ask cancels one owed.
[[gnu::always_inline]] inline void Engine::note_answer(Peer& p, bool asks, bool explored,
                                                       bool eager, std::size_t bytes) {
  if (!asks && p.answer < 0) return;
  const std::uint8_t bucket = answer_bucket_of(bytes);
  if (asks) {
    p.answer = eager ? 1 : 0;
    p.answer_bucket = bucket;
    p.answer_explored = explored;
  } else if (p.answer_bucket == bucket) {
    p.answer = -1;
  }
}

void Engine::tuned_send_completed(const RequestState& r) {
  tuner_->complete(r.tune_honoured, now_ns);
}

// ---------------------------------------------------------------------------------------------
// Receiving

RequestState* Engine::irecv(const CommImpl& comm, p2p::Channel ch, void* buf, std::size_t bytes,
                            int src, int tag, const char* call) {
  Lock g(*this);
  RequestState* r = alloc();
  r->kind = RequestState::Kind::recv;
  r->call = call;
  r->ctx = comm.context(ch);
  r->src = src;
  r->tag = tag;
  r->buf = buf;
  r->cap = bytes;
  MatchQueues& q = queues(r->ctx);
  if (Unexpected* u = q.find_unexpected(src, tag)) {
    q.unexpected.unlink(u);
    --unexpected_now_;
    if (u->kind == Am::rts) {
      start_rendezvous(r, u->peer, u->rts);
    } else {
      rt::Counters& c = ctx_.counters();
      c.unexpected_eager_bytes -= u->size;
      deliver_eager(r, u->peer, u->h, std::span(u->data.data.get(), u->size),
                    u->kind == Am::eager_sync, u->sid);
    }
    unexpected_buffers_.give(std::exchange(u->data, {}));
    unexpected_free_.push_back(u);
    return r;
  }
  r->posted = true;
  q.posted.push_back(r);
  return r;
}

[[gnu::always_inline]] inline void Engine::deliver_eager(RequestState* r, int peer_world,
                                                         const EagerHeader& h,
                                                         std::span<const std::byte> payload,
                                                         bool sync, std::uint64_t sid) {
  r->status = Status{h.src, h.tag, payload.size()};
  if (payload.size() > r->cap) {
    if (r->cap) rt::copy_bytes(r->buf, payload.data(), r->cap);
    r->status.bytes = r->cap;
    fail(r, Errc::truncate, truncate_message(r->call, h.src, h.tag, payload.size(), r->cap));
  } else if (!payload.empty()) {
    // Mostly out of a ring the sending process just wrote (else an unexpected buffer this
    // process filled, or its own send buffer on the self transport: the loop serves those too).
    rt::copy_from_peer(r->buf, payload.data(), payload.size());
  }
  Peer& p = peer(peer_world);
  return_credit(p, peer_world, payload.size());
  if (sync) send_ack(peer_world, Am::sync_ack, sid);
  complete(r);
}

void Engine::start_rendezvous(RequestState* r, int peer_world, const RtsHeader& h) {
  r->status = Status{h.e.src, h.e.tag, static_cast<std::size_t>(h.size)};
  r->peer = peer_world;
  r->sid = h.sid;
  if (h.size > r->cap) {
    // MPI consumes a truncated message: release the sender without moving the data.
    r->status.bytes = 0;
    fail(r, Errc::truncate,
         truncate_message(r->call, h.e.src, h.e.tag, static_cast<std::size_t>(h.size), r->cap));
    send_ack(peer_world, Am::fin, h.sid);
    complete(r);
    return;
  }
  r->get_done.fn = &Engine::on_get_done;
  r->settled_get = (h.flags & p2p::kRtsExplored) != 0;
  ++active_gets_;
  issue_get(r, h.addr, h.key);
}

// Reads a matched rendezvous message; kept for progress to try again while the transport has
// no room for the read (retry), failed when it refuses it.
bool Engine::issue_get(RequestState* r, std::uint64_t addr, const rt::RemoteKey& key) {
  Peer& p = peer(r->peer);
  const rt::TStatus s =
      endpoint_of(p, r->peer)
          .get(std::span(static_cast<std::byte*>(r->buf), r->status.bytes), addr, key, &r->get_done,
               rt::GetHints{.both_ways = p.rndv_out > 0, .settled = r->settled_get});
  if (s == rt::TStatus::ok) return true;
  if (s == rt::TStatus::retry) {
    retry_gets_.push_back({r, addr, key});
    return false;
  }
  --active_gets_;
  fail(r, Errc::transport,
       std::string(r->call) + ": reading " + std::to_string(r->status.bytes) + " bytes from rank " +
           std::to_string(r->status.source) + " failed");
  send_ack(r->peer, Am::fin, r->sid);
  complete(r);
  return true;
}

int Engine::retry_gets() {
  retrying_.swap(retry_gets_);  // those still without room go back to retry_gets_
  int n = 0;
  for (const RetryGet& g : retrying_) n += issue_get(g.r, g.addr, g.key);
  retrying_.clear();
  return n;
}

void Engine::on_get_done(rt::Completion* c, rt::TStatus s) {
  auto* r = reinterpret_cast<RequestState*>(reinterpret_cast<char*>(c) -
                                            offsetof(RequestState, get_done));
  Engine& e = *r->engine;
  --e.active_gets_;
  if (s != rt::TStatus::ok)
    e.fail(r, Errc::transport,
           std::string(r->call) + ": reading " + std::to_string(r->status.bytes) +
               " bytes from rank " + std::to_string(r->status.source) + " failed");
  e.send_ack(r->peer, Am::fin, r->sid, c->trial ? p2p::kAckTrialGet : 0);
  e.complete(r);
}

Engine::Unexpected* Engine::enqueue_unexpected(MatchQueues& q, Am kind, int from,
                                               const EagerHeader& h) {
  Unexpected* u = nullptr;
  if (unexpected_free_.empty()) {
    unexpected_pool_.push_back(std::make_unique<Unexpected>());
    u = unexpected_pool_.back().get();
  } else {
    u = unexpected_free_.back();
    unexpected_free_.pop_back();
  }
  u->kind = kind;
  u->peer = from;
  u->h = h;
  u->size = 0;
  q.unexpected.push_back(u);
  rt::Counters& c = ctx_.counters();
  ++c.unexpected_msgs;
  c.unexpected_peak = std::max<std::uint64_t>(c.unexpected_peak, ++unexpected_now_);
  return u;
}

void Engine::on_am(int from, rt::AmId id, std::span<const std::byte> header,
                   std::span<const std::byte> payload) {
  Peer& p = peer(from);
  rt::Counters& c = ctx_.counters();
  switch (static_cast<Am>(id)) {
    case Am::eager:
    case Am::eager_sync: {
      const bool sync = static_cast<Am>(id) == Am::eager_sync;
      SyncHeader h{};
      if (!(sync ? p2p::decode(header, h) : p2p::decode(header, h.e))) break;
      p.credits += h.e.credits & p2p::kCreditMask;
      note_answer(p, (h.e.credits & p2p::kEagerAnswerInKind) != 0,
                  (h.e.credits & p2p::kEagerExplored) != 0, true, payload.size());
      MatchQueues& q = queues(h.e.ctx);
      if (RequestState* r = q.find_posted(h.e.src, h.e.tag)) {
        q.posted.unlink(r);
        r->posted = false;
        deliver_eager(r, from, h.e, payload, sync, h.sid);
        return;
      }
      Unexpected* u = enqueue_unexpected(q, static_cast<Am>(id), from, h.e);
      u->sid = h.sid;
      u->size = payload.size();
      if (!payload.empty()) {
        u->data = unexpected_buffers_.take(payload.size());
        rt::copy_from_peer(u->data.data.get(), payload.data(), payload.size());
      }
      c.unexpected_eager_bytes += payload.size();
      c.unexpected_eager_bytes_peak =
          std::max(c.unexpected_eager_bytes_peak, c.unexpected_eager_bytes);
      return;
    }
    case Am::rts: {
      RtsHeader h{};
      if (!p2p::decode(header, h)) break;
      p.credits += h.e.credits & p2p::kCreditMask;
      note_answer(p, (h.flags & p2p::kRtsAnswerInKind) != 0, (h.flags & p2p::kRtsExplored) != 0,
                  false, static_cast<std::size_t>(h.size));
      MatchQueues& q = queues(h.e.ctx);
      if (RequestState* r = q.find_posted(h.e.src, h.e.tag)) {
        q.posted.unlink(r);
        r->posted = false;
        start_rendezvous(r, from, h);
        return;
      }
      enqueue_unexpected(q, Am::rts, from, h.e)->rts = h;
      return;
    }
    case Am::fin:
    case Am::sync_ack: {
      AckHeader h{};
      if (!p2p::decode(header, h)) break;
      p.credits += h.credits;
      auto* r = reinterpret_cast<RequestState*>(h.sid);
      // A get on trial at the receiver: counted only (the tuner still judges the send; why:
      // docs/tuning.md).
      if (h.flags & p2p::kAckTrialGet) ++c.rndv_trial_gets;
      if (r->registered) {
        std::span<const std::byte> region(static_cast<const std::byte*>(r->sbuf), r->bytes);
        p.ep->transport().deregister_memory(region, r->key);
        r->registered = false;
        if (p.rndv_out > 0) --p.rndv_out;
      }
      complete(r);
      return;
    }
    case Am::credit: {
      CreditHeader h{};
      if (!p2p::decode(header, h)) break;
      p.credits += h.credits;
      return;
    }
  }
  rt::log_warn("p2p: dropped a malformed message (id " + std::to_string(id) + ", " +
               std::to_string(header.size()) + " header bytes) from rank " + std::to_string(from));
}

// ---------------------------------------------------------------------------------------------
// Completion, probe, cancel

int Engine::progress() {
  Lock g(*this);
  return progress_locked();
}

RequestState* Engine::start(std::unique_ptr<Activity> a) {
  Lock g(*this);
  RequestState* r = alloc();
  r->kind = RequestState::Kind::activity;
  r->activity = std::move(a);
  activities_.push_back(r);
  advance_activities();  // post the first round now
  return r;
}

int Engine::advance_activities() {
  int n = 0;
  // Index loop: an activity may start point-to-point operations, never other activities.
  for (std::size_t i = 0; i < activities_.size();) {
    RequestState* r = activities_[i];
    if (!r->activity->advance(*this)) {
      ++i;
      continue;
    }
    if (r->activity->failed()) fail(r, r->activity->code(), r->activity->what());
    activities_[i] = activities_.back();
    activities_.pop_back();
    complete(r);
    ++n;
  }
  return n;
}

bool Engine::is_complete(RequestState* r) {
  Lock g(*this);
  return r->complete;
}

// A request whose wait or test ended in an error other than its own (a failed peer; a transport
// error met while progressing) is no longer the caller's, whose buffer may be gone once the call
// returns. It is released as a destroyed Request is: an unmatched receive leaves the posted queue
// (else a later message would land in that buffer, and be lost to the receive that waits for it);
// anything already under way (a matched rendezvous receive, a queued send) runs on and is freed
// when it completes, as MPI_Request_free leaves it. The job
// ends soon after a failure anyway (rlaunch). A non-blocking collective stops too: its later
// rounds would write the buffers.
void Engine::give_up(RequestState* r) {
  Lock g(*this);
  if (r->kind == RequestState::Kind::activity && !r->complete) r->activity->abandon(*this);
  release(r);
}

Status Engine::wait(RequestState* r) {
  try {
    progress_until([r] { return r->complete; });
  } catch (...) {
    give_up(r);
    throw;
  }
  Lock g(*this);
  Status s = r->status;
  if (r->has_error) {
    Error e(r->err, r->err_msg ? *r->err_msg : std::string("unknown error"));
    free_request(r);
    throw e;
  }
  free_request(r);
  return s;
}

std::optional<Status> Engine::test(RequestState* r) {
  {
    Lock g(*this);
    try {
      if (!r->complete) progress_locked();
      if (!r->complete) {
        throw_if_peer_failed_while_testing();
        return std::nullopt;
      }
    } catch (...) {
      give_up(r);
      throw;
    }
  }
  return wait(r);
}

bool Engine::cancel(RequestState* r) {
  Lock g(*this);
  if (r->kind != RequestState::Kind::recv || !r->posted) return false;
  MatchQueues& q = queues(r->ctx);
  q.posted.unlink(r);
  q.withdrawn = true;
  r->posted = false;
  r->cancelled = true;
  r->status = Status{any_source, any_tag, 0};
  complete(r);
  return true;
}

void Engine::release(RequestState* r) {
  Lock g(*this);
  if (r->complete) {
    free_request(r);
    return;
  }
  if (cancel(r)) {
    free_request(r);
    return;
  }
  r->released = true;
}

// ---------------------------------------------------------------------------------------------
// Asynchronous progress (RMP_PROGRESS_THREAD=1)

struct Engine::ProgressThread {
  std::atomic<bool> stop{false};
  std::thread thread;
};

void Engine::throw_if_peer_failed(const char* doing) {
  if (const rt::PeerFailure* f = ctx_.peer_failure()) {
    if (doing == nullptr) doing = waiting_for_.load(std::memory_order_relaxed);
    throw Error(Errc::peer_failed, "rank " + std::to_string(ctx_.rank()) + " was " + doing +
                                       " when rank " + std::to_string(f->rank) + " failed (" +
                                       f->message + ")");
  }
}

void Engine::throw_if_peer_failed_while_testing() {
  if ((tests_incomplete_.fetch_add(1, std::memory_order_relaxed) & 255) == 255)
    throw_if_peer_failed("testing a request");
}

void Engine::start_progress_thread() {
  if (thread_) return;
  threaded_ = true;
  thread_ = std::make_unique<ProgressThread>();
  thread_->thread = std::thread([this] {
    rt::NapClock nap;  // yielding alone may hold the core for good (runtime/spin.hpp)
    while (!thread_->stop.load(std::memory_order_relaxed)) {
      int n;
      bool busy;
      try {
        Lock g(*this);
        n = progress_locked();
        busy = !activities_.empty() || outstanding_sends_ > 0 || active_gets_ > 0;
      } catch (const std::exception& e) {
        // Nobody here to throw it to (it ended the process before): the thread stops, and
        // the application's own calls, which progress too, meet the error and throw it.
        rt::log_warn(std::string("progress thread stopped: ") + e.what());
        return;
      }
      // While operations are in flight keep them moving; otherwise stay out of the way of
      // the application's threads.
      if (n > 0 || busy) {
        if (nap.tick()) rt::count_shared(ctx_.counters().idle_naps, 1);
        else ::sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
        nap.restart();
      }
    }
  });
}

void Engine::stop_progress_thread() {
  if (!thread_) return;
  thread_->stop.store(true);
  thread_->thread.join();
  thread_.reset();
  threaded_ = false;
}

Engine::~Engine() { stop_progress_thread(); }

// Both probes progress first, whatever is queued: a loop probing while a matching message
// waits unreceived (iprobe until some other condition holds) had advanced nothing else, so a
// detached collective or send of this rank stalled the ranks waiting for it for as long as the
// loop ran (3 s in a second test pass's program).
std::optional<Status> Engine::iprobe(const CommImpl& comm, p2p::Channel ch, int src, int tag) {
  Lock g(*this);
  progress_locked();
  const Unexpected* u = queues(comm.context(ch)).find_unexpected(src, tag);
  if (!u) return std::nullopt;
  return Status{u->h.src, u->h.tag,
                u->kind == Am::rts ? static_cast<std::size_t>(u->rts.size) : u->size};
}

Status Engine::probe(const CommImpl& comm, p2p::Channel ch, int src, int tag) {
  Status st;
  progress();
  progress_until([&] {
    Unexpected* u = queues(comm.context(ch)).find_unexpected(src, tag);
    if (u)
      st = Status{u->h.src, u->h.tag,
                  u->kind == Am::rts ? static_cast<std::size_t>(u->rts.size) : u->size};
    return u != nullptr;
  });
  return st;
}

}  // namespace rmp::detail
