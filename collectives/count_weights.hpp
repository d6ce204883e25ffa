// Sums that stand for a whole array (or matrix) of counts where ranks compare their calls:
// RMP_COLL_CHECK's records (api/coll_check.hpp) and the node-shared paths' call records
// (CallSig::counts). Equal arrays give equal sums; arrays that differ in one entry always
// differ (odd weights, mod 2^64), and the same counts in another order almost always do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace rmp::coll {

// The weight of entry (from, to) of a count matrix; an array's entry q is (0, q).
inline std::uint64_t pair_weight(int from, int to, int size) {
  // splitmix64 of the pair's index; odd, so that no difference is multiplied away mod 2^64
  std::uint64_t z = static_cast<std::uint64_t>(from) * static_cast<std::uint64_t>(size) +
                    static_cast<std::uint64_t>(to) + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return (z ^ (z >> 31)) | 1;
}

// Σ pair_weight(from, q, size) × counts[q] over q < size (mod 2^64).
inline std::uint64_t weighted_counts(std::span<const std::size_t> counts, int size, int from = 0) {
  std::uint64_t sum = 0;
  for (int q = 0; q < size; ++q)
    sum += pair_weight(from, q, size) * counts[static_cast<std::size_t>(q)];
  return sum;
}

}  // namespace rmp::coll
