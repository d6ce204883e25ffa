// Request semantics: cancel, destruction of active requests, wait_all / wait_any / test_all,
// moves; and synchronous send (ssend) completing only once matched.
#include "harness.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <thread>
#include <vector>

namespace {

using namespace itest;

// Rank 0 receives from rank 1 (one rank: from itself); other ranks idle.
struct Pair01 {
  bool sender, receiver;
  int peer;
};
Pair01 pair01() {
  const int r = rank(), n = size();
  if (n == 1) return {true, true, 0};
  if (r == 0) return {false, true, 1};
  if (r == 1) return {true, false, 0};
  return {false, false, 0};
}

// ---- cancel ------------------------------------------------------------------------------------

// An unmatched irecv is cancelled (cancel() true, its buffer untouched); the message sent
// afterwards goes to a later receive — at every protocol size.
TEST(Cancel, UnmatchedIrecv_ReturnsTrue_NextMessageGoesToLaterReceive) {
  const rmp::Comm& w = rmp::world();
  const Pair01 ro = pair01();
  const int r = rank();
  const auto cls = class_sizes(true);
  for (std::size_t c = 0; c < cls.size(); ++c) {
    const std::size_t s = cls[c].bytes;
    const int tag = 3000 + static_cast<int>(c);
    const std::string ctx = std::string(proto_name(cls[c].proto)) + " " + std::to_string(s) + " B";
    std::vector<std::byte> guard(s + 8, sentinel<std::byte>());
    rmp::Request self_send;
    std::vector<std::byte> msg;
    if (ro.receiver) {
      rmp::Request q = w.irecv(guard.data(), s, ro.peer, tag);
      EXPECT_TRUE(q.cancel()) << ctx << ": an unmatched irecv could not be cancelled";
      if (!ro.sender) w.send<int>(nullptr, 0, ro.peer, 2999);
    }
    if (ro.sender) {
      if (!ro.receiver) w.recv<int>(nullptr, 0, ro.peer, 2999);
      msg = make_message<std::byte>(s, seed(r, ro.peer, c, 0x50));
      self_send = w.isend(msg.data(), s, ro.peer, tag);
    }
    if (ro.receiver) {
      std::vector<std::byte> buf(s);
      const rmp::Status st = w.recv(buf.data(), s, ro.peer, tag);
      EXPECT_EQ(st.bytes, s) << ctx;
      EXPECT_TRUE(matches(buf.data(), s, seed(ro.peer, r, c, 0x50))) << ctx;
      EXPECT_TRUE(untouched(guard.data(), guard.size()))
          << ctx << ": the cancelled receive's buffer was written";
    }
    self_send.wait();
  }
}

// A matched irecv cannot be cancelled (cancel() false) and still delivers its message.
// "Matched" without timing: a second message on the same (source, tag) was received by a
// receive posted after the irecv, so by non-overtaking the first went to the irecv.
TEST(Cancel, MatchedIrecv_ReturnsFalse_DataDelivered) {
  const rmp::Comm& w = rmp::world();
  const Pair01 ro = pair01();
  const int r = rank();
  const auto cls = class_sizes(true);
  for (std::size_t c = 0; c < cls.size(); ++c) {
    const std::size_t s = cls[c].bytes;
    const int tag = 3100 + static_cast<int>(c);
    const std::string ctx = std::string(proto_name(cls[c].proto)) + " " + std::to_string(s) + " B";
    std::vector<std::byte> buf(s);
    rmp::Request q;
    if (ro.receiver) {
      q = w.irecv(buf.data(), s, ro.peer, tag);
      if (!ro.sender) w.send<int>(nullptr, 0, ro.peer, 2999);
    }
    std::vector<rmp::Request> sreqs;
    const auto msg = make_message<std::byte>(s, seed(r, ro.peer, c, 0x51));
    if (ro.sender) {
      if (!ro.receiver) w.recv<int>(nullptr, 0, ro.peer, 2999);
      sreqs.push_back(w.isend(msg.data(), s, ro.peer, tag));
      sreqs.push_back(w.isend<int>(nullptr, 0, ro.peer, tag));  // the marker
    }
    if (ro.receiver) {
      try {
        const rmp::Status ms = w.recv<int>(nullptr, 0, ro.peer, tag);
        EXPECT_EQ(ms.bytes, 0u) << ctx << ": the marker receive got the data message";
      } catch (const rmp::Error& e) {
        ADD_FAILURE() << ctx << ": the marker receive got the data message: " << e.what();
      }
      EXPECT_FALSE(q.cancel()) << ctx << ": cancel() of a matched irecv returned true";
      const rmp::Status st = q.wait();
      EXPECT_EQ(st.bytes, s) << ctx;
      EXPECT_TRUE(matches(buf.data(), s, seed(ro.peer, r, c, 0x51))) << ctx;
    }
    rmp::wait_all(sreqs);
  }
}

// Destroying an active, unmatched irecv cancels it: its buffer stays untouched and the
// message goes to a later receive.
TEST(Cancel, DestroyActiveIrecv_CancelsIt) {
  const rmp::Comm& w = rmp::world();
  const Pair01 ro = pair01();
  const int r = rank();
  const auto cls = class_sizes(true);
  for (std::size_t c = 0; c < cls.size(); ++c) {
    const std::size_t s = cls[c].bytes;
    const int tag = 3200 + static_cast<int>(c);
    std::vector<std::byte> guard(s + 8, sentinel<std::byte>());
    if (ro.receiver) {
      { rmp::Request q = w.irecv(guard.data(), s, ro.peer, tag); }
      if (!ro.sender) w.send<int>(nullptr, 0, ro.peer, 2999);
    }
    rmp::Request sreq;
    const auto msg = make_message<std::byte>(s, seed(r, ro.peer, c, 0x52));
    if (ro.sender) {
      if (!ro.receiver) w.recv<int>(nullptr, 0, ro.peer, 2999);
      sreq = w.isend(msg.data(), s, ro.peer, tag);
    }
    if (ro.receiver) {
      std::vector<std::byte> buf(s);
      w.recv(buf.data(), s, ro.peer, tag);
      EXPECT_TRUE(matches(buf.data(), s, seed(ro.peer, r, c, 0x52))) << s << " B";
      EXPECT_TRUE(untouched(guard.data(), guard.size()))
          << s << " B: the destroyed receive's buffer was written";
    }
    sreq.wait();
  }
}

// Destroying an active isend detaches it: the data still arrives intact (the buffer is kept
// alive until the receiver acknowledges) — at every protocol size and a 4 MiB rendezvous.
TEST(Cancel, DestroyActiveIsend_DetachesAndDataArrives) {
  const rmp::Comm& w = rmp::world();
  const Pair01 ro = pair01();
  const int r = rank();
  auto cls = class_sizes(true);
  cls.push_back({Proto::rndv, (std::size_t{4} << 20) + 1});
  std::vector<std::vector<std::byte>> keep;  // detached send buffers stay valid
  for (std::size_t c = 0; c < cls.size(); ++c) {
    const std::size_t s = cls[c].bytes;
    const int tag = 3300 + static_cast<int>(c);
    if (ro.sender) {
      keep.push_back(make_message<std::byte>(s, seed(r, ro.peer, c, 0x53)));
      { rmp::Request q = w.isend(keep.back().data(), s, ro.peer, tag); }
    }
    if (ro.receiver) {
      std::vector<std::byte> buf(s);
      const rmp::Status st = w.recv(buf.data(), s, ro.peer, tag);
      EXPECT_EQ(st.bytes, s);
      EXPECT_TRUE(matches(buf.data(), s, seed(ro.peer, r, c, 0x53)))
          << s << " B from a detached isend";
      if (!ro.sender) w.send<int>(nullptr, 0, ro.peer, 2998);  // ack
    }
    if (ro.sender && !ro.receiver) w.recv<int>(nullptr, 0, ro.peer, 2998);
  }
}

// ---- probe
// ---------------------------------------------------------------------------------------

// A loop of iprobes that keeps finding a message it does not receive still advances the rank's
// other operations: here a non-blocking allreduce, watched through its output (no other rmp
// call in the loop; the loop ends at 30 s if nothing moves, where it had stalled for as long
// as it probed). Every rank has its own message queued (a send to itself), so every rank's
// probe matches.
TEST(Probe, IprobeFindingAQueuedMessage_StillAdvancesOtherOperations) {
  const rmp::Comm& w = rmp::world();
  const int me = rank();
  const int token = 4242;
  rmp::Request self = w.isend(&token, 1, me, 77);
  std::vector<long> in(100000, 1), out(in.size(), -1);
  rmp::Request sum = w.iallreduce(in.data(), out.data(), in.size(), rmp::Op::sum);
  const double t0 = rmp::wtime();
  auto done = [&] {
    for (long v : out)
      if (v != size()) return false;
    return true;
  };
  bool found = true;
  while (!done() && rmp::wtime() - t0 < 30) {
    const std::optional<rmp::Status> st = w.iprobe(rmp::any_source, rmp::any_tag);
    found = found && st.has_value() && st->tag == 77;
  }
  EXPECT_TRUE(found) << "the queued message was not found by every probe";
  EXPECT_TRUE(done()) << "the allreduce made no progress while iprobe found the queued message";
  sum.wait();
  int got = 0;
  w.recv(&got, 1, me, 77);
  self.wait();
  EXPECT_EQ(got, token);
}

// ---- ssend -------------------------------------------------------------------------------------

// ssend completes only once the receive is posted. Method (no timing in the verdict of a
// correct library): the sender takes t0, sends "start", ssends, then sends a flag carrying
// d = wtime() − t0. The receiver, after "start", watches for the flag with iprobe for a
// window W = 50 ms before it posts the receive: a flag seen inside the window proves the
// ssend returned unmatched. Also d ≥ W (t0 precedes the window, which precedes the post,
// which precedes the return; all on one node's monotonic clock, differences only).
TEST(Ssend, DoesNotCompleteBeforeReceiveIsPosted_EveryProtocol) {
  const rmp::Comm& w = rmp::world();
  const int r = rank();
  if (size() < 2) GTEST_SKIP() << "needs 2 ranks";
  constexpr double W = 0.05;
  const auto cls = class_sizes(true);
  for (std::size_t c = 0; c < cls.size(); ++c) {
    const std::size_t s = cls[c].bytes;
    const int td = 3400 + 3 * static_cast<int>(c), ts = td + 1, tf = td + 2;
    const std::string ctx = std::string(proto_name(cls[c].proto)) + " " + std::to_string(s) + " B";
    if (r == 1) {
      const auto msg = make_message<std::byte>(s, seed(1, 0, c, 0x54));
      const double t0 = rmp::wtime();
      w.send<int>(nullptr, 0, 0, ts);
      w.ssend(msg.data(), s, 0, td);
      const double d = rmp::wtime() - t0;
      w.send(&d, 1, 0, tf);
    } else if (r == 0) {
      w.recv<int>(nullptr, 0, 1, ts);
      const double start = rmp::wtime();
      bool early = false;
      while (rmp::wtime() - start < W) {
        if (w.iprobe(1, tf).has_value()) {
          early = true;
          break;
        }
        std::this_thread::yield();
      }
      EXPECT_FALSE(early) << ctx << ": ssend returned before the receive was posted "
                          << "(its follow-up flag arrived while the receive was not posted)";
      std::vector<std::byte> buf(s);
      w.recv(buf.data(), s, 1, td);
      EXPECT_TRUE(matches(buf.data(), s, seed(1, 0, c, 0x54))) << ctx;
      double d = 0;
      w.recv(&d, 1, 1, tf);
      EXPECT_GE(d, 0.9 * W) << ctx << ": ssend took " << d * 1e3
                            << " ms although the receive was posted only after " << W * 1e3
                            << " ms";
    }
  }
}

// ssend to one's own rank completes when the receive was posted first (every size).
TEST(Ssend, ToSelfWithPrepostedIrecv_EveryProtocol) {
  const rmp::Comm& w = rmp::world();
  const int r = rank();
  const auto cls = class_sizes(true);
  for (std::size_t c = 0; c < cls.size(); ++c) {
    const std::size_t s = cls[c].bytes;
    std::vector<std::byte> buf(s);
    rmp::Request q = w.irecv(buf.data(), s, r, 3500);
    const auto msg = make_message<std::byte>(s, seed(r, r, c, 0x55));
    w.ssend(msg.data(), s, r, 3500);
    const rmp::Status st = q.wait();
    EXPECT_EQ(st.bytes, s);
    EXPECT_TRUE(matches(buf.data(), s, seed(r, r, c, 0x55))) << s << " B";
  }
}

// ---- Requests ----------------------------------------------------------------------------------

TEST(Requests, WaitAny_EmptyOrInactiveSet_ReturnsSize) {
  std::vector<rmp::Request> none;
  rmp::Status st{123, 456, 789};
  EXPECT_EQ(rmp::wait_any(none, &st), 0u);
  EXPECT_TRUE(rmp::test_all(none));
  EXPECT_NO_THROW(rmp::wait_all(none));
  std::vector<rmp::Request> inactive(3);
  for (const rmp::Request& q : inactive) EXPECT_FALSE(q.active()) << "default-constructed";
  EXPECT_EQ(rmp::wait_any(inactive, &st), 3u);
  EXPECT_EQ(rmp::wait_any(inactive), 3u);
  EXPECT_TRUE(rmp::test_all(inactive));
  EXPECT_NO_THROW(rmp::wait_all(inactive));
}

// Moved-from requests are inactive; a completed wait leaves the request inactive; move-
// assigning over an active receive cancels the old one.
TEST(Requests, MovedFrom_IsInactive_MoveAssignCancelsOld) {
  const rmp::Comm& w = rmp::world();
  const int me = rank();
  int y = -1;
  rmp::Request a = w.irecv(&y, 1, me, 3600);
  EXPECT_TRUE(a.active());
  rmp::Request b = std::move(a);
  EXPECT_FALSE(a.active());  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(b.active());
  rmp::Request c;
  c = std::move(b);
  EXPECT_FALSE(b.active());  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(c.active());
  std::vector<rmp::Request> moved_from(1);
  moved_from[0] = std::move(a);
  EXPECT_EQ(rmp::wait_any(moved_from), 1u) << "a moved-from request counts as inactive";
  const int seven = 7;
  w.send(&seven, 1, me, 3600);
  const rmp::Status st = c.wait();
  EXPECT_EQ(y, 7);
  EXPECT_EQ(st.tag, 3600);
  EXPECT_FALSE(c.active()) << "a request stays active after wait() returned";

  int z1 = sentinel<int>(), z2 = -1;
  rmp::Request d = w.irecv(&z1, 1, me, 3601);
  d = w.irecv(&z2, 1, me, 3601);  // the first receive is destroyed: cancelled
  const int nine = 9;
  w.send(&nine, 1, me, 3601);
  d.wait();
  EXPECT_EQ(z2, 9) << "the message went to the receive that replaced the old one?";
  EXPECT_EQ(z1, sentinel<int>()) << "the overwritten (cancelled) receive got the message";
  EXPECT_FALSE(w.iprobe(me, rmp::any_tag).has_value());
}

// wait_any returns the index of the one request that can complete, with its Status, and
// leaves it inactive; once all completed it returns reqs.size().
TEST(Requests, WaitAny_ReturnsCompletedIndexAndStatus) {
  const rmp::Comm& w = rmp::world();
  const int r = rank(), p = pair_partner();
  int in[3] = {-1, -1, -1};
  std::vector<rmp::Request> v;
  for (int i = 0; i < 3; ++i) v.push_back(w.irecv(&in[i], 1, p, 3700 + i));
  const int out[3] = {r * 100 + 0, r * 100 + 1, r * 100 + 2};
  std::vector<rmp::Request> s;
  s.push_back(w.isend(&out[2], 1, p, 3702));
  rmp::Status st;
  const std::size_t idx = rmp::wait_any(v, &st);
  EXPECT_EQ(idx, 2u);
  EXPECT_EQ(st.source, p);
  EXPECT_EQ(st.tag, 3702);
  EXPECT_EQ(st.bytes, sizeof(int));
  EXPECT_EQ(in[2], p * 100 + 2);
  if (idx < v.size()) {
    EXPECT_FALSE(v[idx].active()) << "completed request still active";
  }
  // Handshake so the partner's wait_any ran before the other two messages are sent.
  s.push_back(w.isend<int>(nullptr, 0, p, 3703));
  w.recv<int>(nullptr, 0, p, 3703);
  s.push_back(w.isend(&out[0], 1, p, 3700));
  s.push_back(w.isend(&out[1], 1, p, 3701));
  std::size_t done = 0;
  while (rmp::wait_any(v) != v.size()) ++done;
  EXPECT_EQ(done, 2u);
  EXPECT_EQ(in[0], p * 100 + 0);
  EXPECT_EQ(in[1], p * 100 + 1);
  rmp::wait_all(s);
}

// test() and test_all() report incomplete requests without blocking and complete ones
// once their messages arrive (partners send only after the check, by handshake).
TEST(Requests, TestAndTestAll_FalseUntilComplete) {
  const rmp::Comm& w = rmp::world();
  const int r = rank(), p = pair_partner();
  int in[2] = {-1, -1};
  std::vector<rmp::Request> v;
  v.push_back(w.irecv(&in[0], 1, p, 3800));
  v.push_back(w.irecv(&in[1], 1, p, 3801));
  EXPECT_FALSE(rmp::test_all(v));
  EXPECT_FALSE(v[0].test().has_value()) << "test() completed a receive with no message sent";
  std::vector<rmp::Request> s;
  auto handshake = [&](int tag) {
    s.push_back(w.isend<int>(nullptr, 0, p, tag));
    w.recv<int>(nullptr, 0, p, tag);
  };
  handshake(3802);
  const int out[2] = {r + 1000, r + 2000};
  s.push_back(w.isend(&out[0], 1, p, 3800));
  std::optional<rmp::Status> st;
  while (!(st = v[0].test())) std::this_thread::yield();
  EXPECT_EQ(st->tag, 3800);
  EXPECT_EQ(in[0], p + 1000);
  EXPECT_FALSE(v[0].active()) << "request still active after test() returned its Status";
  EXPECT_FALSE(rmp::test_all(v)) << "test_all true while the second message was not sent";
  handshake(3803);
  s.push_back(w.isend(&out[1], 1, p, 3801));
  while (!rmp::test_all(v)) std::this_thread::yield();
  EXPECT_EQ(in[1], p + 2000);
  for (const rmp::Request& q : v) EXPECT_FALSE(q.active()) << "active after test_all true";
  rmp::wait_all(s);
}

// wait_all completes every request, then throws the first error (by position): two of four
// receives truncate; the other two still get their data.
TEST(Requests, WaitAll_CompletesAllThenThrowsFirstError) {
  const rmp::Comm& w = rmp::world();
  const int r = rank(), p = pair_partner();
  int in[4] = {-1, -1, -1, -1};
  std::vector<rmp::Request> v;
  for (int i = 0; i < 4; ++i) v.push_back(w.irecv(&in[i], 1, p, 3900 + i));
  const std::vector<int> big2(10, r), big4(20, r);
  const int one = r + 7;
  std::vector<rmp::Request> s;
  s.push_back(w.isend(&one, 1, p, 3900));
  s.push_back(w.isend(big2.data(), big2.size(), p, 3901));
  s.push_back(w.isend(&one, 1, p, 3902));
  s.push_back(w.isend(big4.data(), big4.size(), p, 3903));
  try {
    rmp::wait_all(v);
    ADD_FAILURE() << "wait_all did not throw although two receives truncate";
  } catch (const rmp::Error& e) {
    EXPECT_EQ(e.code(), rmp::Errc::truncate) << e.what();
    const std::string what = e.what();
    EXPECT_NE(what.find("3901"), std::string::npos) << "not the first error: " << what;
  }
  for (std::size_t i = 0; i < v.size(); ++i)
    EXPECT_FALSE(v[i].active()) << "request " << i << " not completed by wait_all";
  EXPECT_EQ(in[0], p + 7);
  EXPECT_EQ(in[2], p + 7);
  EXPECT_NO_THROW(rmp::wait_all(s)) << "senders of truncated messages complete normally";
}

}  // namespace
