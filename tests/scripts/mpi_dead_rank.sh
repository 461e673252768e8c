#!/usr/bin/env bash
# What happens to an MPI data parallel job when a rank dies (issue 20; docs/distributed.md
# §5): ddp_train under `mpirun -np 2` saves a checkpoint, resumes from it, and rank 1 is
# killed with SIGKILL two seconds into the resumed run. OpenMPI's mpirun must end the
# whole job (non-zero status) within 60 s instead of leaving rank 0 waiting in a
# collective, and the checkpoint must still resume, on one rank. Needs OpenMPI (see
# tests/scripts/mpi_tests.sh); extra arguments go to cargo.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! grep -qi "open mpi" <<< "$(mpirun --version 2>&1)"; then
    echo "mpi_dead_rank: needs OpenMPI's mpirun (its behaviour is what this checks)" >&2
    exit 1
fi
cargo build --release --features mpi --example ddp_train "$@"
ddp="${CARGO_TARGET_DIR:-$(pwd)/target}/release/examples/ddp_train"
source tests/scripts/mpirun_cmd.sh
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"

"${mpirun[@]}" -np 2 "$ddp" --backend mpi --seed 7 --invariant --steps 40 --save-at 20 \
    --checkpoint ck.safetensors --out a.csv | tail -1
cp ck.safetensors saved.safetensors

echo "== mpirun -np 2, rank 1 killed with SIGKILL 2 s into a resumed run"
# Rank 1's shell starts a timer that kills its own pid, then becomes ddp_train (exec keeps
# the pid). The run would take hours if nothing ended it.
started=$SECONDS
set +e
timeout 60 "${mpirun[@]}" -np 2 bash -c \
    'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then (sleep 2; kill -9 $$) & fi; exec "$0" "$@"' \
    "$ddp" --backend mpi --resume ck.safetensors --steps 1000000 --out b.csv >run.log 2>&1
status=$?
set -e
took=$((SECONDS - started))
tail -4 run.log
if [ "$status" = 0 ] || [ "$status" = 124 ]; then
    echo "mpi_dead_rank: mpirun exited with status $status after ${took}s (0: the job went on; 124: it hung)" >&2
    exit 1
fi
grep -q "exited on signal 9" run.log
echo "mpirun ended the job with status $status after ${took}s, naming the killed rank"

cmp ck.safetensors saved.safetensors
"${mpirun[@]}" -np 1 "$ddp" --backend mpi --resume ck.safetensors --steps 30 --out c.csv | tail -1
echo "mpi_dead_rank: the job ended, and its checkpoint resumes on another world size"
