#!/usr/bin/env bash
# Runs the MPI tests of crates/distributed (feature `mpi`) as real multi-process jobs: every
# test target named mpi_* under `mpirun -np 2` and `-np 4`, and mpi_ddp also under `-np 3`
# (invariant mode at a world size that does not divide the 8 micro-shards, issue 28). (`cargo test --features
# mpi` also runs them, as a world of one process.) Needs an MPI installation:
#   apt-get install libopenmpi-dev openmpi-bin libclang1-14 libclang-common-14-dev
# Extra arguments go to cargo (e.g. --release).
set -euo pipefail
cd "$(dirname "$0")/../.."

source tests/scripts/mpirun_cmd.sh
# cargo prints one JSON line per built artifact; keep the executables of mpi_* tests.
bins=$(cargo test -p distributed --features mpi --no-run --test 'mpi_*' --message-format=json "$@" \
    | grep -o '"executable":"[^"]*/mpi_[^"]*"' | cut -d'"' -f4)
if [ -z "$bins" ]; then
    echo "mpi_tests: no mpi_* test binaries were built" >&2
    exit 1
fi

for np in 2 4; do
    for bin in $bins; do
        echo "== ${mpirun[*]} -np $np $(basename "$bin")"
        timeout 600 "${mpirun[@]}" -np "$np" "$bin"
    done
done
for bin in $bins; do
    case "$(basename "$bin")" in
    mpi_ddp*)
        echo "== ${mpirun[*]} -np 3 $(basename "$bin")"
        timeout 600 "${mpirun[@]}" -np 3 "$bin"
        ;;
    esac
done
