// Point-to-point benchmarks between two ranks, after the OSU micro-benchmarks:
//   latency   — ping-pong; half the round-trip time (osu_latency)
//   bandwidth — rank 0 posts a window of non-blocking sends, rank 1 the matching receives,
//               then a short ack; bytes moved per second (osu_bw)
// Built once per backend: bench_pt2pt_rmp, bench_pt2pt_mpi.
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

// One untimed exchange of a known pattern, rank 0 → rank 1 → rank 0, through the same kind
// of calls the test timed: proves the numbers belong to transfers that deliver the right bytes.
void validate(Context& c, const char* test, std::size_t bytes, bool nonblocking) {
  Backend& b = c.b;
  std::byte* s = c.sbuf.region(0, bytes);
  std::byte* r = c.rbuf.region(0, bytes);
  const auto seed = static_cast<std::uint32_t>(bytes * 31 + (nonblocking ? 1 : 0));
  auto xfer_send = [&](const std::byte* p) {
    if (nonblocking) {
      b.isend(p, bytes, 1 - b.rank(), kTagCheck);
      b.waitall();
    } else {
      b.send(p, bytes, 1 - b.rank(), kTagCheck);
    }
  };
  auto xfer_recv = [&](std::byte* p) {
    if (nonblocking) {
      b.irecv(p, bytes, 1 - b.rank(), kTagCheck);
      b.waitall();
    } else {
      b.recv(p, bytes, 1 - b.rank(), kTagCheck);
    }
  };
  if (b.rank() == 0) {
    bench::fill_pattern(s, bytes, seed);
    xfer_send(s);
    xfer_recv(r);
  } else {
    xfer_recv(r);
    if (!bench::check_pattern(r, bytes, seed)) bench::report_validation_failure(b, test, bytes);
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

double bandwidth(Context& c, std::size_t bytes, std::size_t iters, std::size_t warmup) {
  Backend& b = c.b;
  const bool sender = b.rank() == 0;
  const std::size_t window = c.opt.window;
  std::array<std::byte, 4> ack{};
  std::size_t k = 0;  // region index: hot pools ignore it, cold pools move on every message
  double t0 = b.wtime();
  for (std::size_t i = 0; i < warmup + iters; ++i) {
    if (i == warmup) t0 = b.wtime();
    if (sender) {
      for (std::size_t w = 0; w < window; ++w)
        b.isend(c.sbuf.region(k++, bytes), bytes, 1, kTagBandwidth);
      b.waitall();
      b.recv(ack.data(), ack.size(), 1, kTagAck);
    } else {
      for (std::size_t w = 0; w < window; ++w)
        b.irecv(c.rbuf.region(k++, bytes), bytes, 0, kTagBandwidth);
      b.waitall();
      b.send(ack.data(), ack.size(), 0, kTagAck);
    }
  }
  const double elapsed = b.wtime() - t0;
  validate(c, "bandwidth", bytes, true);
  const double moved = static_cast<double>(bytes) * static_cast<double>(window * iters);
  return moved / elapsed / 1e6;  // MB/s (10^6 bytes, as OSU)
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<bench::Test> tests = {
      {"latency", "us", "ping-pong, half round trip (osu_latency)",
       bench::IterPolicy{.base = 10000, .warmup = 100, .large_threshold = 8192, .min_large = 100},
       latency},
      {"bandwidth", "MB/s", "window of isends, irecvs + ack (osu_bw)",
       bench::IterPolicy{.base = 100, .warmup = 10, .large_threshold = 8192, .min_large = 20},
       bandwidth},
  };
  int status = 0;
  {
    Backend b(argc, argv);
    status = bench::run_suite(b, "bench_pt2pt", tests, argc, argv);
  }
  return status;
}
