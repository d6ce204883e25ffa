// Ranks as threads in one process (after Gloo's spawnThreads): each thread gets its own
// runtime context over an in-process bootstrap, a p2p engine and a world communicator, and
// the real shm transport between them.
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "p2p/engine.hpp"
#include "runtime/bootstrap/bootstrap.hpp"
#include "runtime/context.hpp"

namespace rmp::testing {

struct ThreadRank {
  rt::Context& ctx;
  detail::Engine& engine;
  detail::CommImpl& world;
  rt::InProcessStore& store;  // the job's (rt::report_peer_failure)
};

// How many rounds of a ping-pong between two thread ranks run, as rank 0 decides round by
// round: at least `least`, then until what rank 0 waits for has happened (a tuner's first
// exploration, say), at most `most` rounds or `cap` of time. A fixed count ended before the
// tuner explored at all when tests ran in parallel: on a loaded machine the ranks are
// descheduled between sends, and the tuner leaves sends that far apart unjudged
// (ProtocolTuner::kGapFactor).
class SharedRounds {
public:
  SharedRounds(int least, int most, std::chrono::seconds cap = std::chrono::seconds(30))
      : least_(least), most_(most), end_(std::chrono::steady_clock::now() + cap) {}
  // Rank 0, before round i: whether it runs (`seen`: what the rounds wait for has happened).
  bool lead(int i, bool seen) {
    const bool go = i < least_ || (i < most_ && !seen && std::chrono::steady_clock::now() < end_);
    if (go) decided_.store(i + 1, std::memory_order_release);
    else total_.store(i, std::memory_order_release);
    return go;
  }
  // Rank 1, before round i: whether it runs, as rank 0 decided (no, too, once rank 0 has been
  // silent for 30 s past the cap: it left its rounds by a failed assertion or an exception).
  bool follow(int i) const {
    for (;;) {
      if (decided_.load(std::memory_order_acquire) > i) return true;
      const int t = total_.load(std::memory_order_acquire);
      if (t >= 0 && t <= i) return false;
      if (std::chrono::steady_clock::now() > end_ + std::chrono::seconds(30)) return false;
      std::this_thread::yield();
    }
  }
  bool next(int rank, int i, bool seen) { return rank == 0 ? lead(i, seen) : follow(i); }
  // Rounds run in all (once rank 0 ended them).
  int total() const { return total_.load(std::memory_order_acquire); }

private:
  const int least_, most_;
  const std::chrono::steady_clock::time_point end_;
  std::atomic<int> decided_{0}, total_{-1};
};

// Runs fn on n thread-ranks; rethrows the first exception any of them threw.
inline void run_thread_ranks(int n, const std::function<void(ThreadRank&)>& fn) {
  auto store = rt::make_in_process_store(n);
  std::exception_ptr first;
  std::mutex m;
  std::vector<std::thread> ts;
  std::atomic<int> drained_ranks{0};
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      bool counted = false;
      try {
        rt::Context ctx(rt::make_in_process_bootstrap(store, r));
        detail::Engine engine(ctx);
        detail::CommImpl world(engine, 0, r, n);
        ThreadRank tr{ctx, engine, world, *store};
        fn(tr);
        // Finalize: drain sends and queued messages, and keep reading what the others send until
        // every rank has drained (as finalize's barrier through the progress engine does), then
        // a barrier through bootstrap (no further traffic). A rank that left at once could
        // leave another unable to flush: a sender whose eager sends never waited for credit
        // never read its incoming ring, which the receiver's control messages had filled, and
        // the receiver's last credit return waited for room there forever.
        // (A rank that threw counts as drained; the wait is bounded as the fence is, and ends
        // once a rank is reported failed: the tests that report one expect no further traffic.)
        engine.progress_until([&] { return engine.drained(); });
        counted = true;
        drained_ranks.fetch_add(1, std::memory_order_acq_rel);
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        try {
          engine.progress_until([&] {
            return (drained_ranks.load(std::memory_order_acquire) == n && engine.drained()) ||
                   ctx.peer_failure() != nullptr || std::chrono::steady_clock::now() > until;
          });
        } catch (const Error& e) {  // a failure reported between two of the checks above
          if (e.code() != Errc::peer_failed) throw;
        }
        ctx.bootstrap().fence(std::chrono::seconds(60));
      } catch (...) {
        if (!counted) drained_ranks.fetch_add(1, std::memory_order_acq_rel);
        std::lock_guard<std::mutex> g(m);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : ts) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace rmp::testing
