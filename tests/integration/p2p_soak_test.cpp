// A long stream of point-to-point traffic drawn at random, the same stream on every rank: each
// step a random matrix of messages (sizes on both sides of every protocol edge, several
// messages a pair, two communicators), received by specific receives, by any_source, or by
// any_source and any_tag, posted before the sends or after them, with probes, cancelled
// receives and blocking, synchronous and non-blocking sends. Every message must arrive whole,
// and a wildcard receive must take the oldest unreceived message of the sender it reports
// (non-overtaking). A failure names the step and the seed; ITEST_SOAK_SEED / ITEST_SOAK_STEPS
// replay or lengthen a stream.
#include "harness.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <span>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

namespace {

using namespace itest;

// Sizes in bytes, both sides of the inline, eager and fragment edges as this run's knobs set
// them, and a few fixed ones.
std::vector<std::size_t> soak_sizes() {
  const Knobs& k = knobs();
  std::vector<std::size_t> v{0, 1, 7, 8, 100, 1000, 4096, 200000, (1u << 20) + 3};
  for (std::size_t edge : {k.inline_threshold, k.eager_threshold, k.fragment_size})
    for (std::size_t d : {edge - 1, edge, edge + 1})
      if (d > 0 && d <= (4u << 20)) v.push_back(d);
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

enum class RecvMode { specific, any_source, any_both };

struct Message {
  int from, to, tag, comm;
  std::size_t bytes;
  std::uint64_t seq;  // per (from, to, comm, tag), in send order
};

std::uint64_t message_seed(const Message& m, std::uint64_t step) {
  return seed(m.from, m.to, step * 4096 + m.seq, static_cast<std::uint64_t>(m.tag * 2 + m.comm));
}

}  // namespace

TEST(P2pSoak, RandomTraffic_EveryMessageArrivesInOrder) {
  const rmp::Comm& world = rmp::world();
  const std::uint64_t seed0 = env_number("ITEST_SOAK_SEED", 20261206);
  const std::uint64_t steps = env_number("ITEST_SOAK_STEPS", 2000);
  const int n = world.size(), me = world.rank();
  const rmp::Comm dup = world.dup();
  const rmp::Comm* comms[2] = {&world, &dup};
  const std::vector<std::size_t> sizes = soak_sizes();
  Draw draw(seed0);

  for (std::uint64_t step = 0; step < steps; ++step) {
    // The step's messages, in each sender's send order; tags are the step's own (so a wildcard
    // receive of this step never takes a message of the next).
    const int base_tag = static_cast<int>(step % 50000) * 4;
    std::vector<Message> msgs;
    std::map<std::tuple<int, int, int, int>, std::uint64_t> seqs;
    const std::size_t count = draw.below(static_cast<std::size_t>(3 * n) + 1);
    for (std::size_t k = 0; k < count; ++k) {
      Message m{};
      m.from = static_cast<int>(draw.below(static_cast<std::size_t>(n)));
      m.to = static_cast<int>(draw.below(static_cast<std::size_t>(n)));
      m.tag = base_tag + static_cast<int>(draw.below(3));
      m.comm = static_cast<int>(draw.below(2));
      // Mostly small: a large message now and then.
      m.bytes = sizes[draw.percent(70) ? draw.below(std::min<std::size_t>(sizes.size(), 8))
                                       : draw.below(sizes.size())];
      m.seq = seqs[{m.from, m.to, m.comm, m.tag}]++;
      msgs.push_back(m);
    }
    std::vector<RecvMode> mode(static_cast<std::size_t>(n));
    bool any_both = false;
    for (auto& md : mode) {
      md = static_cast<RecvMode>(draw.below(3));
      any_both |= md == RecvMode::any_both;
    }
    const bool recv_first = draw.percent(60);
    const int send_kind = static_cast<int>(draw.below(4));  // isend, send, ssend, mixed
    const bool probe = draw.percent(25), cancel = draw.percent(15);

    std::vector<const Message*> out, in;
    for (const Message& m : msgs) {
      if (m.from == me) out.push_back(&m);
      if (m.to == me) in.push_back(&m);
    }
    const RecvMode my_mode = mode[static_cast<std::size_t>(me)];
    std::size_t widest = 0;
    for (const Message* m : in) widest = std::max(widest, m->bytes);

    // Receives: one per incoming message; wildcard ones all of the widest size, per communicator.
    std::vector<std::vector<std::byte>> bufs(in.size());
    std::vector<rmp::Request> recvs(in.size());
    auto post_receives = [&] {
      for (std::size_t i = 0; i < in.size(); ++i) {
        const Message& m = *in[i];
        const rmp::Comm& c = *comms[m.comm];
        const int src = my_mode == RecvMode::specific ? m.from : rmp::any_source;
        const int tag = my_mode == RecvMode::any_both ? rmp::any_tag : m.tag;
        bufs[i].assign(my_mode == RecvMode::specific ? m.bytes : widest, std::byte{0});
        if (probe && my_mode == RecvMode::specific && !recv_first) {
          const rmp::Status st = c.probe(src, tag);
          EXPECT_EQ(st.bytes, m.bytes) << "probe, step " << step << ", seed " << seed0;
        }
        recvs[i] = c.irecv(bufs[i].data(), bufs[i].size(), src, tag);
      }
    };
    // A receive nobody sends to, cancelled: it must not take anything.
    std::byte stray_buf[8];  // (declared first: it outlives the receive)
    rmp::Request stray;
    if (cancel) stray = world.irecv(stray_buf, sizeof stray_buf, rmp::any_source, base_tag + 3);

    if (recv_first) post_receives();
    std::vector<std::vector<std::byte>> payloads(out.size());
    std::vector<rmp::Request> sends;
    for (std::size_t i = 0; i < out.size(); ++i) {
      const Message& m = *out[i];
      const rmp::Comm& c = *comms[m.comm];
      payloads[i] = make_message<std::byte>(m.bytes, message_seed(m, step));
      const int kind = send_kind == 3 ? static_cast<int>(i % 3) : send_kind;
      // Blocking sends only where this rank's receives are already posted (a message to
      // itself needs its receive) and every rank posts first: nobody waits for a receive
      // posted after a blocking send elsewhere.
      const bool may_block = recv_first;
      if (kind == 1 && may_block) c.send(payloads[i].data(), m.bytes, m.to, m.tag);
      else if (kind == 2 && may_block) c.ssend(payloads[i].data(), m.bytes, m.to, m.tag);
      else sends.push_back(c.isend(payloads[i].data(), m.bytes, m.to, m.tag));
    }
    if (!recv_first) post_receives();

    // Completed in an order of their own (wait_any), then checked in the order the receives
    // were posted, which is the order they matched in: the k-th receive that reports sender s
    // and tag t holds the k-th message s sent with t (non-overtaking), whole; where receives
    // took any tag, the messages each sender's receives got follow its send order.
    std::vector<rmp::Status> got(in.size());
    for (std::size_t done = 0; done < in.size(); ++done) {
      rmp::Status st;
      const std::size_t i = rmp::wait_any(recvs, &st);
      if (i >= recvs.size()) {
        ADD_FAILURE() << "step " << step << ": no receive left to wait for, seed " << seed0;
        break;
      }
      got[i] = st;
    }
    rmp::wait_all(sends);
    std::map<std::tuple<int, int, int>, std::vector<const Message*>> sent;  // (from, comm, tag)
    std::map<std::pair<int, int>, std::vector<const Message*>> by_sender;   // (from, comm)
    for (const Message* m : in) {
      sent[{m->from, m->comm, m->tag}].push_back(m);
      by_sender[{m->from, m->comm}].push_back(m);
    }
    std::map<std::tuple<int, int, int>, std::size_t> taken;
    std::map<std::pair<int, int>, std::ptrdiff_t> last_index;
    for (std::size_t i = 0; i < in.size(); ++i) {
      const rmp::Status& st = got[i];
      const int comm = in[i]->comm;
      const auto where = [&] {
        std::ostringstream o;
        o << "step " << step << ", receive " << i << " (mode " << static_cast<int>(my_mode)
          << ", communicator " << comm << ") reports rank " << st.source << ", tag " << st.tag
          << ", " << st.bytes << " bytes; seed " << seed0;
        return o.str();
      };
      if (my_mode == RecvMode::specific) {
        EXPECT_EQ(st.source, in[i]->from) << where();
        EXPECT_EQ(st.tag, in[i]->tag) << where();
      }
      const auto list = sent.find({st.source, comm, st.tag});
      std::size_t& k = taken[{st.source, comm, st.tag}];
      if (list == sent.end() || k >= list->second.size()) {
        ADD_FAILURE() << where() << ": no such message was sent";
        continue;
      }
      const Message& m = *list->second[k++];
      EXPECT_EQ(st.bytes, m.bytes) << where() << ": not the oldest message of its sender and tag";
      EXPECT_TRUE(
          matches(bufs[i].data(), std::min(st.bytes, bufs[i].size()), message_seed(m, step)))
          << where();
      if (my_mode == RecvMode::any_both) {
        const auto& order = by_sender[{st.source, comm}];
        const std::ptrdiff_t at = std::find(order.begin(), order.end(), &m) - order.begin();
        auto [it, fresh] = last_index.try_emplace({st.source, comm}, at);
        if (!fresh) {
          EXPECT_GT(at, it->second) << where() << ": overtook an earlier message of its sender";
          it->second = at;
        }
      }
    }
    if (cancel) {
      EXPECT_TRUE(stray.cancel()) << "step " << step << ": the stray receive matched";
    }
    // A step that had any_tag receives somewhere ends together: the next step's messages
    // must not reach them.
    if (any_both) world.barrier();
    if (stop_together(step)) break;  // (a failed check leaves every rank in step)
  }
}
