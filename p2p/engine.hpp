// The point-to-point engine: MPI matching (posted and unexpected queues per communicator
// context, wildcards, non-overtaking order), protocol choice (eager-inline, eager-copy,
// rendezvous-get), credit flow control, requests. Written against the transport interface
// only. Collectives use the interface below and nothing else of p2p.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <rmp/rmp.hpp>

#include "p2p/activity.hpp"
#include "p2p/buffer_cache.hpp"
#include "p2p/protocol_tuner.hpp"
#include "p2p/wire.hpp"
#include "runtime/context.hpp"
#include "runtime/transport/transport.hpp"

namespace rmp::detail {

// One point-to-point operation. Owned by the engine's pool; the user's Request points to it.
// Every member has its initialiser: Engine::alloc() builds one anew by default-initialisation,
// which would leave a member without one as the request before it left it.
struct RequestState {
  enum class Kind : std::uint8_t { send, recv, activity };
  Kind kind = Kind::send;
  bool complete = false;
  bool released = false;  // the user's handle is gone: free on completion
  bool cancelled = false;
  bool posted = false;  // in a posted-receive queue
  bool has_error = false;
  Errc err = Errc::internal;
  std::unique_ptr<std::string> err_msg;  // only when failed: keeps the struct cheap to reset
  Status status;
  // receive (tag: a send's too, for messages)
  std::uint32_t ctx = 0;
  int src = any_source, tag = any_tag;
  void* buf = nullptr;
  std::size_t cap = 0;
  const char* call = "receive";  // the public call that posted it, for its errors
  RequestState* prev = nullptr;
  RequestState* next = nullptr;
  // send
  const void* sbuf = nullptr;
  std::size_t bytes = 0;
  int dest = -1;  // in its communicator
  int peer = -1;  // world rank of the other side
  bool registered = false;
  rt::RemoteKey key;
  // rendezvous receive
  std::uint64_t sid = 0;
  rt::Completion get_done;
  bool settled_get = false;  // the sender explores rendezvous with it (p2p::kRtsExplored)
  class Engine* engine = nullptr;
  // activity (non-blocking collective)
  std::unique_ptr<Activity> activity;
  // RMP_TUNE=adaptive: a send whose protocol the tuner chose, reported when it completes;
  // tune_honoured: it went by the protocol chosen
  bool tuned = false;
  bool tune_honoured = false;
};

}  // namespace rmp::detail

namespace rmp::p2p {

using detail::RequestState;

// The communication channel of a communicator: user point-to-point traffic and the
// communicator's collectives never match each other.
enum class Channel : std::uint32_t { user = 0, collective = 1 };

}  // namespace rmp::p2p

namespace rmp::detail {

// A communicator as p2p sees it: a context id agreed by its members and the map from its
// ranks to world ranks.
class CommImpl {
public:
  CommImpl(Engine& e, std::uint32_t context, int rank, std::vector<int> world_of)
      : engine_(e),
        context_(context),
        rank_(rank),
        size_(static_cast<int>(world_of.size())),
        world_of_(std::move(world_of)) {}
  CommImpl(Engine& e, std::uint32_t context, int rank, int size)  // identity map (world)
      : engine_(e), context_(context), rank_(rank), size_(size) {}

  Engine& engine() const { return engine_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int world_rank(int r) const {
    return world_of_.empty() ? r : world_of_[static_cast<std::size_t>(r)];
  }
  std::uint32_t context(p2p::Channel ch) const {
    return context_ * 2 + static_cast<std::uint32_t>(ch);
  }
  std::uint32_t base_context() const { return context_; }
  // A communicator made before its members agreed on its id (api/comm.cpp) gets it here,
  // before any use.
  void set_context(std::uint32_t context) { context_ = context; }
  // Sequence number of the communicator's next non-blocking collective: every member starts
  // them in the same order, so the numbers agree and keep concurrent operations apart.
  std::uint32_t next_collective_sequence() { return nbc_sequence_++; }
  // State the collectives layer keeps per communicator (e.g. its node-shared segment);
  // opaque to p2p, released with the communicator.
  std::shared_ptr<void>& collective_state() const { return collective_state_; }

private:
  mutable std::shared_ptr<void> collective_state_;
  std::uint32_t nbc_sequence_ = 0;
  Engine& engine_;
  std::uint32_t context_;
  int rank_, size_;
  std::vector<int> world_of_;  // empty: identity
};

// A test that a blocking wait runs now and then while it finds nothing to do (every 256 idle
// polls, beside the failed-peer test), set per thread by a layer above for the length of one of
// its calls: the collectives' test that the ranks a call waits for made the same call
// (coll::CallScope). It throws to end the wait.
class StallTest {
public:
  virtual void operator()() = 0;

protected:
  ~StallTest() = default;
};
inline thread_local StallTest* t_stall_test = nullptr;

class Engine final : public rt::AmSink {
public:
  explicit Engine(rt::Context& ctx);
  ~Engine();

  rt::Context& context() { return ctx_; }
  // State the collectives layer keeps per process (opaque to p2p; its pool of ended
  // communicators' node-shared state): made by make() on first use, released with the engine.
  template <class Make>
  std::shared_ptr<void> collective_state(Make&& make) {
    std::lock_guard<std::mutex> g(coll_state_mu_);
    if (!coll_state_) coll_state_ = make();
    return coll_state_;
  }

  // Non-blocking operations; `dest`/`src` are ranks of `comm` (src may be any_source).
  // `call`: the public call it serves, which its errors name (a refused message's).
  RequestState* isend(const CommImpl& comm, p2p::Channel ch, const void* buf, std::size_t bytes,
                      int dest, int tag, bool sync, const char* call = "send");
  // `call`: the public call it serves, which its errors name (a truncated message's).
  RequestState* irecv(const CommImpl& comm, p2p::Channel ch, void* buf, std::size_t bytes, int src,
                      int tag, const char* call = "receive");
  // Whether a blocking send from this rank to itself (dest = comm.rank()) would wait forever:
  // one that is not buffered (rendezvous, or synchronous) completes only once a matching
  // receive is posted, and while it blocks no other call can post one (thread levels up to
  // serialized; a progress thread posts no receives). True when none is posted yet.
  bool self_send_would_block(const CommImpl& comm, p2p::Channel ch, std::size_t bytes, int tag,
                             bool sync);
  // Blocking standard send: an eager message that fits the transport now leaves without a
  // request; anything else is isend + wait.
  void send(const CommImpl& comm, p2p::Channel ch, const void* buf, std::size_t bytes, int dest,
            int tag);

  // Completes r and releases it; throws the rmp::Error it failed with. A wait ended otherwise (a
  // failed peer: Errc::peer_failed; an error progress met) releases r as a destroyed Request
  // would (an unmatched receive is cancelled) and throws that.
  Status wait(RequestState* r);
  // Status if complete (r is then released), nullopt otherwise. Once the launcher has reported
  // a failed rank, a request still incomplete is given up as wait() gives it up and the call
  // throws Errc::peer_failed (checked every 256th incomplete test): a test loop ends too. So
  // is one whose test met an error while progressing. Either way r is the caller's only after
  // nullopt.
  std::optional<Status> test(RequestState* r);
  bool cancel(RequestState* r);
  // The user's handle went away without waiting.
  void release(RequestState* r);

  // Starts an operation driven by progress(); the request completes when it reports done.
  RequestState* start(std::unique_ptr<Activity> a);
  bool is_complete(RequestState* r);

  std::optional<Status> iprobe(const CommImpl& comm, p2p::Channel ch, int src, int tag);
  Status probe(const CommImpl& comm, p2p::Channel ch, int src, int tag);

  int progress();
  // Errc::peer_failed naming the failed rank when the launcher has reported one; `doing` says
  // what this rank was doing (nullptr: waiting_for(), "waiting in a blocking call").
  void throw_if_peer_failed(const char* doing = nullptr);
  // What a blocking wait is said to be doing when a peer fails: finalize's waits are not the
  // application's blocking calls. A static string.
  void set_waiting_for(const char* doing) { waiting_for_.store(doing, std::memory_order_relaxed); }
  // The same, from a test loop: asks every 256th call only.
  void throw_if_peer_failed_while_testing();
  // Runs progress until done() holds, spinning then yielding per the wait policy. done() is
  // evaluated with the engine locked.
  template <class Done>
  void progress_until(Done&& done) {
    progress_until(done, [] { return rt::Context::Idle::Awaited::unknown; });
  }
  // The same, for a wait that can tell where the ranks it waits for are (awaited(), asked
  // only when the wait would give the core away, i.e. ranks outnumber cores): running on
  // other cores (keep this core a while) or queued behind this rank (give it away at once).
  // A wait that finds nothing to do while a rank the launcher reported failed throws
  // Errc::peer_failed (checked every 256 idle polls, the bootstrap asked at most once a ms);
  // the thread's StallTest runs then too, and Idle::long_wait_tick (a wait idle for 10 ms
  // lets its core go for a moment).
  template <class Done, class Awaited>
  void progress_until(Done&& done, Awaited&& awaited) {
    rt::Context::Idle idle(ctx_);
    std::uint32_t idle_polls = 0;
    for (;;) {
      int n;
      {
        Lock g(*this);
        if (done()) return;
        n = progress_locked();
      }
      if (n > 0) {
        idle.reset();
        continue;
      }
      if ((++idle_polls & 255) == 0) {
        throw_if_peer_failed();
        if (StallTest* t = t_stall_test) (*t)();
        idle.long_wait_tick();
      }
      // Busy-polling (wait mode poll) has nothing to do between polls (Idle::operator()).
      if (idle.yields()) idle(awaited());
    }
  }

  // RMP_PROGRESS_THREAD=1: a thread that drives progress while the application computes.
  // From then on every entry point takes the engine's lock.
  void start_progress_thread();
  void stop_progress_thread();

  // Held by entry points while a progress thread runs (recursive: activities call back in).
  class Lock {
  public:
    explicit Lock(Engine& e) : m_(e.threaded_ ? &e.mu_ : nullptr) {
      if (m_) m_->lock();
    }
    ~Lock() {
      if (m_) m_->unlock();
    }
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

  private:
    std::recursive_mutex* m_;
  };

  // The sends not yet complete, for finalize's messages: "1 send: to rank 0 (tag 5, 8388608
  // bytes)", the first `max_listed` of them, then how many more; "" when there is none.
  std::string describe_outstanding_sends(std::size_t max_listed = 4);
  // No send in flight, no message (data or control: a rendezvous FIN, a credit return)
  // waiting for room in a transport, no rendezvous read under way and no non-blocking
  // collective unfinished (a detached one's later rounds send and read too): what a rank must
  // reach before it stops progressing, or a peer may wait forever for a FIN this rank still
  // holds, or read memory this rank has unmapped.
  bool drained() {
    Lock g(*this);
    return outstanding_sends_ == 0 && pending_peers_.empty() && retry_gets_.empty() &&
           active_gets_ == 0 && activities_.empty();
  }
  // A communicator with base context id `base` has ended at this rank: when no receive is
  // posted on either of its channels and no message waits unmatched there, their queues go
  // and `free` says the id may serve another communicator (api/comm.cpp). `busy`: a receive
  // posted before the communicator was freed still waits for its message, or an unexpected
  // message was never received; ask again later. `never`: a receive on it was withdrawn, and
  // its message may still come.
  enum class Release : std::uint8_t { free, busy, never };
  Release release_context(std::uint32_t base);
  // Non-blocking collectives not finished, for finalize's messages.
  std::size_t unfinished_collectives() {
    Lock g(*this);
    return activities_.size();
  }

  void on_am(int peer, rt::AmId id, std::span<const std::byte> header,
             std::span<const std::byte> payload) override;

  // For tests: this rank's traffic to world rank `world` goes through `e` (a wrapper of the
  // transport's endpoint that injects refusals and retries), set before any traffic to it.
  void route_through(int world, rt::Endpoint& e);
  // For tests: the eager bytes this rank may still send to `world`, and those it has consumed
  // from it and not yet returned.
  std::size_t credits_to(int world);
  std::size_t owed_to(int world);

  // Size of the eager header, so the inline threshold counts user bytes only.
  static std::size_t eager_header_bytes();

private:
  // Inline: it is the body of every waiting loop.
  int progress_locked() {
    int n = ctx_.progress();
    if (!pending_peers_.empty()) n += flush_pending();
    if (!retry_gets_.empty()) n += retry_gets();
    if (!activities_.empty()) n += advance_activities();
    return n;
  }
  int advance_activities();

  struct Unexpected;
  struct MatchQueues;
  struct Peer;
  struct Pending;
  struct RetryGet;

  RequestState* alloc();
  inline void free_request(RequestState* r);  // inline: defined and used in engine.cpp
  void complete(RequestState* r);
  void fail(RequestState* r, Errc e, std::string msg);
  // Releases r, whose wait or test an error ended (a failed peer, or one progress met): see
  // wait().
  void give_up(RequestState* r);
  // Created on first use; the lookups of a known peer or context stay inline (they run
  // several times per message).
  Peer& peer(int world) {
    Peer* p = peers_[static_cast<std::size_t>(world)].get();
    return p ? *p : new_peer(world);
  }
  Peer& new_peer(int world);  // only through peer(): replaces the entry
  rt::Endpoint& endpoint_of(Peer& p, int world);
  MatchQueues& queues(std::uint32_t ctx) {
    MatchQueues* q = ctx < queues_.size() ? queues_[ctx].get() : nullptr;
    return q ? *q : new_queues(ctx);
  }
  MatchQueues& new_queues(std::uint32_t ctx);  // only through queues(): replaces the entry

  void send_or_queue(Peer& p, int world, p2p::Am am, std::span<const std::byte> hdr,
                     std::span<const std::byte> payload, bool inline_hint, RequestState* req,
                     bool completes, bool control);
  int flush_pending();
  void refused(Peer& p, p2p::Am am, std::span<const std::byte> hdr, RequestState* r);
  std::uint32_t take_owed(Peer& p);
  void count_eager(std::size_t bytes, bool inline_path);
  inline void return_credit(Peer& p, int world, std::size_t bytes);  // as free_request
  void send_ack(int world, p2p::Am am, std::uint64_t sid, std::uint32_t flags = 0);

  Unexpected* enqueue_unexpected(MatchQueues& q, p2p::Am kind, int from, const p2p::EagerHeader& h);
  inline void deliver_eager(RequestState* r, int peer, const p2p::EagerHeader& h,
                            std::span<const std::byte> payload, bool sync, std::uint64_t sid);
  void start_rendezvous(RequestState* r, int peer, const p2p::RtsHeader& h);
  bool issue_get(RequestState* r, std::uint64_t addr, const rt::RemoteKey& key);
  int retry_gets();
  static void on_get_done(rt::Completion* c, rt::TStatus s);

  // RMP_TUNE=adaptive (p2p/protocol_tuner.hpp): whether the tuner picks this send's protocol,
  // the pick (recorded in r), and r's completion; free_request tells the tuner of r's release.
  bool tuned_send(p2p::Channel ch, int world, std::size_t bytes, bool sync) const {
    return tuner_ && ch == p2p::Channel::user && !sync && world != self_ && tuner_->tunes(bytes);
  }
  // The tuner's protocol for a send of `bytes` to peer p, world rank `world` (eager?).
  bool tune_pick(Peer& p, int world, std::size_t bytes);
  inline void note_answer(Peer& p, bool asks, bool explored, bool eager, std::size_t bytes);
  // The tuner's flags of an eager header and of an rts (p2p/wire.hpp) for the send of the last
  // tune_pick().
  inline std::uint32_t answer_flags() const;
  inline std::uint32_t rts_tune_flags() const;
  // isend whose tuned protocol send() already picked (`picked`: 1 eager, 0 rendezvous), or
  // that picks it (-1).
  RequestState* isend_as(const CommImpl& comm, p2p::Channel ch, const void* buf, std::size_t bytes,
                         int dest, int tag, bool sync, int picked, const char* call);
  // Whether a message of `bytes` goes eager by size (the tuner aside; credit aside).
  bool eager_size(std::size_t bytes) const {
    return bytes <= std::max(inline_threshold_, eager_threshold_);
  }
  void tuned_send_completed(const RequestState& r);

  rt::Context& ctx_;
  std::size_t inline_threshold_, eager_threshold_;
  std::size_t credit_bytes_;  // eager buffer each receiver grants each sender
  int self_ = -1;             // this rank's world rank (ctx_.rank() is a virtual call away)
  std::vector<std::unique_ptr<Peer>> peers_;          // by world rank, created on first use
  std::vector<Peer*> pending_peers_;                  // peers with queued sends
  std::vector<std::unique_ptr<MatchQueues>> queues_;  // by context
  std::vector<std::unique_ptr<RequestState>> pool_;
  std::vector<RequestState*> free_;
  std::vector<std::unique_ptr<Unexpected>> unexpected_pool_;
  std::vector<Unexpected*> unexpected_free_;
  // Their payloads' buffers, reused: the bytes unexpected at once are bounded by the credit a
  // rank grants each sender, the buffers kept by 8 MiB.
  p2p::BufferCache unexpected_buffers_{std::size_t{8} << 20};
  std::size_t outstanding_sends_ = 0;
  std::size_t unexpected_now_ = 0;
  std::vector<RequestState*> activities_;
  std::size_t active_gets_ = 0;                // rendezvous reads in progress at this rank
  std::vector<RetryGet> retry_gets_;           // reads the transport had no room for yet
  std::vector<RetryGet> retrying_;             // retry_gets()'s, kept for its capacity
  std::unique_ptr<p2p::ProtocolTuner> tuner_;  // RMP_TUNE=adaptive only
  bool tune_explored_ = false;                 // the last tune_pick() was an exploration
  bool tune_answers_trial_ = false;            // ... an answer to the peer's exploration
  bool tune_asks_answer_ = false;              // ... a send alone that leads its pair
  std::recursive_mutex mu_;
  bool threaded_ = false;
  struct ProgressThread;
  std::unique_ptr<ProgressThread> thread_;
  std::mutex coll_state_mu_;
  std::shared_ptr<void> coll_state_;
  // Incomplete tests since start (test loops ask for a peer failure every 256th); atomic:
  // test_all counts without the engine's lock.
  std::atomic<std::uint32_t> tests_incomplete_{0};
  std::atomic<const char*> waiting_for_{"waiting in a blocking call"};  // set_waiting_for()
};

}  // namespace rmp::detail

namespace rmp::p2p {
using detail::CommImpl;
using detail::Engine;
}  // namespace rmp::p2p
