#!/usr/bin/env bash
# A rank that dies inside an NCCL job (issue 20; docs/distributed.md §5): ddp_train
# --backend nccl on 2 processes, torchrun's variables set by hand, rank 1 killed with
# SIGKILL while the job trains. NCCL has no timeout of its own, so rank 0 would wait in
# its next collective forever; its watchdog must abort the communicator after
# --collective-timeout (5 s here) and rank 0 must exit with status 3, within the timeout
# + 10 s, and the typed error naming the collective, its sequence number and the rank
# that never arrived, read from the progress each rank writes to the job's store
# (issue 27 item 4: "all_reduce #70 timed out after 5s: rank 1 last entered collective
# #69 ...").
#
#   bash tests/scripts/nccl_dead_rank.sh path/to/ddp_train   # built with --features nccl
#
# Meant for the CUDA stand-in (host-executed), whose NCCL blocks like NCCL on a dead
# peer; its own safety valve is set far beyond the collective timeout, so that the
# watchdog is what ends the wait. With real NCCL it needs 2 GPUs.
set -euo pipefail
ddp="${1:?usage: bash tests/scripts/nccl_dead_rank.sh path/to/ddp_train}"
[ -x "$ddp" ] || { echo "not an executable: $ddp" >&2; exit 2; }
if [ -n "${DITTO_CUDA_STANDIN:-}" ]; then
  export DITTO_CUDA_STANDIN_DEVICES=2 DITTO_CUDA_STANDIN_NCCL_TIMEOUT_S=300
fi
work="$(mktemp -d)"
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT

source "$(dirname "$0")/../../scripts/free_port.sh"
port="$(free_port)"
export MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" WORLD_SIZE=2 LOCAL_WORLD_SIZE=2
for rank in 0 1; do
  RANK=$rank LOCAL_RANK=$rank "$ddp" --backend nccl --seed 7 --invariant --steps 1000000 \
    --collective-timeout 5 --out "$work/curve$rank.csv" >"$work/rank$rank.log" 2>&1 &
  pids+=($!)
done

# Let the job form and train a little, then kill rank 1.
for _ in $(seq 600); do
  grep -q "^step " "$work/rank0.log" 2>/dev/null && break
  sleep 0.1
done
grep -q "^step " "$work/rank0.log" || { cat "$work/rank0.log" >&2; echo "the job never trained" >&2; exit 1; }
kill -9 "${pids[1]}"
killed=$SECONDS
echo "== rank 1 killed with SIGKILL; waiting for rank 0"

status=0
for _ in $(seq 600); do
  kill -0 "${pids[0]}" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "${pids[0]}" 2>/dev/null; then
  echo "nccl_dead_rank: rank 0 still runs 60 s after rank 1 died" >&2
  exit 1
fi
wait "${pids[0]}" || status=$?
took=$((SECONDS - killed))
tail -2 "$work/rank0.log"
[ "$status" = 3 ] || { echo "nccl_dead_rank: rank 0 exited with $status, expected 3" >&2; exit 1; }
grep -Eq "[a-z_]+ #[0-9]+ timed out after 5s: rank 1 last entered collective #[0-9]+" "$work/rank0.log" ||
  { echo "nccl_dead_rank: rank 0's error does not name rank 1 and the collective" >&2; exit 1; }
[ "$took" -le 15 ] || { echo "nccl_dead_rank: rank 0 took ${took}s, more than the timeout + 10 s" >&2; exit 1; }
echo "nccl_dead_rank: rank 0 ended ${took}s after rank 1 died, with the typed error naming the collective and rank 1"
