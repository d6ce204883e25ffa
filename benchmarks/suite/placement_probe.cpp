// Placement probe: how far apart two CPUs are right now. Two threads pinned to CPUs A and B
// (default 0 and 1) bounce one cache line for a few milliseconds; the one-way latency (half
// a round trip, median over batches) is printed in ns:
//   placement_probe one_way_ns=43.1 cpus=0,1 batches=40 round_trips=12000
// On a VM whose vCPUs the hypervisor moves between sibling and distant cores, this is what
// tells the two placements apart (near: tens of ns; far: ~200 ns), and benchmarks/compare runs
// it around every measured pair to tag each sample with the placement it ran under.
// Usage: placement_probe [--cpus A,B] [--ms MILLISECONDS]. Exit 2 when pinning fails.
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct alignas(64) Line {
  std::atomic<std::uint64_t> value{0};
};

// 0 or the error pthread_setaffinity_np returned.
int pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

int usage(const char* why) {
  std::fprintf(stderr, "placement_probe: %s\nusage: placement_probe [--cpus A,B] [--ms MS]\n", why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int cpu_a = 0, cpu_b = 1;
  double budget_ms = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--cpus" && i + 1 < argc) {
      if (std::sscanf(argv[++i], "%d,%d", &cpu_a, &cpu_b) != 2 || cpu_a < 0 || cpu_b < 0 ||
          cpu_a == cpu_b) {
        return usage("--cpus needs two different CPU numbers, e.g. 0,1");
      }
    } else if (a == "--ms" && i + 1 < argc) {
      budget_ms = std::atof(argv[++i]);
      if (!(budget_ms > 0 && budget_ms <= 10000)) return usage("--ms must be in (0, 10000]");
    } else if (a == "--help" || a == "-h") {
      usage("measures the one-way cache-line latency between two CPUs");
      return 0;
    } else {
      return usage(("unknown argument '" + a + "'").c_str());
    }
  }

  // The two counters live on one line: A writes odd values, B answers with the next even one.
  Line line;
  std::atomic<bool> ready{false}, stop{false};
  std::atomic<int> pin_error_b{0};
  std::thread responder([&] {
    pin_error_b = pin_to(cpu_b);
    ready = true;
    std::uint64_t seen = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const std::uint64_t v = line.value.load(std::memory_order_acquire);
      if (v != seen && (v & 1)) {
        seen = v + 1;
        line.value.store(seen, std::memory_order_release);
      }
    }
  });
  const int pin_error_a = pin_to(cpu_a);
  while (!ready) std::this_thread::yield();
  if (pin_error_a || pin_error_b) {
    stop = true;
    responder.join();
    std::fprintf(stderr, "placement_probe: pthread_setaffinity_np to CPU %d failed: %s\n",
                 pin_error_a ? cpu_a : cpu_b,
                 std::strerror(pin_error_a ? pin_error_a : pin_error_b.load()));
    return 2;
  }

  // Batches of round trips; the median batch is robust to a batch that was descheduled.
  constexpr int kPerBatch = 300;
  std::vector<double> ns_per_trip;
  std::uint64_t v = 0;
  const auto deadline = Clock::now() + std::chrono::duration<double, std::milli>(budget_ms);
  long trips = 0;
  for (int warm = 0; warm < 100; ++warm) {  // bring both ends up to speed
    line.value.store(++v, std::memory_order_release);
    while (line.value.load(std::memory_order_acquire) != v + 1) {
    }
    ++v;
  }
  do {
    const auto t0 = Clock::now();
    for (int i = 0; i < kPerBatch; ++i) {
      line.value.store(++v, std::memory_order_release);
      while (line.value.load(std::memory_order_acquire) != v + 1) {
      }
      ++v;
    }
    const auto t1 = Clock::now();
    ns_per_trip.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / kPerBatch);
    trips += kPerBatch;
  } while (Clock::now() < deadline || ns_per_trip.size() < 5);
  stop = true;
  responder.join();

  std::sort(ns_per_trip.begin(), ns_per_trip.end());
  const double median = ns_per_trip[ns_per_trip.size() / 2];
  std::printf("placement_probe one_way_ns=%.1f cpus=%d,%d batches=%zu round_trips=%ld\n",
              median / 2, cpu_a, cpu_b, ns_per_trip.size(), trips);
  return 0;
}
