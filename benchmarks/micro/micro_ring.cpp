// The shm message ring (runtime/transport/shm/shm_ring.hpp) without a transport around it:
//   ring/push_poll/<payload>     one thread pushes a message and polls it back: the cost of
//                                the two ends with every line hot in this core's cache
//   ring/stream/<payload>        a producer thread pushes, a consumer thread polls: messages
//                                per second through the ring when both ends run at once
//   ring/pingpong/<payload>      two rings, one each way: a message goes over and is echoed
//                                back; time per round trip (twice the one-way latency)
// Payloads up to max_inline_bytes() go inline; "copy" variants carry the payload in the byte
// ring (the eager-copy path). The ring has the transport's default geometry (256 lines,
// 64 KiB byte ring). The threaded variants pin their two threads to the first two CPUs this
// process may use (so that the scheduler cannot put both on one CPU and time-slice them);
// they need two idle CPUs to mean anything, and on a shared VM their numbers move with the
// vCPU placement (see benchmarks/suite/placement_probe.cpp).
#include <benchmark/benchmark.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/transport/shm/shm_ring.hpp"

namespace {

using namespace rmp::rt;
using namespace rmp::rt::shm;

constexpr std::size_t kRingLines = 256;
constexpr std::size_t kDataBytes = std::size_t{1} << 16;
constexpr std::size_t kHeader = 16;  // about what p2p puts in front of an eager message
constexpr AmId kAm = 3;

// One direction of a shm pair, in ordinary memory (the layout does not care where it lives).
struct RingMemory {
  RingShared shared;
  std::vector<Line> lines;
  std::vector<std::byte> data;
  RingLayout layout;
  RingMemory() : lines(kRingLines), data(kDataBytes) {
    for (Line& l : lines) l.seq.store(0, std::memory_order_relaxed);
    layout = {&shared, lines.data(), kRingLines, data.data(), kDataBytes};
  }
};

// Pins the calling thread to one CPU for its lifetime in scope, then restores its mask.
// cpu < 0 (fewer than two CPUs available): leaves the thread alone.
class PinnedTo {
public:
  explicit PinnedTo(int cpu) {
    if (cpu < 0 || pthread_getaffinity_np(pthread_self(), sizeof saved_, &saved_) != 0) return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pinned_ = pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
  }
  ~PinnedTo() {
    if (pinned_) pthread_setaffinity_np(pthread_self(), sizeof saved_, &saved_);
  }
  PinnedTo(const PinnedTo&) = delete;
  PinnedTo& operator=(const PinnedTo&) = delete;

private:
  cpu_set_t saved_{};
  bool pinned_ = false;
};

// The first two CPUs of this process's affinity mask, or {-1, -1}.
std::pair<int, int> two_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return {-1, -1};
  int found[2] = {-1, -1}, n = 0;
  for (int c = 0; c < CPU_SETSIZE && n < 2; ++c) {
    if (CPU_ISSET(c, &set)) found[n++] = c;
  }
  return n == 2 ? std::pair{found[0], found[1]} : std::pair{-1, -1};
}

struct Sink {
  std::size_t bytes = 0;
  void operator()(AmId, std::span<const std::byte> h, std::span<const std::byte> p) {
    bytes += h.size() + p.size();
  }
};

void push_poll(benchmark::State& state, bool inline_payload) {
  const std::size_t plen = static_cast<std::size_t>(state.range(0));
  RingMemory mem;
  RingProducer prod(mem.layout);
  RingConsumer cons(mem.layout);
  std::vector<std::byte> hdr(kHeader, std::byte{1}), pay(plen, std::byte{2});
  Sink sink;
  for (auto _ : state) {
    if (prod.push(kAm, hdr, pay, inline_payload) != TStatus::ok) {
      state.SkipWithError("push failed on an empty ring");
      break;
    }
    if (cons.poll(sink, 1) != 1) {
      state.SkipWithError("poll found no message");
      break;
    }
  }
  benchmark::DoNotOptimize(sink.bytes);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * plen));
}

// The consumer runs in its own thread for the whole benchmark run; the timed loop is the
// producer. After the loop the producer waits until everything pushed has been consumed, so
// the rate counts delivered messages, not queued ones.
void stream(benchmark::State& state, bool inline_payload) {
  const std::size_t plen = static_cast<std::size_t>(state.range(0));
  RingMemory mem;
  RingProducer prod(mem.layout);
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> consumed{0};
  const auto [cpu_a, cpu_b] = two_cpus();
  PinnedTo pin(cpu_a);
  std::thread consumer([&, cpu = cpu_b] {
    PinnedTo pin_consumer(cpu);
    RingConsumer cons(mem.layout);
    Sink sink;
    std::uint64_t n = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const int got = cons.poll(sink, 64);
      if (got) {
        n += static_cast<std::uint64_t>(got);
        consumed.store(n, std::memory_order_release);
      }
    }
  });
  std::vector<std::byte> hdr(kHeader, std::byte{1}), pay(plen, std::byte{2});
  std::uint64_t pushed = 0, retries = 0;
  for (auto _ : state) {
    while (prod.push(kAm, hdr, pay, inline_payload) != TStatus::ok) ++retries;
    ++pushed;
  }
  while (consumed.load(std::memory_order_acquire) < pushed) {
  }
  stop.store(true);
  consumer.join();
  state.SetItemsProcessed(static_cast<std::int64_t>(pushed));
  state.SetBytesProcessed(static_cast<std::int64_t>(pushed * plen));
  state.counters["full_retries_per_msg"] =
      pushed ? static_cast<double>(retries) / static_cast<double>(pushed) : 0.0;
}

// Ping-pong over two rings: the echo thread answers every message with one of the same size.
void pingpong(benchmark::State& state, bool inline_payload) {
  const std::size_t plen = static_cast<std::size_t>(state.range(0));
  RingMemory there, back;
  RingProducer to_echo(there.layout);
  RingConsumer from_echo(back.layout);
  std::atomic<bool> stop{false};
  std::vector<std::byte> hdr(kHeader, std::byte{1}), pay(plen, std::byte{2});
  const auto [cpu_a, cpu_b] = two_cpus();
  PinnedTo pin(cpu_a);
  std::thread echo([&, cpu = cpu_b] {
    PinnedTo pin_echo(cpu);
    RingConsumer in(there.layout);
    RingProducer out(back.layout);
    std::vector<std::byte> eh(kHeader), ep(plen);
    auto reply = [&](AmId, std::span<const std::byte>, std::span<const std::byte>) {
      while (out.push(kAm, eh, ep, inline_payload) != TStatus::ok) {
      }
    };
    while (!stop.load(std::memory_order_relaxed)) in.poll(reply, 1);
  });
  Sink sink;
  for (auto _ : state) {
    while (to_echo.push(kAm, hdr, pay, inline_payload) != TStatus::ok) {
    }
    while (from_echo.poll(sink, 1) == 0) {
    }
  }
  stop.store(true);
  echo.join();
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}

void payloads(benchmark::internal::Benchmark* b) {
  for (const std::int64_t p : {8, 256, 1024}) b->Arg(p);
}

void copy_payloads(benchmark::internal::Benchmark* b) {
  for (const std::int64_t p : {4096, 16384}) b->Arg(p);
}

BENCHMARK_CAPTURE(push_poll, inline, true)->Name("ring/push_poll/inline")->Apply(payloads);
BENCHMARK_CAPTURE(push_poll, copy, false)->Name("ring/push_poll/copy")->Apply(copy_payloads);
BENCHMARK_CAPTURE(stream, inline, true)->Name("ring/stream/inline")->Apply(payloads)->UseRealTime();
BENCHMARK_CAPTURE(stream, copy, false)
    ->Name("ring/stream/copy")
    ->Apply(copy_payloads)
    ->UseRealTime();
BENCHMARK_CAPTURE(pingpong, inline, true)
    ->Name("ring/pingpong/inline")
    ->Apply(payloads)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
