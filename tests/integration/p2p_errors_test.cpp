// Truncation (MPI semantics: the message is consumed, the sender completes, the stream stays
// consistent) and every point-to-point argument error of API.md §Errors.
#include "harness.hpp"

#include <climits>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace {

using namespace itest;

struct TruncCase {
  Proto proto;
  std::size_t msg;  // bytes sent
  std::size_t buf;  // bytes posted
};

std::vector<TruncCase> trunc_cases() {
  std::vector<TruncCase> v;
  for (const ClassSize& c : class_sizes(false)) v.push_back({c.proto, c.bytes, c.bytes - 1});
  const std::size_t big = rndv_size();
  v.push_back({Proto::rndv, big, big / 3});  // rendezvous into a much smaller buffer
  return v;
}

// Roles: rank 0 receives from rank 1 (one rank: from itself); other ranks idle.
struct TruncRoles {
  bool sender, receiver;
  int peer;
};
TruncRoles trunc_roles() {
  const int r = rank(), n = size();
  if (n == 1) return {true, true, 0};
  if (r == 0) return {false, true, 1};
  if (r == 1) return {true, false, 0};
  return {false, false, 0};
}

void check_truncate_error(const rmp::Error& e, const TruncCase& c, int src, int tag,
                          const std::string& how, const std::string& call) {
  const std::string what = e.what();
  const std::string ctx = how + " of a " + std::to_string(c.msg) + " B " + proto_name(c.proto) +
                          " message into " + std::to_string(c.buf) + " B; what(): " + what;
  EXPECT_EQ(e.code(), rmp::Errc::truncate) << ctx;
  EXPECT_EQ(what.rfind(call + ": ", 0), 0u) << ctx << " — does not start with the call";
  for (const std::string& needle :
       {std::to_string(src), std::to_string(tag), std::to_string(c.msg), std::to_string(c.buf)})
    EXPECT_NE(what.find(needle), std::string::npos) << ctx << " — does not name " << needle;
}

// For each protocol: a message longer than the posted buffer fails the receive with
// Errc::truncate (what() names source, tag and both sizes), the sender completes normally,
// the message is consumed and the next two messages on the same channel arrive intact.
void truncation_round(bool use_irecv, int tag0, std::uint64_t salt) {
  const rmp::Comm& w = rmp::world();
  const TruncRoles ro = trunc_roles();
  const int r = rank();
  const auto cases = trunc_cases();
  const std::size_t next_sizes[2] = {100, rndv_size()};
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const TruncCase& c = cases[ci];
    const int tag = tag0 + static_cast<int>(ci);
    std::vector<std::vector<std::byte>> msgs;
    std::vector<rmp::Request> sreqs;
    rmp::Request pre;
    std::vector<std::byte> small(c.buf + 16, sentinel<std::byte>());
    if (ro.receiver && use_irecv) {
      pre = w.irecv(small.data(), c.buf, ro.peer, tag);
      if (!ro.sender) w.send<int>(nullptr, 0, ro.peer, tag0 - 1);
    }
    if (ro.sender) {
      if (use_irecv && !ro.receiver) w.recv<int>(nullptr, 0, ro.peer, tag0 - 1);
      msgs.push_back(make_message<std::byte>(c.msg, seed(r, ro.peer, 0, salt + ci)));
      for (int m = 1; m <= 2; ++m)
        msgs.push_back(make_message<std::byte>(next_sizes[m - 1], seed(r, ro.peer, m, salt + ci)));
      for (auto& m : msgs) sreqs.push_back(w.isend(m.data(), m.size(), ro.peer, tag));
    }
    if (ro.receiver) {
      const int src = ro.peer;
      const std::string how = use_irecv ? "irecv+wait" : "recv";
      try {
        if (use_irecv) pre.wait();
        else w.recv(small.data(), c.buf, src, tag);
        ADD_FAILURE() << how << " of a " << c.msg << " B " << proto_name(c.proto)
                      << " message into a " << c.buf << " B buffer did not throw";
      } catch (const rmp::Error& e) {
        check_truncate_error(e, c, src, tag, how, use_irecv ? "irecv" : "recv");
      }
      EXPECT_TRUE(untouched(small.data() + c.buf, 16)) << how << ": wrote past the posted buffer";
      for (int m = 1; m <= 2; ++m) {
        std::vector<std::byte> buf(next_sizes[m - 1]);
        rmp::Status st;
        EXPECT_NO_THROW(st = w.recv(buf.data(), buf.size(), src, tag))
            << "message after the truncated " << proto_name(c.proto) << " one";
        EXPECT_EQ(st.bytes, next_sizes[m - 1]) << "message " << m << " after the truncation";
        EXPECT_TRUE(matches(buf.data(), buf.size(), seed(src, r, m, salt + ci)))
            << "message " << m << " after a truncated " << proto_name(c.proto) << " message";
      }
      EXPECT_FALSE(w.iprobe(src, tag).has_value()) << "the truncated message was not consumed";
    }
    if (ro.sender) {
      for (std::size_t i = 0; i < sreqs.size(); ++i)
        EXPECT_NO_THROW(sreqs[i].wait()) << "sender of message " << i << " (" << proto_name(c.proto)
                                         << " case) must complete normally";
    }
  }
}

TEST(Truncation, LeavesNextMessageIntact_BlockingRecv_EveryProtocol) {
  truncation_round(false, 2001, 0x30);
}

TEST(Truncation, LeavesNextMessageIntact_IrecvWait_EveryProtocol) {
  truncation_round(true, 2101, 0x40);
}

// ---- Argument errors -------------------------------------------------------------------------

// A rejected call must leave nothing behind (DESIGN §6: arguments are validated before
// anything is sent): after each test no message may be pending here; strays are drained so
// that one finding does not cascade into later tests.
class ArgErrors : public ::testing::Test {
protected:
  void TearDown() override {
    const rmp::Comm& w = rmp::world();
    while (const std::optional<rmp::Status> st = w.iprobe(rmp::any_source, rmp::any_tag)) {
      ADD_FAILURE() << "a rejected call left a message behind: from " << who(st->source) << ", tag "
                    << st->tag << ", " << st->bytes << " B";
      std::vector<std::byte> sink(st->bytes);
      w.recv(sink.data(), sink.size(), st->source, st->tag);
    }
  }
};

// Each call names itself, the argument and the value. Rank errors: dest out of range (also
// any_source on a send side), source out of range → Errc::invalid_rank.
TEST_F(ArgErrors, RankOutOfRange_InvalidRank) {
  const rmp::Comm& w = rmp::world();
  const int n = size();
  int x = 0;
  for (int bad : {n, n + 7, -2, rmp::any_source, INT_MAX, INT_MIN}) {
    const std::string v = std::to_string(bad);
    const rmp::Errc e = rmp::Errc::invalid_rank;
    const bool isend_ok = expect_error([&] { rmp::Request q = w.isend(&x, 1, bad, 2999); }, e,
                                       {"isend", v}, "isend dest " + v);
    if (isend_ok) {  // the blocking variants would block or crash if not validated
      expect_error([&] { w.send(&x, 1, bad, 2999); }, e, {"send", v}, "send dest " + v);
      expect_error([&] { w.ssend(&x, 1, bad, 2999); }, e, {"ssend", v}, "ssend dest " + v);
      expect_error([&] { w.sendrecv(&x, 1, bad, 2999, &x, 1, 0, 2999); }, e, {"sendrecv", v},
                   "sendrecv dest " + v);
    }
    if (bad == rmp::any_source) continue;  // a valid source
    const bool irecv_ok = expect_error([&] { rmp::Request q = w.irecv(&x, 1, bad, 2999); }, e,
                                       {"irecv", v}, "irecv source " + v);
    expect_error([&] { (void)w.iprobe(bad, 2999); }, e, {"iprobe", v}, "iprobe source " + v);
    if (irecv_ok) {
      expect_error([&] { w.recv(&x, 1, bad, 2999); }, e, {"recv", v}, "recv source " + v);
      expect_error([&] { w.probe(bad, 2999); }, e, {"probe", v}, "probe source " + v);
      expect_error([&] { w.sendrecv(&x, 1, rank(), 2999, &x, 1, bad, 2999); }, e, {"sendrecv", v},
                   "sendrecv source " + v);
    }
  }
}

// Tags outside [0, tag_ub] (any_tag only on the receive side) → Errc::invalid_tag.
TEST_F(ArgErrors, TagOutOfRange_InvalidTag) {
  const rmp::Comm& w = rmp::world();
  const int me = rank();
  int x = 0;
  const rmp::Errc e = rmp::Errc::invalid_tag;
  for (int bad : {rmp::any_tag, -2, rmp::tag_ub + 1, INT_MAX, INT_MIN}) {
    const std::string v = std::to_string(bad);
    if (expect_error([&] { rmp::Request q = w.isend(&x, 1, me, bad); }, e, {"isend", v},
                     "isend tag " + v)) {
      expect_error([&] { w.send(&x, 1, me, bad); }, e, {"send", v}, "send tag " + v);
      expect_error([&] { w.ssend(&x, 1, me, bad); }, e, {"ssend", v}, "ssend tag " + v);
      expect_error([&] { w.sendrecv(&x, 1, me, bad, &x, 1, me, 2999); }, e, {"sendrecv", v},
                   "sendrecv send tag " + v);
    }
    if (bad == rmp::any_tag) continue;  // valid on the receive side
    const bool irecv_ok = expect_error([&] { rmp::Request q = w.irecv(&x, 1, me, bad); }, e,
                                       {"irecv", v}, "irecv tag " + v);
    expect_error([&] { (void)w.iprobe(me, bad); }, e, {"iprobe", v}, "iprobe tag " + v);
    if (irecv_ok) {
      expect_error([&] { w.recv(&x, 1, me, bad); }, e, {"recv", v}, "recv tag " + v);
      expect_error([&] { w.probe(me, bad); }, e, {"probe", v}, "probe tag " + v);
      expect_error([&] { w.sendrecv(&x, 1, me, 2999, &x, 1, me, bad); }, e, {"sendrecv", v},
                   "sendrecv recv tag " + v);
    }
  }
}

// A null buffer with a non-zero count → Errc::invalid_argument naming the call.
TEST_F(ArgErrors, NullBufferWithNonZeroCount_InvalidArgument) {
  const rmp::Comm& w = rmp::world();
  const int me = rank();
  int x = 0;
  const rmp::Errc e = rmp::Errc::invalid_argument;
  if (expect_error([&] { rmp::Request q = w.isend<int>(nullptr, 3, me, 2999); }, e, {"isend"},
                   "isend null buffer")) {
    expect_error([&] { w.send<int>(nullptr, 3, me, 2999); }, e, {"send"}, "send null buffer");
    expect_error([&] { w.ssend<int>(nullptr, 3, me, 2999); }, e, {"ssend"}, "ssend null buffer");
    expect_error([&] { w.sendrecv<int>(nullptr, 3, me, 2999, &x, 1, me, 2999); }, e, {"sendrecv"},
                 "sendrecv null send buffer");
  }
  if (expect_error([&] { rmp::Request q = w.irecv<int>(nullptr, 3, me, 2999); }, e, {"irecv"},
                   "irecv null buffer")) {
    expect_error([&] { w.recv<int>(nullptr, 3, me, 2999); }, e, {"recv"}, "recv null buffer");
    expect_error([&] { w.sendrecv<int>(&x, 1, me, 2999, nullptr, 3, me, 2999); }, e, {"sendrecv"},
                 "sendrecv null receive buffer");
  }
}

// rmp::in_place<T> as a send buffer → Errc::invalid_argument naming the call and the argument,
// and nothing sent: it is no buffer (sent, its bytes and whatever lies beside them went out,
// and a rendezvous-sized count made the receiver's read of it fail). To this rank and to the
// next; a barrier then lets anything sent wrongly by the previous rank arrive before TearDown
// looks.
TEST_F(ArgErrors, InPlaceAsSendBuffer_InvalidArgument) {
  const rmp::Comm& w = rmp::world();
  const rmp::Errc e = rmp::Errc::invalid_argument;
  const int* in_place = rmp::in_place<int>;
  int x = 0;
  for (const int dest : {rank(), (rank() + 1) % size()}) {
    for (const std::size_t count : {std::size_t{1}, std::size_t{100000}}) {
      const std::string v = " to " + who(dest) + ", count " + std::to_string(count);
      expect_error([&] { rmp::Request q = w.isend(in_place, count, dest, 2999); }, e,
                   {"isend", "'buf'", "in_place"}, "isend in_place" + v);
      expect_error([&] { w.send(in_place, count, dest, 2999); }, e, {"send", "'buf'", "in_place"},
                   "send in_place" + v);
      expect_error([&] { w.ssend(in_place, count, dest, 2999); }, e, {"ssend", "'buf'", "in_place"},
                   "ssend in_place" + v);
      expect_error([&] { w.sendrecv(in_place, count, dest, 2999, &x, 1, dest, 2999); }, e,
                   {"sendrecv", "'sbuf'", "in_place"}, "sendrecv in_place" + v);
    }
  }
  w.barrier();
}

// Environment: a ThreadLevel outside the enumeration → Errc::invalid_argument naming the
// argument and the value (it was handed back as the level provided); a second Environment in
// a process → invalid_argument.
TEST(EnvironmentErrors, ThreadLevelOutOfRange_AndSecondEnvironment) {
  int argc = 0;
  char** argv = nullptr;
  for (const int bad : {-1, 4, 42})
    expect_error([&] { rmp::Environment env(argc, argv, static_cast<rmp::ThreadLevel>(bad)); },
                 rmp::Errc::invalid_argument, {"Environment", "'required'", std::to_string(bad)},
                 "Environment required " + std::to_string(bad));
  expect_error([&] { rmp::Environment env(argc, argv, rmp::ThreadLevel::serialized); },
               rmp::Errc::invalid_argument, {"Environment", "already initialised"},
               "a second Environment");
  EXPECT_TRUE(rmp::world().valid()) << "a refused Environment must leave the first one working";
}

// Counts whose byte size overflows size_t (or is negative after conversion) →
// Errc::invalid_count naming the call and the count.
TEST_F(ArgErrors, CountOverflow_InvalidCount) {
  const rmp::Comm& w = rmp::world();
  const int me = rank();
  int xi[1] = {0};
  std::complex<double> xc[1];
  char xch[1] = {0};
  const rmp::Errc e = rmp::Errc::invalid_count;
  const std::size_t int_over = std::numeric_limits<std::size_t>::max() / sizeof(int) + 1;
  const std::size_t cplx_over = std::numeric_limits<std::size_t>::max() / 16 + 1;
  const std::size_t neg = static_cast<std::size_t>(-1);  // -1 after conversion
  const std::string vi = std::to_string(int_over), vc = std::to_string(cplx_over),
                    vn = std::to_string(neg);
  if (expect_error([&] { rmp::Request q = w.isend(xi, int_over, me, 2999); }, e, {"isend", vi},
                   "isend int count " + vi)) {
    expect_error([&] { w.send(xi, int_over, me, 2999); }, e, {"send", vi}, "send int count " + vi);
    expect_error([&] { w.ssend(xi, int_over, me, 2999); }, e, {"ssend", vi},
                 "ssend int count " + vi);
    expect_error([&] { w.sendrecv(xi, int_over, me, 2999, xi, 1, me, 2999); }, e, {"sendrecv", vi},
                 "sendrecv send count " + vi);
  }
  expect_error([&] { rmp::Request q = w.isend(xc, cplx_over, me, 2999); }, e, {"isend", vc},
               "isend complex<double> count " + vc);
  expect_error([&] { rmp::Request q = w.isend(xch, neg, me, 2999); }, e, {"isend", vn},
               "isend char count " + vn);
  if (expect_error([&] { rmp::Request q = w.irecv(xi, int_over, me, 2999); }, e, {"irecv", vi},
                   "irecv int count " + vi)) {
    expect_error([&] { w.recv(xi, int_over, me, 2999); }, e, {"recv", vi}, "recv int count " + vi);
    expect_error([&] { w.sendrecv(xi, 1, me, 2999, xi, int_over, me, 2999); }, e, {"sendrecv", vi},
                 "sendrecv receive count " + vi);
  }
  expect_error([&] { rmp::Request q = w.irecv(xch, neg, me, 2999); }, e, {"irecv", vn},
               "irecv char count " + vn);
  // 2^56 bytes and more: past any address space, and past the 56 bits a rendezvous header
  // carries a size in (p2p/wire.hpp). One byte less is not refused as an overflow (it is never
  // sent: the null buffer check comes first).
  const std::size_t past = std::size_t{1} << 56;
  const std::string vp = std::to_string(past);
  expect_error([&] { rmp::Request q = w.isend(xch, past, me, 2999); }, e, {"isend", vp},
               "isend char count " + vp);
  expect_error([&] { rmp::Request q = w.isend(static_cast<char*>(nullptr), past - 1, me, 2999); },
               rmp::Errc::invalid_argument, {"isend", "null"}, "isend of 2^56 - 1 bytes from null");
}

// Calls on a default-constructed, moved-from or split(undefined) Comm → Errc::invalid_comm.
TEST_F(ArgErrors, InvalidComm_InvalidComm) {
  int x = 0;
  const rmp::Errc e = rmp::Errc::invalid_comm;
  auto all_calls = [&](const rmp::Comm& c, const std::string& kind) {
    EXPECT_FALSE(c.valid()) << kind;
    expect_error([&] { c.send(&x, 1, 0, 2999); }, e, {"send"}, kind + " send");
    expect_error([&] { c.ssend(&x, 1, 0, 2999); }, e, {"ssend"}, kind + " ssend");
    expect_error([&] { rmp::Request q = c.isend(&x, 1, 0, 2999); }, e, {"isend"}, kind + " isend");
    expect_error([&] { c.recv(&x, 1, 0, 2999); }, e, {"recv"}, kind + " recv");
    expect_error([&] { rmp::Request q = c.irecv(&x, 1, 0, 2999); }, e, {"irecv"}, kind + " irecv");
    expect_error([&] { c.sendrecv(&x, 1, 0, 2999, &x, 1, 0, 2999); }, e, {"sendrecv"},
                 kind + " sendrecv");
    expect_error([&] { c.probe(0, 2999); }, e, {"probe"}, kind + " probe");
    expect_error([&] { (void)c.iprobe(0, 2999); }, e, {"iprobe"}, kind + " iprobe");
    expect_error([&] { (void)c.rank(); }, e, {"rank"}, kind + " rank()");
    expect_error([&] { (void)c.size(); }, e, {"size"}, kind + " size()");
  };
  const rmp::Comm none;
  all_calls(none, "default-constructed Comm");
  rmp::Comm a = rmp::world();
  rmp::Comm b = std::move(a);
  all_calls(a, "moved-from Comm");  // NOLINT(bugprone-use-after-move): the point of the test
  EXPECT_TRUE(b.valid());
  EXPECT_EQ(b.rank(), rank()) << "the moved-to Comm still works";
  rmp::Comm u = rmp::world().split(rmp::undefined, 2999);  // collective: every rank calls it
  all_calls(u, "split(undefined) Comm");
}

// The edges that are valid: tag 0 and tag_ub, any_source/any_tag on receives, a null buffer
// with count 0, the last rank.
TEST_F(ArgErrors, BoundaryValuesAreAccepted) {
  const rmp::Comm& w = rmp::world();
  const int me = rank(), n = size();
  for (int tag : {0, rmp::tag_ub}) {
    rmp::Request s = w.isend<int>(nullptr, 0, me, tag);
    const rmp::Status st = w.recv<int>(nullptr, 0, me, tag);
    s.wait();
    EXPECT_EQ(st.tag, tag);
    EXPECT_EQ(st.bytes, 0u);
  }
  // The last rank and rank 0 as peers of a ring step.
  const int right = (me + 1) % n, left = (me - 1 + n) % n;
  int got = -1;
  w.sendrecv(&me, 1, right, 7, &got, 1, left, 7);
  EXPECT_EQ(got, left);
  w.barrier();  // nobody sends to this rank any more: any_source/any_tag sees only self
  int x = 5, y = 0;
  rmp::Request s = w.isend(&x, 1, me, rmp::tag_ub);
  const rmp::Status st = w.recv(&y, 1, rmp::any_source, rmp::any_tag);
  s.wait();
  EXPECT_EQ(st.source, me);
  EXPECT_EQ(st.tag, rmp::tag_ub);
  EXPECT_EQ(y, 5);
}

}  // namespace
