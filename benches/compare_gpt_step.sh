#!/usr/bin/env bash
# ditto's GPT training step (benches/train_step.rs --gpt, default and portable
# arithmetic) next to PyTorch eager's (benches/compare_torch_gpt.py), interleaved: each
# round runs every configuration once, in turn, so a burst of load on a shared machine
# hits all of them; the table gives each one's median over the rounds (steps/s), the
# ratio to PyTorch, and the load average before and after.
#
#   bash benches/compare_gpt_step.sh [--threads "1 2"] [--rounds 3] [--seconds 3]
#        [--shapes "4,4,128,64:12:0 6,6,384,256:8:0.2"]   # layers,heads,width,block:batch:dropout
#
# The default shapes are the recipes' (train_gpt --recipe shakespeare-char-cpu, and
# shakespeare-char's model at batch 8), without biases as nanoGPT trains them.
# PYTHON names the interpreter with torch (default: python3; scripts/install_torch.sh
# --print-env sets DITTO_TORCH_PYTHON, which is used when PYTHON is not set).
set -euo pipefail
cd "$(dirname "$0")/.."

threads="1 2"
rounds=3
seconds=3
shapes="4,4,128,64:12:0 6,6,384,256:8:0.2"
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --shapes) shapes="$2"; shift 2 ;;
    *) echo "unknown argument: $1 (expected --threads, --rounds, --seconds, --shapes)" >&2; exit 2 ;;
  esac
done
python="${PYTHON:-${DITTO_TORCH_PYTHON:-python3}}"
have_torch=1
"$python" -c "import torch" 2> /dev/null || have_torch=0

cargo bench --bench train_step --no-run --quiet
bench=$(cargo bench --bench train_step --no-run --message-format=json 2> /dev/null |
  "$python" -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "train_step" and m.get("executable"):
        print(m["executable"])')

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$rounds"); do
  for shape in $shapes; do
    IFS=: read -r model batch dropout <<< "$shape"
    IFS=, read -r layers heads width block <<< "$model"
    for t in $threads; do
      key="${model}:${batch}:${dropout}:${t}"
      for mode in default portable; do
        flag=""; [ "$mode" = portable ] && flag="--portable"
        "$bench" --threads "$t" --gpt "$model" --batch "$batch" --dropout "$dropout" --no-bias \
          --rounds 1 --seconds "$seconds" $flag |
          sed -E 's/.*: ([0-9.]+) steps\/s.*/\1/' >> "$work/$mode-$key"
      done
      if [ "$have_torch" = 1 ]; then
        # About --seconds of PyTorch steps, sized by ditto's rate just measured.
        steps=$(tail -n 1 "$work/default-$key" | awk -v s="$seconds" '{n = int($1 * s); print (n < 3 ? 3 : n)}')
        "$python" benches/compare_torch_gpt.py --threads "$t" --rounds 1 --steps-per-round "$steps" \
          --layers "$layers" --heads "$heads" --width "$width" --block "$block" --batch "$batch" \
          --dropout "$dropout" --no-bias 2> /dev/null |
          sed -nE 's/time per step: median ([0-9.]+) ms.*/\1/p' |
          "$python" -c 'import sys; print(1000 / float(sys.stdin.read()))' >> "$work/torch-$key"
      fi
    done
  done
done
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
median() { sort -g "$1" | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }
printf '%-26s %7s %16s %16s %16s %14s %15s\n' shape threads "ditto steps/s" "portable steps/s" "PyTorch steps/s" "ditto/PyTorch" "portable/ditto"
for shape in $shapes; do
  for t in $threads; do
    key="${shape}:${t}"
    d=$(median "$work/default-$key"); p=$(median "$work/portable-$key")
    if [ -f "$work/torch-$key" ]; then
      pt=$(printf '%.2f' "$(median "$work/torch-$key")"); ratio=$(awk -v a="$d" -v b="$pt" 'BEGIN {printf "%.2fx", a / b}')
    else
      pt="n/a"; ratio="n/a"
    fi
    printf '%-26s %7s %16.2f %16.2f %16s %14s %15s\n' "$shape" "$t" "$d" "$p" "$pt" "$ratio" \
      "$(awk -v a="$p" -v b="$d" 'BEGIN {printf "%.2fx", a / b}')"
  done
done
