#!/usr/bin/env bash
# Elastic restarts on one machine, one process per rank (issue 27 item 2): the loop a
# launcher with restarts runs (torchrun --max-restarts), with scripts/launch_local.sh as
# the launcher. One command line, launched again and again:
#
#   ddp_train --backend nccl --seed 7 --invariant --steps 60 \
#       --checkpoint-dir ck --save-every 5 --resume-latest --out run.csv
#
# Each launch but the last is cut short: once rank 0's CSV reaches a random step, one
# rank picked at random is killed with SIGKILL, and launch_local.sh stops the others, as
# torchrun's agent does. The launches alternate 2 and 4 processes (an elastic job may
# come back smaller or larger). Afterwards:
#
#   1. run.csv is byte-identical to one process's uninterrupted run (--invariant);
#   2. every launch after the first resumed a checkpoint, which rank 0 chose and sent;
#   3. only rank 0 wrote anything (each rank runs in its own working folder, and every
#      folder but rank 0's stays empty), and ck/ holds the newest 3 checkpoints at most.
#
#   bash tests/scripts/elastic_restart.sh path/to/ddp_train   # built with --features nccl
#
# Meant for the CUDA stand-in (host-executed), which it asks for 4 GPUs; with real NCCL
# it needs 4 GPUs on this machine. Every launch is bounded in time.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
ddp="${1:?usage: bash tests/scripts/elastic_restart.sh path/to/ddp_train}"
ddp="$(cd "$(dirname "$ddp")" && pwd)/$(basename "$ddp")"
[ -x "$ddp" ] || { echo "not an executable: $ddp" >&2; exit 2; }
if [ -n "${DITTO_CUDA_STANDIN:-}" ]; then
  export DITTO_CUDA_STANDIN_DEVICES=4
fi
limit="${ELASTIC_RESTART_TIMEOUT_S:-300}"
steps=60
# A launcher stops the surviving ranks with SIGTERM, then SIGKILL this much later.
export LAUNCH_LOCAL_GRACE_S=2

work="$(mktemp -d)"
launcher=""
trap '[ -n "$launcher" ] && kill -TERM "$launcher" 2>/dev/null; rm -rf "$work"' EXIT

# The elastic line, the same at every launch; each rank works in its own folder.
line=(--backend nccl --seed 7 --invariant --steps "$steps" --checkpoint-dir ck --save-every 5
  --resume-latest --out run.csv)
rank_folder='mkdir -p "rank$RANK" && cd "rank$RANK" && exec "$@"'

# start DIR N: launches the line on N processes in DIR, in the background.
start() {
  local dir="$1" n="$2"
  mkdir -p "$dir"
  (cd "$dir" && exec bash "$ROOT/scripts/launch_local.sh" "$n" -- \
    bash -c "$rank_folder" rank-folder "$ddp" "${line[@]}") >> "$work/launches.log" 2>&1 &
  launcher=$!
}

rows() { [ -f "$1" ] && echo $(($(wc -l < "$1") - 1)) || echo 0; }

# The uninterrupted reference: one process, no checkpoints.
mkdir -p "$work/w1"
(cd "$work/w1" && RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 \
  MASTER_PORT="$(source "$ROOT/scripts/free_port.sh" && free_port)" \
  timeout "$limit" "$ddp" --backend nccl --seed 7 --invariant --steps "$steps" --out w1.csv \
  > "$work/w1.log" 2>&1) || { cat "$work/w1.log" >&2; exit 1; }

job="$work/job"
csv="$job/rank0/run.csv"
launches=0
kills=0
done_rows=0
for n in 2 4 2 4; do
  # Kill once rank 0's CSV passes a random step beyond what the last launch reached
  # (and beyond the first save, so every restart has a checkpoint to resume).
  target=$((done_rows + 1 + RANDOM % 15))
  [ "$target" -lt 6 ] && target=6
  [ "$target" -ge "$steps" ] && break
  start "$job" "$n"
  launches=$((launches + 1))
  deadline=$((SECONDS + limit))
  while kill -0 "$launcher" 2>/dev/null && [ "$(rows "$csv")" -lt "$target" ]; do
    [ "$SECONDS" -lt "$deadline" ] || { echo "launch $launches never reached step $target" >&2; exit 1; }
    sleep 0.05
  done
  if kill -0 "$launcher" 2>/dev/null; then
    # launch_local.sh starts the ranks in order, so their pids sort by rank.
    mapfile -t ranks < <(pgrep -P "$launcher" | sort -n)
    victim=$((RANDOM % ${#ranks[@]}))
    kill -KILL "${ranks[$victim]}" 2>/dev/null || true
    kills=$((kills + 1))
  fi
  wait "$launcher" || true
  launcher=""
  done_rows="$(rows "$csv")"
  echo "launch $launches on $n processes: rank $victim killed with SIGKILL at step $done_rows"
done
[ "$kills" -ge 1 ] || { echo "no kill landed mid-run" >&2; exit 1; }

# The same line once more, to the end, on 4 processes.
start "$job" 4
launches=$((launches + 1))
timeout "$limit" tail --pid="$launcher" -f /dev/null
wait "$launcher" || { cat "$work/launches.log" >&2; echo "the last launch failed" >&2; exit 1; }
launcher=""

cmp "$work/w1/w1.csv" "$csv" || { echo "run.csv differs from the uninterrupted run's" >&2; exit 1; }
resumed="$(grep -c "^resumed ck/step-" "$work/launches.log" || true)"
[ "$resumed" = "$((launches - 1))" ] ||
  { cat "$work/launches.log" >&2; echo "$resumed of $((launches - 1)) restarts resumed a checkpoint" >&2; exit 1; }
for folder in "$job"/rank*; do
  [ "$folder" = "$job/rank0" ] && continue
  [ -z "$(ls -A "$folder")" ] || { echo "$folder: $(ls -A "$folder")" >&2; exit 1; }
done
kept="$(ls "$job/rank0/ck" | grep -c '^step-[0-9]*\.safetensors$')"
[ "$kept" -le 3 ] || { ls -la "$job/rank0/ck" >&2; exit 1; }
echo "elastic_restart: $kills kills, $launches launches on 2 and 4 processes: run.csv is byte-identical" \
  "to the uninterrupted run's; every restart resumed; only rank 0 wrote; $kept checkpoints kept"
