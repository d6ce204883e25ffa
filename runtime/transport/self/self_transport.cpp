// The `self` transport: active messages to one's own rank are queued and delivered from
// progress() (never re-entrantly from send_am); get and put are memcpy.
#include "runtime/transport/self/self_transport.hpp"

#include <cstring>
#include <deque>
#include <vector>

namespace rmp::rt {
namespace {

class SelfTransport;

class SelfEndpoint final : public Endpoint {
public:
  SelfEndpoint(SelfTransport& t, int rank) : Endpoint(rank), t_(t) {}
  TStatus send_am(AmId id, std::span<const std::byte> header, std::span<const std::byte> payload,
                  bool inline_hint) override;
  TStatus get(std::span<std::byte> local, std::uint64_t remote_addr, const RemoteKey& key,
              Completion* done, GetHints hints) override;
  TStatus put(std::span<const std::byte> local, std::uint64_t remote_addr, const RemoteKey& key,
              Completion* done) override;
  Transport& transport() override;

private:
  SelfTransport& t_;
};

class SelfTransport final : public Transport {
public:
  SelfTransport(int rank, AmSink& sink) : sink_(sink), ep_(*this, rank) { quiet_ = true; }
  const char* name() const override { return "self"; }
  TransportCaps caps() const override {
    TransportCaps c;
    c.max_inline = 1 << 20;
    c.single_unit_inline = 1 << 20;
    c.max_am_payload = std::size_t(1) << 40;
    c.min_pipeline_depth = 1;
    c.zero_copy_get = c.zero_copy_put = true;
    return c;
  }
  std::vector<std::byte> address() const override { return {}; }
  Endpoint* connect(int peer, std::span<const std::byte>) override {
    return peer == ep_.peer() ? &ep_ : nullptr;
  }
  RemoteKey register_memory(std::span<const std::byte>) override { return {}; }
  void deregister_memory(std::span<const std::byte>, const RemoteKey&) override {}
  int progress() override {
    if (queue_.empty() && done_.empty()) return 0;
    int n = 0;
    // Deliver only what was queued before this call: handlers may send to self again.
    for (std::size_t k = queue_.size(); k > 0; --k) {
      Msg m = std::move(queue_.front());
      queue_.pop_front();
      sink_.on_am(ep_.peer(), m.id, std::span(m.bytes.data(), m.hdr_len),
                  std::span(m.bytes.data() + m.hdr_len, m.bytes.size() - m.hdr_len));
      ++n;
    }
    std::vector<Completion*> done;
    done.swap(done_);
    for (Completion* c : done) c->fn(c, TStatus::ok);
    quiet_ = queue_.empty() && done_.empty();
    return n + static_cast<int>(done.size());
  }

  void enqueue(AmId id, std::span<const std::byte> h, std::span<const std::byte> p) {
    Msg m{id, h.size(), std::vector<std::byte>(h.size() + p.size())};
    if (!h.empty()) std::memcpy(m.bytes.data(), h.data(), h.size());
    if (!p.empty()) std::memcpy(m.bytes.data() + h.size(), p.data(), p.size());
    queue_.push_back(std::move(m));
    quiet_ = false;
  }
  void complete_later(Completion* c) {
    done_.push_back(c);
    quiet_ = false;
  }

private:
  struct Msg {
    AmId id;
    std::size_t hdr_len;
    std::vector<std::byte> bytes;
  };
  AmSink& sink_;
  SelfEndpoint ep_;
  std::deque<Msg> queue_;
  std::vector<Completion*> done_;
};

TStatus SelfEndpoint::send_am(AmId id, std::span<const std::byte> header,
                              std::span<const std::byte> payload, bool) {
  t_.enqueue(id, header, payload);
  return TStatus::ok;
}

TStatus SelfEndpoint::get(std::span<std::byte> local, std::uint64_t remote_addr, const RemoteKey&,
                          Completion* done, GetHints) {
  if (!local.empty()) std::memcpy(local.data(), reinterpret_cast<const void*>(remote_addr), local.size());
  t_.complete_later(done);
  return TStatus::ok;
}

TStatus SelfEndpoint::put(std::span<const std::byte> local, std::uint64_t remote_addr,
                          const RemoteKey&, Completion* done) {
  if (!local.empty()) std::memcpy(reinterpret_cast<void*>(remote_addr), local.data(), local.size());
  t_.complete_later(done);
  return TStatus::ok;
}

Transport& SelfEndpoint::transport() { return t_; }

}  // namespace

std::unique_ptr<Transport> make_self_transport(int my_rank, AmSink& sink) {
  return std::make_unique<SelfTransport>(my_rank, sink);
}

}  // namespace rmp::rt
