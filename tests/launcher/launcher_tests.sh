#!/usr/bin/env bash
# Launcher behaviour tests (DESIGN §4, API.md contract): usage: launcher_tests.sh CASE RLAUNCH PROBE
# Every rlaunch run is wrapped in `timeout` so a hang fails the test instead of CI.
set -u

CASE=$1
RLAUNCH=$2
PROBE=$3
WORK=$(mktemp -d "${TMPDIR:-/tmp}/rlaunch-test-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# rlaunch's socket directories go under this test's own, so even a killed rlaunch leaves nothing.
export TMPDIR=$WORK
OUT=$WORK/out
ERR=$WORK/err
RC=0
ELAPSED=0
FAILED=0
# Under RMP_SANITIZE a probe's deliberate SIGSEGV must stay a SIGSEGV, not an ASan report + exit 1.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_segv=0"

# Run a command (under timeout), capturing stdout, stderr, exit status and wall time (seconds).
run() {
  local start end
  start=$(date +%s%N)
  timeout -k 5 30 "$@" >"$OUT" 2>"$ERR" </dev/null
  RC=$?
  end=$(date +%s%N)
  ELAPSED=$(( (end - start) / 1000000 ))  # ms
}

fail() {
  echo "FAIL [$CASE]: $*" >&2
  echo "--- stdout:" >&2; cat "$OUT" >&2 2>/dev/null
  echo "--- stderr:" >&2; cat "$ERR" >&2 2>/dev/null
  FAILED=1
}
expect_rc() { [ "$RC" -eq "$1" ] || fail "exit status $RC, expected $1"; }
expect_out() { grep -qF -- "$1" "$OUT" || fail "stdout lacks '$1'"; }
expect_err() { grep -qF -- "$1" "$ERR" || fail "stderr lacks '$1'"; }
expect_no_out() { ! grep -qF -- "$1" "$OUT" || fail "stdout has '$1'"; }
expect_out_count() {
  local n
  n=$(grep -cF -- "$1" "$OUT")
  [ "$n" -eq "$2" ] || fail "stdout has $n lines with '$1', expected $2"
}
expect_faster_than() { [ "$ELAPSED" -lt "$1" ] || fail "took ${ELAPSED} ms, limit $1 ms"; }
# Passed as the probe's last argument, so this test's processes can be told from those of
# tests running in parallel.
TAG="rltest-$$-$CASE"
# No probe process of this test may survive the job.
expect_no_survivors() {
  sleep 0.2
  if pgrep -f -- "$TAG" >/dev/null; then
    fail "processes survived the job: $(pgrep -af -- "$TAG")"
    pkill -KILL -f -- "$TAG"
  fi
}

case "$CASE" in

crash_sigsegv)  # the crash is named, the others (blocked in a fence) are stopped, 128+11
  run "$RLAUNCH" -n 3 "$PROBE" crash 1 0 "$TAG"
  expect_rc 139
  expect_err "rlaunch: rank 1 (pid "
  expect_err "killed by signal 11 (SIGSEGV)"
  expect_err " on $(hostname)) killed by"  # the host is named too
  expect_faster_than 5000
  expect_no_survivors
  ;;

exit_code)  # rank 2 exits 3 → rlaunch exits 3 after stopping the others
  run "$RLAUNCH" -n 4 "$PROBE" exit 2 3 "$TAG"
  expect_rc 3
  expect_err "rlaunch: rank 2 (pid "
  expect_err "exited with status 3"
  [ "$(grep -c '^rlaunch: rank' "$ERR")" -eq 1 ] || fail "more than one rank reported as failed"
  expect_faster_than 5000
  expect_no_survivors
  ;;

exit0_without_finalize)  # HELLO then exit 0 without finalize → 1
  run "$RLAUNCH" -n 2 "$PROBE" nofinalize 1 0 "$TAG"
  expect_rc 1
  expect_err "rlaunch: rank 1 (pid "
  expect_err "exited without finalizing"
  expect_faster_than 5000
  expect_no_survivors
  ;;

exit0_without_init)  # exit 0 without initialising while the others did → 1, not their timeout
  for delay in 0 700; do  # before the others initialise, and after
    run "$RLAUNCH" -n 3 "$PROBE" noinit 1 "$delay" "$TAG"
    expect_rc 1
    expect_err "rlaunch: rank 1 (pid "
    expect_err "exited with status 0 without initialising rmp, which other ranks of the job use"
    expect_faster_than 5000
    expect_no_survivors
  done
  ;;

leftover_children)  # helpers a rank left running in the background end with the job
  run "$RLAUNCH" -n 2 sh -c "sh -c 'sleep 30; : $TAG' & echo started"
  expect_rc 0
  expect_err "rlaunch: processes started by rank(s) 0, 1 still running after the job ended; sending SIGTERM"
  expect_faster_than 5000
  expect_no_survivors
  # Helpers that end by themselves within the output drain are not reported.
  run "$RLAUNCH" -n 2 sh -c "sh -c 'sleep 0.2; echo late' &"
  expect_rc 0
  [ "$(grep -c '^late$' "$OUT")" -eq 2 ] || fail "a helper's late output was lost"
  [ ! -s "$ERR" ] || fail "stderr not empty: $(cat "$ERR")"
  ;;

abort)  # abort(code) ends the job with code and says who and why; abort(0) → 1
  run "$RLAUNCH" -n 3 "$PROBE" abort 1 7 "$TAG"
  expect_rc 7
  expect_err "rlaunch: rank 1 called abort(7): probe gave up"
  expect_faster_than 5000
  expect_no_survivors
  run "$RLAUNCH" -n 2 "$PROBE" abort 0 0
  expect_rc 1
  expect_err "rlaunch: rank 0 called abort(0): probe gave up"
  # A code whose low 8 bits are 0 is still a failure; others keep their low 8 bits.
  run "$RLAUNCH" -n 2 "$PROBE" abort 1 256
  expect_rc 1
  expect_err "rlaunch: rank 1 called abort(256): probe gave up"
  run "$RLAUNCH" -n 2 "$PROBE" abort 1 1000
  expect_rc 232
  ;;

program_without_rmp)  # judged by exit status only
  run "$RLAUNCH" -n 2 hostname
  expect_rc 0
  [ "$(wc -l <"$OUT")" -eq 2 ] || fail "expected two lines of hostname output"
  run "$RLAUNCH" -n 2 sh -c 'exit 0'
  expect_rc 0
  [ ! -s "$ERR" ] || fail "stderr not empty for a clean job"
  run "$RLAUNCH" -n 2 false
  expect_rc 1
  expect_err "exited with status 1"
  ;;

finalized_job)  # every rank HELLO + fence + finalize + exit 0 → 0, silent
  run "$RLAUNCH" -n 4 "$PROBE" finalize-ok
  expect_rc 0
  [ ! -s "$ERR" ] || fail "stderr not empty for a clean job"
  ;;

cannot_execute)
  run "$RLAUNCH" -n 2 /nonexistent/program
  expect_rc 127
  expect_err "rlaunch: cannot execute '/nonexistent/program': No such file or directory"
  expect_no_out "the file is there"
  # A script whose #! interpreter is missing: the file is there, what it needs is not.
  printf '#!/nonexistent/interpreter\necho never\n' >"$WORK/script.sh"
  chmod +x "$WORK/script.sh"
  run "$RLAUNCH" -n 2 "$WORK/script.sh"
  expect_rc 127
  expect_err "No such file or directory (the file is there: the interpreter its #! line names"
  ;;

sigint)  # SIGINT reaches every rank; rlaunch exits 130 whatever the ranks do with it
  set -m  # job control: the background rlaunch does not start with SIGINT ignored
  start=$(date +%s%N)
  timeout -k 5 30 "$RLAUNCH" -n 2 sh -c 'trap "echo got-int-$RMP_RANK; exit 0" INT; echo ready-$RMP_RANK; sleep 30 & wait' \
    >"$OUT" 2>"$ERR" </dev/null &
  job=$!
  for _ in $(seq 100); do [ "$(grep -c ready- "$OUT")" -eq 2 ] && break; sleep 0.05; done
  pid=$(pgrep -P "$job" -x rlaunch || pgrep -P "$job")
  kill -INT "$pid"
  wait "$job"
  RC=$?
  ELAPSED=$(( ($(date +%s%N) - start) / 1000000 ))
  expect_rc 130
  expect_err "rlaunch: caught SIGINT"
  expect_out "got-int-0"
  expect_out "got-int-1"
  expect_faster_than 8000
  ;;

ignored_at_entry)  # SIGINT/SIGHUP/SIGTERM ignored when rlaunch starts (nohup, a script's &
  # job) stay so; and SIGCHLD ignored by the parent does not lose the ranks' statuses
  for sig in INT HUP TERM; do
    # (sh execs rlaunch: the job is rlaunch itself; --timeout bounds it.) The ranks outlive
    # the signal by seconds, and the signal must find rlaunch still running.
    sh -c "trap '' $sig; exec \"\$0\" --timeout 30 -n 2 sh -c 'echo ready-\$RMP_RANK; sleep 3; echo done-\$RMP_RANK'" \
      "$RLAUNCH" >"$OUT" 2>"$ERR" </dev/null &
    job=$!
    for _ in $(seq 100); do [ "$(grep -c ready- "$OUT")" -eq 2 ] && break; sleep 0.05; done
    kill -0 "$job" 2>/dev/null || fail "rlaunch ended before SIG$sig was sent"
    kill -"$sig" "$job"
    wait "$job"
    RC=$?
    expect_rc 0
    expect_out "done-0"
    expect_out "done-1"
  done
  run python3 -c 'import os, signal, sys
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
os.execv(sys.argv[1], sys.argv[1:])' "$RLAUNCH" -n 2 sh -c '[ "$RMP_RANK" = 1 ] && exit 7; exit 0'
  expect_rc 7
  ;;

sigterm_escalates)  # ranks ignoring SIGTERM are SIGKILLed after the grace period; all within 5 s
  set -m
  timeout -k 5 30 "$RLAUNCH" -n 2 "$PROBE" ignore-term "$TAG" >"$OUT" 2>"$ERR" </dev/null &
  job=$!
  for _ in $(seq 100); do [ "$(grep -c ignoring "$OUT")" -eq 2 ] && break; sleep 0.05; done
  pid=$(pgrep -P "$job")
  start=$(date +%s%N)
  kill -TERM "$pid"
  wait "$job"
  RC=$?
  ELAPSED=$(( ($(date +%s%N) - start) / 1000000 ))
  expect_rc 143
  expect_err "rlaunch: caught SIGTERM"
  expect_err "sending SIGKILL"
  expect_faster_than 5000
  expect_no_survivors
  ;;

launcher_killed)  # rlaunch SIGKILLed (a CI timeout): its ranks die with it, none is orphaned
  run timeout -s KILL 1 "$RLAUNCH" -n 2 "$PROBE" ignore-term "$TAG"
  expect_rc 137
  ls -d "$WORK"/rlaunch-* >/dev/null 2>&1 || fail "rlaunch did not put its socket under TMPDIR"
  expect_out_count "ignoring SIGTERM" 2
  expect_no_survivors
  # The next rlaunch removes the killed one's socket directory (nobody listens on it), once
  # its socket is more than a minute old; a live job's directory stays, however old.
  stale=$(ls -d "$WORK"/rlaunch-*)
  [ "$(echo "$stale" | wc -l)" -eq 1 ] || fail "expected one leftover directory, saw: $stale"
  run "$RLAUNCH" -n 1 true
  [ -d "$stale" ] || fail "a socket bound less than a minute ago was removed"
  touch -h -d '2 minutes ago' "$stale/kvs"
  timeout -k 5 30 "$RLAUNCH" -n 2 sleep 3 >/dev/null 2>&1 &
  live_pid=$!
  sleep 1
  live=$(ls -d "$WORK"/rlaunch-* | grep -vxF "$stale")
  [ -n "$live" ] || fail "the live job's directory is missing"
  touch -h -d '2 minutes ago' "$live/kvs"
  run "$RLAUNCH" -n 1 true
  expect_rc 0
  [ ! -e "$stale" ] || fail "the killed launcher's directory $stale was not removed"
  [ -S "$live/kvs" ] || fail "a live job's socket $live/kvs was removed"
  wait "$live_pid" || fail "the live job failed (status $?)"
  [ -z "$(ls "$WORK" | grep '^rlaunch-')" ] || fail "directories left: $(ls "$WORK")"
  ;;

timeout)
  run "$RLAUNCH" --timeout 1 -n 2 sleep 30
  expect_rc 124
  expect_err "rlaunch: job timed out after 1 s"
  expect_faster_than 4000
  run "$RLAUNCH" --timeout 0.5 -n 2 "$PROBE" ignore-term "$TAG"
  expect_rc 124
  expect_faster_than 5000
  expect_no_survivors
  ;;

bad_arguments)  # one "rlaunch: …" line, a usage hint, exit 2
  bad() {
    run "$RLAUNCH" "$@"
    expect_rc 2
    [ "$(head -1 "$ERR" | cut -c1-9)" = "rlaunch: " ] || fail "first stderr line does not start with 'rlaunch: ' for: $*"
    expect_err "rlaunch --help"
  }
  bad -n 0 true
  bad -n abc true
  bad -n 2
  bad --bogus -n 2 true
  bad -n 2 --bind-to socket true
  bad -n 2 --param no_such_knob=1 true
  bad -n 2 --param lanes true
  bad -n 2 --profile fastest true
  bad -n 2 --timeout -1 true
  bad -n 2 --timeout abc true
  bad -n 2 -x 1BAD true
  bad -n 2 -x RMP_RANK=3 true
  bad -n 2 -x SURELY_NOT_SET_ANYWHERE_42 true
  bad -n 2 --hosts '' true
  bad -n 2 --hosts localhost:zero true
  bad -n 2 --hostfile /nonexistent/hostfile true
  bad -n 4 --hosts localhost:2 true
  bad -n 2 --agent 'ssh {host}' true
  bad -n 2 --agent 'ssh' --hosts localhost true
  bad -n 2 -n 3 true
  bad --tag-output=yes -n 2 true
  bad -n
  # Values the ranks would reject: one line naming knob, value and range, before any rank starts
  # (each rank used to die on the uncaught error, exit 134).
  bad_value() {
    local expected=$1
    shift
    run "$RLAUNCH" "$@" sh -c 'echo rank-started'
    expect_rc 2
    expect_err "rlaunch: $expected"
    expect_no_out "rank-started"
    [ "$(grep -c '^rlaunch: ' "$ERR")" -eq 1 ] || fail "not one error line for: $*"
    # The line names the setting and its allowed values: no usage hint after it.
    [ "$(wc -l <"$ERR")" -eq 1 ] || fail "more than the error line for: $* ($(cat "$ERR"))"
  }
  bad_value "--param lanes=abc: not a number (allowed 1.." -n 2 --param lanes=abc
  bad_value "--param eager_threshold=2G: out of range (allowed 0.." -n 2 --param eager_threshold=2G
  bad_value "--param eager_threshold=1=2: unexpected '=2'" -n 2 --param 'eager_threshold=1=2'
  bad_value "RMP_FRAGMENT_SIZE=abc: not a number (allowed " -n 2 -x RMP_FRAGMENT_SIZE=abc
  bad_value "RMP_WAIT_MODE=spin: " -n 2 -x RMP_WAIT_MODE=spin
  bad_value "RMP_LOG=loud: unknown value" -n 2 -x RMP_LOG=loud
  bad_value "RMP_ALLREDUCE_ALGO=butterfly: not an algorithm of allreduce (valid: recursive_doubling," \
    -n 2 -x RMP_ALLREDUCE_ALGO=butterfly
  bad_value "unknown variable RMP_EAGER_TRESHOLD (did you mean RMP_EAGER_THRESHOLD?)" \
    -n 2 -x RMP_EAGER_TRESHOLD=1K
  RMP_FRAGMENT_SIZE=abc bad_value "RMP_FRAGMENT_SIZE=abc: not a number" -n 2  # inherited
  # A bound of set values (the latency profile's depths), and the statistics file: judged here
  # as the ranks judge them (both used to abort every rank).
  bad_value "--param cq_depth=300: below sq_depth + rq_depth = 320" \
    -n 2 --profile latency --param cq_depth=300
  RMP_PROFILE=latency bad_value "RMP_CQ_DEPTH=300: below sq_depth + rq_depth = 320" \
    -n 2 -x RMP_CQ_DEPTH=300
  bad_value "RMP_STATS=json:/tmp/rmp-stats.json: all 2 ranks would write the same file" \
    -n 2 -x RMP_STATS=json:/tmp/rmp-stats.json
  bad_value "RMP_STATS=json:/tmp/rmp-stats-%q.json: unknown '%q'" \
    -n 2 -x RMP_STATS=json:/tmp/rmp-stats-%q.json
  bad_value "RMP_STATS=json:/nonexistent-dir/s%r.json: directory /nonexistent-dir" \
    -n 2 -x RMP_STATS=json:/nonexistent-dir/s%r.json
  # A bound that follows the link figures is the ranks' to judge, after calibration; not
  # where they will not calibrate (they would see the figures rlaunch sees).
  run "$RLAUNCH" -n 2 --param cq_depth=32 true
  expect_rc 0
  bad_value "--param cq_depth=32: below sq_depth + rq_depth" -n 2 -x RMP_CALIBRATE=0 \
    --param cq_depth=32
  bad_value "--param cq_depth=32: below sq_depth + rq_depth" -n 1 --param cq_depth=32
  # -x and --param override what rlaunch inherited, as they do for the ranks.
  RMP_LANES=abc run "$RLAUNCH" -n 1 -x RMP_LANES=2 --param eager_threshold=4K true
  expect_rc 0
  RMP_LANES=abc run "$RLAUNCH" -n 1 --param lanes=2 true
  expect_rc 2  # the ranks check the environment's value even when --param hides it
  run "$RLAUNCH" --help
  expect_rc 0
  expect_out "Usage: rlaunch -n N"
  ;;

hosts)  # this node only; any other host is refused, never ignored
  run "$RLAUNCH" --hosts otherhost.invalid:2 -n 2 true
  expect_rc 2
  expect_err "rlaunch: multi-node launch is not implemented yet"
  printf '# comment\nlocalhost slots=2\n\n%s slots=1 # me again\nfar.away.invalid\n' "$(hostname)" >"$WORK/hostfile"
  run "$RLAUNCH" --hostfile "$WORK/hostfile" -n 2 true
  expect_rc 2
  expect_err "multi-node launch is not implemented yet"
  expect_err "far.away.invalid"
  printf 'localhost slots=2\n%s slots=1\n' "$(hostname)" >"$WORK/hostfile"
  run "$RLAUNCH" --hostfile "$WORK/hostfile" "$PROBE" kvs  # -n from the slots: 3
  expect_rc 0
  expect_out_count " of 3 ok" 3
  printf 'localhost slots=two\n' >"$WORK/hostfile"
  run "$RLAUNCH" --hostfile "$WORK/hostfile" -n 2 true
  expect_rc 2
  expect_err "hostfile:1"
  run "$RLAUNCH" --hosts "localhost:1,$(hostname)" -n 2 --agent 'ssh {host}' true
  expect_rc 0
  ;;

tag_output)  # whole lines, [rank] prefix on stdout and stderr, partial last line flushed
  run "$RLAUNCH" --tag-output -n 2 "$PROBE" output
  expect_rc 0
  for r in 0 1; do
    expect_out "[$r] line one from $r"
    expect_out "[$r] line two from $r"
    expect_out "[$r] partial from $r"
    expect_err "[$r] error line from $r"
  done
  grep -v '^\[[01]\] ' "$OUT" | grep -q . && fail "untagged stdout line"
  # Order within one rank is kept.
  [ "$(grep '^\[0\]' "$OUT" | head -1)" = "[0] line one from 0" ] || fail "rank 0 lines out of order"
  run "$RLAUNCH" -n 1 "$PROBE" output
  expect_rc 0
  [ "$(cat "$OUT")" = "$(printf 'line one from 0\nline two from 0\npartial from 0')" ] ||
    fail "untagged output not passed through byte for byte"
  ;;

long_line)  # a line over 64 KiB: pieces end their line, another rank's line stays whole
  # Rank 0 writes 200 000 bytes of one line (the write returns only once rlaunch has read, and
  # passed on, more than 64 KiB of it), then rank 1 a short line, and only then rank 0 ends
  # its line.
  ranks='if [ "$RMP_RANK" = 0 ]; then
      head -c 200000 /dev/zero | tr "\0" a; touch "$1/written"
      while [ ! -e "$1/short" ]; do sleep 0.01; done; sleep 0.2; echo END
    else
      while [ ! -e "$1/written" ]; do sleep 0.01; done
      echo "short line from rank 1"; touch "$1/short"
    fi'
  for tag in "" "--tag-output"; do
    rm -f "$WORK/written" "$WORK/short"
    # shellcheck disable=SC2086
    run "$RLAUNCH" -n 2 $tag sh -c "$ranks" ranks "$WORK"
    expect_rc 0
    p0='' p1=''
    [ -n "$tag" ] && p0='\[0\] ' p1='\[1\] '
    grep -qx "${p1}short line from rank 1" "$OUT" || fail "rank 1's line not whole ($tag)"
    expect_out_count "short line from rank 1" 1
    expect_out_count "END" 1
    bad=$(grep -cvE "^${p0}a+(END)?\$|^${p1}short line from rank 1\$" "$OUT")
    [ "$bad" -eq 0 ] || fail "$bad line(s) mix ranks or lack the tag ($tag)"
    long=$(awk 'length($0) > 65536 + 4' "$OUT" | wc -l)
    [ "$long" -eq 0 ] || fail "$long line(s) longer than 64 KiB ($tag)"
    n=$(grep -v 'short line' "$OUT" | grep -o 'a*' | tr -d '\n' | wc -c)
    [ "$n" -eq 200000 ] || fail "rank 0's line arrived with $n of 200000 bytes ($tag)"
  done
  ;;

stdin)  # stdin goes to rank 0 only, EOF included
  start=$(date +%s%N)
  printf 'hello\nworld' | timeout -k 5 30 "$RLAUNCH" -n 2 "$PROBE" stdin >"$OUT" 2>"$ERR"
  RC=$?
  expect_rc 0
  expect_out "rank 0 stdin 11 bytes: [hello"
  expect_out "world]"
  expect_out "rank 1 stdin 0 bytes: []"
  if command -v script >/dev/null && command -v python3 >/dev/null; then
    # A terminal on stdin: rlaunch forwards it to rank 0 through a pipe; ^D ends it.
    python3 - "$RLAUNCH" "$PROBE" >"$OUT" 2>"$ERR" <<'EOF'
import os, pty, sys, time, select
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], [sys.argv[1], "-n", "2", sys.argv[2], "stdin"])
os.write(fd, b"typed line\n")
time.sleep(0.3)
os.write(fd, b"\x04")
out = b""
deadline = time.time() + 20
while time.time() < deadline:
    r, _, _ = select.select([fd], [], [], 0.5)
    if r:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
_, status = os.waitpid(pid, 0)
sys.stdout.write(out.decode(errors="replace"))
sys.exit(os.waitstatus_to_exitcode(status))
EOF
    RC=$?
    expect_rc 0
    expect_out "rank 0 stdin 11 bytes: [typed line"
    expect_out "rank 1 stdin 0 bytes: []"
  fi
  ;;

oversubscribed)  # 8 ranks on this node's cores (2 in CI): the store works, binding defaults to none
  run "$RLAUNCH" -n 8 "$PROBE" kvs
  expect_rc 0
  expect_out_count " of 8 ok" 8
  expect_out_count "local " 8
  [ "$(grep -o 'job [0-9a-f]*' "$OUT" | sort -u | wc -l)" -eq 1 ] || fail "ranks disagree on the job id"
  for r in 0 1 2 3 4 5 6 7; do expect_out "rank $r of 8 ok"; expect_out "local $r/8 node 0"; done
  cores=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))' 2>/dev/null || nproc)
  all=$(python3 -c 'import os; print(",".join(map(str, sorted(os.sched_getaffinity(0)))))' 2>/dev/null)
  if [ "$cores" -lt 8 ] && [ -n "$all" ]; then
    run "$RLAUNCH" -n 8 "$PROBE" affinity
    expect_rc 0
    expect_out_count "cpus $all" 8
  fi
  ;;

binding)  # default core when ranks <= cores: one distinct core each; none: everything
  all=$(python3 -c 'import os; print(",".join(map(str, sorted(os.sched_getaffinity(0)))))')
  ncpu=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
  if [ "$ncpu" -ge 2 ] && command -v hwloc-calc >/dev/null; then :; fi
  if [ "$ncpu" -ge 2 ]; then
    run "$RLAUNCH" -n 2 "$PROBE" affinity
    expect_rc 0
    a=$(grep '^rank 0 ' "$OUT" | awk '{print $4}')
    b=$(grep '^rank 1 ' "$OUT" | awk '{print $4}')
    [ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ] || fail "ranks 0 and 1 not on different cores ($a / $b)"
    [ "$a" != "$all" ] || fail "rank 0 not bound (cpus $a)"
  fi
  run "$RLAUNCH" -n 2 --bind-to none "$PROBE" affinity
  expect_rc 0
  expect_out_count "cpus $all" 2
  run "$RLAUNCH" -n 2 --bind-to numa "$PROBE" affinity
  expect_rc 0
  expect_out_count "cpus " 2
  run "$RLAUNCH" -n 3 --bind-to core "$PROBE" affinity  # explicit core binding wraps around
  expect_rc 0
  expect_out_count "cpus " 3
  ;;

binding_within_mask)  # rlaunch under taskset: ranks stay on the CPUs rlaunch was given
  command -v taskset >/dev/null || { echo "SKIP [$CASE]: no taskset"; exit 0; }
  # The highest allowed CPU: with two or more, a launcher that ignored its mask would bind
  # rank 0 to CPU 0 instead.
  cpu=$(python3 -c 'import os; print(max(os.sched_getaffinity(0)))')
  for bind in "" "--bind-to core" "--bind-to numa" "--bind-to none"; do
    # shellcheck disable=SC2086
    run taskset -c "$cpu" "$RLAUNCH" -n 1 $bind "$PROBE" affinity
    expect_rc 0
    expect_out "rank 0 cpus $cpu"
    expect_out_count "cpus $cpu" 1
  done
  # Two ranks on one allowed core: oversubscribed, so unbound by default (not spread onto
  # CPUs outside the mask), and the ranks are told one core, not the machine's count.
  run taskset -c "$cpu" "$RLAUNCH" -n 2 "$PROBE" affinity
  expect_rc 0
  expect_out_count "cpus $cpu" 2
  run taskset -c "$cpu" "$RLAUNCH" -n 2 --bind-to core "$PROBE" affinity
  expect_rc 0
  expect_out_count "cpus $cpu" 2
  run taskset -c "$cpu" "$RLAUNCH" -n 2 "$PROBE" env
  expect_rc 0
  expect_out_count "RMP_LOCAL_CORES=1" 2
  ;;

kvs)  # put/get/fence through the real server, parked gets, timeouts that name what they waited for
  run "$RLAUNCH" -n 4 "$PROBE" kvs
  expect_rc 0
  expect_out_count " of 4 ok" 4
  run "$RLAUNCH" -n 2 "$PROBE" get-timeout
  expect_rc 0
  expect_out_count "get-timeout: bootstrap get: key 'never-put-key' was not put within 300 ms" 2
  run "$RLAUNCH" -n 3 "$PROBE" fence-timeout
  expect_rc 0
  expect_out "fence-timeout: bootstrap fence (rank 0): timed out after 300 ms with 1 of 3 ranks arrived; missing: ranks 1, 2"
  expect_out_count "fenced" 3
  run "$RLAUNCH" -n 3 "$PROBE" fence-peer-exits
  expect_rc 0
  expect_out_count "fence-peer-exits: bootstrap fence (rank " 2
  expect_out "rank 2 exited without reaching the fence"
  expect_faster_than 5000
  ;;

token_mismatch)  # a wrong token is refused; garbage before HELLO costs only that connection
  run "$RLAUNCH" -n 2 "$PROBE" bad-token
  expect_rc 0
  expect_out_count "rejected rank" 2
  expect_out "wrong job token"
  run "$RLAUNCH" -n 3 "$PROBE" garbage
  expect_rc 0
  expect_out_count "garbage: closed after" 3
  expect_out_count " of 3 ok" 3
  ;;

shm_cleanup)  # rmp-<job id>-* segments left by a crash are removed; other jobs' are not
  touch /dev/shm/rmp-000000000000-other-job
  run "$RLAUNCH" -n 2 "$PROBE" shm-leak "$TAG"
  expect_rc 139
  n=$(grep -c '^created /dev/shm/rmp-' "$OUT")
  [ "$n" -eq 2 ] || fail "expected 2 segments created, saw $n"
  for f in $(grep '^created ' "$OUT" | awk '{print $2}'); do
    [ ! -e "$f" ] || fail "$f still exists after the job"
  done
  [ -e /dev/shm/rmp-000000000000-other-job ] || fail "another job's segment was removed"
  rm -f /dev/shm/rmp-000000000000-other-job
  ;;

environment)  # the variables every rank gets (API.md), and what the flags add
  export PROBE_X_FROM_LAUNCHER=inherited
  run "$RLAUNCH" -n 2 -x PROBE_X=42 --profile latency --param lanes=2 --param spin_us=3 --param lanes=4 \
    --print-params "$PROBE" env
  expect_rc 0
  for r in 0 1; do
    expect_out "rank $r RMP_RANK=$r"
    expect_out "rank $r RMP_LOCAL_RANK=$r"
    expect_out "rank $r RMP_SIZE=2"
    expect_out "rank $r RMP_LOCAL_SIZE=2"
    expect_out "rank $r RMP_NODE_ID=0"
    expect_out "rank $r RMP_PROFILE=latency"
    expect_out "rank $r RMP_CLI_PARAMS=lanes=4;spin_us=3"
    expect_out "rank $r RMP_PRINT_PARAMS=1"
    expect_out "rank $r PROBE_X=42"
  done
  grep -qE '^rank 0 RMP_JOB_TOKEN=[0-9a-f]{32}$' "$OUT" || fail "token is not 32 hex digits"
  grep -qE '^rank 0 RMP_JOB_ID=[0-9a-f]{12}$' "$OUT" || fail "job id is not 12 hex digits"
  token=$(grep '^rank 0 RMP_JOB_TOKEN=' "$OUT" | cut -d= -f2)
  jobid=$(grep '^rank 0 RMP_JOB_ID=' "$OUT" | cut -d= -f2)
  case "$token" in *"$jobid"*) fail "job id is part of the token";; esac
  kvs=$(grep '^rank 0 RMP_KVS=' "$OUT" | cut -d= -f2)
  case "$kvs" in unix:/*) ;; *) fail "RMP_KVS '$kvs' is not unix:/path";; esac
  sock=${kvs#unix:}
  [ ! -e "$sock" ] && [ ! -e "$(dirname "$sock")" ] || fail "socket directory $(dirname "$sock") left behind"
  # A variable given twice reaches the ranks once, with its last value.
  run "$RLAUNCH" -n 1 -x PROBE_X=1 -x RMP_PROFILE=storage -x PROBE_X=2 --profile training "$PROBE" env
  expect_out "rank 0 PROBE_X=2"
  expect_out "rank 0 RMP_PROFILE=training"
  run "$RLAUNCH" -n 1 -x PROBE_X=1 -x PROBE_X=2 sh -c 'env | grep -c "^PROBE_X="'
  expect_out "1"
  # -x VAR takes rlaunch's own value.
  run "$RLAUNCH" -n 1 -x PROBE_X_FROM_LAUNCHER sh -c 'echo "x=$PROBE_X_FROM_LAUNCHER"'
  expect_out "x=inherited"
  # The token never appears on a command line: not in rlaunch's, not in the ranks'.
  run "$RLAUNCH" -n 1 sh -c 'cat /proc/$PPID/cmdline | tr "\0" " "; echo; echo "tok=$RMP_JOB_TOKEN"'
  token=$(grep '^tok=' "$OUT" | cut -d= -f2)
  [ -n "$token" ] && [ "$(grep -cF "$token" "$OUT")" -eq 1 ] || fail "token found on a command line"
  ;;

bootstrap_outside_launcher)  # singleton without variables; an error naming what is missing otherwise
  run env -u RMP_RANK -u RMP_SIZE -u RMP_KVS -u RMP_JOB_TOKEN "$PROBE" singleton
  expect_rc 0
  expect_out "singleton ok single-"
  run env RMP_RANK=0 RMP_SIZE=2 "$PROBE" partial-env
  expect_rc 0
  expect_out "RMP_KVS, RMP_JOB_TOKEN are not"
  run env RMP_RANK=x RMP_SIZE=2 RMP_KVS=unix:/nonexistent/sock RMP_JOB_TOKEN=t RMP_JOB_ID=abc "$PROBE" partial-env
  expect_rc 0
  expect_out "RMP_RANK='x'"
  run env RMP_RANK=0 RMP_SIZE=2 RMP_KVS=unix:/nonexistent/sock RMP_JOB_TOKEN=t RMP_JOB_ID=abc "$PROBE" partial-env
  expect_rc 0
  expect_out "/nonexistent/sock"
  expect_out "No such file or directory"
  ;;

partial_line)  # an untagged last line without a newline is ended before another rank's output
  # Rank 1 writes once rank 0's stream has ended (its file says so): in either order of the
  # two, no line joins them.
  run "$RLAUNCH" -n 2 sh -c 'if [ "$RMP_RANK" = 0 ]; then printf partial; exec >&-; touch "$1/p0"
    else for _ in $(seq 100); do [ -e "$1/p0" ] && break; sleep 0.05; done; echo whole; fi' sh "$WORK"
  expect_rc 0
  [ "$(sort "$OUT")" = "$(printf 'partial\nwhole')" ] || fail "a rank's unfinished line joined another's"
  ;;

slow_reader)  # a reader that lags holds up the ranks' writes, never rlaunch: --timeout and SIGTERM act at once
  ranks_of_test() {  # the job's processes but rlaunch (and the timeout around it)
    for p in $(pgrep -f -- "$TAG"); do
      case "$(cat "/proc/$p/comm" 2>/dev/null)" in rlaunch | timeout | "") ;; *) echo "$p" ;; esac
    done
  }
  for how in timeout sigterm; do
    args=()
    [ "$how" = timeout ] && args=(--timeout 1)
    want="rlaunch: job timed out after 1 s"
    [ "$how" = sigterm ] && want="rlaunch: caught SIGTERM, stopping 2 rank(s)"
    start=$(date +%s%N)
    (timeout -k 5 60 "$RLAUNCH" "${args[@]}" -n 2 sh -c "yes | head -c 20000000; sleep 30; : $TAG" \
      2>"$ERR" </dev/null | (sleep 15; cat >/dev/null)) &
    job=$!
    for _ in $(seq 200); do [ -n "$(ranks_of_test)" ] && break; sleep 0.05; done
    if [ "$how" = sigterm ]; then
      sleep 0.5  # the ranks fill their pipes and rlaunch's queue meanwhile
      for p in $(pgrep -f -- "$TAG"); do
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = rlaunch ] && kill -TERM "$p"
      done
    fi
    # The reader sleeps 15 s: rlaunch must act, and the ranks end, well before it wakes.
    for _ in $(seq 200); do
      grep -qF -- "$want" "$ERR" && [ -z "$(ranks_of_test)" ] && break
      sleep 0.05
    done
    ELAPSED=$(( ($(date +%s%N) - start) / 1000000 ))
    grep -qF -- "$want" "$ERR" || fail "$how: rlaunch did not act while the reader lagged"
    [ -z "$(ranks_of_test)" ] || fail "$how: ranks still running while the reader lags: $(ranks_of_test)"
    expect_faster_than 14000  # checked before the reader woke up
    wait "$job"  # rlaunch itself ends once the reader has taken what was queued
  done
  expect_no_survivors
  ;;

closed_stdout)  # `rlaunch … | head`: the ranks' next writes fail as in a pipeline, and the job ends
  start=$(date +%s%N)
  timeout -k 5 30 "$RLAUNCH" -n 2 sh -c "yes $TAG" 2>"$ERR" </dev/null | head -1 >"$OUT"
  RC=${PIPESTATUS[0]}
  ELAPSED=$(( ($(date +%s%N) - start) / 1000000 ))
  expect_rc 141
  expect_out "$TAG"
  # The rank's shell reports its `yes`'s SIGPIPE as status 141, or is itself `yes` (exec).
  grep -qE "rlaunch: rank [01] .*(killed by signal 13 \(SIGPIPE\)|exited with status 141)" "$ERR" ||
    fail "the rank's SIGPIPE not reported"
  expect_faster_than 5000
  expect_no_survivors
  ;;

failed_write)  # a write that fails other than EPIPE (a full disk) is reported and fails the job
  [ -c /dev/full ] || { echo "FAIL [$CASE]: no /dev/full to write to" >&2; exit 1; }
  timeout -k 5 30 "$RLAUNCH" -n 2 echo hello >/dev/full 2>"$ERR" </dev/null
  RC=$?
  expect_rc 1
  expect_err "rlaunch: cannot write to standard output: No space left on device"
  ;;

forwarded_signals)  # SIGUSR1/2 reach the ranks; Ctrl-Z stops the ranks and rlaunch, SIGCONT continues them
  set -m  # job control: the background rlaunch does not start with signals ignored
  timeout -k 5 30 "$RLAUNCH" -n 2 sh -c 'trap "echo usr1-$RMP_RANK" USR1; trap "echo usr2-$RMP_RANK" USR2
    echo ready-$RMP_RANK; i=0; while [ $i -lt 40 ]; do sleep 0.05; i=$((i+1)); done; echo end-$RMP_RANK' \
    "$TAG" >"$OUT" 2>"$ERR" </dev/null &
  job=$!
  for _ in $(seq 100); do [ "$(grep -c ready- "$OUT")" -eq 2 ] && break; sleep 0.05; done
  rl=$(pgrep -P "$job" -x rlaunch || pgrep -P "$job")
  kill -USR1 "$rl"
  kill -USR2 "$rl"
  sleep 0.3
  kill -TSTP "$rl"
  sleep 0.5
  case "$(ps -o stat= -p "$rl")" in T*) ;; *) fail "rlaunch not stopped by SIGTSTP" ;; esac
  for p in $(pgrep -P "$rl"); do
    case "$(ps -o stat= -p "$p")" in T*) ;; *) fail "rank process $p not stopped with rlaunch" ;; esac
  done
  kill -CONT "$rl"
  wait "$job"
  RC=$?
  expect_rc 0
  for r in 0 1; do
    expect_out "usr1-$r"
    expect_out "usr2-$r"
    expect_out "end-$r"
  done
  [ ! -s "$ERR" ] || fail "stderr not empty"
  expect_no_survivors
  ;;

*)
  echo "unknown case '$CASE'" >&2
  exit 2
  ;;
esac

if [ "$FAILED" -ne 0 ]; then exit 1; fi
echo "PASS [$CASE]"
