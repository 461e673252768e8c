#!/usr/bin/env bash
# ddp_train under PyTorch's own launcher (issue 27 item 1): torchrun's agent hosts the
# job's TCPStore on MASTER_PORT and ditto's ranks join it as clients.
#
#   1. `torchrun --nproc-per-node N --master-port P --no-python ddp_train --backend nccl
#      --invariant ...` at N = 2 and 4 writes the same CSV bytes as one process;
#   2. no ditto process listens on MASTER_PORT while the job runs (only torchrun's agent
#      does: its listening socket is sampled throughout the run);
#   3. with DITTO_RENDEZVOUS_SECRET set, the job forms the same way (the NCCL id, or the
#      key prefix of Gloo's addresses, travels sealed through the agent's store);
#   4. elastic restarts (item 2): under `torchrun --max-restarts 2`, one worker is killed
#      with SIGKILL at a random step; torchrun restarts the workers (a new attempt, whose
#      rendezvous keys live under its restart count), they resume from the newest
#      checkpoint (--checkpoint-dir, --save-every, --resume-latest: the same command
#      line for the first start and every restart), and the final CSV equals the
#      uninterrupted run's bytes.
#
#   bash tests/scripts/torchrun_tests.sh path/to/ddp_train   # built with --features nccl
#   DITTO_TEST_BACKEND=gloo bash tests/scripts/torchrun_tests.sh path/to/ddp_train   # --features gloo
#
# Needs `torchrun` on PATH (or TORCHRUN=path; CI installs torch in a virtual environment,
# docs/distributed.md §5). Meant for the CUDA stand-in (host-executed), which it asks for
# 4 GPUs; with real NCCL it needs 4 GPUs on this machine. Every launch is bounded by
# `timeout`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
ddp="${1:?usage: bash tests/scripts/torchrun_tests.sh path/to/ddp_train}"
ddp="$(cd "$(dirname "$ddp")" && pwd)/$(basename "$ddp")"
[ -x "$ddp" ] || { echo "not an executable: $ddp" >&2; exit 2; }
torchrun="${TORCHRUN:-$(command -v torchrun || true)}"
[ -n "$torchrun" ] || { echo "torchrun is not on PATH (set TORCHRUN)" >&2; exit 2; }
if [ -n "${DITTO_CUDA_STANDIN:-}" ]; then
  export DITTO_CUDA_STANDIN_DEVICES=4
fi
limit="${TORCHRUN_TEST_TIMEOUT_S:-600}"
source "$ROOT/scripts/free_port.sh"

work="$(mktemp -d)"
watcher=
trap 'kill "$watcher" 2>/dev/null || true; rm -rf "$work"' EXIT

backend="${DITTO_TEST_BACKEND:-nccl}"
common=(--backend "$backend" --seed 7 --invariant --steps 60)

# The reference: one process, launched by hand.
mkdir -p "$work/one"
(cd "$work/one" && RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT="$(free_port)" \
  timeout "$limit" "$ddp" "${common[@]}" --out curve.csv > "$work/one.log" 2>&1) ||
  { cat "$work/one.log" >&2; echo "FAILED: the 1-process reference" >&2; exit 1; }

# listeners PORT OUT: appends, every 0.1 s until killed, the processes listening on PORT.
listeners() {
  while true; do
    ss -Hltnp "sport = :$1" 2>/dev/null | grep -o 'users:(.*)' >> "$2" || true
    sleep 0.1
  done
}

# run NAME N [VAR=VALUE ...]: the torchrun line at --nproc-per-node N.
run() {
  local name="$1" n="$2" port
  shift 2
  port="$(free_port)"
  mkdir -p "$work/$name"
  listeners "$port" "$work/$name.listeners" &
  watcher=$!
  (cd "$work/$name" && env "$@" timeout "$limit" "$torchrun" --nproc-per-node "$n" \
    --master-port "$port" --no-python "$ddp" "${common[@]}" --out curve.csv > "$work/$name.log" 2>&1) ||
    { kill "$watcher"; cat "$work/$name.log" >&2; echo "FAILED: $name" >&2; exit 1; }
  kill "$watcher"
  wait "$watcher" 2>/dev/null || true
  watcher=
  cmp "$work/one/curve.csv" "$work/$name/curve.csv"
  grep -q . "$work/$name.listeners" ||
    { echo "$name: nothing was seen listening on $port (the check would prove nothing)" >&2; exit 1; }
  if grep -q ddp_train "$work/$name.listeners"; then
    echo "$name: a ditto process listened on MASTER_PORT $port:" >&2
    sort -u "$work/$name.listeners" >&2
    exit 1
  fi
  echo "$name: torchrun --nproc-per-node $n writes the 1-process CSV's bytes; only $(sort -u "$work/$name.listeners" | grep -o '"[^"]*"' | sort -u | tr '\n' ' ')listened on MASTER_PORT"
}

[ "$backend" = gloo ] && run t1 1
run t2 2
[ "$backend" = gloo ] && run t3 3
run t4 4
secret="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
run t2-secret 2 DITTO_RENDEZVOUS_SECRET="$secret"

# 4. Elastic: the line below, SIGKILL one of its workers once a checkpoint exists and the
# CSV has passed a random step, and let torchrun restart them.
elastic=(--checkpoint-dir ck --save-every 5 --resume-latest --out run.csv)
mkdir -p "$work/elastic"
port="$(free_port)"
(cd "$work/elastic" && exec "$torchrun" --nproc-per-node 2 --max-restarts 2 --master-port "$port" \
  --no-python "$ddp" "${common[@]}" "${elastic[@]}") > "$work/elastic.log" 2>&1 &
agent=$!
target=$((6 + RANDOM % 40))
rows() { [ -f "$1" ] && echo $(($(wc -l < "$1") - 1)) || echo 0; }
deadline=$((SECONDS + limit))
while kill -0 "$agent" 2>/dev/null && [ "$(rows "$work/elastic/run.csv")" -lt "$target" ]; do
  [ "$SECONDS" -lt "$deadline" ] || { kill "$agent"; cat "$work/elastic.log" >&2; echo "elastic: step $target never came" >&2; exit 1; }
  sleep 0.05
done
mapfile -t workers < <(pgrep -P "$agent" -f "$ddp")
[ "${#workers[@]}" -ge 1 ] || { cat "$work/elastic.log" >&2; echo "elastic: no worker to kill" >&2; exit 1; }
victim="${workers[$((RANDOM % ${#workers[@]}))]}"
kill -KILL "$victim"
echo "elastic: worker $victim killed with SIGKILL at step $(rows "$work/elastic/run.csv")"
timeout "$limit" tail --pid="$agent" -f /dev/null || { kill "$agent"; echo "elastic: torchrun did not finish" >&2; exit 1; }
wait "$agent" || { cat "$work/elastic.log" >&2; echo "elastic: torchrun failed" >&2; exit 1; }
grep -q "^resumed ck/step-" "$work/elastic.log" ||
  { cat "$work/elastic.log" >&2; echo "elastic: the restarted workers did not resume a checkpoint" >&2; exit 1; }
cmp "$work/one/curve.csv" "$work/elastic/run.csv" ||
  { echo "elastic: the restarted run's CSV differs from the uninterrupted run's" >&2; exit 1; }
echo "elastic: torchrun --max-restarts 2 restarted the workers, which resumed; the CSV equals the uninterrupted run's bytes"
echo "torchrun_tests: ddp_train --backend $backend joined torchrun's agent store at 2 and 4 processes (gloo: 1 to 4), with a secret, and survived a restart"
