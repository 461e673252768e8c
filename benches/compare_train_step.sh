#!/usr/bin/env bash
# ditto's training step (benches/train_step.rs, default and portable arithmetic) next to
# its PyTorch twin (benches/compare_torch_train.py), interleaved: every round runs each
# configuration once, in turn, so a burst of load on a shared machine hits all of them;
# the table gives each one's median over the rounds, and the load average around the run.
#
#   bash benches/compare_train_step.sh [--threads "1 2"] [--rounds 5] [--seconds 1]
#        [--shapes "64,256,256,10:128 784,1024,1024,10:256"]   # widths:batch
#        [--simd avx2] [--bench PATH]
#   bash benches/compare_train_step.sh --gpt [--rounds 3] [--seconds 3]
#        [--shapes "4,4,128,64:12:0 6,6,384,256:8:0.2"]   # layers,heads,width,block:batch:dropout
#        [--precision bf16]   # both sides in bf16 autocast (ditto's --precision, torch.autocast)
#
# --gpt times the GPT step instead (`train_step --gpt`, no biases as nanoGPT trains, next
# to benches/compare_torch_gpt.py); its default shapes are the recipes' (train_gpt
# --recipe shakespeare-char-cpu, and shakespeare-char's model at batch 8).
#
# --simd avx2 runs both sides at AVX2 on an AVX-512 CPU: ditto's own kernels through
# DITTO_SIMD, PyTorch through ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS and
# ONEDNN_MAX_CPU_ISA. gemm (ditto's default matmul) reads no variable: for its AVX2
# kernels pass --bench, a train_step binary built with tensor-core's `gemm` dependency
# without its `x86-v4` feature (in a target dir of its own). benches/RESULTS.md (issue 29,
# "AVX2, measured on this CPU") was measured this way.
#
# PYTHON names the interpreter with torch (default: python3, or DITTO_TORCH_PYTHON as
# scripts/install_torch.sh --print-env sets it); without torch the PyTorch column says
# "n/a". Issue 29's table in benches/RESULTS.md is this script's output.
set -euo pipefail
cd "$(dirname "$0")/.."

threads="1 2"
simd=""
bench=""
rounds=5
seconds=1
shapes=""
precision=f32
gpt=0
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --shapes) shapes="$2"; shift 2 ;;
    --simd) simd="$2"; shift 2 ;;
    --bench) bench="$2"; shift 2 ;;
    --gpt) gpt=1; shift ;;
    --precision) precision="$2"; shift 2 ;;
    *) echo "unknown argument: $1 (expected --threads, --rounds, --seconds, --shapes, --simd, --bench, --gpt, --precision)" >&2; exit 2 ;;
  esac
done
case "$precision:$gpt" in
  f32:*|bf16:1) ;;
  *) echo "--precision takes f32 or bf16, and bf16 only with --gpt (got $precision)" >&2; exit 2 ;;
esac
case "${simd:-}" in
  "") ;;
  avx2) export DITTO_SIMD=avx2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 ;;
  *) echo "--simd takes avx2 (the default is what the CPU runs), not $simd" >&2; exit 2 ;;
esac
if [ -z "$shapes" ]; then
  if [ "$gpt" = 1 ]; then shapes="4,4,128,64:12:0 6,6,384,256:8:0.2"; else shapes="64,256,256,10:128 784,1024,1024,10:256"; fi
fi
python="${PYTHON:-${DITTO_TORCH_PYTHON:-python3}}"
have_torch=1
"$python" -c "import torch" 2> /dev/null || have_torch=0

if [ -z "${bench:-}" ]; then
  cargo bench --bench train_step --no-run --quiet
  bench=$(cargo bench --bench train_step --no-run --message-format=json 2> /dev/null |
    "$python" -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "train_step" and m.get("executable"):
        print(m["executable"])')
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')," \
  "SIMD: $(grep -o -w -E 'avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "SIMD limit: ${simd:-none}; ditto binary: $bench"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
# One steps/s number from one process: the number before "steps/s" in its line.
rate() { sed -nE 's/.*: ([0-9.]+) steps\/s.*/\1/p'; }
for round in $(seq "$rounds"); do
  for shape in $shapes; do
    for t in $threads; do
      key="$shape:$t"
      if [ "$gpt" = 1 ]; then
        IFS=: read -r model batch dropout <<< "$shape"
        IFS=, read -r layers heads width block <<< "$model"
        common=(--threads "$t" --batch "$batch" --dropout "$dropout" --no-bias --precision "$precision")
        ditto=(--gpt "$model" --rounds 1 --seconds "$seconds")
      else
        widths=${shape%%:*}; batch=${shape##*:}
        common=(--threads "$t" --widths "$widths" --batch "$batch" --rounds 1 --seconds "$seconds")
        ditto=()
      fi
      "$bench" "${common[@]}" "${ditto[@]}" | rate >> "$work/default-$key"
      "$bench" "${common[@]}" "${ditto[@]}" --portable | rate >> "$work/portable-$key"
      if [ "$have_torch" = 1 ] && [ "$gpt" = 1 ]; then
        # About --seconds of PyTorch steps, sized by ditto's rate just measured.
        steps=$(tail -n 1 "$work/default-$key" | awk -v s="$seconds" '{n = int($1 * s); print (n < 3 ? 3 : n)}')
        "$python" benches/compare_torch_gpt.py "${common[@]}" --rounds 1 --steps-per-round "$steps" \
          --layers "$layers" --heads "$heads" --width "$width" --block "$block" 2> /dev/null |
          rate >> "$work/torch-$key"
      elif [ "$have_torch" = 1 ]; then
        "$python" benches/compare_torch_train.py "${common[@]}" 2> /dev/null | rate >> "$work/torch-$key"
      fi
    done
  done
  echo "round $round/$rounds done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
median() { sort -g "$1" | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo
echo "| model, batch | threads | ditto default | ditto portable | PyTorch | default / PyTorch | portable / default |"
echo "|---|---|---|---|---|---|---|"
for shape in $shapes; do
  for t in $threads; do
    key="$shape:$t"
    d=$(median "$work/default-$key"); p=$(median "$work/portable-$key")
    if [ "$have_torch" = 1 ]; then tr=$(median "$work/torch-$key"); else tr=n/a; fi
    awk -v s="$shape" -v t="$t" -v d="$d" -v p="$p" -v tr="$tr" 'BEGIN {
      ratio = (tr == "n/a") ? "n/a" : sprintf("%.2fx", d / tr)
      printf "| %s | %s | %.2f | %.2f | %s | %s | %.2fx |\n", s, t, d, p, tr, ratio, p / d }'
  done
done
