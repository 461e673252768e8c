#!/usr/bin/env bash
# A small torchrun for one machine, for users without torch:
#
#   bash scripts/launch_local.sh N -- command [args ...]
#
# starts N copies of `command`, one per GPU, each with torchrun's environment: RANK and
# LOCAL_RANK = 0 .. N-1, WORLD_SIZE and LOCAL_WORLD_SIZE = N, GROUP_RANK = 0,
# MASTER_ADDR (default 127.0.0.1) and MASTER_PORT (default: a free port, picked here).
# This is `torchrun --nproc-per-node N --no-python command ...` on a single node.
#
# It waits for all of them. When one fails, the others are stopped (SIGTERM, then
# SIGKILL after LAUNCH_LOCAL_GRACE_S seconds, default 10), as torchrun does, and the
# launcher exits with the failed rank's status, naming it. Ctrl-C stops them all.
set -euo pipefail

usage() {
  echo "usage: bash scripts/launch_local.sh N -- command [args ...]   (N: 1 to 64 processes)" >&2
  exit 2
}

[ "$#" -ge 3 ] || usage
nproc_per_node="$1"
[ "$2" = "--" ] || usage
shift 2
if ! [[ "$nproc_per_node" =~ ^[0-9]+$ ]] || [ "$nproc_per_node" -lt 1 ] || [ "$nproc_per_node" -gt 64 ]; then
  echo "launch_local.sh: N must be a whole number from 1 to 64, not \"$nproc_per_node\"" >&2
  exit 2
fi
grace="${LAUNCH_LOCAL_GRACE_S:-10}"
if ! [[ "$grace" =~ ^[0-9]+$ ]]; then
  echo "launch_local.sh: LAUNCH_LOCAL_GRACE_S must be a whole number of seconds, not \"$grace\"" >&2
  exit 2
fi

# A port nothing listens on now (scripts/free_port.sh). Rank 0 binds it a moment later;
# like torchrun's own choice, another program could take it in between, in which case
# rank 0 reports the address in use.
source "$(dirname "$0")/free_port.sh"
master_addr="${MASTER_ADDR:-127.0.0.1}"
master_port="${MASTER_PORT:-$(free_port)}"

pids=()
stop_all() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  # `jobs -rp` lists the ranks still running (one that ended but was not waited for yet
  # is not running, though kill -0 would still reach it).
  local ticks=0
  while [ "$ticks" -lt $((grace * 10)) ]; do
    [ -z "$(jobs -rp)" ] && return 0
    sleep 0.1
    ticks=$((ticks + 1))
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
}
trap 'echo "launch_local.sh: interrupted; stopping every rank" >&2; stop_all; exit 130' INT TERM

for ((rank = 0; rank < nproc_per_node; rank++)); do
  RANK="$rank" LOCAL_RANK="$rank" GROUP_RANK=0 \
    WORLD_SIZE="$nproc_per_node" LOCAL_WORLD_SIZE="$nproc_per_node" \
    MASTER_ADDR="$master_addr" MASTER_PORT="$master_port" \
    "$@" &
  pids+=("$!")
done

# Which rank a pid is.
rank_of() {
  local r
  for r in "${!pids[@]}"; do [ "${pids[$r]}" = "$1" ] && { echo "$r"; return; }; done
  echo "?"
}

running=("${pids[@]}")
while [ "${#running[@]}" -gt 0 ]; do
  status=0
  wait -n -p finished "${running[@]}" || status=$?
  still=()
  for pid in "${running[@]}"; do [ "$pid" = "$finished" ] || still+=("$pid"); done
  running=("${still[@]}")
  if [ "$status" -ne 0 ]; then
    echo "launch_local.sh: rank $(rank_of "$finished") (pid $finished) exited with status $status; stopping the others" >&2
    stop_all
    wait 2>/dev/null || true
    exit "$status"
  fi
done
