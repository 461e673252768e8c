#!/usr/bin/env bash
# The GPT over NCCL, one process per rank (issue 30 item 6), launched as torchrun
# launches them (scripts/launch_local.sh), each rank on GPU LOCAL_RANK:
#
#   1. train_gpt --backend nccl --portable --invariant on 1, 2 and 4 processes writes
#      the same CSV bytes as the threads backend's CPU run at world size 4 (portable
#      arithmetic: the same bits on the CPU and every GPU; invariant mode: the same
#      curve for every world size);
#   2. only rank 0 writes the CSV.
#
#   bash tests/scripts/gpt_nccl_tests.sh path/to/train_gpt   # built with --features nccl
#
# Meant for the CUDA stand-in (host-executed), which it asks for 4 GPUs; with real
# NCCL it needs 4 GPUs on this machine. A tiny model, so the host-executed kernels
# finish in seconds. Every launch is bounded by `timeout`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
gpt="${1:?usage: bash tests/scripts/gpt_nccl_tests.sh path/to/train_gpt}"
gpt="$(cd "$(dirname "$gpt")" && pwd)/$(basename "$gpt")"
[ -x "$gpt" ] || { echo "not an executable: $gpt" >&2; exit 2; }
if [ -n "${DITTO_CUDA_STANDIN:-}" ]; then
  export DITTO_CUDA_STANDIN_DEVICES=4
fi
limit="${GPT_NCCL_TEST_TIMEOUT_S:-600}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

common=(--portable --invariant --seed 7 --steps 6 --layers 1 --heads 2 --width 16
  --context 8 --batch-size 8 --sample 0)

timeout "$limit" "$gpt" --backend threads --world-size 4 "${common[@]}" --out "$work/threads.csv" \
  > "$work/threads.log" 2>&1 || { cat "$work/threads.log" >&2; exit 1; }
# A header and one row per step: the comparisons below hold a real curve.
[ "$(wc -l < "$work/threads.csv")" -eq 7 ] || { echo "threads.csv: expected 7 lines" >&2; cat "$work/threads.csv" >&2; exit 1; }

for n in 1 2 4; do
  mkdir -p "$work/n$n"
  (
    cd "$work/n$n"
    timeout "$limit" bash "$ROOT/scripts/launch_local.sh" "$n" -- \
      bash -c 'mkdir -p "rank$RANK" && cd "rank$RANK" && exec "$@"' rank-folder \
      "$gpt" --backend nccl "${common[@]}" --out curve.csv > "$work/n$n.log" 2>&1
  ) || { echo "FAILED: train_gpt --backend nccl on $n processes" >&2; cat "$work/n$n.log" >&2; exit 1; }
  cmp "$work/threads.csv" "$work/n$n/rank0/curve.csv"
  for ((r = 1; r < n; r++)); do
    if [ -n "$(ls -A "$work/n$n/rank$r")" ]; then
      echo "n$n: rank $r wrote $(ls -A "$work/n$n/rank$r" | tr '\n' ' ')" >&2
      exit 1
    fi
  done
  echo "train_gpt --backend nccl on $n processes: the CSV is byte-identical to the threads backend's CPU run; only rank 0 wrote it"
done
