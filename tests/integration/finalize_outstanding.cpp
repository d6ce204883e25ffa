// A program that ends with sends still outstanding (their Requests destroyed, i.e. detached)
// but matched by receives its peers post — some only after the sender is already inside the
// Environment destructor. Finalize must deliver them (API.md: "delivers outstanding sends").
// Every rank sends to its right neighbour and receives from its left one (a ring; one rank:
// itself): round 1 with the receives posted first, round 2 with odd ranks receiving 100 ms
// late, round 3 a burst of 3 × rq_depth small messages (more than the credits) received late.
// Round 4 detaches a 4 MiB ibcast and an iallreduce, checked after finalize.
// Then receives nothing matches, left pending at finalize: their handles, used afterwards,
// throw invalid_comm (their state went with the engine; they used to read freed memory).
// Exit status 0 when every rank got every message intact; rlaunch reports the first failure.
#include "harness.hpp"

#include <chrono>
#include <cstdio>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace {

int bad = 0;

void check(bool ok, int round, std::size_t i, std::size_t bytes, int src) {
  if (ok) return;
  ++bad;
  std::fprintf(stderr,
               "[rank %d] finalize test round %d: message %zu (%zu B) from rank %d "
               "arrived wrong\n",
               itest::rank(), round, i, bytes, src);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace itest;
  // Send buffers must outlive the Environment: detached sends read them during finalize.
  static std::vector<std::vector<std::byte>> keep;
  // Round 4's buffers, read after finalize: the detached collectives finish inside it.
  static std::vector<std::byte> bcast_buf;
  static std::vector<double> sum_in, sum_out;
  const std::size_t bcast_bytes = (std::size_t{4} << 20) + 3;
  int me = -1, ranks = 0;
  std::vector<rmp::Request> pending(5);  // receives no message matches, outliving rmp
  rmp::Comm kept;                        // a communicator handle outliving rmp
  int unmatched = 0;
  try {
    rmp::Environment env(argc, argv);
    const rmp::Comm& w = rmp::world();
    const int r = rank(), n = size();
    me = r;
    ranks = n;
    const int right = (r + 1) % n, left = (r - 1 + n) % n;
    const Knobs& k = knobs();
    const std::vector<std::size_t> sizes = {0,
                                            1,
                                            k.inline_threshold + 1,
                                            k.eager_threshold,
                                            k.eager_threshold + 1,
                                            rndv_size(),
                                            (std::size_t{4} << 20) + 3};
    auto send_detached = [&](std::size_t bytes, int tag, std::uint64_t msg) {
      keep.push_back(make_message<std::byte>(bytes, seed(r, right, msg, 0x60)));
      rmp::Request q = w.isend(keep.back().data(), bytes, right, tag);
    };  // q destroyed here: detached

    // Round 1: receives posted before the sends.
    std::vector<std::vector<std::byte>> in;
    std::vector<rmp::Request> rq;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      in.emplace_back(sizes[i]);
      rq.push_back(w.irecv(in.back().data(), sizes[i], left, 100 + int(i)));
    }
    w.barrier();
    for (std::size_t i = 0; i < sizes.size(); ++i) send_detached(sizes[i], 100 + int(i), i);
    rmp::wait_all(rq);
    for (std::size_t i = 0; i < sizes.size(); ++i)
      check(first_mismatch(in[i].data(), sizes[i], seed(left, r, i, 0x60)) == sizes[i], 1, i,
            sizes[i], left);

    // Round 2: odd ranks receive late, while their left neighbours may already be finalizing.
    for (std::size_t i = 0; i < sizes.size(); ++i) send_detached(sizes[i], 200 + int(i), 100 + i);
    // Round 3: more small messages than there are eager credits.
    const std::size_t burst =
        std::min<std::size_t>(3 * std::max<std::size_t>(k.rq_depth, 64), 20000);
    const std::size_t small =
        std::min<std::size_t>(std::max<std::size_t>(k.inline_threshold + 1, 8),
                              std::max<std::size_t>(k.eager_threshold, 8));
    for (std::size_t i = 0; i < burst; ++i) send_detached(small, 300, 1000 + i);
    if (r % 2 == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      std::vector<std::byte> buf(sizes[i]);
      const rmp::Status st = w.recv(buf.data(), sizes[i], left, 200 + int(i));
      check(st.bytes == sizes[i] &&
                first_mismatch(buf.data(), sizes[i], seed(left, r, 100 + i, 0x60)) == sizes[i],
            2, i, sizes[i], left);
    }
    std::vector<std::byte> buf(small);
    for (std::size_t i = 0; i < burst; ++i) {
      const rmp::Status st = w.recv(buf.data(), small, left, 300);
      check(st.bytes == small &&
                first_mismatch(buf.data(), small, seed(left, r, 1000 + i, 0x60)) == small,
            3, i, small, left);
    }
    // Round 4: non-blocking collectives detached at once (their Requests destroyed): a bcast
    // whose rendezvous messages go down a tree, inner ranks forwarding only once theirs has
    // arrived, and an allreduce; both finish inside finalize (the allreduce after the bcast's
    // root arrives).
    bcast_buf = r == 0 ? make_message<std::byte>(bcast_bytes, seed(0, 0, 4000, 0x61))
                       : std::vector<std::byte>(bcast_bytes);
    sum_in.assign(1000, double(r + 1));
    sum_out.assign(1000, 0.0);
    // The root starts late: the others are inside finalize by then, and inner ranks forward
    // what they receive while the closing barrier waits for the root.
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    { rmp::Request q = w.ibcast(bcast_buf.data(), bcast_bytes, 0); }
    { rmp::Request q = w.iallreduce(sum_in.data(), sum_out.data(), sum_in.size(), rmp::Op::sum); }
    for (rmp::Request& p : pending) p = w.irecv(&unmatched, 1, left, 999);
    kept = w.dup();
    if (bad == 0 && r == 0)
      std::printf("finalize test: %d ranks, %zu detached sends per rank delivered\n", n,
                  2 * sizes.size() + burst);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %s] finalize test: %s\n",
                 std::getenv("RMP_RANK") ? std::getenv("RMP_RANK") : "?", e.what());
    return 2;
  }
  // The detached collectives finished before finalize returned.
  if (const std::size_t at = first_mismatch(bcast_buf.data(), bcast_bytes, seed(0, 0, 4000, 0x61));
      at != bcast_bytes) {
    std::fprintf(stderr, "[rank %d] detached ibcast: byte %zu of %zu wrong after finalize\n", me,
                 at, bcast_bytes);
    ++bad;
  }
  for (double v : sum_out)
    if (v != ranks * (ranks + 1) / 2.0) {
      std::fprintf(stderr, "[rank %d] detached iallreduce: %g after finalize, want %g\n", me, v,
                   ranks * (ranks + 1) / 2.0);
      ++bad;
      break;
    }
  // After finalize: every use of a request left pending throws, naming the call, and lets it go.
  const auto expect_finalized = [&](const char* call, auto&& use, rmp::Request& req) {
    try {
      use();
      std::fprintf(stderr, "[rank %d] %s after finalize did not throw\n", itest::rank(), call);
      ++bad;
    } catch (const rmp::Error& e) {
      const std::string what = e.what();
      if (e.code() != rmp::Errc::invalid_comm ||
          what.find(std::string(call) + ": rmp is finalized") == std::string::npos) {
        std::fprintf(stderr, "[rank %d] %s after finalize: %s\n", itest::rank(), call, e.what());
        ++bad;
      }
    }
    if (req.active()) {
      std::fprintf(stderr, "[rank %d] %s after finalize left the request active\n", itest::rank(),
                   call);
      ++bad;
    }
  };
  expect_finalized(
      "wait", [&] { pending[0].wait(); }, pending[0]);
  expect_finalized(
      "test", [&] { (void)pending[1].test(); }, pending[1]);
  expect_finalized(
      "cancel", [&] { (void)pending[2].cancel(); }, pending[2]);
  expect_finalized(
      "wait_any", [&] { (void)rmp::wait_any(std::span(pending).subspan(3, 1)); }, pending[3]);
  expect_finalized(
      "test_all", [&] { (void)rmp::test_all(std::span(pending).subspan(4, 1)); }, pending[4]);
  if (kept.valid()) {
    std::fprintf(stderr, "[rank %d] a Comm kept past finalize still says valid()\n", itest::rank());
    ++bad;
  }
  return bad == 0 ? 0 : 1;
}
