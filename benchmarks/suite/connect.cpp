// connect=eager vs lazy (DESIGN §5): what pre-warming every peer at start costs and saves.
// Run under rlaunch with -x RMP_CONNECT=eager or lazy, one measurement per run (each needs a
// job whose pairs are still unconnected):
//   bench_connect startup  construction of rmp::Environment to the end of the first barrier,
//                          the slowest rank (steady_clock is one clock for all processes of a
//                          node);
//   bench_connect first    rank 0 exchanges 8 bytes with each peer in turn, before any other
//                          message: half the first round trip (lazy: includes connecting the
//                          pair, both ways) and half the median of 100 more, averaged over the
//                          peers. Rank 0 first sleeps 200 ms so that every peer has finished
//                          its start-up and waits in recv (no message may synchronise them).
// Prints one line from rank 0; pairs_connected_before is rank 0's connected peers when its
// measurement began (eager: n − 1; lazy: 0).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <rmp/rmp.hpp>

#include "runtime/stats.hpp"

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string connect_mode() {
  for (const rmp::ParamInfo& p : rmp::effective_params("shm"))
    if (p.name == "connect") return p.value;
  return "?";
}

unsigned long long endpoints() { return rmp::rt::counters().endpoints; }

void startup(double t0) {
  const rmp::Comm& w = rmp::world();
  const unsigned long long before = endpoints();
  w.barrier();
  const double mine = now_s() - t0;
  double slowest = 0;
  w.allreduce(&mine, &slowest, 1, rmp::Op::max);
  if (w.rank() == 0)
    std::printf("connect=%s ranks=%d startup_ms=%.3f pairs_connected_before=%llu\n",
                connect_mode().c_str(), w.size(), slowest * 1e3, before);
}

void first_message() {
  const rmp::Comm& w = rmp::world();
  const int me = w.rank(), n = w.size();
  if (me == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const unsigned long long before = endpoints();
  constexpr int kWarm = 100;
  std::uint64_t msg = 0;
  double first_sum = 0, warm_sum = 0;
  for (int peer = 1; peer < n; ++peer) {
    if (me != 0 && me != peer) continue;
    const int other = me == 0 ? peer : 0;
    std::vector<double> rtt;
    for (int i = 0; i <= kWarm; ++i) {
      const double t = now_s();
      if (me == 0) {
        w.send(&msg, 1, other, 1);
        w.recv(&msg, 1, other, 1);
      } else {
        w.recv(&msg, 1, other, 1);
        w.send(&msg, 1, other, 1);
      }
      rtt.push_back(now_s() - t);
    }
    first_sum += rtt[0] / 2;
    rtt.erase(rtt.begin());
    std::nth_element(rtt.begin(), rtt.begin() + kWarm / 2, rtt.end());
    warm_sum += rtt[kWarm / 2] / 2;
  }
  if (me == 0) {
    const double peers = std::max(1, n - 1);
    std::printf("connect=%s ranks=%d first_msg_us=%.2f warm_us=%.2f pairs_connected_before=%llu\n",
                connect_mode().c_str(), n, first_sum / peers * 1e6, warm_sum / peers * 1e6,
                before);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const double t0 = now_s();
  rmp::Environment env(argc, argv);
  const std::string_view what = argc > 1 ? argv[1] : "";
  if (what == "startup") {
    startup(t0);
  } else if (what == "first") {
    first_message();
  } else {
    if (rmp::world().rank() == 0) std::fprintf(stderr, "usage: bench_connect startup|first\n");
    return 2;
  }
  return 0;
}
