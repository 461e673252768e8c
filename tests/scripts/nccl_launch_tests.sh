#!/usr/bin/env bash
# The NCCL launch path end to end (issue 23 item 3), one process per rank, launched the
# way torchrun launches them (scripts/launch_local.sh sets RANK, WORLD_SIZE, LOCAL_RANK,
# LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), each rank on GPU LOCAL_RANK:
#
#   1. ddp_train --backend nccl --invariant on 2, 3 and 4 processes writes the same CSV
#      bytes as on 1, and on 3 also with --portable (issue 28: a world size that divides
#      neither the 8 micro-shards nor the batch of 128);
#   2. a checkpoint of a 4-process job resumes on 2 processes with the same curve;
#   3. only rank 0 writes the CSV and the checkpoint (each rank runs in its own working
#      folder, and every folder but rank 0's stays empty);
#   4. strangers knocking while a 2-process job forms (an HTTP request, and a process of
#      another job checking in as rank 1) neither end the job nor take a slot.
#
#   bash tests/scripts/nccl_launch_tests.sh path/to/ddp_train   # built with --features nccl
#
# Meant for the CUDA stand-in (host-executed), which it asks for 4 GPUs; with real
# NCCL it needs 4 GPUs on this machine. Every launch is bounded by `timeout`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
ddp="${1:?usage: bash tests/scripts/nccl_launch_tests.sh path/to/ddp_train}"
ddp="$(cd "$(dirname "$ddp")" && pwd)/$(basename "$ddp")"
[ -x "$ddp" ] || { echo "not an executable: $ddp" >&2; exit 2; }
if [ -n "${DITTO_CUDA_STANDIN:-}" ]; then
  export DITTO_CUDA_STANDIN_DEVICES=4
fi
limit="${NCCL_LAUNCH_TEST_TIMEOUT_S:-600}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# launch NAME N ARGS...: ddp_train --backend nccl ARGS on N processes, rank r working in
# $work/NAME/rank<r>; prints rank 0's last line. With HOLD_RANK1_FOR set to a file, rank 1
# starts only once that file says "did not prove the job token" (at most 60 s later):
# the strangers' test uses it so that the stranger, not rank 1, is first at the master.
rank_prologue='if [ "$RANK" = 1 ] && [ -n "${HOLD_RANK1_FOR:-}" ]; then
  for _ in $(seq 600); do grep -qs "did not prove the job token" "$HOLD_RANK1_FOR" && break; sleep 0.1; done
fi
'
launch() {
  local name="$1" n="$2"
  shift 2
  mkdir -p "$work/$name"
  (
    cd "$work/$name"
    timeout "$limit" bash "$ROOT/scripts/launch_local.sh" "$n" -- \
      bash -c "$rank_prologue"'mkdir -p "rank$RANK" && cd "rank$RANK" && exec "$@"' rank-folder \
      "$ddp" --backend nccl "$@" > "$work/$name.log" 2>&1
  ) || { echo "FAILED: $name on $n processes" >&2; cat "$work/$name.log" >&2; return 1; }
  tail -1 "$work/$name.log"
}

# Rank 0 wrote `file`; no other rank wrote anything at all.
only_rank0_wrote() {
  local name="$1" n="$2" file="$3" r
  [ -s "$work/$name/rank0/$file" ] || { echo "$name: rank 0 did not write $file" >&2; return 1; }
  for ((r = 1; r < n; r++)); do
    if [ -n "$(ls -A "$work/$name/rank$r")" ]; then
      echo "$name: rank $r wrote $(ls -A "$work/$name/rank$r" | tr '\n' ' ')" >&2
      return 1
    fi
  done
}

common=(--seed 7 --invariant --steps 100)
launch w1 1 "${common[@]}" --out curve.csv
for n in 2 3 4; do
  launch "w$n" "$n" "${common[@]}" --out curve.csv
  cmp "$work/w1/rank0/curve.csv" "$work/w$n/rank0/curve.csv"
  only_rank0_wrote "w$n" "$n" curve.csv
  echo "$n processes: the CSV is byte-identical to 1 process's; only rank 0 wrote it"
done

launch p1 1 "${common[@]}" --portable --out curve.csv
launch p3 3 "${common[@]}" --portable --out curve.csv
cmp "$work/p1/rank0/curve.csv" "$work/p3/rank0/curve.csv"
if cmp -s "$work/w1/rank0/curve.csv" "$work/p1/rank0/curve.csv"; then
  echo "--portable gave the default curve: the check above could not fail" >&2
  exit 1
fi
echo "3 processes, --portable: the CSV is byte-identical to 1 process's"

# A 4-process job saved after step 50, resumed on 2 processes.
launch s4 4 "${common[@]}" --save-at 50 --checkpoint ck.safetensors --out s.csv
only_rank0_wrote s4 4 ck.safetensors
ck="$work/s4/rank0/ck.safetensors"
launch r2 2 --resume "$ck" --steps 100 --out r.csv --compare "$work/w1/rank0/curve.csv"
grep -q "identical: yes" "$work/r2.log"
only_rank0_wrote r2 2 r.csv
# Steps 51..100: rows 52..101 of the straight CSV (after its header), rows 2..51 resumed.
cmp <(sed -n '52,101p' "$work/w1/rank0/curve.csv") <(sed -n '2,51p' "$work/r2/rank0/r.csv")
echo "a 4-process checkpoint resumed on 2 processes: steps 51..100 byte-identical to the straight run"

# Strangers at the master's port while a 2-process job forms: an HTTP health check and
# a ddp_train of another job (another DITTO_JOB_ID) checking in as rank 1. Both start
# polling for the port before the job is launched, so they knock while it forms; the
# job's own rank 1 is held back until the stranger has been refused, because on a loaded
# machine it could otherwise win the race to the master, the job would form without
# the stranger ever knocking, and the test would prove nothing.
source "$ROOT/scripts/free_port.sh"
port="$(free_port)"
(
  for _ in $(seq 400); do
    if exec 3<>"/dev/tcp/127.0.0.1/$port"; then
      printf 'GET / HTTP/1.1\r\nHost: master\r\n\r\n' >&3
      exec 3>&-
      break
    fi 2>/dev/null
    sleep 0.05
  done
) &
http=$!
mkdir -p "$work/foreign"
(cd "$work/foreign" && DITTO_JOB_ID="someone-elses-job" RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 \
  LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
  timeout 120 "$ddp" --backend nccl "${common[@]}" --out curve.csv > "$work/foreign.log" 2>&1) &
foreign=$!
sleep 1
HOLD_RANK1_FOR="$work/foreign.log" MASTER_PORT="$port" launch strays 2 "${common[@]}" --out curve.csv
wait "$http" || true
kill "$foreign" 2>/dev/null || true # had it knocked after the job formed, it would still wait
if wait "$foreign"; then
  echo "strays: the process of another job was admitted" >&2
  cat "$work/foreign.log" >&2
  exit 1
fi
cmp "$work/w1/rank0/curve.csv" "$work/strays/rank0/curve.csv"
grep -q "did not prove the job token" "$work/foreign.log" ||
  { echo "strays: the other job's rank 1 was not refused for its token" >&2; cat "$work/foreign.log" >&2; exit 1; }
echo "strangers during formation (HTTP, another job's rank 1): refused; the 2-process CSV is byte-identical"

# The README's torchrun lines (torchrun's own agent store, restarts) are run by
# tests/scripts/torchrun_tests.sh, with torch from scripts/install_torch.sh.
