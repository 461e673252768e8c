#!/usr/bin/env bash
# ddp_train launched from PySpark (issue 45 section 3): examples/launchers/spark_launch.py
# runs PySpark's TorchDistributor(num_processes=2, local_mode=True, use_gpu=False), which
# starts torchrun on the driver, which starts the file itself as a shim that becomes the
# binary; the ranks join torchrun's agent store as under a plain torchrun.
#
#   1. `spark_launch.py --nproc 2 -- ddp_train --backend B --invariant --steps 40` writes
#      the same CSV bytes as one process launched by hand;
#   2. a job whose ranks fail makes the launcher exit non-zero, naming each rank's exit
#      status (PySpark's own wrapper around torchrun drops torchrun's status, so the
#      launcher's ranks record theirs in files).
#
#   bash tests/scripts/spark_launch_test.sh path/to/ddp_train   # BACKEND=nccl (default) needs
#                                                               # --features nccl and the CUDA
#                                                               # stand-in or 2 GPUs
#
# Needs pyspark (with numpy) and torch in DITTO_TORCH_PYTHON's venv (scripts/install_torch.sh
# --with-launchers) and Java 17 (Debian: openjdk-17-jre-headless). Spark runs in local
# mode on loopback. Every launch is bounded by `timeout`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
ddp="${1:?usage: bash tests/scripts/spark_launch_test.sh path/to/ddp_train}"
ddp="$(cd "$(dirname "$ddp")" && pwd)/$(basename "$ddp")"
[ -x "$ddp" ] || { echo "not an executable: $ddp" >&2; exit 2; }
python="${DITTO_TORCH_PYTHON:-python3}"
"$python" -c "import pyspark.ml.torch.distributor, torch" 2>/dev/null ||
  { echo "pyspark's TorchDistributor or torch is not importable by $python (bash scripts/install_torch.sh --with-launchers)" >&2; exit 2; }
command -v java > /dev/null || { echo "java is not on PATH (apt-get install openjdk-17-jre-headless)" >&2; exit 2; }
BACKEND="${BACKEND:-nccl}"
if [ -n "${DITTO_CUDA_STANDIN:-}" ]; then
  export DITTO_CUDA_STANDIN_DEVICES=2
fi
limit="${SPARK_LAUNCH_TEST_TIMEOUT_S:-300}"
source "$ROOT/scripts/free_port.sh"
# Spark's driver on loopback, and its scratch files in the test's folder.
export SPARK_LOCAL_IP=127.0.0.1

work="$(mktemp -d)"
export SPARK_LOCAL_DIRS="$work/spark"
trap 'rm -rf "$work"' EXIT

common=(--backend "$BACKEND" --seed 7 --invariant --steps 40)

# The reference: one process, launched by hand.
mkdir -p "$work/one"
(cd "$work/one" && RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT="$(free_port)" \
  timeout "$limit" "$ddp" "${common[@]}" --out curve.csv > "$work/one.log" 2>&1) ||
  { cat "$work/one.log" >&2; echo "FAILED: the 1-process reference" >&2; exit 1; }

launch=("$python" "$ROOT/examples/launchers/spark_launch.py" --nproc 2)

# 1. Two ranks under TorchDistributor.
mkdir -p "$work/s2"
(cd "$work/s2" && timeout "$limit" "${launch[@]}" -- "$ddp" "${common[@]}" --out curve.csv \
  > "$work/s2.log" 2>&1) || { cat "$work/s2.log" >&2; echo "FAILED: spark_launch --nproc 2" >&2; exit 1; }
cmp "$work/one/curve.csv" "$work/s2/curve.csv"
grep -q "spark_launch: every rank of 2 exited 0" "$work/s2.log" || { cat "$work/s2.log" >&2; exit 1; }
echo "spark: TorchDistributor(num_processes=2, local_mode=True) writes the 1-process CSV's bytes"

# 2. Ranks that fail at start-up (a collective timeout out of range): non-zero exit.
if (cd "$work/s2" && timeout "$limit" "${launch[@]}" -- "$ddp" "${common[@]}" --collective-timeout 0 \
  --out bad.csv > "$work/bad.log" 2>&1); then
  cat "$work/bad.log" >&2; echo "bad: spark_launch exited 0 for a job whose ranks fail" >&2; exit 1
fi
grep -q "collective-timeout" "$work/bad.log" && grep -q "the job failed; exit status by rank: \[2, 2\]" "$work/bad.log" ||
  { cat "$work/bad.log" >&2; echo "bad: expected the ranks' error and their exit status 2 in the output" >&2; exit 1; }
echo "bad: a job whose ranks fail makes spark_launch.py exit non-zero, with the ranks' error in its output"
echo "spark_launch_test: ddp_train launched by PySpark's TorchDistributor ($BACKEND, 2 ranks) writes the 1-process CSV"
