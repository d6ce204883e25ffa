#include "collectives/nonblocking.hpp"

#include <cstring>
#include <functional>
#include <vector>

#include "collectives/reduce_ops.hpp"

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
  explicit Schedule(std::shared_ptr<CommImpl> c)
      : comm_(std::move(c)),
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
  std::byte* buffer(std::size_t bytes) {
    buffers_.emplace_back(bytes);
    return buffers_.back().data();
  }

  bool advance(Engine& e) override {
    while (cur_ < rounds_.size()) {
      Round& r = rounds_[cur_];
      if (!posted_) {
        for (const Transfer& x : r.xfers)
          inflight_.push_back(
              x.send ? e.isend(*comm_, p2p::Channel::collective, x.buf, x.bytes, x.peer, tag_, false)
                     : e.irecv(*comm_, p2p::Channel::collective, x.buf, x.bytes, x.peer, tag_));
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
  int tag_;
  std::vector<Round> rounds_;
  std::vector<std::vector<std::byte>> buffers_;
  std::vector<RequestState*> inflight_;
  std::size_t cur_ = 0;
  bool posted_ = false;
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

}  // namespace

std::unique_ptr<detail::Activity> ibarrier(std::shared_ptr<CommImpl> c) {
  auto s = std::make_unique<Schedule>(std::move(c));
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
  auto s = std::make_unique<Schedule>(std::move(c));
  add_binomial_bcast(*s, buf, bytes, root);
  return s;
}

std::unique_ptr<detail::Activity> iallreduce(std::shared_ptr<CommImpl> c, const void* in,
                                             void* out, std::size_t count, std::size_t esize,
                                             detail::Type t, Op op) {
  auto s = std::make_unique<Schedule>(std::move(c));
  const int n = s->comm().size(), vr = s->comm().rank();
  const std::size_t bytes = count * esize;
  // Binomial reduction to rank 0 in a fixed order, then a binomial broadcast: every rank
  // ends with the same bits.
  std::byte* acc = s->buffer(bytes);
  std::byte* scratch = s->buffer(bytes);
  if (bytes) std::memcpy(acc, in ? in : out, bytes);
  for (int mask = 1; mask < n; mask <<= 1) {
    if ((vr & mask) == 0) {
      const int child = vr | mask;
      if (child < n) {
        s->recv(scratch, bytes, child);
        s->then([=] { reduce_apply(op, t, scratch, acc, count); });
        s->next_round();
      }
    } else {
      s->send(acc, bytes, vr & ~mask);
      s->next_round();
      break;
    }
  }
  if (vr == 0) {
    s->then([=] {
      if (bytes) std::memcpy(out, acc, bytes);
    });
    s->next_round();
  }
  add_binomial_bcast(*s, out, bytes, 0);
  return s;
}

}  // namespace rmp::coll
