// Message order (non-overtaking across protocol changes), wildcard matching and probe.
#include "harness.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace {

using namespace itest;

// Sizes that cross every protocol edge, interleaved so consecutive messages change protocol.
std::vector<std::size_t> mixed_sizes() {
  const Knobs& k = knobs();
  std::vector<std::size_t> v = {0, 1, 17};
  if (k.inline_threshold >= 1) v.push_back(k.inline_threshold);
  v.push_back(k.inline_threshold + 1);
  if (k.eager_threshold >= 1) v.push_back(k.eager_threshold - 1);
  v.push_back(k.eager_threshold);
  v.push_back(k.eager_threshold + 1);
  v.push_back(rndv_size((std::size_t{1} << 20) + 5));
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  // Interleave small and large: 0, big, 1, big-1, …
  std::vector<std::size_t> out;
  for (std::size_t i = 0, j = v.size(); i < j;) {
    out.push_back(v[i++]);
    if (i < j) out.push_back(v[--j]);
  }
  return out;
}

std::size_t size_of_msg(const std::vector<std::size_t>& sizes, std::size_t j) {
  return sizes[(j * 5 + j / sizes.size()) % sizes.size()];
}

// Roles in pairwise tests: even rank r sends to r+1; the odd one out talks to itself.
struct Roles {
  bool sender = false, receiver = false;
  int peer = 0;  // the other end (== rank() for self)
};
Roles pair_roles() {
  const int r = rank(), n = size();
  Roles ro;
  if (r % 2 == 0 && r + 1 < n) {
    ro.sender = true;
    ro.peer = r + 1;
  } else if (r % 2 == 1) {
    ro.receiver = true;
    ro.peer = r - 1;
  } else {
    ro.sender = ro.receiver = true;
    ro.peer = r;
  }
  return ro;
}

constexpr std::size_t kOrderMsgs = 48;

// Many messages with one (source, tag), sizes alternating between inline, eager and
// rendezvous, land in the receives in the order they were sent when the receives are
// posted before the messages arrive.
TEST(Order, NonOvertaking_MixedProtocols_PrepostedReceives) {
  const rmp::Comm& w = rmp::world();
  const int r = rank();
  const Roles ro = pair_roles();
  const auto sizes = mixed_sizes();
  const std::size_t cap = *std::max_element(sizes.begin(), sizes.end());
  const int tag = 1000;
  std::vector<std::vector<std::byte>> bufs;
  std::vector<rmp::Request> rreqs;
  if (ro.receiver) {
    for (std::size_t j = 0; j < kOrderMsgs; ++j) {
      bufs.emplace_back(cap);
      rreqs.push_back(w.irecv(bufs.back().data(), cap, ro.peer, tag));
    }
    if (!ro.sender) w.send<int>(nullptr, 0, ro.peer, tag + 1);  // "receives posted"
  }
  if (ro.sender) {
    if (!ro.receiver) w.recv<int>(nullptr, 0, ro.peer, tag + 1);
    for (std::size_t j = 0; j < kOrderMsgs; ++j) {
      const auto msg = make_message<std::byte>(size_of_msg(sizes, j), seed(r, ro.peer, j, 0x1));
      w.send(msg.data(), msg.size(), ro.peer, tag);  // blocking: every receive is posted
    }
  }
  if (ro.receiver) {
    std::vector<rmp::Status> st(kOrderMsgs);
    for (std::size_t j = 0; j < kOrderMsgs; ++j) st[j] = rreqs[j].wait();
    for (std::size_t j = 0; j < kOrderMsgs; ++j) {
      const std::size_t s = size_of_msg(sizes, j);
      EXPECT_EQ(st[j].bytes, s) << "receive #" << j << " (expected " << proto_name(proto_of(s))
                                << " message #" << j << ")";
      EXPECT_EQ(st[j].source, ro.peer);
      EXPECT_TRUE(matches(bufs[j].data(), std::min(s, st[j].bytes), seed(ro.peer, r, j, 0x1)))
          << "receive #" << j << " holds another message (overtaking?)";
    }
  }
}

// The same order when every message is unexpected: the sender issues them all (isend) and a
// marker with another tag; the receiver takes the marker first, then drains in order.
TEST(Order, NonOvertaking_MixedProtocols_UnexpectedMessages) {
  const rmp::Comm& w = rmp::world();
  const int r = rank();
  const Roles ro = pair_roles();
  const auto sizes = mixed_sizes();
  const std::size_t cap = *std::max_element(sizes.begin(), sizes.end());
  const int tag = 1100, marker = 1101;
  std::vector<std::vector<std::byte>> msgs;
  std::vector<rmp::Request> sreqs;
  if (ro.sender) {
    for (std::size_t j = 0; j < kOrderMsgs; ++j) {
      msgs.push_back(make_message<std::byte>(size_of_msg(sizes, j), seed(r, ro.peer, j, 0x2)));
      sreqs.push_back(w.isend(msgs.back().data(), msgs.back().size(), ro.peer, tag));
    }
    sreqs.push_back(w.isend<int>(nullptr, 0, ro.peer, marker));
  }
  if (ro.receiver) {
    w.recv<int>(nullptr, 0, ro.peer, marker);
    std::vector<std::byte> buf(cap);
    for (std::size_t j = 0; j < kOrderMsgs; ++j) {
      const std::size_t s = size_of_msg(sizes, j);
      const rmp::Status st = w.recv(buf.data(), cap, ro.peer, tag);
      EXPECT_EQ(st.bytes, s) << "receive #" << j << ": expected the " << proto_name(proto_of(s))
                             << " message #" << j;
      EXPECT_TRUE(matches(buf.data(), std::min(s, st.bytes), seed(ro.peer, r, j, 0x2)))
          << "receive #" << j << " holds another message (overtaking?)";
    }
  }
  rmp::wait_all(sreqs);
}

// ---- Wildcards -------------------------------------------------------------------------------

// Every other rank sends 24 messages of mixed protocols and tags to rank 0, which receives
// them all with any_source/any_tag: per sender they arrive in send order, and Status names
// the right source, tag and size.
TEST(Wildcard, AnySourceAnyTag_PerSenderOrderAndStatus) {
  const rmp::Comm& w = rmp::world();
  const int r = rank(), n = size();
  const auto sizes = mixed_sizes();
  const std::size_t cap = *std::max_element(sizes.begin(), sizes.end());
  constexpr std::size_t M = 24;
  auto tag_of = [](std::size_t j) { return 10 + static_cast<int>(j % 4); };
  auto size_of = [&](int src, std::size_t j) { return sizes[(j + src) % sizes.size()]; };
  const bool is_sender = n == 1 || r != 0;
  std::vector<std::vector<std::byte>> msgs;
  std::vector<rmp::Request> sreqs;
  if (is_sender) {
    for (std::size_t j = 0; j < M; ++j) {
      msgs.push_back(make_message<std::byte>(size_of(r, j), seed(r, 0, j, 0x3)));
      sreqs.push_back(w.isend(msgs.back().data(), msgs.back().size(), 0, tag_of(j)));
    }
  }
  if (r == 0) {
    const int senders = n == 1 ? 1 : n - 1;
    std::map<int, std::size_t> next;
    std::vector<std::byte> buf(cap);
    for (std::size_t i = 0; i < M * static_cast<std::size_t>(senders); ++i) {
      const rmp::Status st = w.recv(buf.data(), cap, rmp::any_source, rmp::any_tag);
      ASSERT_TRUE(st.source >= 0 && st.source < n && (n == 1 || st.source != 0))
          << "Status.source " << st.source;
      const std::size_t j = next[st.source]++;
      ASSERT_LT(j, M) << "more than " << M << " messages from " << who(st.source);
      EXPECT_EQ(st.tag, tag_of(j)) << "message #" << j << " of " << who(st.source);
      EXPECT_EQ(st.bytes, size_of(st.source, j)) << "message #" << j << " of " << who(st.source);
      EXPECT_TRUE(matches(buf.data(), std::min(st.bytes, size_of(st.source, j)),
                          seed(st.source, 0, j, 0x3)))
          << "message #" << j << " of " << who(st.source) << " out of order or corrupt";
    }
  }
  rmp::wait_all(sreqs);
}

// Posted receives with specific and wildcard source/tag are matched in post order: each
// arriving message takes the first posted receive that matches it, even when an earlier
// posted receive (specific tag 9) is only satisfied by the last message.
TEST(Wildcard, MixedSpecificAndWildcardReceives_MatchFirstPostedInOrder) {
  const rmp::Comm& w = rmp::world();
  const int r = rank(), n = size();
  const int p = n > 1 ? 1 : 0;  // the sender
  const Knobs& k = knobs();
  const std::size_t s[4] = {std::min<std::size_t>(8, k.inline_threshold), k.eager_threshold,
                            rndv_size(), 0};
  const int tags[4] = {7, 8, 7, 9};
  const std::size_t cap = rndv_size() + 16;
  if (r == 0) {
    std::vector<std::vector<std::byte>> bufs(5, std::vector<std::byte>(cap));
    std::vector<rmp::Request> q;
    if (n >= 3) q.push_back(w.irecv(bufs[4].data(), cap, 2, rmp::any_tag));    // only rank 2
    q.push_back(w.irecv(bufs[0].data(), cap, p, 9));                           // R0
    q.push_back(w.irecv(bufs[1].data(), cap, rmp::any_source, 7));             // R1
    q.push_back(w.irecv(bufs[2].data(), cap, p, rmp::any_tag));                // R2
    q.push_back(w.irecv(bufs[3].data(), cap, rmp::any_source, rmp::any_tag));  // R3
    const std::size_t off = n >= 3 ? 1 : 0;
    std::vector<rmp::Request> self_sends;
    std::vector<std::vector<std::byte>> self_msgs;
    if (p == 0) {
      for (int m = 0; m < 4; ++m) {
        self_msgs.push_back(make_message<std::byte>(s[m], seed(p, 0, m, 0x4)));
        self_sends.push_back(w.isend(self_msgs.back().data(), s[m], 0, tags[m]));
      }
    } else {
      w.send<int>(nullptr, 0, p, 1200);
      if (n >= 3) w.send<int>(nullptr, 0, 2, 1200);
    }
    std::vector<rmp::Status> st(q.size());
    for (std::size_t i = 0; i < q.size(); ++i) st[i] = q[i].wait();
    rmp::wait_all(self_sends);
    // Message m must be in receive expect[m]: m0→R1, m1→R2, m2→R3, m3→R0.
    const int expect[4] = {1, 2, 3, 0};
    for (int m = 0; m < 4; ++m) {
      const rmp::Status& x = st[off + expect[m]];
      EXPECT_EQ(x.source, p) << "R" << expect[m] << " should hold message " << m;
      EXPECT_EQ(x.tag, tags[m]) << "R" << expect[m] << " should hold message " << m;
      EXPECT_EQ(x.bytes, s[m]) << "R" << expect[m] << " should hold message " << m;
      EXPECT_TRUE(matches(bufs[expect[m]].data(), std::min(x.bytes, s[m]), seed(p, 0, m, 0x4)))
          << "R" << expect[m] << " should hold message " << m;
    }
    if (n >= 3) {
      EXPECT_EQ(st[0].source, 2);
      EXPECT_EQ(st[0].tag, 9);
      EXPECT_EQ(st[0].bytes, 5u);
    }
  } else if (r == p) {
    w.recv<int>(nullptr, 0, 0, 1200);
    for (int m = 0; m < 4; ++m) {
      const auto msg = make_message<std::byte>(s[m], seed(p, 0, m, 0x4));
      w.send(msg.data(), s[m], 0, tags[m]);
    }
  } else if (r == 2) {
    w.recv<int>(nullptr, 0, 0, 1200);
    const std::byte five[5] = {};
    w.send(five, 5, 0, 9);
  }
}

// With messages of two tags waiting unexpected, receives by tag (any_source) and by source
// (any_tag) each take the oldest matching message.
TEST(Wildcard, UnexpectedMessages_TagAndSourceWildcardsTakeOldestMatch) {
  const rmp::Comm& w = rmp::world();
  const int r = rank();
  const Roles ro = pair_roles();
  const auto sizes = mixed_sizes();
  const std::size_t cap = *std::max_element(sizes.begin(), sizes.end());
  constexpr int K = 8;  // messages 0..7, tags alternate 21, 22
  std::vector<std::vector<std::byte>> msgs;
  std::vector<rmp::Request> sreqs;
  if (ro.sender) {
    for (int j = 0; j < K; ++j) {
      msgs.push_back(make_message<std::byte>(sizes[j % sizes.size()], seed(r, ro.peer, j, 0x5)));
      sreqs.push_back(w.isend(msgs.back().data(), msgs.back().size(), ro.peer, 21 + j % 2));
    }
    sreqs.push_back(w.isend<int>(nullptr, 0, ro.peer, 23));
  }
  if (ro.receiver) {
    w.recv<int>(nullptr, 0, ro.peer, 23);
    std::vector<std::byte> buf(cap);
    auto check = [&](const rmp::Status& st, int j) {
      EXPECT_EQ(st.source, ro.peer);
      EXPECT_EQ(st.tag, 21 + j % 2) << "expected message #" << j;
      EXPECT_EQ(st.bytes, sizes[j % sizes.size()]) << "expected message #" << j;
      EXPECT_TRUE(matches(buf.data(), std::min(st.bytes, sizes[j % sizes.size()]),
                          seed(ro.peer, r, j, 0x5)))
          << "expected message #" << j;
    };
    for (int j = 1; j < K; j += 2) check(w.recv(buf.data(), cap, rmp::any_source, 22), j);
    for (int j = 0; j < K; j += 2) check(w.recv(buf.data(), cap, ro.peer, rmp::any_tag), j);
  }
  rmp::wait_all(sreqs);
}

// ---- probe / iprobe --------------------------------------------------------------------------

// probe and iprobe report a pending message's source, tag and size before it is received,
// at every protocol size; the receive then gets that message and nothing is left.
TEST(Probe, ReportsPendingMessageBeforeReceive_EveryProtocol) {
  const rmp::Comm& w = rmp::world();
  const int r = rank();
  const Roles ro = pair_roles();
  const auto cls = class_sizes(true);
  std::vector<std::vector<std::byte>> msgs;
  std::vector<rmp::Request> sreqs;
  if (ro.sender) {
    for (std::size_t c = 0; c < cls.size(); ++c) {
      msgs.push_back(make_message<std::byte>(cls[c].bytes, seed(r, ro.peer, c, 0x6)));
      sreqs.push_back(w.isend(msgs.back().data(), cls[c].bytes, ro.peer, 1300 + int(c)));
    }
  }
  if (ro.receiver) {
    for (std::size_t c = 0; c < cls.size(); ++c) {
      const int tag = 1300 + static_cast<int>(c);
      const std::string ctx = std::string(proto_name(cls[c].proto)) + " message of " +
                              std::to_string(cls[c].bytes) + " B";
      const rmp::Status p = w.probe(ro.peer, tag);
      EXPECT_EQ(p.source, ro.peer) << ctx;
      EXPECT_EQ(p.tag, tag) << ctx;
      EXPECT_EQ(p.bytes, cls[c].bytes) << ctx;
      const std::optional<rmp::Status> ip = w.iprobe(rmp::any_source, tag);
      ASSERT_TRUE(ip.has_value()) << ctx << ": iprobe after probe found nothing";
      EXPECT_EQ(ip->source, ro.peer) << ctx;
      EXPECT_EQ(ip->bytes, cls[c].bytes) << ctx;
      std::vector<std::byte> buf(cls[c].bytes);
      const rmp::Status st = w.recv(buf.data(), buf.size(), p.source, p.tag);
      EXPECT_EQ(st.bytes, p.bytes) << ctx;
      EXPECT_TRUE(matches(buf.data(), buf.size(), seed(ro.peer, r, c, 0x6))) << ctx;
      EXPECT_FALSE(w.iprobe(ro.peer, tag).has_value()) << ctx << ": still pending after recv";
    }
  }
  rmp::wait_all(sreqs);
}

// iprobe returns nullopt when nothing is pending (also with both wildcards; collective
// traffic is never visible to it), and finds a message once one is there.
TEST(Probe, Iprobe_NothingPending_ReturnsNullopt) {
  const rmp::Comm& w = rmp::world();
  const int r = rank();
  EXPECT_FALSE(w.iprobe(rmp::any_source, 1400).has_value());
  EXPECT_FALSE(w.iprobe(rmp::any_source, rmp::any_tag).has_value());
  EXPECT_FALSE(w.iprobe(r, rmp::any_tag).has_value());
  w.barrier();  // a collective in between must not leave anything for iprobe to see
  EXPECT_FALSE(w.iprobe(rmp::any_source, rmp::any_tag).has_value());
  const int x = 42;
  rmp::Request s = w.isend(&x, 1, r, 1400);
  std::optional<rmp::Status> st;
  for (int i = 0; i < 1000000 && !st; ++i) st = w.iprobe(rmp::any_source, rmp::any_tag);
  ASSERT_TRUE(st.has_value()) << "a message to self never showed in iprobe";
  EXPECT_EQ(st->source, r);
  EXPECT_EQ(st->tag, 1400);
  EXPECT_EQ(st->bytes, sizeof(int));
  int y = 0;
  w.recv(&y, 1, r, 1400);
  EXPECT_EQ(y, 42);
  s.wait();
  EXPECT_FALSE(w.iprobe(rmp::any_source, rmp::any_tag).has_value());
}

// probe with wildcards reports messages in per-sender order, and a receive by the probed
// source and tag gets exactly the probed message (many senders at once). Phase 1: tags
// 5, 6, 7 under probe(any_source, any_tag); phase 2 (after a "go" from rank 0): tag 20 under
// probe(source, any_tag), tag 21 under probe(any_source, 21).
TEST(Probe, WildcardProbeThenRecv_GetsTheProbedMessage) {
  const rmp::Comm& w = rmp::world();
  const int r = rank(), n = size();
  const auto cls = class_sizes(true);
  auto size_of = [&](int src, int tag) { return cls[(src + tag) % cls.size()].bytes; };
  const int tags[5] = {5, 6, 7, 20, 21};
  const int first = n == 1 ? 0 : 1;  // senders: first .. n-1
  std::vector<std::vector<std::byte>> msgs;
  std::vector<rmp::Request> sreqs;
  const bool is_sender = n == 1 || r != 0;
  auto send_tags = [&](int from, int to) {
    for (int i = from; i < to; ++i) {
      msgs.push_back(make_message<std::byte>(size_of(r, tags[i]), seed(r, 0, tags[i], 0x7)));
      sreqs.push_back(w.isend(msgs.back().data(), msgs.back().size(), 0, tags[i]));
    }
  };
  auto take = [&](const rmp::Status& p, const char* how) {
    const std::string ctx =
        std::string(how) + " → " + who(p.source) + " tag " + std::to_string(p.tag);
    EXPECT_EQ(p.bytes, size_of(p.source, p.tag)) << ctx;
    std::vector<std::byte> buf(p.bytes + 8);
    const rmp::Status st = w.recv(buf.data(), buf.size(), p.source, p.tag);
    EXPECT_EQ(st.source, p.source) << ctx;
    EXPECT_EQ(st.tag, p.tag) << ctx;
    EXPECT_EQ(st.bytes, p.bytes) << ctx;
    EXPECT_TRUE(matches(buf.data(), std::min(st.bytes, p.bytes), seed(p.source, 0, p.tag, 0x7)))
        << ctx;
  };
  msgs.reserve(5);
  if (is_sender) send_tags(0, 3);
  if (r == 0) {
    std::map<int, int> next;  // index into tags, per sender
    for (int i = 0; i < 3 * (n - first); ++i) {
      const rmp::Status p = w.probe(rmp::any_source, rmp::any_tag);
      const int j = next[p.source]++;
      ASSERT_LT(j, 3) << "too many messages from " << who(p.source);
      EXPECT_EQ(p.tag, tags[j]) << who(p.source) << " message #" << j << " overtaken";
      take(p, "probe(any_source, any_tag)");
    }
    for (int s = first; s < n; ++s)
      if (s != 0) w.send<int>(nullptr, 0, s, 19);
  }
  if (is_sender) {
    if (r != 0) w.recv<int>(nullptr, 0, 0, 19);
    send_tags(3, 5);
  }
  if (r == 0) {
    for (int s = first; s < n; ++s) {
      const rmp::Status p = w.probe(s, rmp::any_tag);
      EXPECT_EQ(p.tag, 20) << "probe(" << s << ", any_tag)";
      EXPECT_EQ(p.source, s);
      take(p, "probe(source, any_tag)");
    }
    for (int s = first; s < n; ++s) {
      const rmp::Status p = w.probe(rmp::any_source, 21);
      EXPECT_EQ(p.tag, 21);
      take(p, "probe(any_source, 21)");
    }
    EXPECT_FALSE(w.iprobe(rmp::any_source, rmp::any_tag).has_value());
  }
  rmp::wait_all(sreqs);
}

}  // namespace
