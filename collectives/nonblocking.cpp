#include "collectives/nonblocking.hpp"

#include <cstring>
#include <functional>
#include <vector>

#include "collectives/algorithms.hpp"
#include "collectives/reduce_ops.hpp"
#include "collectives/select.hpp"

namespace rmp::coll {
namespace {

using detail::CommImpl;
using detail::Engine;
using detail::RequestState;

// Tags of non-blocking collectives: above the blocking ones, one per operation in flight
// (the communicator's sequence number), so concurrent operations never match each other.
constexpr int kTagBase = 1 << 24;
constexpr std::uint32_t kTagMask = (1u << 24) - 1;

class Schedule final : public detail::Activity {
public:
  // `call`: the public call (ibcast, ...), which errors of its transfers name.
  Schedule(std::shared_ptr<CommImpl> c, const char* call)
      : comm_(std::move(c)),
        call_(call),
        tag_(kTagBase + static_cast<int>(comm_->next_collective_sequence() & kTagMask)) {
    rounds_.emplace_back();
  }

  const CommImpl& comm() const { return *comm_; }

  // Transfers of the round being built; they are posted together and all complete before
  // the round's local step runs and the next round starts.
  void send(const void* buf, std::size_t bytes, int dest) {
    rounds_.back().xfers.push_back({true, const_cast<void*>(buf), bytes, dest});
  }
  void recv(void* buf, std::size_t bytes, int src) {
    rounds_.back().xfers.push_back({false, buf, bytes, src});
  }
  void then(std::function<void()> step) { rounds_.back().after = std::move(step); }
  void next_round() {
    if (!rounds_.back().xfers.empty() || rounds_.back().after) rounds_.emplace_back();
  }
  // Scratch space that lives as long as the operation, uninitialised (every use writes it
  // before reading it).
  std::byte* buffer(std::size_t bytes) {
    buffers_.push_back(std::make_unique_for_overwrite<std::byte[]>(bytes));
    return buffers_.back().get();
  }

  void abandon(Engine& e) override {
    fail(Errc::peer_failed, std::string(call_) + ": given up after a rank failed");
    abandoned_ = true;
    for (RequestState* q : inflight_) e.cancel(q);  // an unmatched receive; else nothing
  }

  bool advance(Engine& e) override {
    if (abandoned_) {
      for (RequestState* q : inflight_)
        if (!q->complete) return false;
      for (RequestState* q : inflight_) {
        try {
          e.wait(q);
        } catch (const Error&) {  // a cancelled receive's status; the failure is recorded
        }
      }
      inflight_.clear();
      return true;
    }
    while (cur_ < rounds_.size()) {
      Round& r = rounds_[cur_];
      if (!posted_) {
        // A transfer that cannot start (its peer's endpoint fails to connect) fails the
        // operation here, where it is recorded, instead of leaving the progress call that
        // advanced it (from which a progress thread could not report it) with the round half
        // posted, to be posted again in full at the next call.
        for (const Transfer& x : r.xfers) {
          try {
            inflight_.push_back(x.send ? e.isend(*comm_, p2p::Channel::collective, x.buf, x.bytes,
                                                 x.peer, tag_, false, call_)
                                       : e.irecv(*comm_, p2p::Channel::collective, x.buf, x.bytes,
                                                 x.peer, tag_, call_));
          } catch (const Error& err) {
            fail(err.code(), err.what());
          }
        }
        posted_ = true;
      }
      for (RequestState* q : inflight_)
        if (!q->complete) return false;
      for (RequestState* q : inflight_) {
        try {
          e.wait(q);  // complete: releases it (throws its error, if any)
        } catch (const Error& err) {
          fail(err.code(), err.what());
        }
      }
      inflight_.clear();
      if (r.after) r.after();
      ++cur_;
      posted_ = false;
    }
    return true;
  }

private:
  struct Transfer {
    bool send;
    void* buf;
    std::size_t bytes;
    int peer;
  };
  struct Round {
    std::vector<Transfer> xfers;
    std::function<void()> after;
  };

  std::shared_ptr<CommImpl> comm_;  // keeps the communicator alive while the operation runs
  const char* call_;
  int tag_;
  std::vector<Round> rounds_;
  std::vector<std::unique_ptr<std::byte[]>> buffers_;
  std::vector<RequestState*> inflight_;
  std::size_t cur_ = 0;
  bool posted_ = false;
  bool abandoned_ = false;
};

// Binomial broadcast rounds from `root` (receive from the parent, then send to children).
void add_binomial_bcast(Schedule& s, void* buf, std::size_t bytes, int root) {
  const int n = s.comm().size();
  const int vr = (s.comm().rank() - root + n) % n;
  int mask = 1;
  while (mask < n) {
    if (vr & mask) {
      s.recv(buf, bytes, (vr - mask + root) % n);
      s.next_round();
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vr + mask < n) s.send(buf, bytes, (vr + mask + root) % n);
  s.next_round();
}

// Binomial reduction to rank 0 in a fixed order, then a binomial broadcast, with the vector
// in `work` (the caller's output): every rank ends with the same bits. 2 log p rounds of the
// whole vector: for short ones.
void add_binomial_allreduce(Schedule& s, std::byte* work, std::size_t count, std::size_t esize,
                            Type t, Op op) {
  const int n = s.comm().size(), vr = s.comm().rank();
  const std::size_t bytes = count * esize;
  std::byte* scratch = s.buffer(bytes);
  for (int mask = 1; mask < n; mask <<= 1) {
    if ((vr & mask) == 0) {
      const int child = vr | mask;
      if (child < n) {
        s.recv(scratch, bytes, child);
        s.then([=] { reduce_apply(op, t, scratch, work, count); });
        s.next_round();
      }
    } else {
      s.send(work, bytes, vr & ~mask);
      s.next_round();
      break;
    }
  }
  add_binomial_bcast(s, work, bytes, 0);
}

// Rabenseifner's allreduce as rounds, as allreduce_rabenseifner does it blocking: over the
// Fold of the ranks, reduce-scatter by recursive halving, then allgather by recursive
// doubling, with the vector in `work` (the caller's output). Every element is combined at
// one rank, so every rank ends with the same bits; each rank sends and receives about
// 2 (p - 1) / p of the vector, and all reduce at once: for long ones.
void add_rabenseifner_allreduce(Schedule& s, std::byte* work, std::size_t count, std::size_t esize,
                                Type t, Op op) {
  const int r = s.comm().rank();
  const std::size_t bytes = count * esize;
  const Fold f(s.comm().size());
  const Blocks blocks = Blocks::even(count, s.comm().size());
  auto at = [=](std::size_t e) { return work + e * esize; };
  if (f.sits_out(r)) {  // hands its vector to its odd neighbour, which hands back the result
    s.send(work, bytes, r + 1);
    s.next_round();
    s.recv(work, bytes, r + 1);
    s.next_round();
    return;
  }
  const int nr = f.newrank(r);
  std::byte* tmp = s.buffer(halving_scratch(f, blocks, r) * esize);
  if (f.folded(r)) {
    s.recv(tmp, bytes, r - 1);
    s.then([=] { reduce_apply(op, t, tmp, work, count); });
    s.next_round();
  }
  for (const HalvingStep& h : halving_steps(f, blocks, nr)) {
    s.send(at(h.give), h.ngive * esize, h.partner);
    s.recv(tmp, h.nkeep * esize, h.partner);
    std::byte* into = at(h.keep);
    const std::size_t nkeep = h.nkeep;
    s.then([=] { reduce_apply(op, t, tmp, into, nkeep); });
    s.next_round();
  }
  for (const DoublingStep& d : doubling_steps(f, blocks, nr)) {
    s.send(at(d.mine), d.nmine * esize, d.partner);
    s.recv(at(d.theirs), d.ntheirs * esize, d.partner);
    s.next_round();
  }
  if (f.folded(r)) {
    s.send(work, bytes, r - 1);
    s.next_round();
  }
}

}  // namespace

std::unique_ptr<detail::Activity> ibarrier(std::shared_ptr<CommImpl> c) {
  auto s = std::make_unique<Schedule>(std::move(c), "ibarrier");
  const int n = s->comm().size(), r = s->comm().rank();
  // Dissemination: round k exchanges an empty message with ranks r ± 2^k.
  for (int k = 1; k < n; k <<= 1) {
    s->send(nullptr, 0, (r + k) % n);
    s->recv(nullptr, 0, (r - k + n) % n);
    s->next_round();
  }
  return s;
}

std::unique_ptr<detail::Activity> ibcast(std::shared_ptr<CommImpl> c, void* buf,
                                         std::size_t bytes, int root) {
  auto s = std::make_unique<Schedule>(std::move(c), "ibcast");
  add_binomial_bcast(*s, buf, bytes, root);
  return s;
}

IallreduceSchedule iallreduce_schedule(const detail::CommImpl& c, std::size_t count,
                                       std::size_t esize) {
  // The blocking allreduce's formulas choose (from rank 0's parameters and the ranks per
  // core, the same on every rank that the runtime counts alike): Rabenseifner's schedule
  // where they pick a bandwidth-optimal algorithm, else the latency-optimal reduce and
  // broadcast.
  const int n = c.size();
  const int algo = cheapest(Coll::allreduce, cost_model(c), n, static_cast<double>(count * esize));
  return count >= static_cast<std::size_t>(n) &&
                 algo != static_cast<int>(AllreduceAlgo::recursive_doubling)
             ? IallreduceSchedule::rabenseifner
             : IallreduceSchedule::binomial;
}

std::unique_ptr<detail::Activity> iallreduce(std::shared_ptr<CommImpl> c, const void* in, void* out,
                                             std::size_t count, std::size_t esize, detail::Type t,
                                             Op op, IallreduceSchedule schedule) {
  auto s = std::make_unique<Schedule>(std::move(c), "iallreduce");
  const int n = s->comm().size();
  const std::size_t bytes = count * esize;
  // The result is built in `out`: the input goes there first (in place it is there).
  if (in && in != out && bytes) std::memcpy(out, in, bytes);
  if (schedule == IallreduceSchedule::chosen)
    schedule = iallreduce_schedule(s->comm(), count, esize);
  if (n > 1 && schedule == IallreduceSchedule::rabenseifner)
    add_rabenseifner_allreduce(*s, static_cast<std::byte*>(out), count, esize, t, op);
  else add_binomial_allreduce(*s, static_cast<std::byte*>(out), count, esize, t, op);
  return s;
}

}  // namespace rmp::coll
