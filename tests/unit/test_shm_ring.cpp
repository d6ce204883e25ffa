// The shm line ring and byte ring: ordering, wrap-around, padding, back-pressure, and that
// stale payload bytes can never pass for a message header a lap later.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <random>
#include <thread>
#include <vector>

#include "runtime/shared_memory.hpp"
#include "runtime/transport/shm/shm_ring.hpp"

using namespace rmp::rt;
using namespace rmp::rt::shm;

namespace {

struct RingMemory {
  RingShared shared;
  std::vector<Line> lines;
  std::vector<std::byte> data;
  RingLayout layout;
  RingMemory(std::size_t nlines, std::size_t data_bytes) : lines(nlines), data(data_bytes) {
    for (auto& l : lines) l.seq.store(0);
    layout = {&shared, lines.data(), nlines, data.data(), data_bytes};
  }
};

struct Msg {
  AmId am;
  std::vector<std::byte> hdr, payload;
};

std::vector<std::byte> bytes_of_value(std::size_t n, std::uint32_t v) {
  // Payload made of words equal to plausible sequence numbers: if a stale continuation line
  // were ever taken for a header, the test would see a bogus message.
  std::vector<std::byte> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((v >> (8 * (i % 4))) & 0xff);
  return b;
}

int drain(RingConsumer& c, std::deque<Msg>& expect) {
  return c.poll(
      [&](AmId am, std::span<const std::byte> h, std::span<const std::byte> p) {
        ASSERT_FALSE(expect.empty()) << "a message nobody sent";
        const Msg& m = expect.front();
        EXPECT_EQ(am, m.am);
        ASSERT_EQ(h.size(), m.hdr.size());
        ASSERT_EQ(p.size(), m.payload.size());
        EXPECT_TRUE(std::equal(h.begin(), h.end(), m.hdr.begin()));
        EXPECT_TRUE(std::equal(p.begin(), p.end(), m.payload.begin()));
        expect.pop_front();
      },
      1 << 30);
}

}  // namespace

TEST(ShmRing, EightBytesTouchOneLine) {
  RingMemory mem(64, 4096);
  RingProducer p(mem.layout);
  RingConsumer c(mem.layout);
  std::vector<std::byte> hdr(16, std::byte{1}), pay(8, std::byte{2});
  ASSERT_EQ(p.push(3, hdr, pay, true), TStatus::ok);
  EXPECT_EQ(mem.lines[0].nlines, 1);
  EXPECT_EQ(mem.lines[1].seq.load(), 0u);
  std::deque<Msg> q{{3, hdr, pay}};
  EXPECT_EQ(drain(c, q), 1);
}

TEST(ShmRing, FullRingSaysRetryAndRecovers) {
  RingMemory mem(64, 1 << 12);
  RingProducer p(mem.layout);
  RingConsumer c(mem.layout);
  std::deque<Msg> q;
  std::vector<std::byte> hdr(16, std::byte{9});
  int sent = 0;
  while (true) {
    auto pay = bytes_of_value(20, static_cast<std::uint32_t>(sent));
    if (p.push(1, hdr, pay, true) != TStatus::ok) break;
    q.push_back({1, hdr, pay});
    ++sent;
  }
  EXPECT_EQ(sent, 64);
  EXPECT_EQ(drain(c, q), 64);
  auto pay = bytes_of_value(20, 1);
  EXPECT_EQ(p.push(1, hdr, pay, true), TStatus::ok);
}

TEST(ShmRing, DataRingFullSaysRetry) {
  RingMemory mem(64, 1 << 12);
  RingProducer p(mem.layout);
  RingConsumer c(mem.layout);
  std::vector<std::byte> hdr(16), big(3000);
  EXPECT_EQ(p.push(1, hdr, big, false), TStatus::ok);
  EXPECT_EQ(p.push(1, hdr, big, false), TStatus::retry);  // 6000 > 4096
  std::deque<Msg> q{{1, hdr, big}};
  drain(c, q);
  EXPECT_EQ(p.push(1, hdr, big, false), TStatus::ok);  // skips to the start, contiguous
  EXPECT_EQ(p.push(1, hdr, std::vector<std::byte>(5000), false), TStatus::error);  // > ring
}

TEST(ShmRing, RandomMixAcrossManyLaps_DeliversExactlyInOrder) {
  RingMemory mem(64, 1 << 13);
  RingProducer p(mem.layout);
  RingConsumer c(mem.layout);
  std::mt19937 rng(42);
  std::deque<Msg> q;
  for (int i = 0; i < 20000; ++i) {
    const std::size_t hlen = rng() % 64;
    const bool inl = rng() % 2;
    const std::size_t plen = inl ? rng() % 1025 : rng() % 3000;
    Msg m{static_cast<AmId>(rng() % 24), bytes_of_value(hlen, static_cast<std::uint32_t>(rng())),
          bytes_of_value(plen, static_cast<std::uint32_t>(i / 3 + 1))};
    while (p.push(m.am, m.hdr, m.payload, inl) == TStatus::retry) drain(c, q);
    q.push_back(std::move(m));
    if (rng() % 5 == 0) drain(c, q);
  }
  drain(c, q);
  EXPECT_TRUE(q.empty());
}

// Both directions of a pair as two ranks hold them: each side's producer echoes where its
// consumer has read to, and learns from the other side's lines where its own were read.
struct PairRings {
  RingMemory ab, ba;
  RingProducer a_out{ab.layout}, b_out{ba.layout};
  RingConsumer a_in{ba.layout}, b_in{ab.layout};
  explicit PairRings(std::size_t data_bytes = 1 << 13) : ab(64, data_bytes), ba(64, data_bytes) {
    pair_rings(a_out, a_in);
    pair_rings(b_out, b_in);
  }
};

// The byte-ring position a line at `idx` carries (its payload went by copy).
std::uint64_t data_position(const RingMemory& mem, std::size_t idx) {
  std::uint64_t dpos;
  std::memcpy(&dpos, mem.lines[idx].body, 8);
  return dpos;
}

// The rest of a ping-pong's round after a pushed `m` (a to b): b reads it, answers with 8
// bytes inline, and a reads the answer; every message arrives intact.
void answer_round(PairRings& pr, std::deque<Msg>& to_b, std::deque<Msg>& to_a, Msg m,
                  const std::vector<std::byte>& hdr, int i) {
  to_b.push_back(std::move(m));
  ASSERT_EQ(drain(pr.b_in, to_b), 1);
  Msg r{2, hdr, bytes_of_value(8, static_cast<std::uint32_t>(~i))};
  ASSERT_EQ(pr.b_out.push(r.am, r.hdr, r.payload, true), TStatus::ok);
  to_a.push_back(std::move(r));
  ASSERT_EQ(drain(pr.a_in, to_a), 1);
}

// A ping-pong keeps to the ring's first kHotLines lines once the echoes say the ring is idle,
// and starts every copied payload at the byte ring's start; every message arrives intact.
TEST(ShmRing, PingPongOfAPair_KeepsToTheHotLines) {
  PairRings pr;
  std::deque<Msg> to_b, to_a;
  std::vector<std::byte> hdr(16, std::byte{7});
  std::vector<std::uint64_t> seq_before(64);
  for (int i = 0; i < 2000; ++i) {
    if (i == 10)
      for (std::size_t l = 0; l < 64; ++l) seq_before[l] = pr.ab.lines[l].seq.load();
    const bool copied = i % 3 == 0;  // every third payload through the byte ring
    Msg m{1, hdr, bytes_of_value(copied ? 100 + i % 50 : 8, static_cast<std::uint32_t>(i))};
    ASSERT_EQ(pr.a_out.push(m.am, m.hdr, m.payload, !copied), TStatus::ok);
    // Where it went: the line the consumer is about to read.
    const std::size_t at = *pr.b_in.position() & 63;
    if (i >= 10) {
      EXPECT_LT(at, kHotLines) << "message " << i;
      if (copied) {
        EXPECT_EQ(data_position(pr.ab, at) % pr.ab.data.size(), 0u) << "message " << i;
      }
    }
    ASSERT_NO_FATAL_FAILURE(answer_round(pr, to_b, to_a, std::move(m), hdr, i));
  }
  for (std::size_t l = kHotLines; l < 64; ++l)
    EXPECT_EQ(pr.ab.lines[l].seq.load(), seq_before[l]) << "line " << l << " written again";
  for (std::size_t l = 0; l < kHotLines; ++l)
    EXPECT_NE(pr.ab.lines[l].seq.load(), seq_before[l]) << "hot line " << l << " unused";
}

// In a ping-pong, a payload of up to kMaxRestartBytes starts at the byte ring's start; a larger
// one goes on from where the last one ended (round the ring), and every message arrives intact.
TEST(ShmRing, PingPong_OnlySmallPayloadsStartTheByteRingOver) {
  for (const std::size_t len : {kMaxRestartBytes, kMaxRestartBytes + 64}) {
    PairRings pr(1 << 16);
    std::deque<Msg> to_b, to_a;
    std::vector<std::byte> hdr(16, std::byte{7});
    std::uint64_t last = 0;
    int at_start = 0;  // of the payloads after the first two
    for (int i = 0; i < 40; ++i) {
      Msg m{1, hdr, bytes_of_value(len, static_cast<std::uint32_t>(i))};
      ASSERT_EQ(pr.a_out.push(m.am, m.hdr, m.payload, false), TStatus::ok);
      const std::uint64_t at = data_position(pr.ab, *pr.b_in.position() & 63);
      if (i >= 2) {  // once the ring has been idle twice (the echoes have come back)
        at_start += at % pr.ab.data.size() == 0;
        if (len <= kMaxRestartBytes) {
          EXPECT_EQ(at % pr.ab.data.size(), 0u) << "message " << i;
        } else {  // right after the last one, or at the start where it would not fit
          EXPECT_TRUE(at == last + len || at % pr.ab.data.size() == 0) << "message " << i;
        }
      }
      last = at;
      ASSERT_NO_FATAL_FAILURE(answer_round(pr, to_b, to_a, std::move(m), hdr, i));
    }
    // Going round, one payload in seven or eight (7 of 8256 bytes fit in 64 KiB, and the
    // eighth starts the next lap) starts a lap: 5 of these 38; starting over, all 38.
    if (len > kMaxRestartBytes) {
      EXPECT_LE(at_start, 6) << "of 38 payloads";
    }
  }
}

// What a jump costs the ring's room: a burst whose first message jumps fills the lines before
// that message's, then waits for it to be read, then has the whole ring again; a burst after a
// burst (a window of sends, then the other side's reply) does not jump at all.
TEST(ShmRing, Bursts_JumpOnlyWhileMessagesAlternate) {
  PairRings pr;
  std::vector<std::byte> hdr(16), pay(8);
  std::deque<Msg> to_b, to_a;
  auto reply = [&] {
    ASSERT_EQ(pr.b_out.push(2, hdr, pay, true), TStatus::ok);
    to_a.push_back({2, hdr, pay});
    ASSERT_EQ(drain(pr.a_in, to_a), 1);
  };
  auto burst = [&] {
    int sent = 0;
    while (pr.a_out.push(1, hdr, pay, true) == TStatus::ok) {
      to_b.push_back({1, hdr, pay});
      ++sent;
    }
    return sent;
  };
  for (std::size_t i = 0; i + 1 < kHotLines; ++i) {  // ping-pong up to the last hot line
    ASSERT_EQ(pr.a_out.push(1, hdr, pay, true), TStatus::ok);
    to_b.push_back({1, hdr, pay});
    ASSERT_EQ(drain(pr.b_in, to_b), 1);
    reply();
  }
  EXPECT_EQ(burst(), static_cast<int>(kHotLines));
  EXPECT_TRUE(pr.ab.lines[kHotLines - 1].flags & kFlagJump);
  EXPECT_EQ(drain(pr.b_in, to_b), static_cast<int>(kHotLines));
  for (int window = 0; window < 5; ++window) {
    EXPECT_EQ(burst(), 64) << "window " << window;
    EXPECT_EQ(drain(pr.b_in, to_b), 64);
    reply();
  }
  for (std::size_t l = 0; l < 64; ++l)
    EXPECT_FALSE(pr.ab.lines[l].flags & kFlagJump) << "line " << l;
}

// Bursts both ways between the two sides of a pair, with the ring idle (jumps to the hot lines,
// byte ring started over) now and then and full at other times: every message arrives in
// order, intact, over many laps of both rings.
TEST(ShmRing, PairBurstsBothWays_JumpsAndFullRings_DeliverExactlyInOrder) {
  PairRings pr;
  std::mt19937 rng(7);
  std::deque<Msg> to_b, to_a;
  auto send = [&](RingProducer& out, RingConsumer& other_in, std::deque<Msg>& q, int i) {
    const std::size_t hlen = rng() % 64;
    const bool inl = rng() % 2;
    const std::size_t plen = inl ? rng() % 200 : rng() % 3000;
    Msg m{static_cast<AmId>(rng() % 24), bytes_of_value(hlen, static_cast<std::uint32_t>(rng())),
          bytes_of_value(plen, static_cast<std::uint32_t>(i + 1))};
    while (out.push(m.am, m.hdr, m.payload, inl) == TStatus::retry) drain(other_in, q);
    q.push_back(std::move(m));
  };
  for (int i = 0; i < 20000;) {
    for (int k = static_cast<int>(rng() % 90); k >= 0; --k) send(pr.a_out, pr.b_in, to_b, i++);
    if (rng() % 2) drain(pr.b_in, to_b);
    for (int k = static_cast<int>(rng() % 5); k >= 0; --k) send(pr.b_out, pr.a_in, to_a, i++);
    if (rng() % 3) drain(pr.a_in, to_a);
  }
  drain(pr.b_in, to_b);
  drain(pr.a_in, to_a);
  EXPECT_TRUE(to_b.empty());
  EXPECT_TRUE(to_a.empty());
}

// The same with the two sides on two threads, as two ranks run: each sends a burst, then
// reads what arrived, until both have sent and received everything.
TEST(ShmRing, PairOnTwoThreads_DeliversExactlyInOrder) {
  PairRings pr;
  constexpr std::uint64_t kEach = 100000;
  auto side = [&](RingProducer& out, RingConsumer& in, unsigned seed) {
    std::mt19937 rng(seed);
    std::uint64_t sent = 0, got = 0;
    while (sent < kEach || got < kEach) {
      for (int k = static_cast<int>(rng() % 8); k >= 0 && sent < kEach; --k) {
        std::vector<std::byte> pay(sent % 7 == 0 ? 40 + sent % 300 : 8);
        std::memcpy(pay.data(), &sent, 8);
        if (out.push(0, {}, pay, pay.size() < 30) != TStatus::ok) break;
        ++sent;
      }
      in.poll(
          [&](AmId, std::span<const std::byte>, std::span<const std::byte> p) {
            std::uint64_t v;
            std::memcpy(&v, p.data(), 8);
            ASSERT_EQ(v, got);
            ASSERT_EQ(p.size(), got % 7 == 0 ? 40 + got % 300 : 8u);
            ++got;
          },
          1 << 30);
    }
  };
  std::thread b([&] { side(pr.b_out, pr.b_in, 2); });
  side(pr.a_out, pr.a_in, 1);
  b.join();
}

TEST(ShmRing, ProducerAndConsumerThreads) {
  RingMemory mem(128, 1 << 14);
  const int n = 200000;
  std::thread prod([&] {
    RingProducer p(mem.layout);
    for (int i = 0; i < n; ++i) {
      std::uint64_t v = static_cast<std::uint64_t>(i);
      std::vector<std::byte> pay(i % 97 == 0 ? 2000 : 8);
      std::memcpy(pay.data(), &v, 8);
      while (p.push(0, {}, pay, pay.size() < 100) != TStatus::ok) std::this_thread::yield();
    }
  });
  RingConsumer c(mem.layout);
  int got = 0;
  while (got < n) {
    got += c.poll(
        [&](AmId, std::span<const std::byte>, std::span<const std::byte> p) {
          std::uint64_t v;
          std::memcpy(&v, p.data(), 8);
          ASSERT_EQ(v, static_cast<std::uint64_t>(got));
          ASSERT_EQ(p.size(), got % 97 == 0 ? 2000u : 8u);
        },
        1);
  }
  prod.join();
}

// Picked and timed byte-ring payloads between two threads, many laps of both rings: payloads
// of 0.5-28 KiB in a 64 KiB byte ring (kept contiguous: about one in five is moved to the
// ring's start), headers of 0-200 bytes beside the position and stamp so that messages of 1-4
// lines meet the line ring's end and its padding, and a random pick (streaming or cached,
// timed or not) for every payload of 8 KiB or more. Every byte arrives in order; every timed
// payload is reported right after its delivery with the size and kind of stores it was sent
// with, and no other one is.
TEST(ShmRing, PickedAndTimedPayloadsAcrossLaps_Threads) {
  RingMemory mem(64, 1 << 16);
  const int n = 6000;
  // What message i looks like and, if pickable, how it is stored: a function of i alone, so
  // that the consumer knows what to expect.
  auto plen_of = [](int i) {
    return i % 7 == 0 ? std::size_t{512} : 8192 + (i * 2654435761u) % 20480;
  };
  auto hlen_of = [](int i) { return static_cast<std::size_t>((i * 40503u) % 201); };
  auto pick_of = [](int i) {
    const std::uint32_t h = static_cast<std::uint32_t>(i) * 2246822519u;
    return StorePick{(h >> 7) % 2 == 0, (h >> 13) % 3 == 0};
  };
  std::thread prod([&] {
    RingProducer p(mem.layout);
    for (int i = 0; i < n; ++i) {
      const auto hdr = bytes_of_value(hlen_of(i), static_cast<std::uint32_t>(i * 3 + 1));
      const auto pay = bytes_of_value(plen_of(i), static_cast<std::uint32_t>(i + 7));
      int asked = 0;
      auto pick = [&](std::size_t bytes) {
        ++asked;
        EXPECT_EQ(bytes, pay.size());
        return pick_of(i);
      };
      while (p.push(3, hdr, pay, false, pick) != TStatus::ok) std::this_thread::yield();
      EXPECT_EQ(asked, pay.size() >= kMinPickedBytes ? 1 : 0) << "message " << i;
    }
  });
  RingConsumer c(mem.layout);
  int got = 0, timed_seen = 0, timed_want = 0;
  while (got < n) {
    const int before = got;
    c.poll(
        [&](AmId am, std::span<const std::byte> h, std::span<const std::byte> pl) {
          const int i = got++;  // counted first: a failed check must not stall the loop
          const auto hdr = bytes_of_value(hlen_of(i), static_cast<std::uint32_t>(i * 3 + 1));
          const auto pay = bytes_of_value(plen_of(i), static_cast<std::uint32_t>(i + 7));
          timed_want += pay.size() >= kMinPickedBytes && pick_of(i).timed;
          EXPECT_EQ(am, 3);
          EXPECT_TRUE(std::equal(h.begin(), h.end(), hdr.begin(), hdr.end())) << "header " << i;
          EXPECT_TRUE(std::equal(pl.begin(), pl.end(), pay.begin(), pay.end())) << "payload " << i;
        },
        1,
        [&](const TimedDelivery& d) {
          const int i = got - 1;  // the message just delivered
          ASSERT_TRUE(plen_of(i) >= kMinPickedBytes && pick_of(i).timed) << "message " << i;
          EXPECT_EQ(d.bytes, plen_of(i));
          EXPECT_EQ(d.streamed, pick_of(i).streaming) << "message " << i;
          EXPECT_LT(d.ns, 10'000'000'000u) << "a cost of over 10 s for a copy in memory";
          ++timed_seen;
        });
    if (got == before) std::this_thread::yield();
  }
  prod.join();
  EXPECT_EQ(timed_seen, timed_want);
  EXPECT_GT(timed_want, n / 5);
}

// A byte-ring payload of 8 KiB or more is stored as the producer's pick says and, when timed,
// reported to the consumer's hook once delivered: streamed flag and size as sent, a cost that
// covers at least the delivery. Smaller and inline payloads never ask.
TEST(ShmRing, PickedStoresAndTimedPayloads) {
  RingMemory mem(64, 1 << 17);
  RingProducer p(mem.layout);
  RingConsumer c(mem.layout);
  std::vector<std::byte> hdr(16, std::byte{7});
  std::vector<std::size_t> asked;
  int turn = 0;
  auto pick = [&](std::size_t bytes) {
    asked.push_back(bytes);
    const int t = turn++;
    return StorePick{t % 2 == 0, t % 3 != 2};
  };
  std::deque<Msg> q;
  const std::size_t sizes[] = {8191, 8192, 8193, 9001, 16384, 20000};
  for (std::size_t i = 0; i < std::size(sizes); ++i) {
    auto pay = bytes_of_value(sizes[i], static_cast<std::uint32_t>(i + 11));
    ASSERT_EQ(p.push(2, hdr, pay, false, pick), TStatus::ok);
    q.push_back({2, hdr, pay});
  }
  auto small = bytes_of_value(900, 5);
  ASSERT_EQ(p.push(2, hdr, small, true, pick), TStatus::ok);  // inline: never asked
  q.push_back({2, hdr, small});
  EXPECT_EQ(asked, (std::vector<std::size_t>{8192, 8193, 9001, 16384, 20000}));
  std::vector<TimedDelivery> timed;
  auto check = [&](AmId am, std::span<const std::byte> h, std::span<const std::byte> pl) {
    ASSERT_FALSE(q.empty());
    const Msg& m = q.front();
    EXPECT_EQ(am, m.am);
    EXPECT_TRUE(std::equal(h.begin(), h.end(), m.hdr.begin(), m.hdr.end()));
    EXPECT_TRUE(std::equal(pl.begin(), pl.end(), m.payload.begin(), m.payload.end()));
    q.pop_front();
  };
  EXPECT_EQ(c.poll(check, 100, [&](const TimedDelivery& d) { timed.push_back(d); }), 7);
  // Picks 0..4: streaming on even turns, timed unless turn % 3 == 2.
  ASSERT_EQ(timed.size(), 4u);
  const std::size_t want_bytes[] = {8192, 8193, 16384, 20000};
  const bool want_streamed[] = {true, false, false, true};
  for (std::size_t i = 0; i < timed.size(); ++i) {
    EXPECT_EQ(timed[i].bytes, want_bytes[i]);
    EXPECT_EQ(timed[i].streamed, want_streamed[i]);
    EXPECT_LT(timed[i].ns, 10'000'000'000u) << "a cost of over 10 s for a copy in memory";
  }
  EXPECT_TRUE(q.empty());

  // A header of 200 bytes beside the stamp (the line count covers both), twice, then a payload
  // the byte ring has no room for: retry, and the pick is not spent on it.
  std::vector<std::byte> big_hdr(200, std::byte{3});
  auto pay = bytes_of_value(50000, 77);
  auto always = [&](std::size_t bytes) {
    asked.push_back(bytes);
    return StorePick{true, true};
  };
  asked.clear();
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(p.push(4, big_hdr, pay, false, always), TStatus::ok) << i;
    q.push_back({4, big_hdr, pay});
  }
  EXPECT_EQ(p.push(4, hdr, pay, false, always), TStatus::retry);
  EXPECT_EQ(asked.size(), 2u) << "a push that could not go asked for a pick";
  timed.clear();
  EXPECT_EQ(c.poll(check, 100, [&](const TimedDelivery& d) { timed.push_back(d); }), 2);
  ASSERT_EQ(timed.size(), 2u);
  for (const TimedDelivery& d : timed) {
    EXPECT_TRUE(d.streamed);
    EXPECT_EQ(d.bytes, pay.size());
  }
  EXPECT_TRUE(q.empty());
}

// Cross-memory attach of many spans (the split gets' batches), within this process: more
// spans than one call takes (64), empty ones among them, both directions; every byte lands
// where its span says and nothing else changes.
TEST(CrossMemoryCopy, ManySpans_EmptyOnesSkipped_EveryByteInPlace) {
  std::vector<std::byte> src(1 << 20), dst(1 << 20, std::byte{0xee});
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 131 + 7);
  for (const bool write : {false, true}) {
    std::fill(dst.begin(), dst.end(), std::byte{0xee});
    std::vector<CmaSpan> spans;
    std::vector<bool> covered(dst.size());
    std::size_t at = 0;
    for (int i = 0; i < 150; ++i) {
      const std::size_t len = i % 7 == 3 ? 0 : static_cast<std::size_t>(1 + (i * 977) % 5000);
      // Reading: local = dst; writing: local = src (the remote side is this process too).
      std::byte* local = write ? src.data() + at : dst.data() + at;
      const std::uint64_t remote =
          reinterpret_cast<std::uint64_t>(write ? dst.data() + at : src.data() + at);
      spans.push_back({local, remote, len});
      for (std::size_t b = at; b < at + len; ++b) covered[b] = true;
      at += len + 13;  // gaps stay untouched
    }
    ASSERT_LT(at, dst.size());
    const int err = cross_memory_copy(::getpid(), std::span<const CmaSpan>(spans), write);
    if (err == EPERM || err == ENOSYS)
      GTEST_SKIP() << "cross-memory attach is not permitted here: " << std::strerror(err);
    ASSERT_EQ(err, 0) << std::strerror(err);
    for (std::size_t b = 0; b < dst.size(); ++b)
      ASSERT_EQ(dst[b], covered[b] ? src[b] : std::byte{0xee})
          << "byte " << b << (write ? " (written)" : " (read)");
  }
  // No spans, or only empty ones: nothing to do, no error.
  EXPECT_EQ(cross_memory_copy(::getpid(), std::span<const CmaSpan>{}, false), 0);
  const CmaSpan empty[2] = {{dst.data(), reinterpret_cast<std::uint64_t>(src.data()), 0},
                            {dst.data(), reinterpret_cast<std::uint64_t>(src.data()), 0}};
  EXPECT_EQ(cross_memory_copy(::getpid(), std::span<const CmaSpan>(empty), false), 0);
}
