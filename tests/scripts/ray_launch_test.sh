#!/usr/bin/env bash
# ddp_train launched by Ray (issue 45 section 2): examples/launchers/ray_launch.py starts
# each rank as a Ray actor on a one-machine Ray cluster (`ray start --head`, loopback only,
# 2 CPUs, stopped at the end) and gives it torchrun's variables.
#
#   1. `ray_launch.py --nproc 2 -- ddp_train --backend B --invariant --steps 40` writes the
#      same CSV bytes as one process launched by hand;
#   2. elastic: under `--max-restarts 2` with the one line that every start uses
#      (--checkpoint-dir ck --save-every 5 --resume-latest), one rank's process is killed
#      with SIGKILL from outside at a random step; the launcher stops the other rank,
#      starts both again, they resume the newest checkpoint, and the final CSV equals the
#      uninterrupted run's bytes;
#   3. a job whose ranks fail (at start-up) is started 1 + --max-restarts times, and the
#      launcher exits non-zero.
#
#   bash tests/scripts/ray_launch_test.sh path/to/ddp_train   # BACKEND=nccl (default) needs
#                                                             # --features nccl and the CUDA
#                                                             # stand-in or 2 GPUs
#
# Needs ray in DITTO_TORCH_PYTHON's venv (scripts/install_torch.sh --with-launchers).
# Every launch is bounded by `timeout`. The cluster is ended with `ray stop`, which ends
# every Ray cluster of this user on the machine: do not run the test beside another.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
ddp="${1:?usage: bash tests/scripts/ray_launch_test.sh path/to/ddp_train}"
ddp="$(cd "$(dirname "$ddp")" && pwd)/$(basename "$ddp")"
[ -x "$ddp" ] || { echo "not an executable: $ddp" >&2; exit 2; }
python="${DITTO_TORCH_PYTHON:-python3}"
bin="$(dirname "$python")"
"$python" -c "import ray" 2>/dev/null ||
  { echo "ray is not importable by $python (bash scripts/install_torch.sh --with-launchers)" >&2; exit 2; }
BACKEND="${BACKEND:-nccl}"
if [ -n "${DITTO_CUDA_STANDIN:-}" ]; then
  export DITTO_CUDA_STANDIN_DEVICES=2
fi
limit="${RAY_LAUNCH_TEST_TIMEOUT_S:-300}"
source "$ROOT/scripts/free_port.sh"

work="$(mktemp -d)"
launcher=
# The cluster keeps its files under $work (--temp-dir), and `ray stop` ends its daemons.
trap '[ -n "$launcher" ] && kill -TERM "$launcher" 2>/dev/null; timeout 60 "$bin/ray" stop > /dev/null 2>&1 || true; rm -rf "$work"' EXIT

common=(--backend "$BACKEND" --seed 7 --invariant --steps 40)

# The reference: one process, launched by hand.
mkdir -p "$work/one"
(cd "$work/one" && RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT="$(free_port)" \
  timeout "$limit" "$ddp" "${common[@]}" --out curve.csv > "$work/one.log" 2>&1) ||
  { cat "$work/one.log" >&2; echo "FAILED: the 1-process reference" >&2; exit 1; }

# A one-machine cluster on loopback; the launcher joins it with --address. Ray's
# single-machine mode (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, its default off Linux) makes
# 127.0.0.1 the node's address, so every Ray service and ditto's rendezvous (MASTER_ADDR
# is rank 0's node address) listen on loopback. Token authentication, with a token made
# here and handed to the launcher through the environment. The store's port lies above
# 19999: Ray's workers take ports 10002 to 19999. The ranks inherit the cluster's
# environment (the stand-in's variables set above).
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_AUTH_MODE=token
RAY_AUTH_TOKEN="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export RAY_AUTH_TOKEN
port="$(free_port)"
while [ "$port" -lt 20000 ]; do port="$(free_port)"; done
gcs="127.0.0.1:$port"
timeout 120 "$bin/ray" start --head --node-ip-address 127.0.0.1 --port "${gcs#*:}" --num-cpus 2 \
  --num-gpus 0 --object-store-memory 100000000 --temp-dir "$work/ray" --disable-usage-stats \
  > "$work/ray-start.log" 2>&1 || { cat "$work/ray-start.log" >&2; echo "FAILED: ray start" >&2; exit 1; }
launch=("$python" "$ROOT/examples/launchers/ray_launch.py" --address "$gcs" --nproc 2 --grace-s 2)

# 1. Two ranks, straight through.
mkdir -p "$work/r2"
(cd "$work/r2" && timeout "$limit" "${launch[@]}" -- "$ddp" "${common[@]}" --out curve.csv \
  > "$work/r2.log" 2>&1) || { cat "$work/r2.log" >&2; echo "FAILED: ray_launch --nproc 2" >&2; exit 1; }
cmp "$work/one/curve.csv" "$work/r2/curve.csv"
grep -q "every rank exited 0 (attempt 0)" "$work/r2.log" || { cat "$work/r2.log" >&2; exit 1; }
echo "ray: ray_launch.py --nproc 2 writes the 1-process CSV's bytes"

# 2. Elastic: kill one rank once a checkpoint exists and the CSV has passed a random step.
mkdir -p "$work/elastic"
(cd "$work/elastic" && exec timeout "$limit" "${launch[@]}" --max-restarts 2 -- "$ddp" "${common[@]}" \
  --checkpoint-dir ck --save-every 5 --resume-latest --out run.csv) > "$work/elastic.log" 2>&1 &
launcher=$!
target=$((6 + RANDOM % 25))
rows() { [ -f "$1" ] && echo $(($(wc -l < "$1") - 1)) || echo 0; }
deadline=$((SECONDS + limit))
while kill -0 "$launcher" 2>/dev/null && [ "$(rows "$work/elastic/run.csv")" -lt "$target" ]; do
  [ "$SECONDS" -lt "$deadline" ] || { cat "$work/elastic.log" >&2; echo "elastic: step $target never came" >&2; exit 1; }
  sleep 0.05
done
# The ranks are the processes whose command line starts with the binary (the launcher's
# own command line names it later on, after python).
mapfile -t ranks < <(pgrep -f "^$ddp " || true)
[ "${#ranks[@]}" -ge 1 ] || { cat "$work/elastic.log" >&2; echo "elastic: no rank to kill" >&2; exit 1; }
victim="${ranks[$((RANDOM % ${#ranks[@]}))]}"
kill -KILL "$victim"
echo "elastic: rank process $victim killed with SIGKILL at step $(rows "$work/elastic/run.csv")"
wait "$launcher" || { cat "$work/elastic.log" >&2; echo "elastic: ray_launch failed" >&2; exit 1; }
launcher=
grep -q "killed by signal 9" "$work/elastic.log" && grep -q "every rank exited 0 (attempt 1)" "$work/elastic.log" ||
  { cat "$work/elastic.log" >&2; echo "elastic: expected a rank killed, then attempt 1 to finish" >&2; exit 1; }
# The ranks' own record (ray_launch.py's rank-N.log): Ray's forwarded output can lose the
# last lines of a short attempt when the driver exits.
grep -q "resumed ck/step-" "$work/elastic/"rank-*.log ||
  { cat "$work/elastic.log" "$work/elastic/"rank-*.log >&2; echo "elastic: the restarted ranks did not resume a checkpoint" >&2; exit 1; }
cmp "$work/one/curve.csv" "$work/elastic/run.csv" ||
  { echo "elastic: the restarted run's CSV differs from the uninterrupted run's" >&2; exit 1; }
grep "^ray_launch: rank .* killed by signal 9" "$work/elastic.log" | sed 's/^/elastic: /'
echo "elastic: ray_launch.py --max-restarts 2 started the group again, which resumed; the CSV equals the uninterrupted run's bytes"
# 3. A job that cannot run (a collective timeout out of range) fails every
# attempt: the launcher says so, rank by rank, and exits non-zero.
if (cd "$work/r2" && timeout "$limit" "${launch[@]}" --max-restarts 1 -- "$ddp" "${common[@]}" \
  --collective-timeout 0 --out bad.csv > "$work/bad.log" 2>&1); then
  cat "$work/bad.log" >&2; echo "bad: ray_launch exited 0 for a job whose ranks fail" >&2; exit 1
fi
grep -q "failed after 1 restarts" "$work/bad.log" && [ "$(grep -c "attempt [01] of 2" "$work/bad.log")" = 2 ] ||
  { cat "$work/bad.log" >&2; echo "bad: expected 2 failed attempts" >&2; exit 1; }
echo "bad: a job whose ranks fail at start-up fails both attempts, and ray_launch.py exits non-zero"
echo "ray_launch_test: ddp_train launched by Ray ($BACKEND, 2 ranks) writes the 1-process CSV, straight and after a killed rank"
