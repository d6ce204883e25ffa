// Inputs and sequential references for the collectives' tests (unit and multi-rank): byte
// patterns that depend on the sender, the element and a salt; element values whose reduction
// is exact in any order (so every algorithm must match the sequential fold); values whose
// reduction is not (for the bit-identity checks); and the reference fold in rank order.
#pragma once

#include <rmp/rmp.hpp>

#include <complex>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

namespace rmp::testing {

inline std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
inline std::uint64_t h(int rank, std::size_t i, std::uint64_t salt) {
  return mix(mix(salt * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(rank)) + i);
}
inline std::byte pattern(int rank, std::size_t i, std::uint64_t salt) {
  return static_cast<std::byte>(h(rank, i, salt) >> 56);
}
inline std::vector<std::byte> pattern_block(int rank, std::size_t n, std::uint64_t salt) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = pattern(rank, i, salt);
  return v;
}

template <class T>
constexpr bool is_complex =
    std::is_same_v<T, std::complex<float>> || std::is_same_v<T, std::complex<double>>;

// Inputs whose reduction is exact in any order (wrapping integers; small integers, powers of
// two and plain values for floating min/max), so every algorithm must match the sequential
// fold bit for bit.
template <class T>
T exact_value(Op op, int rank, std::size_t i, std::uint64_t salt) {
  const std::uint64_t x = h(rank, i, salt);
  if constexpr (std::is_same_v<T, std::byte>) {
    return static_cast<std::byte>(x);
  } else if constexpr (std::is_integral_v<T>) {
    if (op == Op::land || op == Op::lor) return static_cast<T>(x % 3);
    return static_cast<T>(x);
  } else if constexpr (is_complex<T>) {
    using R = typename T::value_type;
    // Components in {−2, −1, 1, 2}: no zero factor, so no signed zero whose sign would
    // depend on the order (x − x is +0 in every order).
    constexpr R kc[] = {-2, -1, 1, 2};
    if (op == Op::prod) return T(kc[x % 4], kc[(x >> 8) % 4]);
    return T(static_cast<R>(static_cast<int>(x % 17) - 8),
             static_cast<R>(static_cast<int>((x >> 8) % 17) - 8));
  } else {
    if (op == Op::prod) {
      constexpr T kf[] = {1, 2, 0.5, -1, -2};
      return kf[x % 5];
    }
    if (op == Op::sum) return static_cast<T>(static_cast<int>(x % 17) - 8);
    return static_cast<T>(static_cast<double>(static_cast<std::int64_t>(x % 20001) - 10000) / 8);
  }
}

// Inputs whose reduction does depend on the order (for the bit-identity checks): arbitrary
// floating values, with NaN and ±0 for min and max.
template <class T>
T messy_value(Op op, int rank, std::size_t i, std::uint64_t salt) {
  const std::uint64_t x = h(rank, i, salt);
  if constexpr (is_complex<T>) {
    using R = typename T::value_type;
    return T(static_cast<R>(static_cast<double>(x >> 11) * 0x1p-45),
             static_cast<R>(static_cast<double>(x & 0xfffff) * 1e-3 - 3));
  } else if constexpr (std::is_floating_point_v<T>) {
    if ((op == Op::min || op == Op::max) && x % 7 == 0) return x % 2 ? T(0.0) : T(-0.0);
    if ((op == Op::min || op == Op::max) && x % 11 == 0) return std::numeric_limits<T>::quiet_NaN();
    return static_cast<T>(static_cast<double>(x >> 11) * 0x1p-45 * ((x & 1) ? -1 : 1));
  } else {
    return exact_value<T>(op, rank, i, salt);
  }
}

template <class T>
T apply(Op op, T a, T b) {  // a op b, as the reference defines it
  if constexpr (std::is_same_v<T, std::byte>) {
    switch (op) {
      case Op::band:
        return a & b;
      case Op::bor:
        return a | b;
      default:
        return a ^ b;
    }
  } else if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    switch (op) {
      case Op::sum:
        return static_cast<T>(
            static_cast<U>(static_cast<W>(static_cast<U>(a)) + static_cast<W>(static_cast<U>(b))));
      case Op::prod:
        return static_cast<T>(
            static_cast<U>(static_cast<W>(static_cast<U>(a)) * static_cast<W>(static_cast<U>(b))));
      case Op::min:
        return b < a ? b : a;
      case Op::max:
        return a < b ? b : a;
      case Op::land:
        return static_cast<T>(a != 0 && b != 0);
      case Op::lor:
        return static_cast<T>(a != 0 || b != 0);
      case Op::band:
        return static_cast<T>(a & b);
      case Op::bor:
        return static_cast<T>(a | b);
      case Op::bxor:
        return static_cast<T>(a ^ b);
    }
    return a;
  } else if constexpr (is_complex<T>) {
    return op == Op::sum ? a + b : a * b;
  } else {
    switch (op) {
      case Op::sum:
        return a + b;
      case Op::prod:
        return a * b;
      case Op::min:
        return b < a ? b : a;
      default:
        return a < b ? b : a;
    }
  }
}

// Reduction of ranks [first, last) at element i of exact_value inputs, in rank order.
template <class T>
T fold(Op op, int first, int last, std::size_t i, std::uint64_t salt) {
  T acc = exact_value<T>(op, first, i, salt);
  for (int r = first + 1; r < last; ++r) acc = apply(op, acc, exact_value<T>(op, r, i, salt));
  return acc;
}

// Whether API.md allows `op` on elements of type T.
template <class T>
constexpr bool op_allowed(Op op) {
  if constexpr (std::is_same_v<T, std::byte>)
    return op == Op::band || op == Op::bor || op == Op::bxor;
  else if constexpr (std::is_integral_v<T>) return true;
  else if constexpr (is_complex<T>) return op == Op::sum || op == Op::prod;
  else return op == Op::sum || op == Op::prod || op == Op::min || op == Op::max;
}

}  // namespace rmp::testing
