// Reduction kernels (collectives/reduce_ops.cpp) in isolation: for every Op x element type
// API.md allows, how many bytes of one operand are reduced per second (inout[i] op= in[i])
// at a size that stays in L1, one in L2 and one beyond the last-level cache.
// Names: reduce/<type>/<op>/<bytes>. The bytes_per_second counter is the operand size per
// second (the message bytes a collective reduces); memory traffic is three times that.
#include <benchmark/benchmark.h>

#include <complex>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collectives/reduce_ops.hpp"

namespace {

using rmp::Op;
using rmp::detail::Type;

constexpr Op kOps[] = {Op::sum, Op::prod, Op::min, Op::max, Op::land,
                       Op::lor, Op::band, Op::bor, Op::bxor};
constexpr Type kTypes[] = {Type::i8,  Type::u8,  Type::i16, Type::u16, Type::i32,
                           Type::u32, Type::i64, Type::u64, Type::f32, Type::f64,
                           Type::c32, Type::c64, Type::byte};
// 4 KiB: L1; 256 KiB: L2; 64 MiB (two of them): well past a 32 MiB LLC.
constexpr std::size_t kSizes[] = {4u << 10, 256u << 10, 64u << 20};

std::size_t elem_size(Type t) {
  switch (t) {
    case Type::i8:
    case Type::u8:
    case Type::byte:
      return 1;
    case Type::i16:
    case Type::u16:
      return 2;
    case Type::i32:
    case Type::u32:
    case Type::f32:
      return 4;
    case Type::i64:
    case Type::u64:
    case Type::f64:
    case Type::c32:
      return 8;
    case Type::c64:
      return 16;
  }
  return 1;
}

// Operands chosen so that repeated application stays in normal arithmetic: `in` is one
// (prod keeps `inout` fixed, sum grows it slowly, min/max/logical/bitwise keep it bounded),
// so no iteration drifts into denormals, infinities or NaN.
template <class T>
void fill_typed(std::vector<std::byte>& in, std::vector<std::byte>& io) {
  T* a = reinterpret_cast<T*>(in.data());
  T* b = reinterpret_cast<T*>(io.data());
  const std::size_t n = in.size() / sizeof(T);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = static_cast<T>(1);
    b[i] = static_cast<T>(static_cast<int>(i % 100) + 1);
  }
}

void fill(Type t, std::vector<std::byte>& in, std::vector<std::byte>& io) {
  switch (t) {
    case Type::i8:
      return fill_typed<std::int8_t>(in, io);
    case Type::u8:
      return fill_typed<std::uint8_t>(in, io);
    case Type::byte:
      return fill_typed<std::uint8_t>(in, io);
    case Type::i16:
      return fill_typed<std::int16_t>(in, io);
    case Type::u16:
      return fill_typed<std::uint16_t>(in, io);
    case Type::i32:
      return fill_typed<std::int32_t>(in, io);
    case Type::u32:
      return fill_typed<std::uint32_t>(in, io);
    case Type::i64:
      return fill_typed<std::int64_t>(in, io);
    case Type::u64:
      return fill_typed<std::uint64_t>(in, io);
    case Type::f32:
      return fill_typed<float>(in, io);
    case Type::f64:
      return fill_typed<double>(in, io);
    case Type::c32:
      return fill_typed<std::complex<float>>(in, io);
    case Type::c64:
      return fill_typed<std::complex<double>>(in, io);
  }
}

void reduce_kernel(benchmark::State& state, Op op, Type t) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t count = bytes / elem_size(t);
  std::vector<std::byte> in(bytes), io(bytes);
  fill(t, in, io);
  for (auto _ : state) {
    rmp::coll::reduce_apply(op, t, in.data(), io.data(), count);
    benchmark::DoNotOptimize(io.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(bytes));
}

// Short names for the benchmark ids (type_name() says "complex<float>", "std::byte").
const char* short_type(Type t) {
  static const char* names[] = {"i8",  "u8",  "i16", "u16", "i32", "u32", "i64",
                                "u64", "f32", "f64", "c32", "c64", "byte"};
  return names[static_cast<int>(t)];
}

const bool registered = [] {
  for (const Type t : kTypes) {
    for (const Op op : kOps) {
      if (!rmp::coll::op_applies(op, t)) continue;
      const std::string name =
          std::string("reduce/") + short_type(t) + "/" + rmp::coll::op_name(op);
      auto* b = benchmark::RegisterBenchmark(name.c_str(), reduce_kernel, op, t);
      for (const std::size_t s : kSizes) b->Arg(static_cast<std::int64_t>(s));
    }
  }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
