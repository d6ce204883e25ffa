// Shared helpers of the multi-rank point-to-point suite (tests/integration): the effective
// shm knob values that decide protocol edges, message patterns that expose offset, rank and
// message-number errors, sizes around every protocol edge, and small SPMD conveniences.
// Every test body runs on every rank; see README.md beside this file.
#pragma once

#include <rmp/rmp.hpp>

#include "runtime/stats.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

namespace itest {

// ---- Knobs --------------------------------------------------------------------------------

// Effective values of the knobs that shape p2p protocols on shm, read once from
// rmp::effective_params("shm") so that edge sizes follow whatever a variant sets.
struct Knobs {
  std::size_t inline_threshold = 44;
  std::size_t eager_threshold = 16384;
  std::size_t fragment_size = 131072;
  std::size_t pipeline_depth = 2;
  std::size_t rq_depth = 0;
  std::size_t sq_depth = 0;
  bool tune_adaptive = false;         // tune = adaptive: eager sends up to 2 x eager_threshold
  std::size_t eager_buffer = 0;       // the shm transport's eager buffer per pair (bytes)
  // Above it an allreduce or a floating reduce chooses between its node-shared paths
  // (collectives/node_shared.hpp: direct_call_bytes, from rank 0's parameters).
  std::size_t direct_call_bytes = 0;
  std::vector<std::string> problems;  // rows missing or not numeric (reported by a test)
  std::string table;                  // "name=value(source) …" for messages
};
const Knobs& knobs();
// The eager credit a receiver grants each sender, in bytes: rq_depth slots of the largest eager
// message, at least the transport's eager buffer (p2p/engine.cpp).
std::size_t eager_credit_bytes();

enum class Proto { inline_, eager, rndv };
// The sender's protocol choice for a message of `bytes` (DESIGN §2).
Proto proto_of(std::size_t bytes);
const char* proto_name(Proto p);

// One representative size per protocol class that exists under the current knobs
// (inline: the threshold itself; eager: the eager threshold; rendezvous: a size with a
// partial last fragment, at most a few MiB).
struct ClassSize {
  Proto proto;
  std::size_t bytes;
};
std::vector<ClassSize> class_sizes(bool include_zero = false);

// A rendezvous size that spans more than one fragment where fragments are small, with a
// partial last fragment, capped to `cap` (but always > eager_threshold).
std::size_t rndv_size(std::size_t cap = (4u << 20) + 3);

// 0, 1, 3, every threshold −1/0/+1 (inline, eager, fragment, fragment × pipeline_depth),
// 1000003 and 16 MiB; sorted, unique, each ≤ cap.
std::vector<std::size_t> edge_sizes(std::size_t cap);

// ---- Patterns -------------------------------------------------------------------------------

inline std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// A message's seed: depends on sender, receiver, message number and a salt (test id).
inline std::uint64_t seed(int src, int dst, std::uint64_t msg, std::uint64_t salt = 0) {
  std::uint64_t s = mix64(static_cast<std::uint64_t>(src) + 0x5151'0000ULL);
  s = mix64(s ^ (static_cast<std::uint64_t>(dst) << 24) ^ 0xa5a5);
  s = mix64(s ^ (msg * 0x9E3779B97F4A7C15ULL));
  return mix64(s ^ salt);
}

// Element i of the message with seed s: a Weyl sequence (one multiply-add per element), so a
// shifted, repeated, stale or zero-filled block never matches.
template <class T>
inline T pattern_value(std::uint64_t s, std::size_t i) {
  const std::uint64_t h = s + (static_cast<std::uint64_t>(i) + 1) * 0x9E3779B97F4A7C15ULL;
  if constexpr (std::is_same_v<T, std::byte>) {
    return static_cast<std::byte>(h >> 56);
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(h >> (64 - 8 * sizeof(T)));
  } else if constexpr (std::is_same_v<T, double>) {
    return static_cast<double>(h >> 11);
  } else if constexpr (std::is_same_v<T, float>) {
    return static_cast<float>(h >> 40);
  } else if constexpr (std::is_same_v<T, std::complex<double>>) {
    return {static_cast<double>(h >> 11), -static_cast<double>((h * 0xD1342543DE82EF95ULL) >> 11)};
  } else {
    static_assert(std::is_same_v<T, std::complex<float>>);
    return {static_cast<float>(h >> 40), -static_cast<float>((h * 0xD1342543DE82EF95ULL) >> 40)};
  }
}

template <class T>
void fill(T* p, std::size_t n, std::uint64_t s) {
  for (std::size_t i = 0; i < n; ++i) p[i] = pattern_value<T>(s, i);
}

template <class T>
std::vector<T> make_message(std::size_t n, std::uint64_t s) {
  std::vector<T> v(n);
  fill(v.data(), n, s);
  return v;
}

// A value no pattern is likely to produce at a given place, to detect writes past the end
// and writes into buffers that must stay untouched.
template <class T>
inline T sentinel() {
  if constexpr (std::is_same_v<T, std::byte>) return std::byte{0xA5};
  else if constexpr (std::is_integral_v<T>) return static_cast<T>(0x5A5A5A5A5A5A5A5AULL);
  else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(-12345.5);
  else return T(-12345.5, 777.25);
}

template <class T>
std::size_t first_mismatch(const T* p, std::size_t n, std::uint64_t s) {
  for (std::size_t i = 0; i < n; ++i)
    if (!(p[i] == pattern_value<T>(s, i))) return i;
  return n;
}

// Checks p[0..n) against the pattern of seed s; the failure text says where and what.
template <class T>
::testing::AssertionResult matches(const T* p, std::size_t n, std::uint64_t s) {
  const std::size_t i = first_mismatch(p, n, s);
  if (i == n) return ::testing::AssertionSuccess();
  std::size_t bad = 0;
  for (std::size_t j = i; j < n; ++j) bad += !(p[j] == pattern_value<T>(s, j));
  return ::testing::AssertionFailure()
         << "payload differs from the pattern at element " << i << " of " << n << " (byte offset "
         << i * sizeof(T) << "); " << bad << " elements differ";
}

template <class T>
::testing::AssertionResult untouched(const T* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (!(p[i] == sentinel<T>()))
      return ::testing::AssertionFailure()
             << "element " << i << " of " << n << " that must stay untouched was written";
  return ::testing::AssertionSuccess();
}

// ---- SPMD conveniences ------------------------------------------------------------------------

int rank();
int size();
// r^1 where that rank exists, else this rank itself (self-messages for the odd one out).
int pair_partner();
// "0" … for messages.
std::string who(int r);

// True when the job's environment sets var to value (variants pass RMP_* through rlaunch -x).
bool env_is(const char* var, const char* value);
// The job's environment's number in var (strtoull, any base), or `fallback` where it is unset.
std::uint64_t env_number(const char* var, std::uint64_t fallback);

// A random stream that every rank draws alike from one seed (the soak tests): no std
// distribution, whose results are the standard library's choice.
class Draw {
public:
  explicit Draw(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() { return s_ = mix64(s_ + 0x9E3779B97F4A7C15ULL); }
  // One draw whatever n (0 gives 0): a rank whose n is 0 stays in step with the others.
  std::size_t below(std::size_t n) {
    const std::uint64_t x = next();
    return n ? static_cast<std::size_t>(x % n) : 0;
  }
  bool percent(unsigned p) { return next() % 100 < p; }

private:
  std::uint64_t s_;
};

// Called by every rank after each step of a long stream (the soak tests), whose failed checks
// leave the ranks in step: after every 100th step, whether the current test has failed on any
// rank (an allreduce on the world), and the watchdog's clock starts again for the steps after
// it (the test's phase, renamed); false after the others.
bool stop_together(std::uint64_t step);

// Whether cross-memory attach works between the ranks of `w` both ways, as the transport and
// the direct collective paths find it: RMP_SHM_CMA may allow it where ptrace rules (Yama's
// ptrace_scope, a container's seccomp) forbid it. Collective.
bool cma_between_ranks(const rmp::Comm& w);
// Whether this kernel moves an anonymous 2 MiB block onto a huge page when asked
// (MADV_COLLAPSE, Linux 6.1; what RMP_SHM_HUGEPAGES relies on).
bool kernel_collapses_memory();
// After a test that reused buffers of 2 MiB blocks that other ranks read or write by
// cross-memory attach (`took_part`: this rank did): some of them went onto huge pages where the
// kernel collapses memory and nothing forbids it (else a note says only the data were checked:
// also where no ask reached the kernel, every turn put off for a time budget that is still
// spent), none where RMP_SHM_CMA=0 or RMP_SHM_HUGEPAGES=0. `before`: the counters as the test
// began; `what`: which block should have.
void check_huge_blocks(const rmp::rt::Counters& before, bool took_part, const std::string& what);
// Whether `ranks` ranks on this node have a core each, counted as rlaunch counts them for
// RMP_LOCAL_CORES on this test machine (the online CPUs; unknown counts as yes).
bool ranks_have_own_cores(int ranks);

// Sums a value over all ranks (through world().allreduce).
std::uint64_t sum_over_ranks(std::uint64_t v);

// Expects f() to throw rmp::Error with code, and what() to contain every string in needles.
// Returns true when it threw rmp::Error at all (callers skip blocking variants otherwise).
bool expect_error(const std::function<void()>& f, rmp::Errc code,
                  std::initializer_list<std::string> needles, const std::string& what_call);

// Process-wide watchdog: a phase ("init", "Suite.Test", "finalize") that runs longer than
// ITEST_WATCHDOG_S seconds (default 60) ends this rank with status 125 after naming it on
// stderr, so a deadlock is reported with the test that hung rather than as a bare timeout.
void watchdog_phase(const std::string& phase);

// The SPMD GoogleTest main shared by the suite's executables: constructs rmp::Environment,
// prints the full log on rank 0 and only failures (prefixed [rank r]) elsewhere, runs a
// barrier after every test so that tests never overlap, and returns non-zero on every rank
// when any test failed on any rank.
int run_spmd_main(int argc, char** argv);

}  // namespace itest
