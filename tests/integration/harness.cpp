// The SPMD GoogleTest main and the helpers declared in harness.hpp.
#include "harness.hpp"

#include "collectives/node_shared.hpp"
#include "runtime/context.hpp"
#include "runtime/huge_pages.hpp"

#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace itest {

// ---- Knobs --------------------------------------------------------------------------------

namespace {

// "16384", "131072", "2" … also tolerates a unit suffix (K, KiB, M, MiB).
bool parse_size(const std::string& text, std::size_t& out) {
  const char* p = text.c_str();
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(p, &end, 10);
  if (end == p || errno != 0) return false;
  std::string rest(end);
  rest.erase(0, rest.find_first_not_of(' '));
  std::size_t mult = 1;
  if (rest.empty() || rest == "B") mult = 1;
  else if (rest == "K" || rest == "KiB" || rest == "k") mult = 1024;
  else if (rest == "M" || rest == "MiB") mult = 1024 * 1024;
  else return false;
  out = static_cast<std::size_t>(v) * mult;
  return true;
}

Knobs read_knobs() {
  Knobs k;
  std::vector<rmp::ParamInfo> rows;
  try {
    rows = rmp::effective_params("shm");
  } catch (const std::exception& e) {
    k.problems.push_back(std::string("effective_params(\"shm\") threw: ") + e.what());
    return k;
  }
  struct Want {
    const char* name;
    std::size_t* field;
  };
  const Want wants[] = {{"inline_threshold", &k.inline_threshold},
                        {"eager_threshold", &k.eager_threshold},
                        {"fragment_size", &k.fragment_size},
                        {"pipeline_depth", &k.pipeline_depth},
                        {"rq_depth", &k.rq_depth},
                        {"sq_depth", &k.sq_depth}};
  std::ostringstream table;
  for (const Want& w : wants) {
    bool found = false;
    for (const rmp::ParamInfo& row : rows) {
      if (row.name != w.name) continue;
      found = true;
      table << row.name << '=' << row.value << '(' << row.source << ") ";
      if (!parse_size(row.value, *w.field))
        k.problems.push_back(std::string(w.name) + " has a non-numeric value \"" + row.value +
                             "\" (unit \"" + row.unit + "\")");
    }
    if (!found) k.problems.push_back(std::string("no row named ") + w.name);
  }
  for (const rmp::ParamInfo& row : rows)
    if (row.name == "tune") k.tune_adaptive = row.value == "adaptive";
  if (const rmp::rt::Context* ctx = rmp::rt::default_context()) {
    k.eager_buffer = ctx->eager_buffer_bytes();
    k.direct_call_bytes = rmp::coll::direct_call_bytes(ctx->coll_params());
  } else {
    k.problems.push_back("no runtime context (rmp::Environment not started?)");
  }
  table << "eager_buffer=" << k.eager_buffer << " direct_call_bytes=" << k.direct_call_bytes << ' ';
  k.table = table.str();
  if (k.fragment_size == 0) {  // keep the size arithmetic of the tests defined
    k.problems.push_back("fragment_size is 0");
    k.fragment_size = 131072;
  }
  return k;
}

}  // namespace

const Knobs& knobs() {
  static const Knobs k = read_knobs();
  return k;
}

std::size_t eager_credit_bytes() {
  const Knobs& k = knobs();
  const std::size_t largest_eager = (k.tune_adaptive ? 2 : 1) * k.eager_threshold;
  // (p2p/engine.cpp: at least the transport's eager buffer, which it has room for anyway.)
  return std::max(k.rq_depth * std::max(largest_eager, k.inline_threshold), k.eager_buffer);
}

Proto proto_of(std::size_t bytes) {
  const Knobs& k = knobs();
  if (bytes <= k.inline_threshold) return Proto::inline_;
  if (bytes <= k.eager_threshold) return Proto::eager;
  return Proto::rndv;
}

const char* proto_name(Proto p) {
  switch (p) {
    case Proto::inline_:
      return "inline";
    case Proto::eager:
      return "eager";
    case Proto::rndv:
      return "rendezvous";
  }
  return "?";
}

std::size_t rndv_size(std::size_t cap) {
  const Knobs& k = knobs();
  std::size_t s = 2 * k.fragment_size + k.fragment_size / 2 + 3;
  if (s > cap) s = cap;
  return std::max(s, k.eager_threshold + 1);
}

std::vector<ClassSize> class_sizes(bool include_zero) {
  const Knobs& k = knobs();
  std::vector<ClassSize> v;
  if (include_zero) v.push_back({proto_of(0), 0});
  if (k.inline_threshold >= 1) v.push_back({Proto::inline_, k.inline_threshold});
  if (k.eager_threshold > k.inline_threshold) v.push_back({Proto::eager, k.eager_threshold});
  v.push_back({Proto::rndv, rndv_size()});
  return v;
}

std::vector<std::size_t> edge_sizes(std::size_t cap) {
  const Knobs& k = knobs();
  std::vector<std::size_t> v = {0, 1, 3, 1000003, std::size_t{16} << 20};
  const std::size_t fd = k.fragment_size * std::max<std::size_t>(k.pipeline_depth, 1);
  for (std::size_t edge : {k.inline_threshold, k.eager_threshold, k.fragment_size, fd}) {
    if (edge >= 1) v.push_back(edge - 1);
    v.push_back(edge);
    v.push_back(edge + 1);
  }
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  v.erase(std::remove_if(v.begin(), v.end(), [cap](std::size_t s) { return s > cap; }), v.end());
  return v;
}

// ---- SPMD conveniences ------------------------------------------------------------------------

int rank() { return rmp::world().rank(); }
int size() { return rmp::world().size(); }

int pair_partner() {
  const int r = rank();
  const int p = r ^ 1;
  return p < size() ? p : r;
}

std::string who(int r) { return "rank " + std::to_string(r); }

bool ranks_have_own_cores(int ranks) {
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  return !(cores > 0 && ranks > cores);
}

bool cma_between_ranks(const rmp::Comm& w) {
  const char* env = std::getenv("RMP_SHM_CMA");
  if ((env && std::string(env) == "0") || w.size() < 2) return false;
  static std::uint64_t word = 0x726d70;
  const std::uint64_t mine[2] = {static_cast<std::uint64_t>(::getpid()),
                                 reinterpret_cast<std::uint64_t>(&word)};
  std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(w.size()));
  w.allgather(mine, 2, all.data());
  const std::size_t q = static_cast<std::size_t>((w.rank() + 1) % w.size());
  std::uint64_t v = 0;
  iovec local{&v, sizeof v}, remote{reinterpret_cast<void*>(all[2 * q + 1]), sizeof v};
  const auto pid = static_cast<pid_t>(all[2 * q]);
  const bool ok = ::process_vm_readv(pid, &local, 1, &remote, 1, 0) == sizeof v && v == 0x726d70 &&
                  ::process_vm_writev(pid, &local, 1, &remote, 1, 0) == sizeof v;
  const int mine_ok = ok ? 1 : 0;
  int every = 0;
  w.allreduce(&mine_ok, &every, 1, rmp::Op::min);
  return every == 1;
}

bool env_is(const char* var, const char* value) {
  const char* v = std::getenv(var);
  return v != nullptr && std::strcmp(v, value) == 0;
}

std::uint64_t env_number(const char* var, std::uint64_t fallback) {
  const char* v = std::getenv(var);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 0) : fallback;
}

bool stop_together(std::uint64_t step) {
  if (step % 100 != 99) return false;
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  if (t != nullptr)
    watchdog_phase(std::string(t->test_suite_name()) + "." + t->name() + " after step " +
                   std::to_string(step));
  const int mine = ::testing::Test::HasFailure() ? 1 : 0;
  int any = 0;
  rmp::world().allreduce(&mine, &any, 1, rmp::Op::max);
  return any != 0;
}

bool kernel_collapses_memory() {
  using rmp::rt::HugePages;
  std::vector<std::byte> v(3 * HugePages::kBlock, std::byte{1});
  return HugePages::madvise_collapse(HugePages::blocks_within(v.data(), v.size()).first) ==
         HugePages::Outcome::collapsed;
}

void check_huge_blocks(const rmp::rt::Counters& before, bool took_part, const std::string& what) {
  const rmp::rt::Counters& now = rmp::rt::counters();
  const std::uint64_t blocks = now.shm_huge_blocks - before.shm_huge_blocks;
  const bool allowed = !env_is("RMP_SHM_CMA", "0") && !env_is("RMP_SHM_HUGEPAGES", "0");
  if (!allowed) {
    EXPECT_EQ(blocks, 0u) << "RMP_SHM_CMA=0 or RMP_SHM_HUGEPAGES=0";
  } else if (took_part && kernel_collapses_memory()) {
    const std::uint64_t put_off = now.shm_huge_deferred - before.shm_huge_deferred;
    const std::uint64_t refused = now.shm_huge_refused - before.shm_huge_refused;
    const std::uint64_t spent_before = before.shm_huge_us, spent = now.shm_huge_us - spent_before;
    rmp::rt::Context* ctx = rmp::rt::default_context();
    const rmp::rt::HugePages* huge = ctx ? ctx->huge_pages() : nullptr;
    if (blocks == 0 && put_off > 0 && refused == 0 && huge &&
        (huge->budget_spent() || huge->last_turn_put_off())) {
      // Excluded, visibly: no ask of this test reached the kernel, because the time budget for
      // asking (5 % of the time that passes) was spent and still is, by this test's asks or
      // the earlier tests', or was until the last turn (a fresh clone's CI, 8 ranks on 2
      // cores: 60.6 ms spent asking before a 0.6 s test, 4 turns put off, the budget back only
      // after the last ping-pong). While a CI build shared the machine, one rank's asks took up
      // to 5.4 s in all over the rendezvous tests, which puts asking off for some 100 s. (A
      // budget that came back while put-off turns still came without their asking fails below.)
      std::printf(
          "[ note ] rank %d: no %s went onto a huge page: the time budget for asking is spent, "
          "or was at the last turn "
          "(%llu turns put off; %llu us spent asking before this test, %llu us in it): only the "
          "data were checked\n",
          rank(), what.c_str(), static_cast<unsigned long long>(put_off),
          static_cast<unsigned long long>(spent_before), static_cast<unsigned long long>(spent));
      return;
    }
    EXPECT_GT(blocks, 0u) << "no " << what << " went onto a huge page, on rank " << rank()
                          << " (the kernel refused " << refused << " asks; turns put off for the "
                          << "time budget: " << put_off << "; time spent asking: " << spent_before
                          << " us before this test, " << spent << " us in it)";
  } else if (took_part) {
    std::printf(
        "[ note ] rank %d: this kernel does not collapse memory (MADV_COLLAPSE): "
        "only the data were checked\n",
        rank());
  }
}

std::uint64_t sum_over_ranks(std::uint64_t v) {
  std::uint64_t out = 0;
  rmp::world().allreduce(&v, &out, 1, rmp::Op::sum);
  return out;
}

namespace {
const char* errc_text(rmp::Errc c) {
  switch (c) {
    case rmp::Errc::invalid_argument:
      return "invalid_argument";
    case rmp::Errc::invalid_rank:
      return "invalid_rank";
    case rmp::Errc::invalid_tag:
      return "invalid_tag";
    case rmp::Errc::invalid_count:
      return "invalid_count";
    case rmp::Errc::invalid_comm:
      return "invalid_comm";
    case rmp::Errc::truncate:
      return "truncate";
    case rmp::Errc::peer_failed:
      return "peer_failed";
    case rmp::Errc::timeout:
      return "timeout";
    case rmp::Errc::bootstrap:
      return "bootstrap";
    case rmp::Errc::transport:
      return "transport";
    case rmp::Errc::internal:
      return "internal";
  }
  return "?";
}
}  // namespace

bool expect_error(const std::function<void()>& f, rmp::Errc code,
                  std::initializer_list<std::string> needles, const std::string& what_call) {
  try {
    f();
  } catch (const rmp::Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(errc_text(e.code()), std::string(errc_text(code)))
        << what_call << ": wrong Errc; what(): " << what;
    for (const std::string& n : needles)
      EXPECT_NE(what.find(n), std::string::npos)
          << what_call << ": what() does not mention \"" << n << "\"; what(): " << what;
    return true;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what_call << ": threw a non-rmp exception: " << e.what();
    return true;
  }
  ADD_FAILURE() << what_call << ": did not throw (expected rmp::Error " << errc_text(code) << ")";
  return false;
}

// ---- Watchdog -------------------------------------------------------------------------------

namespace {

class Watchdog {
public:
  Watchdog() {
    if (const char* s = std::getenv("ITEST_WATCHDOG_S")) limit_s_ = std::atof(s);
    if (const char* r = std::getenv("RMP_RANK")) rank_ = r;
    thread_ = std::thread([this] { run(); });
  }
  ~Watchdog() { stop(); }
  void phase(const std::string& p) {
    std::lock_guard lk(m_);
    phase_ = p;
    since_ = std::chrono::steady_clock::now();
  }
  void stop() {
    {
      std::lock_guard lk(m_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

private:
  void run() {
    std::unique_lock lk(m_);
    while (!stop_) {
      cv_.wait_for(lk, std::chrono::milliseconds(250));
      if (stop_ || limit_s_ <= 0) continue;
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count();
      if (secs > limit_s_) {
        std::fprintf(stderr,
                     "[rank %s] itest watchdog: \"%s\" still running after %.0f s (deadlock or "
                     "lost message?); ending this rank with status 125\n",
                     rank_.c_str(), phase_.c_str(), secs);
        std::fflush(stderr);
        std::fflush(stdout);
        std::_Exit(125);
      }
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::string phase_ = "start";
  std::string rank_ = "?";
  std::chrono::steady_clock::time_point since_ = std::chrono::steady_clock::now();
  double limit_s_ = 60;
  bool stop_ = false;
  std::thread thread_;
};

Watchdog& watchdog() {
  static Watchdog w;
  return w;
}

// Prints failures of ranks other than 0 (rank 0 keeps GoogleTest's full printer).
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
public:
  explicit RankFailurePrinter(int r) : r_(r) {}
  void OnTestPartResult(const ::testing::TestPartResult& res) override {
    if (!res.failed()) return;
    std::printf("[rank %d] %s:%d: Failure\n%s\n", r_, res.file_name() ? res.file_name() : "?",
                res.line_number(), res.message());
    std::fflush(stdout);
  }
  void OnTestEnd(const ::testing::TestInfo& t) override {
    if (t.result()->Failed()) {
      std::printf("[rank %d] [  FAILED  ] %s.%s\n", r_, t.test_suite_name(), t.name());
      std::fflush(stdout);
    }
  }

private:
  int r_;
};

// Keeps tests apart: no rank starts test k+1 before every rank has finished test k.
class BarrierAfterEachTest : public ::testing::EmptyTestEventListener {
public:
  void OnTestStart(const ::testing::TestInfo& t) override {
    watchdog().phase(std::string(t.test_suite_name()) + "." + t.name());
  }
  void OnTestEnd(const ::testing::TestInfo& t) override {
    watchdog().phase(std::string("barrier after ") + t.test_suite_name() + "." + t.name());
    try {
      rmp::world().barrier();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[rank %d] itest: barrier after %s.%s threw: %s\n", rank(),
                   t.test_suite_name(), t.name(), e.what());
      std::fflush(stderr);
      std::_Exit(126);
    }
  }
};

}  // namespace

void watchdog_phase(const std::string& phase) { watchdog().phase(phase); }

namespace {

// RMP_ITEST_RANK_ENV="VAR=V,VAR=V|VAR=V": group g of variables (groups split by '|') is set
// in ranks whose rank % groups == g, before rmp starts. How a variant gives ranks different
// settings (rlaunch -x gives every rank the same).
void apply_rank_env() {
  const char* spec = std::getenv("RMP_ITEST_RANK_ENV");
  const char* rank = std::getenv("RMP_RANK");
  if (!spec || !rank) return;
  std::vector<std::string> groups(1);
  for (const char* p = spec; *p; ++p)
    if (*p == '|') groups.emplace_back();
    else groups.back() += *p;
  const std::string& mine = groups[std::strtoul(rank, nullptr, 10) % groups.size()];
  std::size_t at = 0;
  while (at < mine.size()) {
    std::size_t end = mine.find(',', at);
    if (end == std::string::npos) end = mine.size();
    const std::string kv = mine.substr(at, end - at);
    if (const std::size_t eq = kv.find('='); eq != std::string::npos)
      ::setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
    at = end + 1;
  }
}

}  // namespace

int run_spmd_main(int argc, char** argv) {
  apply_rank_env();
  watchdog_phase("rmp::Environment construction");
  int result = 1;
  try {
    rmp::Environment env(argc, argv);
    ::testing::InitGoogleTest(&argc, argv);
    const int r = rank();
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    if (r != 0) {
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new RankFailurePrinter(r));
    }
    listeners.Append(new BarrierAfterEachTest);
    const int rc = RUN_ALL_TESTS();
    watchdog_phase("allreduce of the failure flag after all tests");
    int failed = rc != 0 ? 1 : 0;
    int any_failed = 0;
    rmp::world().allreduce(&failed, &any_failed, 1, rmp::Op::max);
    if (any_failed != 0 && failed == 0 && r == 0)
      std::printf("itest: tests failed on other ranks (see the [rank N] lines)\n");
    result = any_failed;
    std::fflush(stdout);
    watchdog_phase("finalize (rmp::Environment destructor)");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %s] itest: %s\n",
                 std::getenv("RMP_RANK") ? std::getenv("RMP_RANK") : "?", e.what());
    result = 2;
  }
  watchdog().stop();
  return result;
}

}  // namespace itest
