// RMP_SHM_HUGEPAGES: which blocks of a rendezvous buffer are asked to go onto huge pages, and
// when (runtime/huge_pages.hpp), the kernel call and the clock replaced by fakes.
#include "runtime/huge_pages.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <vector>

namespace {

using rmp::rt::HugePages;
using Outcome = HugePages::Outcome;
constexpr std::uintptr_t kBlock = HugePages::kBlock;

// What the fake kernel answers per block, the calls it saw, and a clock: every use of a
// buffer takes `use_seconds`, every call `collapse_seconds`.
struct FakeKernel {
  std::map<std::uintptr_t, Outcome> answer;  // default: collapsed
  std::vector<std::uintptr_t> calls;
  double now = 1.0, use_seconds = 1e-3, collapse_seconds = 0;
};
FakeKernel* kernel = nullptr;
Outcome fake_collapse(std::uintptr_t block) {
  kernel->calls.push_back(block);
  kernel->now += kernel->collapse_seconds;
  auto it = kernel->answer.find(block);
  return it == kernel->answer.end() ? Outcome::collapsed : it->second;
}
double fake_clock() { return kernel->now; }

struct HugePagesTest : ::testing::Test {
  FakeKernel k;
  void SetUp() override {
    kernel = &k;
    total = {};
  }
  void TearDown() override { kernel = nullptr; }
  static const void* at(std::uintptr_t a) { return reinterpret_cast<const void*>(a); }
  // What the uses so far did, summed.
  static inline HugePages::Asked total;
  // One use of [p, p + n), the time of the use passing first. Returns the blocks collapsed.
  static int use(HugePages& h, std::uintptr_t p, std::size_t n) {
    kernel->now += kernel->use_seconds;
    const HugePages::Asked a = h.use(at(p), n);
    total.collapsed += a.collapsed;
    total.refused += a.refused;
    total.deferred += a.deferred;
    total.seconds += a.seconds;
    return a.collapsed;
  }
  // Uses `from` to `to` (counted from 1) of a one-block buffer: those at which it asked.
  static std::vector<std::uint32_t> uses_that_ask(HugePages& h, std::uintptr_t block,
                                                  std::uint32_t from, std::uint32_t to) {
    std::vector<std::uint32_t> asked;
    for (std::uint32_t n = from; n <= to; ++n) {
      const std::size_t before = kernel->calls.size();
      use(h, block, kBlock);
      if (kernel->calls.size() != before) asked.push_back(n);
    }
    return asked;
  }
  // Spends the time budget: a block's first ask takes 20 ms (the kernel compacting), 16 ms
  // more than the bucket holds, which 5 % of the time makes up after 320 ms.
  static void spend_budget(HugePages& h, std::uintptr_t block) {
    kernel->collapse_seconds = 20e-3;
    for (std::uint32_t i = 0; i < HugePages::kFirstTry; ++i) use(h, block, kBlock);
    kernel->collapse_seconds = 0.4e-3;
  }
  // Uses of one buffer up to (not including) the one that first asks.
  static void before_first_try(HugePages& h, std::uintptr_t p, std::size_t n) {
    for (std::uint32_t i = 1; i < HugePages::kFirstTry; ++i) use(h, p, n);
  }
};

TEST_F(HugePagesTest, BlocksWithin_OnlyWholeAlignedBlocks) {
  const std::uintptr_t base = 64 * kBlock;
  auto count = [](HugePages::Blocks b) { return (b.end - b.first) / kBlock; };
  EXPECT_EQ(count(HugePages::blocks_within(at(base), kBlock)), 1u);
  EXPECT_EQ(count(HugePages::blocks_within(at(base), kBlock - 1)), 0u);
  EXPECT_EQ(count(HugePages::blocks_within(at(base + 1), kBlock)), 0u);
  EXPECT_EQ(count(HugePages::blocks_within(at(base + 4096), 4 * kBlock)), 3u);
  const auto b = HugePages::blocks_within(at(base + 4096), 4 * kBlock);
  EXPECT_EQ(b.first, base + kBlock);
  EXPECT_EQ(b.end, base + 4 * kBlock);
  EXPECT_EQ(count(HugePages::blocks_within(at(base - 1), 2 * kBlock + 2)), 2u);
  EXPECT_EQ(count(HugePages::blocks_within(at(base), 0)), 0u);
}

// The blocks a buffer uses: the whole ones, and one at either end whose part in the buffer
// is half a block or more (a 1 MiB buffer uses one block or none, a 4 MiB one two or three).
TEST_F(HugePagesTest, BlocksUsed_WholeOnesAndThoseAtLeastHalfCovered) {
  const std::uintptr_t base = 64 * kBlock;
  const std::size_t half = kBlock / 2;
  auto blocks = [](std::uintptr_t p, std::size_t n) {
    const HugePages::Blocks b = HugePages::blocks_used(at(p), n);
    std::vector<std::uintptr_t> v;
    for (std::uintptr_t a = b.first; a < b.end; a += kBlock) v.push_back(a / kBlock);
    return v;
  };
  using V = std::vector<std::uintptr_t>;
  EXPECT_EQ(blocks(base, kBlock), (V{64}));
  EXPECT_EQ(blocks(base, half), (V{64})) << "half a block, at its start";
  EXPECT_EQ(blocks(base + half, half), (V{64})) << "half a block, at its end";
  EXPECT_EQ(blocks(base, half - 1), V{}) << "less than half";
  EXPECT_EQ(blocks(base + half + 1, half), V{}) << "half, across a boundary: neither half";
  EXPECT_EQ(blocks(base + 4096, 2 * kBlock), (V{64, 65})) << "all but a page of the first";
  // 4 MiB: the middle block whole; of the ends, each that holds half a block or more.
  EXPECT_EQ(blocks(base + half - 4096, 2 * kBlock), (V{64, 65}));
  EXPECT_EQ(blocks(base + half + 4096, 2 * kBlock), (V{65, 66}));
  EXPECT_EQ(blocks(base + 4096, 4 * kBlock), (V{64, 65, 66, 67}));
  EXPECT_EQ(blocks(base + 3 * half, 3 * half), (V{65, 66})) << "half of one, then a whole one";
  EXPECT_EQ(blocks(base + half / 2, 3 * half), (V{64, 65})) << "three quarters of each";
  EXPECT_EQ(blocks(base, 0), V{});
  // Whatever the address, a buffer of 4 MiB uses two or three blocks.
  for (std::uintptr_t off = 0; off < kBlock; off += 4096) {
    const std::size_t n = blocks(base + off, 2 * kBlock).size();
    EXPECT_TRUE(n == 2 || n == 3) << off;
  }
}

// A buffer's blocks are asked from their kFirstTry-th use on, once each when the kernel
// collapses them; buffers smaller than half a block are never looked at; disabled, nothing is
// asked.
TEST_F(HugePagesTest, AskedFromTheFirstTryOn_CollapsedOnce) {
  HugePages h(true, &fake_collapse, &fake_clock);
  const std::uintptr_t base = 10 * kBlock + 4096;
  before_first_try(h, base, 3 * kBlock);
  EXPECT_TRUE(k.calls.empty()) << "fewer uses than kFirstTry";
  EXPECT_EQ(use(h, base, 3 * kBlock), 3) << "both whole blocks and the first, all but a page";
  EXPECT_EQ(k.calls, (std::vector<std::uintptr_t>{10 * kBlock, 11 * kBlock, 12 * kBlock}));
  for (int i = 0; i < 100; ++i) EXPECT_EQ(use(h, base, 3 * kBlock), 0);
  EXPECT_EQ(k.calls.size(), 3u) << "collapsed blocks are not asked again";
  for (int i = 0; i < 40; ++i) use(h, 20 * kBlock, kBlock / 2 - 1);
  EXPECT_EQ(k.calls.size(), 3u) << "smaller than half a block";
  HugePages off(false, &fake_collapse, &fake_clock);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(use(off, 30 * kBlock, 4 * kBlock), 0);
  EXPECT_EQ(k.calls.size(), 3u) << "RMP_SHM_HUGEPAGES=0";
}

// Collapsing takes at most kBudget of the time, after a first burst of kBurst: a pool of
// buffers each used a little more than kFirstTry times, every collapse taking 4 ms (the
// kernel compacting memory) against 1 ms a use, collapses some blocks, not all, and the time
// spent stays within the budget (plus one collapse, whose cost is known only once it is
// over). Cheap ones (0.4 ms) all go through, some at their next turn.
TEST_F(HugePagesTest, CollapsingStaysWithinItsBudget) {
  HugePages h(true, &fake_collapse, &fake_clock);
  k.collapse_seconds = 4e-3;
  const double start = k.now;
  constexpr int kBuffers = 64;
  auto buffer = [](int b) { return (1000 + 4 * static_cast<std::uintptr_t>(b)) * kBlock; };
  for (std::uint32_t round = 0; round < HugePages::kFirstTry + 2; ++round)
    for (int b = 0; b < kBuffers; ++b) use(h, buffer(b), 2 * kBlock);
  const double elapsed = k.now - start;
  EXPECT_GT(k.calls.size(), 0u);
  EXPECT_LT(k.calls.size(), 2u * kBuffers) << "not every block at 4 ms each";
  EXPECT_LE(total.seconds, HugePages::kBurst + HugePages::kBudget * elapsed + k.collapse_seconds);
  EXPECT_EQ(static_cast<std::size_t>(total.collapsed), k.calls.size());
  EXPECT_EQ(total.refused, 0);
  EXPECT_GT(total.deferred, 0) << "turns put off while the budget was spent";
  FakeKernel cheap;
  cheap.collapse_seconds = 0.4e-3;
  kernel = &cheap;
  HugePages g(true, &fake_collapse, &fake_clock);
  for (std::uint32_t round = 0; round < 2 * HugePages::kFirstTry + 2; ++round)
    for (int b = 0; b < 8; ++b) use(g, buffer(b), 2 * kBlock);
  EXPECT_EQ(cheap.calls.size(), 16u);
  kernel = &k;
}

// A turn that finds the budget spent is put off to the block's next use with time in it, not
// to its next turn: one 20 ms collapse (the kernel compacting) leaves the budget 16 ms short,
// which 5 % of the time makes up after 320 ms; the other block, used every 1 ms, asks then
// (at about its 300th use), not at its 512th.
TEST_F(HugePagesTest, TurnPutOffForTheBudget_AskedOnceTimeIsBack) {
  HugePages h(true, &fake_collapse, &fake_clock);
  spend_budget(h, 50 * kBlock);
  ASSERT_EQ(k.calls.size(), 1u);
  const std::vector<std::uint32_t> asked_at = uses_that_ask(h, 60 * kBlock, 1, 600);
  ASSERT_EQ(asked_at.size(), 1u) << "collapsed at its first ask";
  EXPECT_GT(asked_at[0], 290u) << "the budget kept";
  EXPECT_LT(asked_at[0], 310u) << "asked as soon as the budget had time again";
  EXPECT_EQ(total.deferred, 1) << "put off once, counted once";
}

// A put-off turn that the kernel refuses as busy where it lands (mid-window, the peer's reads
// pinning the pages) is spent: the block asks again at its next turns, 2^k and 2^k + 1 uses,
// not at every use. budget_spent() says whether a turn would be put off now.
TEST_F(HugePagesTest, PutOffAsk_RefusedBusy_BackToTurns) {
  HugePages h(true, &fake_collapse, &fake_clock);
  EXPECT_FALSE(h.budget_spent()) << "nothing asked yet";
  spend_budget(h, 50 * kBlock);
  EXPECT_TRUE(h.budget_spent());
  const std::uintptr_t pinned = 70 * kBlock;
  k.answer[pinned] = Outcome::busy;
  const std::vector<std::uint32_t> asked_at = uses_that_ask(h, pinned, 1, 600);
  ASSERT_EQ(asked_at.size(), 3u);
  EXPECT_GT(asked_at[0], 290u) << "the put-off turn, once the budget had time";
  EXPECT_LT(asked_at[0], 310u);
  EXPECT_EQ(asked_at[1], 512u);
  EXPECT_EQ(asked_at[2], 513u);
  EXPECT_EQ(total.refused, 3);
  EXPECT_EQ(total.deferred, 1);
  EXPECT_FALSE(h.budget_spent());
  EXPECT_FALSE(h.last_turn_put_off());
}

// last_turn_put_off() says whether the latest turn found the budget spent, whatever the
// budget holds since: a test that checks for collapsed blocks after its last use tells "no
// time came while the block was used" from "time came and the block did not ask".
TEST_F(HugePagesTest, LastTurnPutOff_StaysUntilATurnFindsTime) {
  HugePages h(true, &fake_collapse, &fake_clock);
  EXPECT_FALSE(h.last_turn_put_off()) << "no turn yet";
  spend_budget(h, 50 * kBlock);
  const std::uintptr_t block = 90 * kBlock;
  for (int n = 0; n < 64 && total.deferred == 0; ++n) use(h, block, kBlock);  // its first turn
  ASSERT_EQ(total.deferred, 1) << "the first turn put off";
  EXPECT_TRUE(h.budget_spent());
  EXPECT_TRUE(h.last_turn_put_off());
  const std::size_t asked = k.calls.size();
  for (int i = 0; i < 100 && h.budget_spent(); ++i) k.now += 0.1;  // the budget comes back
  EXPECT_FALSE(h.budget_spent());
  EXPECT_TRUE(h.last_turn_put_off()) << "no use since could have asked";
  use(h, block, kBlock);  // the put-off turn asks now
  EXPECT_EQ(k.calls.size(), asked + 1);
  EXPECT_FALSE(h.last_turn_put_off());
}

// Pages pinned by the peer's cross-memory attach (a window of sends of one buffer): the kernel
// refuses for now, and the block asks again at 2^k and 2^k + 1 uses, so that a window of up
// to 2^k sends has its next window's first send ask.
TEST_F(HugePagesTest, BusyBlocksAskAgainAtWindowStarts) {
  HugePages h(true, &fake_collapse, &fake_clock);
  const std::uintptr_t block = 40 * kBlock;
  k.answer[block] = Outcome::busy;
  EXPECT_EQ(uses_that_ask(h, block, 1, 200),
            (std::vector<std::uint32_t>{16, 17, 32, 33, 64, 65, 128, 129}));
  EXPECT_EQ(total.refused, 8) << "each refusal counted";
  EXPECT_EQ(total.collapsed, 0);
  EXPECT_EQ(total.deferred, 0);
  // Windows of 64: the 129th use (the third window's first send) finds the pages free.
  k.answer.erase(block);
  for (std::uint32_t n = 201; n <= 300; ++n) use(h, block, kBlock);
  EXPECT_EQ(k.calls.back(), block);
  const std::size_t calls = k.calls.size();
  for (int i = 0; i < 1000; ++i) use(h, block, kBlock);
  EXPECT_EQ(k.calls.size(), calls) << "collapsed at its 256th use: asked no more";
  EXPECT_FALSE(HugePages::due(HugePages::kFirstTry - 1));
  EXPECT_TRUE(HugePages::due(HugePages::kLastTry + 1));
  EXPECT_FALSE(HugePages::due(HugePages::kLastTry + 2));
}

// A block the kernel will not collapse is not asked again; four such refusals before any
// success (a kernel without MADV_COLLAPSE) end the asking for every block.
TEST_F(HugePagesTest, RefusedForGood_NotAskedAgain_FourBeforeAnySuccessStopAll) {
  auto block = [](int b) { return (100 + static_cast<std::uintptr_t>(b)) * kBlock; };
  for (int b = 0; b < 4; ++b) k.answer[block(b)] = Outcome::never;
  HugePages h(true, &fake_collapse, &fake_clock);
  for (int i = 0; i < 40; ++i) use(h, block(0), kBlock);
  EXPECT_EQ(k.calls.size(), 1u) << "refused for good: asked once";
  EXPECT_EQ(total.refused, 1);
  EXPECT_TRUE(h.enabled());
  for (int b = 1; b < 4; ++b)
    for (int i = 0; i < 20; ++i) use(h, block(b), kBlock);
  EXPECT_FALSE(h.enabled());
  const std::size_t calls = k.calls.size();
  for (int i = 0; i < 40; ++i) use(h, 200 * kBlock, kBlock);
  EXPECT_EQ(k.calls.size(), calls) << "off: a collapsible block is not asked either";
  // Blocks at a buffer's end (a huge page there would cross into another mapping, say) are
  // refused without saying anything of the kernel: they settle, and the asking goes on.
  FakeKernel ends;
  kernel = &ends;
  auto end_block = [](int b) { return (400 + 4 * static_cast<std::uintptr_t>(b)) * kBlock; };
  for (int b = 0; b < 8; ++b) {
    ends.answer[end_block(b)] = Outcome::never;
    ends.answer[end_block(b) + kBlock] = Outcome::never;
  }
  HugePages e(true, &fake_collapse, &fake_clock);
  // 3 MiB from a quarter block in: three quarters of each of two blocks, no whole one.
  for (int b = 0; b < 8; ++b)
    for (int i = 0; i < 20; ++i) use(e, end_block(b) + kBlock / 4, 3 * kBlock / 2);
  EXPECT_TRUE(e.enabled()) << "16 refusals, none of a whole block";
  EXPECT_EQ(ends.calls.size(), 16u) << "each buffer's two blocks once, refused";
  // Whole blocks refused beside them still end the asking.
  for (int b = 0; b < 4; ++b) {
    const std::uintptr_t at = (600 + 4 * static_cast<std::uintptr_t>(b)) * kBlock;
    ends.answer[at] = Outcome::never;
    for (int i = 0; i < 20; ++i) use(e, at, kBlock);
  }
  EXPECT_FALSE(e.enabled());
  kernel = &k;
  // After one success, refusals only settle their own blocks.
  HugePages g(true, &fake_collapse, &fake_clock);
  for (int i = 0; i < 20; ++i) use(g, 300 * kBlock, kBlock);
  for (int b = 0; b < 4; ++b)
    for (int i = 0; i < 20; ++i) use(g, block(b), kBlock);
  EXPECT_TRUE(g.enabled());
}

}  // namespace
