#!/usr/bin/env bash
# Install test driver (registered by CMakeLists.txt beside it, label `install`):
#   1. cmake --install BUILD --prefix TMP
#   2. builds examples/external with find_package(rmp) against TMP
#   3. builds examples/ring.cpp with g++ $(pkg-config --cflags --libs rmp) (PKG_CONFIG_PATH=TMP)
#   4. runs both with TMP/bin/rlaunch -n 2, LD_LIBRARY_PATH unset (the rpaths must do)
# RMP_KEEP_INSTALL_TEST=1 keeps the temporary directory for inspection.
set -euo pipefail

build_dir="" source_dir="" cmake_bin="cmake" cxx="g++" pkg_config="pkg-config" config="Release"
while (($#)); do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --source-dir) source_dir="$2"; shift 2 ;;
    --cmake) cmake_bin="$2"; shift 2 ;;
    --cxx) cxx="$2"; shift 2 ;;
    --pkg-config) pkg_config="$2"; shift 2 ;;
    --config) config="$2"; shift 2 ;;
    *) echo "run_install_test.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if [[ -z "$build_dir" || -z "$source_dir" ]]; then
  echo "usage: run_install_test.sh --build-dir DIR --source-dir DIR [--cmake C] [--cxx C]" \
       "[--pkg-config P] [--config CFG]" >&2
  exit 2
fi
[[ -n "$config" ]] || config=Release

work="$(mktemp -d "${TMPDIR:-/tmp}/rmp-install-test.XXXXXX")"
cleanup() {
  if [[ "${RMP_KEEP_INSTALL_TEST:-0}" == 1 ]]; then
    echo "kept $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
prefix="$work/prefix"
step() { printf '\n== %s\n' "$*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

step "install $build_dir into $prefix"
"$cmake_bin" --install "$build_dir" --prefix "$prefix" --config "$config"

step "check the installed layout"
for f in include/rmp/rmp.hpp bin/rlaunch; do
  [[ -e "$prefix/$f" ]] || fail "$prefix/$f was not installed"
  echo "ok  $f"
done
pc="$(find "$prefix" -name rmp.pc -print -quit)"
config_file="$(find "$prefix" -name rmpConfig.cmake -print -quit)"
lib="$(find "$prefix" -name 'librmp.so' -print -quit)"
[[ -n "$pc" ]] || fail "rmp.pc was not installed"
[[ -n "$config_file" ]] || fail "rmpConfig.cmake was not installed"
[[ -n "$lib" ]] || fail "librmp.so was not installed"
echo "ok  ${pc#"$prefix"/}"
echo "ok  ${config_file#"$prefix"/}"
echo "ok  ${lib#"$prefix"/}"
if grep -rqF -e "$build_dir" -e "$source_dir" "$(dirname "$config_file")" "$pc"; then
  fail "installed package files refer to the build or source tree"
fi
echo "ok  package files name neither the build nor the source tree"

step "find_package(rmp): build examples/external"
"$cmake_bin" -S "$source_dir/examples/external" -B "$work/external" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release
"$cmake_bin" --build "$work/external"

step "pkg-config: $cxx ring.cpp \$(pkg-config --cflags --libs rmp)"
PKG_CONFIG_PATH="$(dirname "$pc")"
export PKG_CONFIG_PATH
flags="$("$pkg_config" --cflags --libs rmp)"
echo "pkg-config --cflags --libs rmp: $flags"
[[ "$flags" == *-std=c++20* ]] || fail "Cflags lack -std=c++20"
# Word splitting of $flags is intended: it is a list of compiler flags.
# shellcheck disable=SC2086
"$cxx" -O2 -o "$work/ring" "$source_dir/examples/ring.cpp" $flags

step "run with the installed rlaunch (LD_LIBRARY_PATH unset: rpaths must find librmp)"
unset LD_LIBRARY_PATH
for exe in "$work/ring" "$work/external/external_app"; do
  resolved="$(ldd "$exe" | awk '/librmp/ {print $3}')"
  [[ "$resolved" == "$prefix"/* ]] || fail "$exe resolves librmp to '$resolved', not into $prefix"
  echo "ok  $(basename "$exe") loads $resolved"
done
if [[ -x "$prefix/bin/rinfo" ]]; then
  "$prefix/bin/rinfo" >/dev/null || fail "installed rinfo does not run"
  echo "ok  installed rinfo runs"
fi
"$prefix/bin/rlaunch" -n 2 --timeout 60 "$work/ring"
"$prefix/bin/rlaunch" -n 2 --timeout 60 "$work/external/external_app"

printf '\ninstall test: OK\n'
