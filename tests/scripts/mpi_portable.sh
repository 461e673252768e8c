#!/usr/bin/env bash
# Portable arithmetic over MPI (issue 19 item 6; docs/contract.md §14): ddp_train
# --backend mpi --portable --invariant under `mpirun -np 2`, `-np 3` and `-np 4` writes the
# same CSV bytes as the single-process CPU run (the threads backend at world size 1); so
# does the default arithmetic at `-np 3` (issue 28: a world size that divides neither the
# 8 micro-shards nor the batch of 128). The
# default-arithmetic single-process run must differ from the portable one, or the
# comparison would not show that --portable reached the ranks. Needs OpenMPI (see
# tests/scripts/mpi_tests.sh); extra arguments go to cargo.
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/scripts/mpirun_cmd.sh
cargo build --release --features mpi --example ddp_train "$@"
ddp="${CARGO_TARGET_DIR:-$(pwd)/target}/release/examples/ddp_train"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"

common=(--seed 7 --invariant --steps 60)
"$ddp" --portable --world-size 1 "${common[@]}" --out cpu.csv | tail -1
"$ddp" --world-size 1 "${common[@]}" --out default.csv | tail -1
if cmp -s cpu.csv default.csv; then
    echo "mpi_portable: the default run equals the portable one; the check below could not fail" >&2
    exit 1
fi
for np in 2 3 4; do
    timeout 600 "${mpirun[@]}" -np "$np" "$ddp" --backend mpi --portable "${common[@]}" \
        --out "mpi$np.csv" | tail -1
    cmp cpu.csv "mpi$np.csv"
    echo "mpirun -np $np --portable --invariant: the CSV is byte-identical to the single-process CPU run"
done
timeout 600 "${mpirun[@]}" -np 3 "$ddp" --backend mpi "${common[@]}" --out mpi3-default.csv | tail -1
cmp default.csv mpi3-default.csv
echo "mpirun -np 3 --invariant, default arithmetic: the CSV is byte-identical to the single-process CPU run"
