#!/usr/bin/env bash
# ditto's training step (benches/train_step.rs, default and portable arithmetic) next to
# its PyTorch twin (benches/compare_torch_train.py), interleaved: every round runs each
# configuration once, in turn, so a burst of load on a shared machine hits all of them;
# the table gives each one's median over the rounds, and the load average around the run.
#
#   bash benches/compare_train_step.sh [--threads "1 2"] [--rounds 5] [--seconds 1]
#        [--shapes "64,256,256,10:128 784,1024,1024,10:256"]   # widths:batch
#
# PYTHON names the interpreter with torch (default: python3); without torch the PyTorch
# column says "n/a". Issue 29's table in benches/RESULTS.md is this script's output.
set -euo pipefail
cd "$(dirname "$0")/.."

threads="1 2"
rounds=5
seconds=1
shapes="64,256,256,10:128 784,1024,1024,10:256"
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --shapes) shapes="$2"; shift 2 ;;
    *) echo "unknown argument: $1 (expected --threads, --rounds, --seconds, --shapes)" >&2; exit 2 ;;
  esac
done
python="${PYTHON:-python3}"
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
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')," \
  "SIMD: $(grep -o -w -E 'avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
# One steps/s number from one process: the number before "steps/s" in its line.
rate() { sed -E 's/.*: ([0-9.]+) steps\/s.*/\1/'; }
for round in $(seq "$rounds"); do
  for shape in $shapes; do
    widths=${shape%%:*}; batch=${shape##*:}
    for t in $threads; do
      key="$widths:$batch:$t"
      common=(--threads "$t" --widths "$widths" --batch "$batch" --rounds 1 --seconds "$seconds")
      "$bench" "${common[@]}" | rate >> "$work/default-$key"
      "$bench" "${common[@]}" --portable | rate >> "$work/portable-$key"
      if [ "$have_torch" = 1 ]; then
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
  widths=${shape%%:*}; batch=${shape##*:}
  for t in $threads; do
    key="$widths:$batch:$t"
    d=$(median "$work/default-$key"); p=$(median "$work/portable-$key")
    if [ "$have_torch" = 1 ]; then tr=$(median "$work/torch-$key"); else tr=n/a; fi
    awk -v s="${widths//,/-}, $batch" -v t="$t" -v d="$d" -v p="$p" -v tr="$tr" 'BEGIN {
      ratio = (tr == "n/a") ? "n/a" : sprintf("%.2fx", d / tr)
      printf "| %s | %s | %.1f | %.1f | %s | %s | %.2fx |\n", s, t, d, p, tr, ratio, p / d }'
  done
done
