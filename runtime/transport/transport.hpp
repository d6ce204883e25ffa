// The transport interface (DESIGN §1): RDMA semantics and nothing MPI-specific. An endpoint
// per connected peer offers active-message send (small header + payload, inline when it
// fits), get/put of registered memory, and completions delivered from progress(). self, shm,
// and later tcp and verbs implement it; p2p never looks behind it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace rmp::rt {

// Non-throwing result of a data-path call. `retry` means out of resources now (ring full,
// no send credit in the transport): the caller queues the operation and tries again after
// progress(). `error` means the operation did not happen and never will (the peer is
// unreachable): a message so refused was not delivered, in part or whole.
enum class [[nodiscard]] TStatus : std::uint8_t { ok, retry, error };

// Active-message identifiers. The upper layer owns ids [0, kAmUserLimit); transports use the
// rest for their own control traffic.
using AmId = std::uint8_t;
inline constexpr AmId kAmUserLimit = 24;

// Delivers an arriving active message to the upper layer. `header` and `payload` are valid
// only during the call; the handler copies what it keeps.
class AmSink {
public:
  virtual void on_am(int peer, AmId id, std::span<const std::byte> header,
                     std::span<const std::byte> payload) = 0;

protected:
  ~AmSink() = default;
};

// Completion of a get or put, called from progress() (never from inside get()/put()).
struct Completion {
  void (*fn)(Completion* self, TStatus result) = nullptr;
  // Set by a transport's get() (shm; callers start it false, and transports that choose no
  // mechanism by measurement leave it so): the get's mechanism was one the transport was still
  // trying (a warm-up or re-measuring use, or a fallback after cross-memory attach was refused),
  // so the time it took says little about what a get of its size costs once chosen (p2p: the
  // receiver's fin says so, and the sender counts it).
  bool trial = false;
};

// What the caller of a get knows that may help a transport choose how to make it.
struct GetHints {
  // The caller has data of its own in flight to this peer too (a rendezvous send it has not
  // seen finish), so the peer is reading from it or about to: a transport whose mechanisms
  // borrow the peer's CPU may prefer one that leaves it to its own reading.
  bool both_ways = false;
  // The caller is trying something out with this get and judges it on its time (the adaptive
  // tuner exploring rendezvous where it holds eager: p2p marks the send's rts). A transport
  // that chooses its mechanism by measurement serves it by the mechanism it holds for the
  // get's size (or its best guess before it holds one) and puts nothing on trial with it: two
  // explorations nested, the outer one judged a mechanism the inner one was trying.
  bool settled = false;
};

// Remote key of registered memory, packed small enough to travel in a rendezvous header.
struct RemoteKey {
  std::uint8_t len = 0;
  std::array<std::byte, 15> bytes{};
};

struct TransportCaps {
  std::size_t max_inline = 0;          // largest inline payload (header + data) in bytes
  std::size_t single_unit_inline = 0;  // header + data that fit one unit (shm: one line)
  std::size_t max_am_payload = 0;      // largest payload send_am accepts
  std::size_t min_pipeline_depth = 2;  // 1 where the NIC moves data, 2 for chunked copies
  // A chunked get's first piece, copied in by the owner and then out by the reader before the
  // reader has any of it (0: the transport has no chunked gets).
  std::size_t get_fill_bytes = 0;
  bool zero_copy_get = false;
  bool zero_copy_put = false;
  double latency_s = 0;      // declared one-way latency, fed to the tuning model
  double bandwidth_Bps = 0;  // declared bandwidth
};

class Transport;

class Endpoint {
public:
  virtual ~Endpoint() = default;
  // Sends an active message. `inline_hint` asks for the inline path (header and data in the
  // control unit itself) when the transport can; otherwise the payload is copied to a bounce
  // buffer. Returns retry when no room; the call then had no effect.
  virtual TStatus send_am(AmId id, std::span<const std::byte> header,
                          std::span<const std::byte> payload, bool inline_hint) = 0;
  // RDMA-read semantics: fill `local` from the peer's registered memory at `remote_addr`.
  virtual TStatus get(std::span<std::byte> local, std::uint64_t remote_addr, const RemoteKey& key,
                      Completion* done, GetHints hints) = 0;
  // RDMA-write semantics: copy `local` to the peer's registered memory at `remote_addr`.
  virtual TStatus put(std::span<const std::byte> local, std::uint64_t remote_addr,
                      const RemoteKey& key, Completion* done) = 0;
  virtual Transport& transport() = 0;
  int peer() const { return peer_; }

protected:
  explicit Endpoint(int peer) : peer_(peer) {}

private:
  int peer_;
};

class Transport {
public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  virtual TransportCaps caps() const = 0;
  // This rank's address on the transport, published through bootstrap (tens of bytes).
  virtual std::vector<std::byte> address() const = 0;
  // Endpoint for `peer` whose published address is `peer_address`, created on first use and
  // owned by the transport; nullptr when this transport cannot reach that peer.
  virtual Endpoint* connect(int peer, std::span<const std::byte> peer_address) = 0;
  // Registers memory for get/put by peers; returns the key to send them.
  virtual RemoteKey register_memory(std::span<const std::byte> region) = 0;
  virtual void deregister_memory(std::span<const std::byte> region, const RemoteKey& key) = 0;
  // Polls: delivers arriving messages to the sink and runs completions. Returns how many
  // events it handled (0 = idle).
  virtual int progress() = 0;
  // Cheap test before calling progress(): false only when the transport knows it is idle.
  bool may_have_work() const { return !quiet_; }

protected:
  bool quiet_ = false;  // kept up to date by transports that can tell cheaply (self)
};

}  // namespace rmp::rt
