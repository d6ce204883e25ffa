// Point-to-point benchmarks, after the OSU micro-benchmarks:
//   latency   — ping-pong between 2 ranks; half the round-trip time (osu_latency)
//   bandwidth — rank 0 posts a window of non-blocking sends, rank 1 the matching receives,
//               then a short ack; bytes moved per second (osu_bw)
//   bibw      — both of 2 ranks post a window of receives and a window of sends at once;
//               bytes moved both ways per second (osu_bibw)
//   multi_bw  — N/2 pairs (rank r with r + N/2) each run the bandwidth loop at the same time;
//   msg_rate    aggregate bytes / messages per second over all pairs (osu_mbw_mr)
// Built once per backend: bench_pt2pt_rmp, bench_pt2pt_openmpi, bench_pt2pt_mpich.
#include <array>
#include <cstddef>
#include <vector>

#include "backend.hpp"
#include "harness.hpp"

namespace {

using bench::Backend;
using bench::Context;

constexpr int kTagLatency = 1;
constexpr int kTagBandwidth = 100;
constexpr int kTagAck = 101;
constexpr int kTagCheck = 7;

// Rank pairs as in osu_mbw_mr: rank r < size/2 leads (sends first; the bandwidth sender) and
// is paired with r + size/2. With two ranks: 0 leads, 1 answers.
int partner(const Backend& b) {
  const int half = b.size() / 2;
  return b.rank() < half ? b.rank() + half : b.rank() - half;
}
bool leads(const Backend& b) { return b.rank() < b.size() / 2; }
std::size_t pairs(const Backend& b) { return static_cast<std::size_t>(b.size() / 2); }

// One untimed exchange of a known pattern, leader → partner → leader, through the same kind
// of calls the test timed: proves the numbers belong to transfers that deliver the right bytes.
void validate(Context& c, const char* test, std::size_t bytes, bool nonblocking) {
  Backend& b = c.b;
  const int peer = partner(b);
  std::byte* s = c.sbuf.region(0, bytes);
  std::byte* r = c.rbuf.region(0, bytes);
  const auto seed = static_cast<std::uint32_t>(bytes * 31 + (nonblocking ? 1 : 0) +
                                               static_cast<std::size_t>(b.rank()) * 7919);
  auto xfer_send = [&](const std::byte* p) {
    if (nonblocking) {
      b.isend(p, bytes, peer, kTagCheck);
      b.waitall();
    } else {
      b.send(p, bytes, peer, kTagCheck);
    }
  };
  auto xfer_recv = [&](std::byte* p) {
    if (nonblocking) {
      b.irecv(p, bytes, peer, kTagCheck);
      b.waitall();
    } else {
      b.recv(p, bytes, peer, kTagCheck);
    }
  };
  if (leads(b)) {
    bench::fill_pattern(s, bytes, seed);
    xfer_send(s);
    xfer_recv(r);
  } else {
    xfer_recv(r);
    const auto leader_seed = static_cast<std::uint32_t>(
        bytes * 31 + (nonblocking ? 1 : 0) + static_cast<std::size_t>(peer) * 7919);
    if (!bench::check_pattern(r, bytes, leader_seed)) {
      bench::report_validation_failure(b, test, bytes);
    }
    xfer_send(r);  // echo what arrived
    return;
  }
  if (!bench::check_pattern(r, bytes, seed)) bench::report_validation_failure(b, test, bytes);
}

double latency(Context& c, std::size_t bytes, std::size_t iters, std::size_t warmup) {
  Backend& b = c.b;
  const bool ping = b.rank() == 0;
  double t0 = b.wtime();
  for (std::size_t i = 0; i < warmup + iters; ++i) {
    if (i == warmup) t0 = b.wtime();
    std::byte* s = c.sbuf.region(i, bytes);
    std::byte* r = c.rbuf.region(i, bytes);
    if (ping) {
      b.send(s, bytes, 1, kTagLatency);
      b.recv(r, bytes, 1, kTagLatency);
    } else {
      b.recv(r, bytes, 0, kTagLatency);
      b.send(s, bytes, 0, kTagLatency);
    }
  }
  const double elapsed = b.wtime() - t0;
  validate(c, "latency", bytes, false);
  return elapsed * 1e6 / (2.0 * static_cast<double>(iters));  // µs, one way
}

// The osu_bw loop between this rank and its partner: the leader posts `window` isends, the
// partner as many irecvs, then a short ack. Returns this rank's elapsed seconds.
double windowed(Context& c, std::size_t bytes, std::size_t iters, std::size_t warmup) {
  Backend& b = c.b;
  const bool sender = leads(b);
  const int peer = partner(b);
  const std::size_t window = c.opt.window;
  std::array<std::byte, 4> ack{};
  std::size_t k = 0;  // region index: hot pools ignore it, cold pools move on every message
  double t0 = b.wtime();
  for (std::size_t i = 0; i < warmup + iters; ++i) {
    if (i == warmup) t0 = b.wtime();
    if (sender) {
      for (std::size_t w = 0; w < window; ++w)
        b.isend(c.sbuf.region(k++, bytes), bytes, peer, kTagBandwidth);
      b.waitall();
      b.recv(ack.data(), ack.size(), peer, kTagAck);
    } else {
      for (std::size_t w = 0; w < window; ++w)
        b.irecv(c.rbuf.region(k++, bytes), bytes, peer, kTagBandwidth);
      b.waitall();
      b.send(ack.data(), ack.size(), peer, kTagAck);
    }
  }
  return b.wtime() - t0;
}

// Messages one pair moved in the timed part of windowed().
double messages(const Context& c, std::size_t iters) {
  return static_cast<double>(c.opt.window * iters);
}

double bandwidth(Context& c, std::size_t bytes, std::size_t iters, std::size_t warmup) {
  const double elapsed = windowed(c, bytes, iters, warmup);
  validate(c, "bandwidth", bytes, true);
  return static_cast<double>(bytes) * messages(c, iters) / elapsed / 1e6;  // MB/s (10^6 B)
}

// Every pair runs windowed() at once; the slowest rank's time stands for all of them, so the
// aggregate counts only time in which every pair was done.
double all_pairs_elapsed(Context& c, const char* test, std::size_t bytes, std::size_t iters,
                         std::size_t warmup) {
  double mine = windowed(c, bytes, iters, warmup), slowest = 0;
  c.b.allreduce(&mine, &slowest, 1, bench::Elem::f64, bench::ReduceOp::max);
  validate(c, test, bytes, true);
  return slowest;
}

double multi_bw(Context& c, std::size_t bytes, std::size_t iters, std::size_t warmup) {
  const double elapsed = all_pairs_elapsed(c, "multi_bw", bytes, iters, warmup);
  return static_cast<double>(pairs(c.b) * bytes) * messages(c, iters) / elapsed / 1e6;
}

double msg_rate(Context& c, std::size_t bytes, std::size_t iters, std::size_t warmup) {
  const double elapsed = all_pairs_elapsed(c, "msg_rate", bytes, iters, warmup);
  return static_cast<double>(pairs(c.b)) * messages(c, iters) / elapsed;  // messages/s
}

double bibw(Context& c, std::size_t bytes, std::size_t iters, std::size_t warmup) {
  Backend& b = c.b;
  const int peer = partner(b);
  const std::size_t window = c.opt.window;
  std::size_t k = 0;
  double t0 = b.wtime();
  for (std::size_t i = 0; i < warmup + iters; ++i) {
    if (i == warmup) t0 = b.wtime();
    for (std::size_t w = 0; w < window; ++w)
      b.irecv(c.rbuf.region(k + w, bytes), bytes, peer, kTagBandwidth);
    for (std::size_t w = 0; w < window; ++w)
      b.isend(c.sbuf.region(k + w, bytes), bytes, peer, kTagBandwidth);
    k += window;
    b.waitall();
  }
  const double elapsed = b.wtime() - t0;
  validate(c, "bibw", bytes, true);
  return 2.0 * static_cast<double>(bytes) * messages(c, iters) / elapsed / 1e6;  // both ways
}

}  // namespace

int main(int argc, char** argv) {
  const bench::IterPolicy windows{
      .base = 100, .warmup = 10, .large_threshold = 8192, .min_large = 20};
  const std::vector<bench::Test> tests = {
      {"latency", "us", "ping-pong, half round trip (osu_latency)",
       bench::IterPolicy{.base = 10000, .warmup = 100, .large_threshold = 8192, .min_large = 100},
       latency, false, /*exact_ranks=*/2},
      {"bandwidth", "MB/s", "window of isends, irecvs + ack (osu_bw)", windows, bandwidth, false,
       /*exact_ranks=*/2},
      {"bibw", "MB/s", "a window of isends and irecvs each way at once (osu_bibw)", windows, bibw,
       false, /*exact_ranks=*/2},
      {"multi_bw", "MB/s", "N/2 pairs in osu_bw at once, aggregate bytes/s (osu_mbw_mr)", windows,
       multi_bw, false, 0, /*even_ranks=*/true},
      {"msg_rate", "msgs/s", "N/2 pairs in osu_bw at once, aggregate messages/s (osu_mbw_mr)",
       windows, msg_rate, false, 0, /*even_ranks=*/true},
  };
  bench::SuiteSpec spec;
  spec.program = "bench_pt2pt";
  spec.min_ranks = 2;
  spec.max_ranks = 0;
  int status = 0;
  {
    Backend b(argc, argv);
    status = bench::run_suite(b, spec, tests, argc, argv);
  }
  return status;
}
