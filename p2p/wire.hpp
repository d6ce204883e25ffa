// Headers of p2p's active messages (DESIGN §2). Plain structs copied with memcpy; both ends
// run the same build, so no byte swapping.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

#include "runtime/transport/transport.hpp"

namespace rmp::p2p {

enum class Am : rt::AmId {
  eager = 0,       // EagerHeader + payload
  eager_sync = 1,  // SyncHeader + payload: receiver answers sync_ack once matched (ssend)
  rts = 2,         // RtsHeader: receiver gets the data, then answers fin
  fin = 3,         // AckHeader: rendezvous data consumed; sender completes
  sync_ack = 4,    // AckHeader: the ssend was matched
  credit = 5,      // CreditHeader: eager buffer space returned
};

// Every header starts with the eager-buffer bytes the sender returns to the receiver.
struct EagerHeader {
  std::uint32_t credits;  // bytes of eager buffer returned (piggybacked; kCreditMask), and
                          // the flags kEagerAnswerInKind and kEagerExplored
  std::uint32_t ctx;      // communicator context (channel)
  std::int32_t tag;
  std::int32_t src;  // sender's rank in the communicator
};
struct SyncHeader {
  EagerHeader e;
  std::uint64_t sid;  // sender's request
};
struct RtsHeader {
  EagerHeader e;
  // Bytes: 56 bits hold more than any address space (x86-64: 57 bits of virtual address at
  // most, user space half of it), and keep the header within 63 bytes.
  std::uint64_t size : 56;
  std::uint64_t flags : 8;  // kRtsExplored
  std::uint64_t sid;
  std::uint64_t addr;
  rt::RemoteKey key;
};
// rts: the sender's adaptive tuner is trying a setting out with this send (rendezvous where it
// holds eager, or eager that went by rendezvous for want of credit) and judges it on its time:
// the receiver asks its transport for a settled get (rt::GetHints::settled), so that no copy
// mechanism is on trial within that trial.
inline constexpr std::uint32_t kRtsExplored = 1;
// A send alone whose protocol the sender's adaptive tuner picked, the sender leading the pair
// (the lower rank): the receiver's next tuned send alone to it in the same size bucket goes by
// the same protocol (p2p/protocol_tuner.hpp, ProtocolTuner::post's `answer`). Rendezvous: a bit of
// RtsHeader::flags; eager: the top bit of EagerHeader::credits, whose count stays below the
// flags (a header returns at most kCreditMask bytes, the rest with later ones).
inline constexpr std::uint32_t kRtsAnswerInKind = 2;
inline constexpr std::uint32_t kEagerAnswerInKind = 1u << 31;
// eager, with kEagerAnswerInKind: the sender's tuner is trying eager out on this send (as
// kRtsExplored says of an rts). The answer is eager too; where it goes by rendezvous all the
// same (the receiver short of eager credit) it is part of that trial: its rts says kRtsExplored,
// and its get is settled.
inline constexpr std::uint32_t kEagerExplored = 1u << 30;
inline constexpr std::uint32_t kCreditMask = kEagerExplored - 1;
struct AckHeader {
  std::uint32_t credits;
  std::uint32_t flags;  // kAckTrialGet
  std::uint64_t sid;
};
// fin: the receiver's transport read the data by a mechanism it was still trying
// (rt::Completion::trial), so the send's time is not what its protocol costs once settled
// (counted: rndv_trial_gets).
inline constexpr std::uint32_t kAckTrialGet = 1;
struct CreditHeader {
  std::uint32_t credits;
};
static_assert(sizeof(EagerHeader) == 16);
static_assert(sizeof(RtsHeader) <= 63);

template <class H>
std::span<const std::byte> bytes_of(const H& h) {
  return std::as_bytes(std::span(&h, 1));
}

// Reads a header; returns false when the message is too short to hold it.
template <class H>
bool decode(std::span<const std::byte> b, H& h) {
  if (b.size() < sizeof(H)) return false;
  std::memcpy(&h, b.data(), sizeof(H));
  return true;
}

}  // namespace rmp::p2p
