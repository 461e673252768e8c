#!/usr/bin/env bash
# ddp_train launched by Horovod's own launcher (issue 45 item 4), horovodrun 0.28.1
# (scripts/install_horovod.sh):
#
#   1. Gloo mode (`horovodrun --gloo`): horovodrun sets HOROVOD_RANK, HOROVOD_SIZE,
#      HOROVOD_LOCAL_RANK and its HTTP rendezvous server's address, not RANK or
#      MASTER_ADDR; ditto reads them (LaunchEnv) and forms the job through that server
#      (HorovodStore). `--backend gloo --invariant` at 2 and 3 processes writes the
#      1-process CSV's bytes.
#   2. MPI mode (`horovodrun --mpi`, mpirun underneath): `--backend mpi --invariant` at 2
#      and 4 processes writes the same bytes.
#
#   bash tests/scripts/horovod_tests.sh path/to/ddp_train   # built with --features mpi,gloo
#
# Needs HOROVODRUN (or horovodrun on PATH). Every launch is bounded by `timeout`; all
# traffic stays on loopback.
set -euo pipefail
ddp="${1:?usage: bash tests/scripts/horovod_tests.sh path/to/ddp_train}"
ddp="$(cd "$(dirname "$ddp")" && pwd)/$(basename "$ddp")"
[ -x "$ddp" ] || { echo "not an executable: $ddp" >&2; exit 2; }
horovodrun="${HOROVODRUN:-$(command -v horovodrun || true)}"
[ -n "$horovodrun" ] || { echo "horovodrun is not on PATH (set HOROVODRUN)" >&2; exit 2; }
source "$(dirname "$0")/../../scripts/free_port.sh"
limit="${HOROVOD_TEST_TIMEOUT_S:-300}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
common=(--seed 7 --invariant --steps 40)

# The reference: one Gloo process, torchrun's variables set by hand.
(cd "$work" && RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT="$(free_port)" \
  timeout "$limit" "$ddp" --backend gloo "${common[@]}" --out one.csv > one.log 2>&1) ||
  { cat "$work/one.log" >&2; echo "FAILED: the 1-process reference" >&2; exit 1; }

# run MODE BACKEND N [horovodrun flags...]
run() {
  local mode="$1" backend="$2" n="$3"
  shift 3
  (cd "$work" && timeout "$limit" "$horovodrun" -np "$n" -H "localhost:$n" "--$mode" "$@" \
    "$ddp" --backend "$backend" "${common[@]}" --out "$mode$n.csv" > "$mode$n.log" 2>&1) ||
    { cat "$work/$mode$n.log" >&2; echo "FAILED: horovodrun --$mode -np $n" >&2; exit 1; }
  cmp "$work/one.csv" "$work/$mode$n.csv" ||
    { echo "horovodrun --$mode -np $n: the CSV differs from one process's" >&2; exit 1; }
  echo "horovodrun --$mode -np $n --backend $backend: the 1-process CSV's bytes"
}

run gloo gloo 2
run gloo gloo 3
mpi_args=(--mpi-args="--allow-run-as-root --oversubscribe")
run mpi mpi 2 "${mpi_args[@]}"
run mpi mpi 4 "${mpi_args[@]}"
echo "horovod_tests: passed"
