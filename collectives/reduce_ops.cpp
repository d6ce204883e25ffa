// Reduction kernels (reduce_ops.hpp): one loop per Op x element type, chosen once per call.
//
// Each loop is `io[i] = f(io[i], in[i])` (or `out[i] = f(a[i], b[i])`) over __restrict pointers
// with `f` a small function object, so the compiler sees a straight-line body it vectorises (check
// with -fopt-info-vec, or benchmarks/micro/micro_reduce for the GB/s). Semantics:
//   - integer sum and prod wrap (two's complement), as MPI implementations do: they are
//     computed on the unsigned type, widened to unsigned int first so that narrow types do
//     not promote to a signed int that could overflow (65535 * 65535);
//   - min and max are std::min(io, in) / std::max(io, in) for every type, floats included
//     (a NaN in `in` leaves `io`; a NaN in `io` stays), written as the selects they are;
//   - complex prod is std::complex's product: the textbook formula, vectorised, and for the
//     rare element whose result is NaN + NaN i (an infinity meeting a zero or a NaN), the
//     library's own recovery (C Annex G), exactly as `operator*` does it;
//   - land / lor give 0 or 1, band / bor / bxor are bitwise, on the integer types (and
//     std::byte for the bitwise ones).
// Each element's result depends only on its own two operands, so vector width never changes
// a result: every rank and every code path computes bit-identical values.
// On x86-64 with GCC or Clang, reduce_apply is also compiled for AVX2 and picked at load
// time (target_clones); the baseline version runs everywhere else. The AVX2 clone vectorises
// every kernel; the baseline x86-64 (SSE2) one leaves 64-bit integer prod, min, max, land,
// lor and complex<double> prod scalar (SSE2 has no 64-bit multiply or compare).
// `in` and `inout` must not overlap (the loops are compiled on that assumption).
#include "collectives/reduce_ops.hpp"

#include <algorithm>
#include <complex>
#include <cstdint>
#include <cstring>
#include <type_traits>

// Building with -DRMP_REDUCE_CLONES= (empty) compiles the baseline version only.
#ifndef RMP_REDUCE_CLONES
#if defined(__x86_64__) && defined(__GNUC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define RMP_REDUCE_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#endif
#ifndef RMP_REDUCE_CLONES
#define RMP_REDUCE_CLONES
#endif

// Kernels are inlined into reduce_apply and reduce_into so that each target clone gets its own
// copies.
#define RMP_KERNEL [[gnu::always_inline]] inline

namespace rmp::coll {
namespace {

using detail::Type;

// Unsigned arithmetic at least as wide as unsigned int: the promotion rules would otherwise
// turn unsigned char / short operands into (signed) int.
template <class U>
using Wide = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;

struct WrapSum {
  template <class U>
  U operator()(U a, U b) const {
    return static_cast<U>(static_cast<Wide<U>>(a) + static_cast<Wide<U>>(b));
  }
};
struct WrapProd {
  template <class U>
  U operator()(U a, U b) const {
    return static_cast<U>(static_cast<Wide<U>>(a) * static_cast<Wide<U>>(b));
  }
};
struct Plus {
  template <class T>
  T operator()(T a, T b) const {
    return a + b;
  }
};
struct Times {
  template <class T>
  T operator()(T a, T b) const {
    return a * b;
  }
};
// std::min(a, b) is (b < a) ? b : a and std::max(a, b) is (a < b) ? b : a; spelled out so the
// compiler sees a select, not a reference-returning call.
struct Min {
  template <class T>
  T operator()(T a, T b) const {
    return b < a ? b : a;
  }
};
struct Max {
  template <class T>
  T operator()(T a, T b) const {
    return a < b ? b : a;
  }
};
// Non-short-circuit forms: no branch in the loop body.
struct LogicalAnd {
  template <class T>
  T operator()(T a, T b) const {
    return static_cast<T>((a != 0) & (b != 0));
  }
};
struct LogicalOr {
  template <class T>
  T operator()(T a, T b) const {
    return static_cast<T>((a != 0) | (b != 0));
  }
};
struct BitAnd {
  template <class T>
  T operator()(T a, T b) const {
    return static_cast<T>(a & b);
  }
};
struct BitOr {
  template <class T>
  T operator()(T a, T b) const {
    return static_cast<T>(a | b);
  }
};
struct BitXor {
  template <class T>
  T operator()(T a, T b) const {
    return static_cast<T>(a ^ b);
  }
};

// The loops every kernel is made of: in place (`io` op= `in`, two streams) and apart
// (`out` = `a` op `b`, three streams). No two of their arrays may overlap.
template <class T, class F>
RMP_KERNEL void elementwise(const T* __restrict in, T* __restrict io, std::size_t n, F f) {
  for (std::size_t i = 0; i < n; ++i) io[i] = f(io[i], in[i]);
}
template <class T, class F>
RMP_KERNEL void elementwise_apart(const T* __restrict a, const T* __restrict b, T* __restrict out,
                                  std::size_t n, F f) {
  for (std::size_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
}
// out = a op b over n elements of T: with kApart three arrays, else `out` is `a` itself.
template <bool kApart, class T, class F>
RMP_KERNEL void combine(const void* a, const void* b, void* out, std::size_t n, F f) {
  if constexpr (kApart)
    elementwise_apart(static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), n,
                      f);
  else elementwise(static_cast<const T*>(b), static_cast<T*>(out), n, f);
}

// Complex product over the interleaved (re, im) scalars, in blocks: the textbook formula for
// a block is computed into a local array (vectorised), and only when some element of it came
// out NaN + NaN i is that element redone with std::complex's operator* (whose inline fast
// path is this same formula, and which calls the Annex G recovery exactly then).
template <class R>
RMP_KERNEL void complex_prod(const void* in, void* io, std::size_t n) {
  constexpr std::size_t kBlock = 32;
  // [complex.numbers]: a std::complex<R> array may be accessed as an array of 2n R.
  const R* __restrict x = static_cast<const R*>(in);
  R* __restrict y = static_cast<R*>(io);
  for (std::size_t base = 0; base < n; base += kBlock) {
    const std::size_t m = std::min(kBlock, n - base);
    R re[kBlock], im[kBlock];
    int nan_pairs = 0;
    for (std::size_t j = 0; j < m; ++j) {
      const std::size_t k = 2 * (base + j);
      const R a = y[k], b = y[k + 1], c = x[k], d = x[k + 1];
      re[j] = a * c - b * d;
      im[j] = a * d + b * c;
      nan_pairs |= static_cast<int>((re[j] != re[j]) & (im[j] != im[j]));
    }
    if (nan_pairs) [[unlikely]] {
      for (std::size_t j = 0; j < m; ++j) {
        if (re[j] != re[j] && im[j] != im[j]) {
          const std::size_t k = 2 * (base + j);
          const std::complex<R> p =
              std::complex<R>(y[k], y[k + 1]) * std::complex<R>(x[k], x[k + 1]);
          re[j] = p.real();
          im[j] = p.imag();
        }
      }
    }
    for (std::size_t j = 0; j < m; ++j) {
      const std::size_t k = 2 * (base + j);
      y[k] = re[j];
      y[k + 1] = im[j];
    }
  }
}

// Signed and unsigned integers: sum, prod and the bitwise / logical ops on the unsigned type
// (wrap-around is defined there; bit patterns are the same), min and max on the signed one.
template <bool kApart, class S>
RMP_KERNEL void apply_integer(Op op, const void* a, const void* b, void* out, std::size_t n) {
  using U = std::make_unsigned_t<S>;
  switch (op) {
    case Op::sum:
      return combine<kApart, U>(a, b, out, n, WrapSum{});
    case Op::prod:
      return combine<kApart, U>(a, b, out, n, WrapProd{});
    case Op::min:
      return combine<kApart, S>(a, b, out, n, Min{});
    case Op::max:
      return combine<kApart, S>(a, b, out, n, Max{});
    case Op::land:
      return combine<kApart, U>(a, b, out, n, LogicalAnd{});
    case Op::lor:
      return combine<kApart, U>(a, b, out, n, LogicalOr{});
    case Op::band:
      return combine<kApart, U>(a, b, out, n, BitAnd{});
    case Op::bor:
      return combine<kApart, U>(a, b, out, n, BitOr{});
    case Op::bxor:
      return combine<kApart, U>(a, b, out, n, BitXor{});
  }
}

template <bool kApart, class R>
RMP_KERNEL void apply_floating(Op op, const void* a, const void* b, void* out, std::size_t n) {
  switch (op) {
    case Op::sum:
      return combine<kApart, R>(a, b, out, n, Plus{});
    case Op::prod:
      return combine<kApart, R>(a, b, out, n, Times{});
    case Op::min:
      return combine<kApart, R>(a, b, out, n, Min{});
    case Op::max:
      return combine<kApart, R>(a, b, out, n, Max{});
    default:
      return;  // not applicable (op_applies); the API layer rejected it
  }
}

template <bool kApart, class R>
RMP_KERNEL void apply_complex(Op op, const void* a, const void* b, void* out, std::size_t n) {
  switch (op) {
    case Op::sum:  // component-wise: 2n independent sums
      return combine<kApart, R>(a, b, out, 2 * n, Plus{});
    case Op::prod:
      // Rare enough for two passes: the product is only written in place.
      if constexpr (kApart) std::memcpy(out, a, 2 * n * sizeof(R));
      return complex_prod<R>(b, out, n);
    default:
      return;  // not applicable (op_applies)
  }
}

template <bool kApart>
RMP_KERNEL void apply_bytes(Op op, const void* a, const void* b, void* out, std::size_t n) {
  switch (op) {
    case Op::band:
      return combine<kApart, std::uint8_t>(a, b, out, n, BitAnd{});
    case Op::bor:
      return combine<kApart, std::uint8_t>(a, b, out, n, BitOr{});
    case Op::bxor:
      return combine<kApart, std::uint8_t>(a, b, out, n, BitXor{});
    default:
      return;  // not applicable (op_applies)
  }
}

template <bool kApart>
RMP_KERNEL void apply(Op op, Type t, const void* a, const void* b, void* out, std::size_t n) {
  switch (t) {
    case Type::i8:
      return apply_integer<kApart, std::int8_t>(op, a, b, out, n);
    case Type::u8:
      return apply_integer<kApart, std::uint8_t>(op, a, b, out, n);
    case Type::i16:
      return apply_integer<kApart, std::int16_t>(op, a, b, out, n);
    case Type::u16:
      return apply_integer<kApart, std::uint16_t>(op, a, b, out, n);
    case Type::i32:
      return apply_integer<kApart, std::int32_t>(op, a, b, out, n);
    case Type::u32:
      return apply_integer<kApart, std::uint32_t>(op, a, b, out, n);
    case Type::i64:
      return apply_integer<kApart, std::int64_t>(op, a, b, out, n);
    case Type::u64:
      return apply_integer<kApart, std::uint64_t>(op, a, b, out, n);
    case Type::f32:
      return apply_floating<kApart, float>(op, a, b, out, n);
    case Type::f64:
      return apply_floating<kApart, double>(op, a, b, out, n);
    case Type::c32:
      return apply_complex<kApart, float>(op, a, b, out, n);
    case Type::c64:
      return apply_complex<kApart, double>(op, a, b, out, n);
    case Type::byte:
      return apply_bytes<kApart>(op, a, b, out, n);
  }
}

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::sum:
      return "sum";
    case Op::prod:
      return "prod";
    case Op::min:
      return "min";
    case Op::max:
      return "max";
    case Op::land:
      return "land";
    case Op::lor:
      return "lor";
    case Op::band:
      return "band";
    case Op::bor:
      return "bor";
    case Op::bxor:
      return "bxor";
  }
  return "?";
}

const char* type_name(Type t) {
  static const char* names[] = {"int8",           "uint8",           "int16",    "uint16", "int32",
                                "uint32",         "int64",           "uint64",   "float",  "double",
                                "complex<float>", "complex<double>", "std::byte"};
  return names[static_cast<int>(t)];
}

bool op_applies(Op op, Type t) {
  const bool integer = t <= Type::u64;
  const bool floating = t == Type::f32 || t == Type::f64;
  const bool complex = t == Type::c32 || t == Type::c64;
  switch (op) {
    case Op::sum:
    case Op::prod:
      return integer || floating || complex;
    case Op::min:
    case Op::max:
      return integer || floating;
    case Op::land:
    case Op::lor:
      return integer;
    case Op::band:
    case Op::bor:
    case Op::bxor:
      return integer || t == Type::byte;
  }
  return false;
}

RMP_REDUCE_CLONES
void reduce_apply(Op op, Type t, const void* in, void* io, std::size_t n) {
  apply<false>(op, t, io, in, io, n);
}

RMP_REDUCE_CLONES
void reduce_into(Op op, Type t, const void* a, const void* b, void* out, std::size_t n) {
  apply<true>(op, t, a, b, out, n);
}

}  // namespace rmp::coll
