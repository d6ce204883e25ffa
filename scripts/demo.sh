#!/usr/bin/env bash
# rmp demo on a fresh Debian 12 machine: installs what is missing, builds Release into build/,
# runs the ring example on 4 ranks and prints a short latency/bandwidth table of rmp against
# OpenMPI and MPICH.
#   scripts/demo.sh            (RMP_BUILD_DIR=DIR scripts/demo.sh builds elsewhere)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RMP_BUILD_DIR:-$repo/build}"
jobs="$(nproc 2>/dev/null || echo 2)"
step() { printf '\n=== %s\n' "$*"; }

step "1/4 Debian packages"
"$repo/scripts/install-deps.sh"

step "2/4 configure and build (Release) in $build"
cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" --parallel "$jobs"

rlaunch="$(sed -n 's/^RLAUNCH=//p' "$build/benchmarks/bench_paths.txt")"
[[ -x "$rlaunch" ]] || { echo "demo: rlaunch was not built" >&2; exit 1; }

step "3/4 ring example: rlaunch -n 4 examples/ring"
"$rlaunch" -n 4 "$build/examples/ring"

step "4/4 rmp vs OpenMPI and MPICH, quick: 8 B, 4 KiB, 64 KiB, 1 MiB, 4 MiB"
"$repo/benchmarks/compare" --build-dir "$build" --no-build --quick --sizes 8,4K,64K,1M,4M \
  --tests latency,bandwidth

printf '\ndemo: done. Full comparison: benchmarks/compare --build-dir %s\n' "$build"
