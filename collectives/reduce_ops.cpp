#include "collectives/reduce_ops.hpp"

#include <algorithm>
#include <complex>
#include <cstdint>

namespace rmp::coll {
namespace {

using detail::Type;

template <class T>
void apply_arith(Op op, const T* in, T* io, std::size_t n) {
  switch (op) {
    case Op::sum:
      for (std::size_t i = 0; i < n; ++i) io[i] = io[i] + in[i];
      return;
    case Op::prod:
      for (std::size_t i = 0; i < n; ++i) io[i] = io[i] * in[i];
      return;
    default:
      break;
  }
  if constexpr (!std::is_same_v<T, std::complex<float>> && !std::is_same_v<T, std::complex<double>>) {
    switch (op) {
      case Op::min:
        for (std::size_t i = 0; i < n; ++i) io[i] = std::min(io[i], in[i]);
        return;
      case Op::max:
        for (std::size_t i = 0; i < n; ++i) io[i] = std::max(io[i], in[i]);
        return;
      default:
        break;
    }
    if constexpr (std::is_integral_v<T>) {
      switch (op) {
        case Op::land:
          for (std::size_t i = 0; i < n; ++i) io[i] = static_cast<T>((io[i] != 0) && (in[i] != 0));
          return;
        case Op::lor:
          for (std::size_t i = 0; i < n; ++i) io[i] = static_cast<T>((io[i] != 0) || (in[i] != 0));
          return;
        case Op::band:
          for (std::size_t i = 0; i < n; ++i) io[i] = static_cast<T>(io[i] & in[i]);
          return;
        case Op::bor:
          for (std::size_t i = 0; i < n; ++i) io[i] = static_cast<T>(io[i] | in[i]);
          return;
        case Op::bxor:
          for (std::size_t i = 0; i < n; ++i) io[i] = static_cast<T>(io[i] ^ in[i]);
          return;
        default:
          break;
      }
    }
  }
}

// Integer sums and products wrap (two's complement) like MPI implementations do; computing
// them on the unsigned type keeps that defined behaviour.
template <class S>
void apply_int(Op op, const void* in, void* io, std::size_t n) {
  using U = std::make_unsigned_t<S>;
  if (op == Op::sum || op == Op::prod)
    apply_arith(op, static_cast<const U*>(in), static_cast<U*>(io), n);
  else
    apply_arith(op, static_cast<const S*>(in), static_cast<S*>(io), n);
}

void apply_bytes(Op op, const void* in, void* io, std::size_t n) {
  apply_arith(op, static_cast<const std::uint8_t*>(in), static_cast<std::uint8_t*>(io), n);
}

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::sum: return "sum";
    case Op::prod: return "prod";
    case Op::min: return "min";
    case Op::max: return "max";
    case Op::land: return "land";
    case Op::lor: return "lor";
    case Op::band: return "band";
    case Op::bor: return "bor";
    case Op::bxor: return "bxor";
  }
  return "?";
}

const char* type_name(Type t) {
  static const char* names[] = {"int8",  "uint8",  "int16",  "uint16",          "int32",
                                "uint32", "int64", "uint64", "float",           "double",
                                "complex<float>", "complex<double>", "std::byte"};
  return names[static_cast<int>(t)];
}

bool op_applies(Op op, Type t) {
  const bool integer = t <= Type::u64;
  const bool floating = t == Type::f32 || t == Type::f64;
  const bool complex = t == Type::c32 || t == Type::c64;
  switch (op) {
    case Op::sum:
    case Op::prod: return integer || floating || complex;
    case Op::min:
    case Op::max: return integer || floating;
    case Op::land:
    case Op::lor: return integer;
    case Op::band:
    case Op::bor:
    case Op::bxor: return integer || t == Type::byte;
  }
  return false;
}

void reduce_apply(Op op, Type t, const void* in, void* io, std::size_t n) {
  switch (t) {
    case Type::i8: return apply_int<std::int8_t>(op, in, io, n);
    case Type::u8: return apply_int<std::uint8_t>(op, in, io, n);
    case Type::i16: return apply_int<std::int16_t>(op, in, io, n);
    case Type::u16: return apply_int<std::uint16_t>(op, in, io, n);
    case Type::i32: return apply_int<std::int32_t>(op, in, io, n);
    case Type::u32: return apply_int<std::uint32_t>(op, in, io, n);
    case Type::i64: return apply_int<std::int64_t>(op, in, io, n);
    case Type::u64: return apply_int<std::uint64_t>(op, in, io, n);
    case Type::f32: return apply_arith(op, static_cast<const float*>(in), static_cast<float*>(io), n);
    case Type::f64: return apply_arith(op, static_cast<const double*>(in), static_cast<double*>(io), n);
    case Type::c32:
      return apply_arith(op, static_cast<const std::complex<float>*>(in),
                         static_cast<std::complex<float>*>(io), n);
    case Type::c64:
      return apply_arith(op, static_cast<const std::complex<double>*>(in),
                         static_cast<std::complex<double>*>(io), n);
    case Type::byte: return apply_bytes(op, in, io, n);
  }
}

}  // namespace rmp::coll
