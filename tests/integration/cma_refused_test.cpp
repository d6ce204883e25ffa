// Cross-memory attach refused in the middle of a run. Every rank drops CAP_SYS_PTRACE from
// its effective capabilities and one rank, the victim, makes itself non-dumpable
// (prctl PR_SET_DUMPABLE 0): the kernel then refuses other processes' process_vm_readv and
// process_vm_writev on the victim's memory with EPERM, as ptrace rules (Yama, a container's
// seccomp profile, a setuid program) refuse them on some clusters, while the victim's own
// copies from and into the others still work. Both settings are put back after each case.
//
// - Point-to-point falls back to the shared chunks and delivers every byte: the victim as
//   the sender (the receiver's single or split read fails), and as the receiver of split gets
//   (the owner's write of its half fails, and the requester copies that half itself).
// - A direct collective (the variants force every shm_direct path) never returns quietly
//   with a buffer it did not fill: each rank either holds the exact result or throws
//   Errc::transport, the root of a reduce throws whenever its result lacks a part, and the
//   same call succeeds on every rank once the victim is dumpable again.
#include "harness.hpp"

#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace {

using namespace itest;
using rmp::Errc;
using rmp::Op;

bool set_ptrace_capability(bool on) {
  __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct d[2]{};
  if (::syscall(SYS_capget, &h, d) != 0) return false;
  const unsigned bit = 1u << (CAP_SYS_PTRACE % 32);
  auto& word = d[CAP_SYS_PTRACE / 32];
  if (on && !(word.permitted & bit)) return true;  // never had it
  word.effective = on ? word.effective | bit : word.effective & ~bit;
  return ::syscall(SYS_capset, &h, d) == 0;
}

// While alive, the ranks' cross-memory access to `victim` is refused (collective).
class Refusal {
public:
  explicit Refusal(int victim) : victim_(victim) {
    ok_ = set_ptrace_capability(false) &&
          (rank() != victim || ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0);
    rmp::world().barrier();
  }
  ~Refusal() {
    rmp::world().barrier();  // every rank is done with its copies
    if (rank() == victim_) ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    set_ptrace_capability(true);
    rmp::world().barrier();
  }
  Refusal(const Refusal&) = delete;
  Refusal& operator=(const Refusal&) = delete;
  bool set_up() const { return ok_; }

private:
  int victim_;
  bool ok_ = false;
};

// Whether a refusal takes here: every rank but rank 1 tries to read a word of rank 1's memory
// while rank 1 is the victim, and must get EPERM. (Collective; false with one rank.)
bool refusal_works() {
  const rmp::Comm& w = rmp::world();
  if (w.size() < 2 || !cma_between_ranks(w)) return false;
  static std::uint64_t word = 42;
  const std::uint64_t mine[2] = {static_cast<std::uint64_t>(::getpid()),
                                 reinterpret_cast<std::uint64_t>(&word)};
  std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(w.size()));
  w.allgather(mine, 2, all.data());
  int refused = 1;
  {
    Refusal r(1);
    if (!r.set_up()) refused = 0;
    if (rank() != 1) {
      std::uint64_t v = 0;
      iovec local{&v, sizeof v}, remote{reinterpret_cast<void*>(all[3]), sizeof v};
      const bool failed =
          ::process_vm_readv(static_cast<pid_t>(all[2]), &local, 1, &remote, 1, 0) < 0 &&
          errno == EPERM;
      refused = refused && failed;
    }
  }
  int every = 0;
  w.allreduce(&refused, &every, 1, Op::min);
  return every == 1;
}

#define SKIP_UNLESS_REFUSAL_WORKS()                                                           \
  do {                                                                                        \
    static const bool works = refusal_works();                                                \
    if (!works) {                                                                             \
      GTEST_SKIP() << "cross-memory attach is off here (RMP_SHM_CMA=0, ptrace rules, or one " \
                      "rank), or a non-dumpable rank is not refused: nothing to take away";   \
    }                                                                                         \
  } while (0)

// What a collective call did on this rank.
struct Outcome {
  bool threw = false;
  bool right = false;  // returned, and its result is exact
  std::string what;
};

Outcome run(const std::function<void()>& call, const std::function<bool()>& check) {
  Outcome o;
  try {
    call();
    o.right = check();
  } catch (const rmp::Error& e) {
    o.threw = true;
    o.what = e.what();
    EXPECT_EQ(e.code(), Errc::transport) << e.what();
  }
  return o;
}

// Small exact values (sums stay exact in double whatever the order).
double value(int r, std::size_t i, int salt) {
  return static_cast<double>(
      (static_cast<std::size_t>(r) * 7919 + i * 31 + static_cast<std::size_t>(salt)) % 1021);
}

std::vector<double> input(std::size_t n, int r, int salt) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value(r, i, salt);
  return v;
}

bool is_sum(const std::vector<double>& got, int salt) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    double s = 0;
    for (int q = 0; q < size(); ++q) s += value(q, i, salt);
    if (got[i] != s) return false;
  }
  return true;
}

// Runs `call` (with its check) once with every rank in turn refused, then once more with
// none refused. Expects no rank to return a wrong result, `must_throw(victim)` ranks to throw,
// and the call refused somewhere in the loop to have failed on some rank (else the case tested
// nothing); then every rank right.
void each_victim(
    const char* what, const std::function<void()>& call, const std::function<bool()>& check,
    const std::function<bool(int victim)>& must_throw = [](int) { return false; }) {
  int thrown = 0;
  for (int victim = 0; victim < size(); ++victim) {
    Outcome o;
    {
      Refusal refuse(victim);
      EXPECT_TRUE(refuse.set_up());  // (no early return: the others would wait)
      o = run(call, check);
    }
    thrown += static_cast<int>(sum_over_ranks(o.threw ? 1 : 0));
    EXPECT_TRUE(o.threw || o.right)
        << what << ", rank " << victim << " refused: returned a wrong result on rank " << rank();
    if (must_throw(victim)) {
      EXPECT_TRUE(o.threw) << what << ", rank " << victim << " refused: rank " << rank()
                           << " returned without the parts it could not get";
    }
  }
  EXPECT_GT(thrown, 0) << what << ": no rank saw a refusal (the direct path did not run?)";
  const Outcome after = run(call, check);
  EXPECT_TRUE(after.right && !after.threw)
      << what << " once every rank is dumpable again: " << after.what;
}

}  // namespace

TEST(CmaRefused, Bcast_EveryRankHoldsTheMessageOrThrows) {
  SKIP_UNLESS_REFUSAL_WORKS();
  const std::size_t n = (1u << 20) + 3;
  for (int root : {0, size() - 1}) {
    std::vector<std::byte> buf(n);
    const std::uint64_t s = seed(root, 0, 1);
    each_victim(("bcast of 1 MiB + 3 from root " + std::to_string(root)).c_str(),
                [&] {
                  if (rank() == root) {
                    fill(buf.data(), n, s);
                  } else {
                    std::fill(buf.begin(), buf.end(), std::byte{0});
                  }
                  rmp::world().bcast(buf.data(), n, root);
                },
                [&] { return first_mismatch(buf.data(), n, s) == n; },
                // Every other rank reads from the root.
                [&](int victim) { return victim == root && rank() != root; });
  }
}

TEST(CmaRefused, Reduce_TheRootHoldsTheSumOrThrows) {
  SKIP_UNLESS_REFUSAL_WORKS();
  // Up to a quarter chunk (pulled), more (sliced: one block a slice, or several).
  for (std::size_t count : {std::size_t{5000}, std::size_t{65536 + 7}, std::size_t{1} << 20}) {
    for (int root : {0, size() - 1}) {
      const std::vector<double> in = input(count, rank(), 3);
      std::vector<double> out(count);
      each_victim(
          ("reduce of " + std::to_string(count) + " doubles to root " + std::to_string(root))
              .c_str(),
          [&] {
            std::fill(out.begin(), out.end(), -1.0);
            rmp::world().reduce(in.data(), out.data(), count, Op::sum, root);
          },
          [&] { return rank() != root || is_sum(out, 3); });
    }
  }
}

TEST(CmaRefused, Allreduce_EveryRankHoldsTheSumOrThrows) {
  SKIP_UNLESS_REFUSAL_WORKS();
  for (std::size_t count : {std::size_t{65536 + 7}, std::size_t{1} << 20}) {
    const std::vector<double> in = input(count, rank(), 5);
    std::vector<double> out(count);
    each_victim(("allreduce of " + std::to_string(count) + " doubles").c_str(),
                [&] {
                  std::fill(out.begin(), out.end(), -1.0);
                  rmp::world().allreduce(in.data(), out.data(), count, Op::sum);
                },
                [&] { return is_sum(out, 5); },
                // Every rank reads a slice of every other's input, and writes into every output.
                [&](int) { return true; });
  }
  // In place: a rank's buffer is its input and its output.
  const std::size_t count = (1u << 18) + 1;
  std::vector<double> buf(count);
  each_victim(
      "allreduce in place",
      [&] {
        buf = input(count, rank(), 6);
        rmp::world().allreduce(rmp::in_place<double>, buf.data(), count, Op::sum);
      },
      [&] { return is_sum(buf, 6); }, [&](int) { return true; });
}

TEST(CmaRefused, AllgatherAndAlltoall_EveryRankHoldsEveryBlockOrThrows) {
  SKIP_UNLESS_REFUSAL_WORKS();
  const rmp::Comm& w = rmp::world();
  const auto un = static_cast<std::size_t>(size());
  const std::size_t block = (64u << 10) + 5;
  std::vector<std::byte> mine(block), all(block * un);
  fill(mine.data(), block, seed(rank(), 0, 7));
  auto all_right = [&] {
    for (int q = 0; q < size(); ++q)
      if (first_mismatch(all.data() + static_cast<std::size_t>(q) * block, block, seed(q, 0, 7)) !=
          block)
        return false;
    return true;
  };
  // Every rank reads every other rank's block.
  auto others_throw = [&](int victim) { return rank() != victim; };
  each_victim(
      "allgather of 64 KiB + 5",
      [&] {
        std::fill(all.begin(), all.end(), std::byte{0});
        w.allgather(mine.data(), block, all.data());
      },
      all_right, others_throw);

  // Uneven blocks, some empty.
  std::vector<std::size_t> counts(un), displs(un);
  std::size_t total = 0;
  for (std::size_t q = 0; q < un; ++q) {
    counts[q] = q % 3 == 1 ? 0 : block + q * 4099;
    displs[q] = total;
    total += counts[q];
  }
  std::vector<std::byte> v_in(counts[static_cast<std::size_t>(rank())]), v_out(total);
  fill(v_in.data(), v_in.size(), seed(rank(), 1, 7));
  each_victim(
      "allgatherv with empty blocks",
      [&] {
        std::fill(v_out.begin(), v_out.end(), std::byte{0});
        w.allgatherv(v_in.data(), v_in.size(), v_out.data(), counts, displs);
      },
      [&] {
        for (std::size_t q = 0; q < un; ++q)
          if (first_mismatch(v_out.data() + displs[q], counts[q],
                             seed(static_cast<int>(q), 1, 7)) != counts[q])
            return false;
        return true;
      });

  std::vector<std::byte> a_in(block * un), a_out(block * un);
  for (int q = 0; q < size(); ++q)
    fill(a_in.data() + static_cast<std::size_t>(q) * block, block, seed(rank(), q, 8));
  each_victim(
      "alltoall of 64 KiB + 5",
      [&] {
        std::fill(a_out.begin(), a_out.end(), std::byte{0});
        w.alltoall(a_in.data(), block, a_out.data());
      },
      [&] {
        for (int q = 0; q < size(); ++q)
          if (first_mismatch(a_out.data() + static_cast<std::size_t>(q) * block, block,
                             seed(q, rank(), 8)) != block)
            return false;
        return true;
      },
      others_throw);
}

// Last: a refused read turns cross-memory attach off for the rest of the reader's run.
TEST(CmaRefused, PointToPoint_FallsBackToTheChunksAndDeliversEveryByte) {
  SKIP_UNLESS_REFUSAL_WORKS();
  const rmp::Comm& w = rmp::world();
  const int n = size(), r = rank();
  const int to = (r + 1) % n, from = (r + n - 1) % n;
  // Rendezvous sizes: one long message, and a window of 64 KiB ones (split gets in batches).
  const std::vector<std::size_t> sizes{(1u << 20) + 3, (4u << 20) + 1};
  constexpr int kWindow = 16;
  const std::size_t small = (64u << 10) + 9;
  for (int victim = 0; victim < n; ++victim) {
    Refusal refuse(victim);
    EXPECT_TRUE(refuse.set_up());  // (no early return: the others would wait)
    for (std::size_t bytes : sizes) {
      std::vector<std::byte> out(bytes), in(bytes);
      fill(out.data(), bytes, seed(r, to, bytes, victim));
      w.sendrecv(out.data(), bytes, to, 5, in.data(), bytes, from, 5);
      EXPECT_TRUE(matches(in.data(), bytes, seed(from, r, bytes, victim)))
          << bytes << " bytes from rank " << from << ", rank " << victim << " refused";
    }
    std::vector<std::vector<std::byte>> outs(kWindow), ins(kWindow);
    std::vector<rmp::Request> reqs;
    for (int i = 0; i < kWindow; ++i) {
      outs[i].resize(small);
      ins[i].resize(small);
      fill(outs[i].data(), small, seed(r, to, static_cast<std::uint64_t>(i), victim + 100));
      reqs.push_back(w.irecv(ins[i].data(), small, from, 6));
    }
    for (int i = 0; i < kWindow; ++i) reqs.push_back(w.isend(outs[i].data(), small, to, 6));
    rmp::wait_all(reqs);
    for (int i = 0; i < kWindow; ++i)
      EXPECT_TRUE(
          matches(ins[i].data(), small, seed(from, r, static_cast<std::uint64_t>(i), victim + 100)))
          << "message " << i << " of a window from rank " << from << ", rank " << victim
          << " refused";
  }
}
