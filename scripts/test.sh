#!/usr/bin/env bash
# Everything CI checks, on a fresh Debian 12 machine (2 cores, well under 30 minutes):
#   1. installs missing Debian packages
#   2. Release build in build/ with warnings as errors; every CTest test: unit, multi-rank,
#      launcher, examples, install, and a smoke run of each benchmark (tiny iterations)
#   3. ASan+UBSan build in build-asan/: unit, launcher and the multi-rank suite at 2 and 4 ranks
#      (less a few point-to-point variants at 4 ranks: label notsanitized,
#      tests/integration/CMakeLists.txt)
# Exits non-zero when any step fails; ends with a summary.
# Environment: RMP_BUILD_DIR (default build/), RMP_ASAN_BUILD_DIR (default build-asan/),
#              RMP_CTEST_JOBS (default 1: multi-rank tests already oversubscribe 2 cores),
#              RMP_ASAN_BUILD_TYPE (default Debug), RMP_SKIP_ASAN=1 to skip step 3.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RMP_BUILD_DIR:-$repo/build}"
build_asan="${RMP_ASAN_BUILD_DIR:-$repo/build-asan}"
jobs="$(nproc 2>/dev/null || echo 2)"
ctest_jobs="${RMP_CTEST_JOBS:-1}"
asan_type="${RMP_ASAN_BUILD_TYPE:-Debug}"
logdir="$(mktemp -d "${TMPDIR:-/tmp}/rmp-test.XXXXXX")"
start=$SECONDS

results=()        # one "STATUS  seconds  step" line per step
failed=0
tests_passed=0
tests_failed=0

step() { printf '\n=== %s\n' "$*"; }

# run_step NAME CMD...: runs CMD, records PASS/FAIL and the time; never exits.
run_step() {
  local name="$1"; shift
  local t0=$SECONDS status=PASS
  step "$name"
  echo "+ $*"
  if ! "$@"; then
    status=FAIL
    failed=1
  fi
  results+=("$(printf '%-5s %5ds  %s' "$status" $((SECONDS - t0)) "$name")")
  [[ "$status" == PASS ]]
}

# run_ctest NAME LOG ARGS...: ctest with its output also kept in LOG, counted for the summary.
run_ctest() {
  local name="$1" log="$2"; shift 2
  local rc=0
  # shellcheck disable=SC2016  # $0/$@ belong to the inner shell
  run_step "$name" bash -c 'set -o pipefail; ctest "$@" 2>&1 | tee "$0"' "$log" "$@" || rc=1
  # "NN% tests passed, F tests failed out of T"
  local line
  line="$(grep -E 'tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -1 || true)"
  if [[ -n "$line" ]]; then
    local f t
    f="$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")"
    t="$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\2/' <<<"$line")"
    tests_failed=$((tests_failed + f))
    tests_passed=$((tests_passed + t - f))
  fi
  return "$rc"
}

run_step "deps: Debian packages" "$repo/scripts/install-deps.sh" || {
  echo "test.sh: cannot install dependencies" >&2
  exit 1
}

# --- Release, warnings as errors, every test -----------------------------------------------
if run_step "release: configure ($build, -DRMP_WERROR=ON)" \
     cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DRMP_WERROR=ON &&
   run_step "release: build" cmake --build "$build" --parallel "$jobs"; then
  run_ctest "release: ctest (all tests, -j$ctest_jobs)" "$logdir/ctest-release.log" \
    --test-dir "$build" --output-on-failure --no-tests=error -j "$ctest_jobs" \
    --timeout 600 || true
fi

# --- AddressSanitizer + UndefinedBehaviorSanitizer ------------------------------------------
if [[ "${RMP_SKIP_ASAN:-0}" != 1 ]]; then
  asan_ok=1
  run_step "asan: configure ($build_asan, $asan_type, -DRMP_SANITIZE=ON)" \
    cmake -S "$repo" -B "$build_asan" -DCMAKE_BUILD_TYPE="$asan_type" -DRMP_SANITIZE=ON \
    -DRMP_BUILD_BENCHMARKS=OFF || asan_ok=0
  if ((asan_ok)); then
    run_step "asan: build" cmake --build "$build_asan" --parallel "$jobs" || asan_ok=0
  fi
  if ((asan_ok)); then
    # One regex: a test runs when any of its labels matches (repeated -L would mean AND).
    # Sanitizer settings reach every rank: rlaunch passes its environment on.
    asan_opts=(halt_on_error=1 abort_on_error=0 print_stacktrace=1 detect_leaks=1
               strict_string_checks=1 detect_stack_use_after_return=1
               check_initialization_order=1)
    ASAN_OPTIONS="$(IFS=:; echo "${asan_opts[*]}")"
    export ASAN_OPTIONS
    export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
    export LSAN_OPTIONS="suppressions=$repo/scripts/lsan.supp:print_suppressions=0"
    # (-LE: the cases tests/integration/CMakeLists.txt leaves out here, named and reasoned there.)
    run_ctest "asan: ctest -L '^(unit|np2|np4|launcher)\$' -LE '^notsanitized\$'" \
      "$logdir/ctest-asan.log" \
      --test-dir "$build_asan" --output-on-failure --no-tests=error -j "$ctest_jobs" \
      --timeout 900 -L '^(unit|np2|np4|launcher)$' -LE '^notsanitized$' || true
  fi
fi

# --- Advisory: formatting (not enforced until the tree has been formatted once) -------------
unformatted=()
if command -v clang-format >/dev/null && git -C "$repo" rev-parse >/dev/null 2>&1; then
  while read -r f; do
    if [[ -f "$repo/$f" ]] && ! clang-format --dry-run --Werror "$repo/$f" >/dev/null 2>&1; then
      unformatted+=("$f")
    fi
  done < <(git -C "$repo" ls-files -co --exclude-standard '*.cpp' '*.hpp')
fi
if ((${#unformatted[@]})); then
  printf '\nnote: %d file(s) differ from .clang-format (not a failure): %s\n' \
    "${#unformatted[@]}" "${unformatted[*]}"
fi

# --- Summary ----------------------------------------------------------------------------------
printf '\n=== summary (%ds, logs in %s)\n' $((SECONDS - start)) "$logdir"
printf '%s\n' "${results[@]}"
if ((failed)); then
  echo "test.sh: FAILED"
else
  echo "test.sh: all steps passed"
fi
echo "tests: $tests_passed passed, $tests_failed failed"
exit "$failed"
