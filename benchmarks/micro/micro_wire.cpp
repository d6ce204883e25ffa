// p2p's active-message headers (p2p/wire.hpp), as the engine builds and reads them:
//   wire/encode/<header>  fill the struct from varying fields and copy bytes_of() into a
//                         transport-sized slot (what send_am does with the header)
//   wire/decode/<header>  decode() out of such a slot into a fresh struct
// <header>: eager (EagerHeader, 16 B), sync (SyncHeader), rts (RtsHeader, the largest),
// ack (AckHeader). `bytes_per_second` counts header bytes.
#include <benchmark/benchmark.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "p2p/wire.hpp"

namespace {

using namespace rmp::p2p;

// A header built from loop-varying values, so that nothing folds to a constant.
template <class H>
H make(std::uint64_t i);

template <>
EagerHeader make<EagerHeader>(std::uint64_t i) {
  return EagerHeader{static_cast<std::uint32_t>(i & 0xfff), 2, static_cast<std::int32_t>(i), 1};
}
template <>
SyncHeader make<SyncHeader>(std::uint64_t i) {
  return SyncHeader{make<EagerHeader>(i), i * 3};
}
template <>
RtsHeader make<RtsHeader>(std::uint64_t i) {
  RtsHeader h{make<EagerHeader>(i), i << 10, 0, i * 3, 0x7f0000000000 + (i << 12), {}};
  h.key.len = 8;
  return h;
}
template <>
AckHeader make<AckHeader>(std::uint64_t i) {
  return AckHeader{static_cast<std::uint32_t>(i), 0, i * 5};
}

// The transport's header slot (headers are at most 63 bytes, see wire.hpp).
using Slot = std::array<std::byte, 64>;

template <class H>
void BM_encode(benchmark::State& state) {
  alignas(64) Slot slot{};
  std::uint64_t i = 0;
  for (auto _ : state) {
    const H h = make<H>(i++);
    const auto b = bytes_of(h);
    std::memcpy(slot.data(), b.data(), b.size());
    benchmark::DoNotOptimize(slot);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * sizeof(H)));
}

template <class H>
void BM_decode(benchmark::State& state) {
  alignas(64) Slot slot{};
  const H sent = make<H>(12345);
  std::memcpy(slot.data(), &sent, sizeof(H));
  const std::span<const std::byte> in(slot.data(), sizeof(H));
  for (auto _ : state) {
    benchmark::DoNotOptimize(slot);
    H h{};
    const bool ok = decode(in, h);
    benchmark::DoNotOptimize(ok);
    benchmark::DoNotOptimize(h);
  }
  H back{};
  if (!decode(in, back) || std::memcmp(&back, &sent, sizeof(H)) != 0) {
    state.SkipWithError("decode did not return the encoded header");
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * sizeof(H)));
}

}  // namespace

BENCHMARK(BM_encode<EagerHeader>)->Name("wire/encode/eager");
BENCHMARK(BM_encode<SyncHeader>)->Name("wire/encode/sync");
BENCHMARK(BM_encode<RtsHeader>)->Name("wire/encode/rts");
BENCHMARK(BM_encode<AckHeader>)->Name("wire/encode/ack");
BENCHMARK(BM_decode<EagerHeader>)->Name("wire/decode/eager");
BENCHMARK(BM_decode<SyncHeader>)->Name("wire/decode/sync");
BENCHMARK(BM_decode<RtsHeader>)->Name("wire/decode/rts");
BENCHMARK(BM_decode<AckHeader>)->Name("wire/decode/ack");

BENCHMARK_MAIN();
