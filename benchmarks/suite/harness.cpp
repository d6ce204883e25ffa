// The suite's harness: option parsing, size sweep, buffer pools, output (see harness.hpp).
#include "harness.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>

namespace bench {
namespace {

constexpr std::size_t kPage = 4096;
constexpr std::size_t kMaxMessage = std::size_t{1} << 30;  // MPI's int counts stay valid
bool g_validation_failed = false;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "4096", "4K", "1M", "2G" (binary multiples). Rejects anything else.
std::size_t parse_size(std::string_view opt, std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (s.empty() || s[0] == '-' || end == s.c_str() || errno != 0) {
    throw UsageError(std::string(opt) + ": '" + s + "' is not a size (e.g. 64, 4K, 1M)");
  }
  std::size_t mult = 1;
  const std::string suffix(end);
  if (suffix == "K" || suffix == "k" || suffix == "KiB") mult = std::size_t{1} << 10;
  else if (suffix == "M" || suffix == "MiB") mult = std::size_t{1} << 20;
  else if (suffix == "G" || suffix == "GiB") mult = std::size_t{1} << 30;
  else if (!suffix.empty() && suffix != "B") {
    throw UsageError(std::string(opt) + ": unknown suffix '" + suffix + "' in '" + s +
                     "' (use K, M or G)");
  }
  return static_cast<std::size_t>(v) * mult;
}

std::size_t parse_count(std::string_view opt, std::string_view text) {
  const std::string s(text);
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (s.empty() || s[0] == '-' || *end != '\0' || errno != 0) {
    throw UsageError(std::string(opt) + ": '" + s + "' is not a non-negative integer");
  }
  return static_cast<std::size_t>(v);
}

void usage(std::string_view program, const std::vector<Test>& tests) {
  std::printf("usage: %.*s [TEST...] [options]\n\ntests (default: all of them, in this order):\n",
              static_cast<int>(program.size()), program.data());
  for (const Test& t : tests) {
    std::printf("  %-12s %s [%s]\n", t.name.c_str(), t.help.c_str(), t.unit.c_str());
  }
  std::printf(
      "\noptions:\n"
      "  --min BYTES       smallest message (default 1)\n"
      "  --max BYTES       largest message (default 4M); sizes double from --min\n"
      "  --sizes LIST      comma-separated sizes instead of --min/--max, e.g. 8,4K,1M\n"
      "  --iters N         timed iterations for small messages (larger ones get fewer)\n"
      "  --warmup N        untimed iterations before timing\n"
      "  --window W        messages in flight per bandwidth iteration (default 64)\n"
      "  --cold            use a different buffer region every message, cycling through a\n"
      "                    pool larger than the last-level cache (cold caches)\n"
      "  --cold-pool BYTES size of each cold pool (default max(2 x LLC, 4 x --max))\n"
      "  --help            this text\n"
      "BYTES accept K, M, G suffixes (binary). Output: '# ...' comment lines, then one\n"
      "'<test> <bytes> <value>' line per size.\n");
}

Options parse(int argc, char** argv, const std::vector<Test>& tests, bool& help) {
  Options o;
  std::size_t min = 1, max = std::size_t{4} << 20;
  std::vector<std::size_t> list;
  help = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) throw UsageError(std::string(a) + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      help = true;
    } else if (a == "--min") {
      min = parse_size(a, value());
    } else if (a == "--max") {
      max = parse_size(a, value());
    } else if (a == "--sizes") {
      const std::string_view v = value();
      std::size_t pos = 0;
      while (pos <= v.size()) {
        const std::size_t comma = std::min(v.find(',', pos), v.size());
        list.push_back(parse_size(a, v.substr(pos, comma - pos)));
        pos = comma + 1;
      }
    } else if (a == "--iters") {
      o.iters = parse_count(a, value());
      if (o.iters == 0) throw UsageError("--iters must be at least 1");
    } else if (a == "--warmup") {
      o.warmup = parse_count(a, value());
      o.warmup_set = true;
    } else if (a == "--window") {
      o.window = parse_count(a, value());
      if (o.window == 0) throw UsageError("--window must be at least 1");
    } else if (a == "--cold") {
      o.cold = true;
    } else if (a == "--cold-pool") {
      o.cold_pool = parse_size(a, value());
    } else if (!a.empty() && a[0] == '-') {
      throw UsageError("unknown option '" + std::string(a) + "' (see --help)");
    } else if (a == "all") {
      for (const Test& t : tests) o.tests.push_back(t.name);
    } else {
      const bool known =
          std::any_of(tests.begin(), tests.end(), [&](const Test& t) { return t.name == a; });
      if (!known) throw UsageError("unknown test '" + std::string(a) + "' (see --help)");
      o.tests.emplace_back(a);
    }
  }
  if (o.tests.empty()) {
    for (const Test& t : tests) o.tests.push_back(t.name);
  }
  if (!list.empty()) {
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
    o.sizes = list;
  } else {
    if (min == 0) min = 1;
    if (min > max) throw UsageError("--min is larger than --max");
    if (max > kMaxMessage) throw UsageError("--max: messages above 1 GiB are not supported");
    for (std::size_t s = min; s <= max; s *= 2) o.sizes.push_back(s);
  }
  if (o.sizes.back() > kMaxMessage) {
    throw UsageError("--sizes: messages above 1 GiB are not supported");
  }
  return o;
}

}  // namespace

std::size_t IterPolicy::iters(std::size_t bytes) const {
  if (bytes <= large_threshold) return base;
  return std::max(min_large, base * large_threshold / bytes);
}

std::size_t IterPolicy::warmups(std::size_t bytes) const {
  if (bytes <= large_threshold) return warmup;
  return std::max<std::size_t>(warmup / 5, std::min<std::size_t>(warmup, 1));
}

std::size_t llc_bytes() {
  // The highest cache index that is a data or unified cache is the last level.
  std::size_t best = 0;
  for (int idx = 0; idx < 8; ++idx) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(idx);
    std::ifstream type(dir + "/type"), size(dir + "/size");
    std::string t, s;
    if (!(type >> t) || !(size >> s)) continue;
    if (t == "Instruction") continue;
    std::size_t v = std::strtoull(s.c_str(), nullptr, 10);
    if (!s.empty() && (s.back() == 'K')) v <<= 10;
    if (!s.empty() && (s.back() == 'M')) v <<= 20;
    best = std::max(best, v);
  }
  if (best == 0) {
    const long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (v > 0) best = static_cast<std::size_t>(v);
  }
  return best ? best : std::size_t{64} << 20;
}

BufferPool::BufferPool(std::size_t max_message, bool cold, std::size_t cold_pool_bytes)
    : cold_(cold) {
  std::size_t want = round_up(std::max<std::size_t>(max_message, 1), kPage);
  if (cold) {
    const std::size_t dflt = std::max(2 * llc_bytes(), 4 * want);
    want = round_up(std::max(cold_pool_bytes ? cold_pool_bytes : dflt, want), kPage);
  }
  base_ = static_cast<std::byte*>(std::aligned_alloc(kPage, want));
  if (!base_) {
    std::fprintf(stderr, "bench: cannot allocate a %zu-byte buffer pool\n", want);
    std::exit(3);
  }
  std::memset(base_, 0x5a, want);  // fault every page in before anything is timed
  bytes_ = want;
}

BufferPool::~BufferPool() { std::free(base_); }

std::byte* BufferPool::region(std::size_t i, std::size_t bytes) const {
  if (!cold_) return base_;
  const std::size_t stride = round_up(std::max<std::size_t>(bytes, 1), kPage);
  const std::size_t regions = std::max<std::size_t>(1, bytes_ / stride);
  return base_ + (i % regions) * stride;
}

void fill_pattern(std::byte* p, std::size_t n, std::uint32_t seed) {
  std::uint32_t x = seed * 2654435761u + 1;
  for (std::size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    p[i] = static_cast<std::byte>(x >> 24);
  }
}

bool check_pattern(const std::byte* p, std::size_t n, std::uint32_t seed) {
  std::uint32_t x = seed * 2654435761u + 1;
  for (std::size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    if (p[i] != static_cast<std::byte>(x >> 24)) return false;
  }
  return true;
}

void report_validation_failure(Backend& b, std::string_view test, std::size_t bytes) {
  std::fprintf(stderr, "# ERROR rank %d: %.*s %zu B: received data does not match what was sent\n",
               b.rank(), static_cast<int>(test.size()), test.data(), bytes);
  g_validation_failed = true;
}

int run_suite(Backend& b, std::string_view program, const std::vector<Test>& tests, int argc,
              char** argv) {
  const bool root = b.rank() == 0;
  Options opt;
  bool help = false;
  try {
    opt = parse(argc, argv, tests, help);
  } catch (const UsageError& e) {
    if (root) {
      std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(program.size()), program.data(),
                   e.what());
    }
    return 2;
  }
  if (help) {
    if (root) usage(program, tests);
    return 0;
  }
  if (b.size() != 2) {
    if (root) {
      std::fprintf(stderr, "%.*s: needs exactly 2 ranks, got %d\n",
                   static_cast<int>(program.size()), program.data(), b.size());
    }
    return 2;
  }

  BufferPool sbuf(opt.sizes.back(), opt.cold, opt.cold_pool);
  BufferPool rbuf(opt.sizes.back(), opt.cold, opt.cold_pool);
  Context ctx{b, opt, sbuf, rbuf};
  b.reserve(opt.window + 1);

  if (root) {
    std::printf("# %.*s backend=%s ranks=%d cold=%d pool_bytes=%zu llc_bytes=%zu window=%zu\n",
                static_cast<int>(program.size()), program.data(), Backend::name(), b.size(),
                opt.cold ? 1 : 0, sbuf.bytes(), llc_bytes(), opt.window);
  }
  for (const std::string& name : opt.tests) {
    const Test& t =
        *std::find_if(tests.begin(), tests.end(), [&](const Test& x) { return x.name == name; });
    IterPolicy pol = t.policy;
    if (opt.iters) {
      pol.min_large = std::max<std::size_t>(1, pol.min_large * opt.iters / pol.base);
      pol.base = opt.iters;
    }
    if (opt.warmup_set) pol.warmup = opt.warmup;
    if (root) {
      std::printf("# test=%s unit=%s iters=%zu (fewer above %zu B, min %zu) warmup=%zu\n",
                  t.name.c_str(), t.unit.c_str(), pol.base, pol.large_threshold, pol.min_large,
                  pol.warmup);
      std::fflush(stdout);
    }
    for (const std::size_t bytes : opt.sizes) {
      b.barrier();
      const double v = t.run(ctx, bytes, pol.iters(bytes), pol.warmups(bytes));
      if (root) {
        std::printf("%s %zu %.3f\n", t.name.c_str(), bytes, v);
        std::fflush(stdout);
      }
    }
  }
  b.barrier();
  return g_validation_failed ? 1 : 0;
}

}  // namespace bench
