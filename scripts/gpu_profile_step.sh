#!/usr/bin/env bash
# Where a training step's GPU time goes: every kernel of a few steps of ditto's
# benches/train_step and of its PyTorch twin, timed by Nsight Compute (one metric,
# gpu__time_duration.sum, so each kernel runs once under the profiler), then summed by
# kernel name side by side. This is how the large MLP's missing 20% was found
# (benches/RESULTS.md, "GPU runs of 2026-11-27, 16:17-16:40 UTC").
#
# scripts/gpu_bundle.sh copies it into gpu-bundle/; on the GPU machine, from the folder
# holding gpu-bundle/:
#   bash gpu-bundle/gpu_profile_step.sh [OUT_DIR] [--widths 1024,4096,4096,10 --batch 1024]
#   bash gpu-bundle/gpu_profile_step.sh [OUT_DIR] --gpt 6,6,384,256 --batch 64 --dropout 0.2
# OUT_DIR (default gpu-bundle/profile) gets ncu_ditto.csv, ncu_torch.csv and summary.md.
# With --gpt the twin is benches/compare_torch_gpt.py with the same shape (f32, TF32 off),
# on the bundle's tiny Shakespeare.
#
#   bash scripts/gpu_profile_step.sh --summarize ditto.csv torch.csv
# prints the summary of two CSVs made earlier (runs anywhere with python3).
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"

# The kernels of each ncu CSV (`--csv --print-units base`), summed by name: how often each
# ran, its total microseconds and its time per launch, largest total first.
summarize() {
  python3 - "$@" <<'PY'
import collections, csv, sys

def kernels(path):
    rows = [r for r in csv.reader(open(path, newline="")) if len(r) > 5]
    if not rows:
        return {}
    head = rows[0]
    name, value = head.index("Kernel Name"), head.index("Metric Value")
    total = collections.defaultdict(lambda: [0, 0.0])
    for row in rows[1:]:
        short = row[name].split("(")[0].replace("void ", "")[:70]
        total[short][0] += 1
        total[short][1] += float(row[value].replace(",", "")) / 1000.0  # ns -> us
    return total

for label, path in zip(["ditto", "PyTorch"], sys.argv[1:]):
    k = kernels(path)
    print(f"\n### {label}: {sum(v[1] for v in k.values()):.1f} us in {sum(v[0] for v in k.values())} kernels ({path})\n")
    print("| kernel | launches | total us | us per launch |")
    print("|---|---:|---:|---:|")
    for short, (count, us) in sorted(k.items(), key=lambda kv: -kv[1][1]):
        print(f"| `{short}` | {count} | {us:.1f} | {us / count:.1f} |")
PY
}

if [ "${1:-}" = "--summarize" ]; then
  shift
  summarize "$@"
  exit
fi

OUT_DIR="${1:-$HERE/profile}"
[ $# -gt 0 ] && shift
shape=("$@")
[ ${#shape[@]} -eq 0 ] && shape=(--widths 1024,4096,4096,10 --batch 1024)
mkdir -p "$OUT_DIR"

source "$HERE/gpu_cuda_lib.sh"
refuse_cuda_standin
NCU="$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)"
[ -n "$NCU" ] || { echo "gpu_profile_step.sh: Nsight Compute (ncu) not found" >&2; exit 2; }
LIB="$(find_cuda_lib)" || { echo "gpu_profile_step.sh: no nvidia/cu13/lib with libnvrtc.so.13 found; set DITTO_CUDA_LIB" >&2; exit 2; }
export LD_LIBRARY_PATH="$HERE/lib:$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# Skip the first launches (start-up, warm-up), then time the next 120: about three steps of
# the large MLP in either program (they launch different numbers of kernels a step, so
# compare kernels by their time per launch). The runs are time-based, so each asks for
# enough seconds to reach the profiled launches under ncu.
profile=(--clock-control none --launch-skip 400 --launch-count 120
         --metrics gpu__time_duration.sum --csv --print-units base)
timing=(--rounds 2 --seconds 1)
twin=("$HERE/compare_torch_train.py" "${shape[@]}" "${timing[@]}")
ditto=("${shape[@]}")
if [ "${shape[0]}" = --gpt ]; then
  IFS=, read -r layers heads width block <<< "${shape[1]}"
  twin=("$HERE/compare_torch_gpt.py" --layers "$layers" --heads "$heads" --width "$width"
        --block "$block" "${shape[@]:2}" --rounds 2 --steps-per-round 3)
  ditto+=(--data "$HERE/tinyshakespeare.txt")
fi
status=0
timeout 120 "$NCU" "${profile[@]}" "$HERE/bin/train_step" --device cuda:0 "${ditto[@]}" "${timing[@]}" \
  > "$OUT_DIR/ncu_ditto.csv" 2> "$OUT_DIR/ncu_ditto.err" || { echo "ncu on train_step failed: $OUT_DIR/ncu_ditto.err"; status=1; }
timeout 120 "$NCU" "${profile[@]}" python3 "${twin[0]}" --device cuda "${twin[@]:1}" \
  > "$OUT_DIR/ncu_torch.csv" 2> "$OUT_DIR/ncu_torch.err" || { echo "ncu on ${twin[0]##*/} failed: $OUT_DIR/ncu_torch.err"; status=1; }
{
  echo "# Kernel times of a few training steps: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), ${shape[*]}"
  summarize "$OUT_DIR/ncu_ditto.csv" "$OUT_DIR/ncu_torch.csv"
} | tee "$OUT_DIR/summary.md"
exit $status
