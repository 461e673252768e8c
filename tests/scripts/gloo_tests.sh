#!/usr/bin/env bash
# ddp_train --backend gloo (issue 45 item 1), with ditto's own store on rank 0
# (scripts/launch_local.sh; torchrun's agent store is torchrun_tests.sh's, run with
# DITTO_TEST_BACKEND=gloo):
#
#   1. --invariant at 2, 3 and 4 processes writes the 1-process CSV's bytes, in default
#      and in --portable arithmetic;
#   2. a run saved on 4 processes resumes on 2 (and one saved on 2 on 3) with the
#      uninterrupted run's bytes;
#   3. a rank killed with SIGKILL: rank 0 exits with status 3 at once (Gloo sees the
#      closed connection), its error naming rank 1 as exited;
#   4. a rank stopped with SIGSTOP (alive, silent): rank 0 exits with status 3 after the
#      collective timeout, its error naming rank 1 and the collective.
#
#   bash tests/scripts/gloo_tests.sh path/to/ddp_train   # built with --features gloo
#
# Every launch is bounded by `timeout`; all traffic stays on loopback.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
ddp="${1:?usage: bash tests/scripts/gloo_tests.sh path/to/ddp_train}"
ddp="$(cd "$(dirname "$ddp")" && pwd)/$(basename "$ddp")"
[ -x "$ddp" ] || { echo "not an executable: $ddp" >&2; exit 2; }
source "$ROOT/scripts/free_port.sh"
limit="${GLOO_TEST_TIMEOUT_S:-300}"

work="$(mktemp -d)"
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT
fail() { echo "gloo_tests: $*" >&2; exit 1; }

# job DIR N ARGS...: ddp_train --backend gloo on N processes in DIR (only rank 0 writes).
job() {
  local dir="$1" n="$2"
  shift 2
  mkdir -p "$dir"
  (cd "$dir" && timeout "$limit" bash "$ROOT/scripts/launch_local.sh" "$n" -- \
    "$ddp" --backend gloo --seed 7 --invariant "$@" >> log 2>&1) ||
    { cat "$dir/log" >&2; fail "$n processes in $dir failed"; }
}

# 1. Any world size, either arithmetic.
for arith in default portable; do
  flags=(--steps 40)
  [ "$arith" = portable ] && flags+=(--portable)
  for n in 1 2 3 4; do
    job "$work/$arith/w$n" "$n" "${flags[@]}" --out curve.csv
    cmp "$work/$arith/w1/curve.csv" "$work/$arith/w$n/curve.csv" ||
      fail "$arith: $n processes wrote other bytes than 1"
  done
  echo "$arith: 1, 2, 3 and 4 Gloo processes write the same CSV bytes"
done

# 2. Saved on one world size, resumed on another (the same line, more steps).
for sizes in "4 2" "2 3"; do
  read -r first second <<< "$sizes"
  dir="$work/resume-$first-$second"
  line=(--checkpoint-dir ck --save-every 20 --resume-latest --out curve.csv)
  job "$dir" "$first" --steps 20 "${line[@]}"
  job "$dir" "$second" --steps 40 "${line[@]}"
  grep -q "^resumed ck/step-" "$dir/log" || { cat "$dir/log" >&2; fail "the $second-process run did not resume"; }
  cmp "$work/default/w1/curve.csv" "$dir/curve.csv" ||
    fail "saved on $first processes and resumed on $second, the CSV differs"
  echo "resume: saved on $first processes, resumed on $second: the uninterrupted run's bytes"
done

# 3 and 4. A rank that dies, and a rank that stops. rank0 SIGNAL: runs 2 ranks, sends
# SIGNAL to rank 1 once rank 0 trains, and echoes how long rank 0 took to exit.
rank0_after() {
  local signal="$1" dir="$work/$1" port
  mkdir -p "$dir"
  port="$(free_port)"
  pids=()
  for rank in 0 1; do
    RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
      "$ddp" --backend gloo --seed 7 --invariant --steps 1000000 --collective-timeout 5 \
      --out "$dir/curve$rank.csv" > "$dir/rank$rank.log" 2>&1 &
    pids+=($!)
  done
  for _ in $(seq 600); do
    grep -q "^step " "$dir/rank0.log" 2>/dev/null && break
    sleep 0.1
  done
  grep -q "^step " "$dir/rank0.log" || { cat "$dir/rank0.log" >&2; fail "$signal: the job never trained"; }
  kill "-$signal" "${pids[1]}"
  local sent=$SECONDS status=0
  timeout 60 tail --pid="${pids[0]}" -f /dev/null || fail "$signal: rank 0 still runs 60 s later"
  wait "${pids[0]}" || status=$?
  [ "$status" = 3 ] || { cat "$dir/rank0.log" >&2; fail "$signal: rank 0 exited with $status, expected 3"; }
  kill -9 "${pids[1]}" 2>/dev/null || true
  echo $((SECONDS - sent))
}

took="$(rank0_after KILL)"
grep -Eq "rank\(s\) \[1\] exited before taking part" "$work/KILL/rank0.log" ||
  { tail -2 "$work/KILL/rank0.log" >&2; fail "KILL: rank 0's error does not name rank 1"; }
[ "$took" -le 5 ] || fail "KILL: rank 0 took ${took}s to notice a closed connection"
echo "dead rank: rank 0 ended ${took}s after rank 1 was killed: $(tail -1 "$work/KILL/rank0.log")"

took="$(rank0_after STOP)"
grep -Eq "[a-z_]+ #[0-9]+ timed out after 5s: rank 1 " "$work/STOP/rank0.log" ||
  { tail -2 "$work/STOP/rank0.log" >&2; fail "STOP: rank 0's error does not name rank 1 and the collective"; }
[ "$took" -le 15 ] || fail "STOP: rank 0 took ${took}s, more than the timeout + 10 s"
echo "stopped rank: rank 0 ended ${took}s after rank 1 stopped: $(tail -1 "$work/STOP/rank0.log")"
echo "gloo_tests: passed"
