// The shared harness of the benchmark suite: command line, message-size sweep, iteration
// policy, hot/cold buffer pools and the machine-readable output. Every benchmark program
// (pt2pt, coll) is a main() that registers its tests here and runs them over whichever
// Backend it was linked with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "backend.hpp"

namespace bench {

// How many timed iterations a message size gets. OSU style: `base` iterations up to
// `large_threshold` bytes, then fewer in proportion to the size, never below `min_large`.
struct IterPolicy {
  std::size_t base;
  std::size_t warmup;
  std::size_t large_threshold = 8192;
  std::size_t min_large;

  std::size_t iters(std::size_t bytes) const;
  std::size_t warmups(std::size_t bytes) const;
};

struct Options {
  std::vector<std::string> tests;  // requested test names, in order
  bool all_tests = false;          // no test named: every test (those the rank count allows)
  std::vector<std::size_t> sizes;  // message sizes in bytes, ascending
  std::size_t iters = 0;           // 0: each test's default base
  std::size_t warmup = 0;          // 0: each test's default
  bool warmup_set = false;
  std::size_t window = 64;    // bandwidth: messages in flight per iteration
  bool cold = false;          // cycle through a pool larger than the LLC
  std::size_t cold_pool = 0;  // bytes per pool; 0: derived from the LLC size
  // Typed programs only (SuiteSpec::typed): element type, reduction op, root rank.
  Elem elem = Elem::f64;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  Compress compress = Compress::none;  // allreduce's wire format (--compress, rmp only)
};

class BufferPool;

// What a test body works with: the library, the options and this rank's two buffer pools.
struct Context {
  Backend& b;
  const Options& opt;
  BufferPool& sbuf;
  BufferPool& rbuf;
};

// One kind of measurement, e.g. "latency". `run` measures one message size with the given
// timed and warm-up iteration counts and returns the value printed in `unit` (significant on
// rank 0 only).
struct Test {
  std::string name;
  std::string unit;
  std::string help;
  IterPolicy policy;
  std::function<double(Context&, std::size_t bytes, std::size_t iters, std::size_t warmup)> run;
  // Measured once, not per size (barrier): printed as "<test> 0 <value>".
  bool sizeless = false;
  // Rank counts the test runs on: exactly `exact_ranks` (0: any the program accepts); an even
  // number when `even_ranks` (pairs of ranks). A test named on the command line that does not
  // fit the job's rank count is a usage error; one left out of "all" is named in a comment.
  int exact_ranks = 0;
  bool even_ranks = false;
};

// What a benchmark program needs from the harness beyond its tests.
struct SuiteSpec {
  std::string_view program;  // "bench_pt2pt", "bench_coll"
  int min_ranks = 2;
  int max_ranks = 2;  // 0: no upper limit
  // Accepts --type, --op and --root; sizes must be multiples of the element size, and the
  // default sweep starts at one element.
  bool typed = false;
  std::size_t default_max = std::size_t{4} << 20;
  // Buffer pools hold size() messages (allgather, alltoall, reduce_scatter_block).
  bool pools_per_rank = false;
  // Called once after the pools exist, before any test (e.g. fills them with benign values).
  std::function<void(Context&)> prepare;
};

// A buffer of `pool_bytes` pre-faulted bytes, page aligned. Hot: region(i, n) is always the
// start. Cold: consecutive i walk through the pool one page-rounded region at a time, so a
// region is reused only after the whole pool (≥ 2 × LLC) has been touched.
class BufferPool {
public:
  BufferPool(std::size_t max_message, bool cold, std::size_t cold_pool_bytes);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  std::byte* region(std::size_t i, std::size_t bytes) const;
  std::size_t bytes() const { return bytes_; }

private:
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
  bool cold_ = false;
};

// Last-level cache size in bytes (sysfs, then sysconf), or a conservative 64 MiB.
std::size_t llc_bytes();

// Fills / checks a deterministic pattern, used by the untimed validation exchange.
void fill_pattern(std::byte* p, std::size_t n, std::uint32_t seed);
bool check_pattern(const std::byte* p, std::size_t n, std::uint32_t seed);

// Parses `argc/argv` (after the backend has taken its own arguments), runs the selected tests
// on every size and prints "# ..." headers and "<test> <bytes> <value>" lines on rank 0.
// Rank range, typed options and pool sizing come from `spec`.
// Returns the process exit status: 0, 1 on a validation failure, 2 on a usage error.
int run_suite(Backend& b, const SuiteSpec& spec, const std::vector<Test>& tests, int argc,
              char** argv);

// Set by a test when the validation exchange found wrong bytes.
void report_validation_failure(Backend& b, std::string_view test, std::size_t bytes);
// The same with the test's own explanation (element index, expected and actual value...).
void report_validation_failure(Backend& b, std::string_view test, std::size_t bytes,
                               std::string_view what);

}  // namespace bench
