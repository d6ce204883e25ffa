// The suite's harness: option parsing, size sweep, buffer pools, output (see harness.hpp).
#include "harness.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

namespace bench {

// ---- Element types and ops (declared in backend.hpp) ----------------------------------------

namespace {

struct ElemInfo {
  Elem elem;
  std::string_view name;
  std::size_t size;
};
// In enum order: indexed by the enum's value.
constexpr ElemInfo kElems[] = {
    {Elem::i8, "int8", 1},    {Elem::u8, "uint8", 1},           {Elem::i16, "int16", 2},
    {Elem::u16, "uint16", 2}, {Elem::i32, "int32", 4},          {Elem::u32, "uint32", 4},
    {Elem::i64, "int64", 8},  {Elem::u64, "uint64", 8},         {Elem::f32, "float", 4},
    {Elem::f64, "double", 8}, {Elem::c32, "complex<float>", 8}, {Elem::c64, "complex<double>", 16},
};
constexpr std::string_view kOpNames[] = {"sum", "prod", "min", "max", "land",
                                         "lor", "band", "bor", "bxor"};
constexpr ReduceOp kOps[] = {ReduceOp::sum,  ReduceOp::prod, ReduceOp::min,
                             ReduceOp::max,  ReduceOp::land, ReduceOp::lor,
                             ReduceOp::band, ReduceOp::bor,  ReduceOp::bxor};

constexpr bool elems_in_enum_order() {
  for (std::size_t i = 0; i < std::size(kElems); ++i) {
    if (static_cast<std::size_t>(kElems[i].elem) != i) return false;
  }
  return true;
}
static_assert(elems_in_enum_order(), "kElems must list Elem values in enum order");
static_assert(std::size(kOpNames) == std::size(kOps) &&
              static_cast<std::size_t>(ReduceOp::bxor) + 1 == std::size(kOps));

}  // namespace

std::size_t elem_size(Elem e) { return kElems[static_cast<std::size_t>(e)].size; }

std::string_view elem_name(Elem e) { return kElems[static_cast<std::size_t>(e)].name; }

std::string_view reduce_op_name(ReduceOp op) { return kOpNames[static_cast<std::size_t>(op)]; }

bool op_applies(ReduceOp op, Elem e) {
  const bool complex = e == Elem::c32 || e == Elem::c64;
  const bool floating = e == Elem::f32 || e == Elem::f64;
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::prod:
      return true;
    case ReduceOp::min:
    case ReduceOp::max:
      return !complex;
    case ReduceOp::land:
    case ReduceOp::lor:
    case ReduceOp::band:
    case ReduceOp::bor:
    case ReduceOp::bxor:
      return !complex && !floating;
  }
  return false;
}

// ---- Harness ------------------------------------------------------------------------------

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

void usage(const SuiteSpec& spec, const std::vector<Test>& tests) {
  const std::string_view program = spec.program;
  std::printf("usage: %.*s [TEST...] [options]\n\ntests (default: all of them, in this order):\n",
              static_cast<int>(program.size()), program.data());
  for (const Test& t : tests) {
    std::printf("  %-12s %s [%s]\n", t.name.c_str(), t.help.c_str(), t.unit.c_str());
  }
  const std::string max_text = std::to_string(spec.default_max >> 20) + "M";
  std::printf(
      "\noptions:\n"
      "  --min BYTES       smallest message (default %s)\n"
      "  --max BYTES       largest message (default %s); sizes double from --min\n"
      "  --sizes LIST      comma-separated sizes instead of --min/--max, e.g. 8,4K,1M\n"
      "  --iters N         timed iterations for small messages (larger ones get fewer)\n"
      "  --warmup N        untimed iterations before timing\n",
      spec.typed ? "one element" : "1", max_text.c_str());
  if (!spec.typed) {
    std::printf("  --window W        messages in flight per bandwidth iteration (default 64)\n");
  }
  std::printf(
      "  --cold            use a different buffer region every message, cycling through a\n"
      "                    pool larger than the last-level cache (cold caches)\n"
      "  --cold-pool BYTES size of each cold pool (default max(2 x LLC, 4 x --max))\n");
  if (spec.typed) {
    std::printf("  --type T          element type (default double), one of\n                   ");
    for (const ElemInfo& e : kElems) {
      std::printf(" %.*s", static_cast<int>(e.name.size()), e.name.data());
    }
    std::printf("\n  --op OP           reduction (default sum), one of\n                   ");
    for (const ReduceOp o : kOps) {
      const std::string_view n = reduce_op_name(o);
      std::printf(" %.*s", static_cast<int>(n.size()), n.data());
    }
    std::printf("\n  --root R          root of bcast and reduce (default 0)\n");
    std::printf("  --compress F      allreduce sends 16-bit values: fp16 or bf16 (float/double\n"
                "                    with sum, min, max; rmp only; default none)\n");
  }
  std::printf(
      "  --help            this text\n"
      "BYTES accept K, M, G suffixes (binary). Output: '# ...' comment lines, then one\n"
      "'<test> <bytes> <value>' line per size.\n");
}

Elem parse_elem(std::string_view text) {
  for (const ElemInfo& e : kElems) {
    if (e.name == text) return e.elem;
  }
  // Short aliases for the long names.
  if (text == "f64") return Elem::f64;
  if (text == "f32") return Elem::f32;
  if (text == "c32" || text == "cfloat") return Elem::c32;
  if (text == "c64" || text == "cdouble") return Elem::c64;
  throw UsageError("--type: unknown element type '" + std::string(text) + "' (see --help)");
}

ReduceOp parse_op(std::string_view text) {
  for (const ReduceOp o : kOps) {
    if (reduce_op_name(o) == text) return o;
  }
  throw UsageError("--op: unknown reduction '" + std::string(text) + "' (see --help)");
}

Options parse(int argc, char** argv, const SuiteSpec& spec, const std::vector<Test>& tests,
              bool& help) {
  Options o;
  std::size_t min = 0, max = spec.default_max;
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
    } else if (spec.typed && a == "--type") {
      o.elem = parse_elem(value());
    } else if (spec.typed && a == "--op") {
      o.op = parse_op(value());
    } else if (spec.typed && a == "--compress") {
      const std::string_view v = value();
      if (v == "fp16") o.compress = Compress::fp16;
      else if (v == "bf16") o.compress = Compress::bf16;
      else if (v == "none") o.compress = Compress::none;
      else throw UsageError("--compress: unknown format '" + std::string(v) + "' (fp16|bf16|none)");
    } else if (spec.typed && a == "--root") {
      o.root = static_cast<int>(std::min<std::size_t>(parse_count(a, value()), 1u << 30));
    } else if (!spec.typed && a == "--window") {
      o.window = parse_count(a, value());
      if (o.window == 0) throw UsageError("--window must be at least 1");
    } else if (a == "--cold") {
      o.cold = true;
    } else if (a == "--cold-pool") {
      o.cold_pool = parse_size(a, value());
    } else if (!a.empty() && a[0] == '-') {
      throw UsageError("unknown option '" + std::string(a) + "' (see --help)");
    } else if (a == "all") {
      o.all_tests = true;
      for (const Test& t : tests) o.tests.push_back(t.name);
    } else {
      const bool known =
          std::any_of(tests.begin(), tests.end(), [&](const Test& t) { return t.name == a; });
      if (!known) throw UsageError("unknown test '" + std::string(a) + "' (see --help)");
      o.tests.emplace_back(a);
    }
  }
  if (o.tests.empty()) {
    o.all_tests = true;
    for (const Test& t : tests) o.tests.push_back(t.name);
  }
  const std::size_t unit = spec.typed ? elem_size(o.elem) : 1;
  if (spec.typed && !op_applies(o.op, o.elem)) {
    throw UsageError("--op " + std::string(reduce_op_name(o.op)) + " does not apply to --type " +
                     std::string(elem_name(o.elem)));
  }
  if (o.compress != Compress::none) {
    if (std::string_view(Backend::name()) != "rmp")
      throw UsageError("--compress: only rmp has a compressed allreduce");
    const bool fp = o.elem == Elem::f32 || o.elem == Elem::f64;
    const bool op = o.op == ReduceOp::sum || o.op == ReduceOp::min || o.op == ReduceOp::max;
    if (!fp || !op)
      throw UsageError("--compress applies to --type float or double with --op sum, min or max");
  }
  if (!list.empty()) {
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
    o.sizes = list;
  } else {
    if (min == 0) min = unit;
    if (min > max) throw UsageError("--min is larger than --max");
    if (max > kMaxMessage) throw UsageError("--max: messages above 1 GiB are not supported");
    for (std::size_t s = min; s <= max; s *= 2) o.sizes.push_back(s);
  }
  if (o.sizes.back() > kMaxMessage) {
    throw UsageError("--sizes: messages above 1 GiB are not supported");
  }
  for (const std::size_t s : o.sizes) {
    if (spec.typed && (s == 0 || s % unit != 0)) {
      throw UsageError("message size " + std::to_string(s) + " is not a positive multiple of " +
                       std::to_string(unit) + " bytes, the size of one " +
                       std::string(elem_name(o.elem)));
    }
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
  report_validation_failure(b, test, bytes, "received data does not match what was sent");
}

void report_validation_failure(Backend& b, std::string_view test, std::size_t bytes,
                               std::string_view what) {
  std::fprintf(stderr, "# ERROR rank %d: %.*s %zu B: %.*s\n", b.rank(),
               static_cast<int>(test.size()), test.data(), bytes, static_cast<int>(what.size()),
               what.data());
  g_validation_failed = true;
}

namespace {

// Why `t` cannot run on `ranks` ranks, or empty when it can.
std::string rank_mismatch(const Test& t, int ranks) {
  if (t.exact_ranks > 0 && ranks != t.exact_ranks) {
    return t.name + " needs exactly " + std::to_string(t.exact_ranks) + " ranks, got " +
           std::to_string(ranks);
  }
  if (t.even_ranks && ranks % 2 != 0) {
    return t.name + " needs an even number of ranks (pairs), got " + std::to_string(ranks);
  }
  return {};
}

const Test& find_test(const std::vector<Test>& tests, const std::string& name) {
  return *std::find_if(tests.begin(), tests.end(), [&](const Test& x) { return x.name == name; });
}

}  // namespace

int run_suite(Backend& b, const SuiteSpec& spec, const std::vector<Test>& tests, int argc,
              char** argv) {
  const std::string_view program = spec.program;
  const bool root = b.rank() == 0;
  Options opt;
  bool help = false;
  try {
    opt = parse(argc, argv, spec, tests, help);
  } catch (const UsageError& e) {
    if (root) {
      std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(program.size()), program.data(),
                   e.what());
    }
    return 2;
  }
  if (help) {
    if (root) usage(spec, tests);
    return 0;
  }
  if (b.size() < spec.min_ranks || (spec.max_ranks > 0 && b.size() > spec.max_ranks)) {
    if (root) {
      if (spec.min_ranks == spec.max_ranks) {
        std::fprintf(stderr, "%.*s: needs exactly %d ranks, got %d\n",
                     static_cast<int>(program.size()), program.data(), spec.min_ranks, b.size());
      } else {
        std::fprintf(stderr, "%.*s: needs at least %d ranks, got %d\n",
                     static_cast<int>(program.size()), program.data(), spec.min_ranks, b.size());
      }
    }
    return 2;
  }
  if (spec.typed && (opt.root < 0 || opt.root >= b.size())) {
    if (root) {
      std::fprintf(stderr, "%.*s: --root %d is not a rank of this %d-rank job\n",
                   static_cast<int>(program.size()), program.data(), opt.root, b.size());
    }
    return 2;
  }

  // Tests that do not fit the rank count: an error when named, skipped (and said so) in "all".
  std::vector<std::string> skipped;
  for (auto it = opt.tests.begin(); it != opt.tests.end();) {
    const std::string why = rank_mismatch(find_test(tests, *it), b.size());
    if (why.empty()) {
      ++it;
    } else if (opt.all_tests) {
      skipped.push_back(why);
      it = opt.tests.erase(it);
    } else {
      if (root) {
        std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(program.size()), program.data(),
                     why.c_str());
      }
      return 2;
    }
  }
  if (opt.tests.empty()) {
    if (root) {
      std::fprintf(stderr, "%.*s: no test runs on %d ranks\n", static_cast<int>(program.size()),
                   program.data(), b.size());
      for (const std::string& why : skipped) std::fprintf(stderr, "  %s\n", why.c_str());
    }
    return 2;
  }

  const std::size_t per_pool =
      opt.sizes.back() * (spec.pools_per_rank ? static_cast<std::size_t>(b.size()) : 1);
  BufferPool sbuf(per_pool, opt.cold, opt.cold_pool);
  BufferPool rbuf(per_pool, opt.cold, opt.cold_pool);
  Context ctx{b, opt, sbuf, rbuf};
  b.reserve(2 * opt.window + 1);  // bidirectional bandwidth: a window each way
  if (spec.prepare) spec.prepare(ctx);

  if (root) {
    std::printf("# %.*s backend=%s ranks=%d cold=%d pool_bytes=%zu llc_bytes=%zu",
                static_cast<int>(program.size()), program.data(), Backend::name(), b.size(),
                opt.cold ? 1 : 0, sbuf.bytes(), llc_bytes());
    if (spec.typed) {
      const std::string_view e = elem_name(opt.elem), o = reduce_op_name(opt.op);
      std::printf(" type=%.*s op=%.*s root=%d\n", static_cast<int>(e.size()), e.data(),
                  static_cast<int>(o.size()), o.data(), opt.root);
    } else {
      std::printf(" window=%zu\n", opt.window);
    }
  }
  if (root) {
    for (const std::string& why : skipped) std::printf("# skipped: %s\n", why.c_str());
  }
  for (const std::string& name : opt.tests) {
    const Test& t = find_test(tests, name);
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
    if (t.sizeless) {
      b.barrier();
      const double v = t.run(ctx, 0, pol.base, pol.warmup);
      if (root) {
        std::printf("%s 0 %.3f\n", t.name.c_str(), v);
        std::fflush(stdout);
      }
      continue;
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
