# Sourced by the MPI scripts (mpi_tests.sh, mpi_portable.sh, mpi_dead_rank.sh): sets the
# array `mpirun` to the launcher with the flags this machine needs, or exits when there
# is no mpirun. OpenMPI refuses to run as root without --allow-run-as-root, and 4 ranks
# on a 2-core machine need --oversubscribe; MPICH's mpirun needs neither and does not
# know them, so they are only added for OpenMPI.
if ! command -v mpirun >/dev/null; then
    echo "$(basename "$0"): mpirun not found; install OpenMPI:" \
         "apt-get install libopenmpi-dev openmpi-bin libclang1-14 libclang-common-14-dev" >&2
    exit 1
fi
mpirun=(mpirun)
if grep -qi "open mpi" <<< "$(mpirun --version 2>&1)"; then
    mpirun+=(--oversubscribe)
    if [ "$(id -u)" = 0 ]; then mpirun+=(--allow-run-as-root); fi
fi
