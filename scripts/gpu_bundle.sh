#!/usr/bin/env bash
# Builds ditto's GPU test and bench binaries here (the GPU machines have no Rust) and
# packs them with a runner into the git-ignored gpu-bundle/ (docs/contract.md §11).
#
#   scripts/gpu_bundle.sh              # build + pack
#   then, on the GPU machine, from the folder holding gpu-bundle/:
#   bash gpu-bundle/run.sh             # runs tests (REQUIRE_GPU=1) and the bench,
#                                      # writes gpu-bundle/results.md
#
# The runner finds libnvrtc / libnccl in a Python venv's nvidia/cu13/lib (set
# DITTO_CUDA_LIB to point at it directly; scripts/gpu_cuda_lib.sh, shared with
# gpu_profile_step.sh), because cargo's [env] cannot set LD_LIBRARY_PATH for the binaries
# and the GPU machines keep CUDA's libraries there.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUNDLE="$ROOT/gpu-bundle"
cd "$ROOT"

# ---- CUDA stand-in guard (issue 9) ----
# The bundle is for real GPUs. Built or run with the host-executed CUDA stand-in on the
# library path, its results would be the stand-in's, so refuse.
if [ -n "${DITTO_CUDA_STANDIN:-}" ] || [[ "${LD_LIBRARY_PATH:-}" == *cuda-standin* ]]; then
  echo "gpu_bundle.sh: the CUDA stand-in (host-executed) is in this environment" \
       "(DITTO_CUDA_STANDIN / LD_LIBRARY_PATH); run this from a shell without it" >&2
  exit 2
fi
# ---- end CUDA stand-in guard ----

# Prints the executables of the artifacts cargo reports in its JSON messages.
executables() {
  python3 -c '
import json, sys
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if msg.get("reason") == "compiler-artifact" and msg.get("executable"):
        print(msg["executable"])
'
}

echo "building GPU test binaries (release)..." >&2
# One integration-test binary per crate; the runner runs each GPU module of it
# (tests/scripts/gpu_test_modules.sh --list --bundle) in a process of its own.
rm -rf "$BUNDLE.tmp"; mkdir -p "$BUNDLE.tmp"
for package in ditto kernels tensor-core; do
  # Cargo also reports the package's binaries (built for CARGO_BIN_EXE_*): keep the test.
  exe=$(cargo test --release --no-run --message-format=json -p "$package" --test integration | executables | grep '/deps/integration-')
  cp "$exe" "$BUNDLE.tmp/${package//-/_}_tests"
done
echo "building the training demo (release)..." >&2
examples=$(cargo build --release --message-format=json -p ditto --example train_resume --example train_gpt --bin ditto-audit | executables)
# --- data parallel (issue 11): NCCL at world size 1 on the GPU -----------------------
echo "building ddp_train and the NCCL availability test with --features nccl (release)..." >&2
examples="$examples $(cargo build --release --message-format=json -p ditto --features nccl --example ddp_train | executables)"
exe=$(cargo test --release --no-run --message-format=json -p distributed --features nccl --test integration | executables | grep '/deps/integration-')
cp "$exe" "$BUNDLE.tmp/distributed_tests"
# ----------------------------------------------------------------------------------------
echo "building the GPU bench (release)..." >&2
benches=$(cargo bench --no-run --message-format=json -p ditto --bench gpu_bench | executables)
# ---- determinism (issue 12): fast (atomic) vs deterministic paths on the GPU ----
benches="$benches $(cargo bench --no-run --message-format=json -p ditto --bench gpu_determinism_bench | executables)"
# ---- end determinism ----
# ---- portable arithmetic (issue 19): portable matmul vs cuBLAS ----
benches="$benches $(cargo bench --no-run --message-format=json -p ditto --bench gpu_portable_bench | executables)"
# ---- GPU training step (issue 18 item 5): the step alone, next to its PyTorch twin ----
benches="$benches $(cargo bench --no-run --message-format=json -p ditto --bench train_step | executables)"

rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/bin" "$BUNDLE/lib"
mv "$BUNDLE.tmp"/*_tests "$BUNDLE/bin/"
rmdir "$BUNDLE.tmp"
{ bash tests/scripts/gpu_test_modules.sh --list --bundle; echo "distributed nccl_availability"; } > "$BUNDLE/modules.txt"
for exe in $benches $examples; do
  # Strip cargo's hash suffix: gpu_random-0123abcd -> gpu_random.
  name="$(basename "$exe" | sed 's/-[0-9a-f]\{16\}$//')"
  cp "$exe" "$BUNDLE/bin/$name"
done
# The bundle travels to the GPU machine with the working tree, under a size limit (64 MiB
# for both on the machines lent to this project): symbol tables go (about a fifth of each
# binary); panics still print their messages and locations.
if command -v strip > /dev/null; then strip --strip-all "$BUNDLE"/bin/*; fi
cp "$ROOT/benches/compare_torch.py" "$ROOT/benches/compare_torch_train.py" "$ROOT/benches/compare_torch_gpt.py" \
  "$ROOT/scripts/gpt_torch_parity.py" "$ROOT/scripts/gpu_profile_step.sh" "$ROOT/scripts/gpu_cuda_lib.sh" "$ROOT/data/emma.txt" \
  "$ROOT/data/tinyshakespeare.txt" "$BUNDLE/"

cat > "$BUNDLE/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs ditto's GPU tests and bench on this machine; writes results.md beside this file.
set -uo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"

# find_cuda_lib, refuse_cuda_standin. Real GPUs only: never the host-executed stand-in.
source "$HERE/gpu_cuda_lib.sh"
refuse_cuda_standin
LIB="$(find_cuda_lib)" || { echo "no nvidia/cu13/lib with libnvrtc.so.13 found; set DITTO_CUDA_LIB" >&2; LIB=""; }
# The nvidia-nccl-cu13 wheel puts libnccl.so.2 in nvidia/nccl/lib, beside nvidia/cu13.
if [ -n "$LIB" ] && [ ! -e "$LIB/libnccl.so.2" ] && [ -e "$LIB/../../nccl/lib/libnccl.so.2" ]; then
  ln -sf "$(cd "$LIB/../../nccl/lib" && pwd)/libnccl.so.2" "$HERE/lib/libnccl.so"
fi
# libnccl.so.2 ships without the unversioned name that loaders ask for.
if [ -n "$LIB" ] && [ -e "$LIB/libnccl.so.2" ] && [ ! -e "$LIB/libnccl.so" ]; then
  ln -sf "$LIB/libnccl.so.2" "$HERE/lib/libnccl.so"
fi
export LD_LIBRARY_PATH="$HERE/lib${LIB:+:$LIB}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export REQUIRE_GPU=1
mkdir -p "$HERE/logs"

{
  echo "# ditto GPU run"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo unknown)"
  echo "- CUDA libraries: ${LIB:-not found}"
  echo
  echo "| crate: test module | result | summary |"
  echo "|---|---|---|"
} > "$HERE/results.md"

status=0
export DITTO_EXPECT_NCCL=1  # nccl_availability: the GPU machines have NCCL
while read -r package module; do
  t="$HERE/bin/${package//-/_}_tests"
  name="$module"
  if "$t" --test-threads=1 "$module::" > "$HERE/logs/$name.log" 2>&1; then result=pass; else result=FAIL; status=1; fi
  summary="$(grep -E '^test result:' "$HERE/logs/$name.log" | tail -1)"
  # A filter that matched nothing ran nothing: not a pass.
  if [[ "$summary" == *" 0 passed"* ]]; then result=FAIL; status=1; fi
  echo "| $package: $name | $result | ${summary:-see logs/$name.log} |" >> "$HERE/results.md"
  echo "$package $name: $result ($summary)"
done < "$HERE/modules.txt"

# Issue 4's acceptance on the GPU: straight run, save at 120, resume, compare; then a
# truncated and a bit-flipped checkpoint must fail with a message and no panic.
{
  echo
  echo "## Training demo on cuda:0 (seed 7, 200 steps, save at 120)"
  echo
  echo '```'
} >> "$HERE/results.md"
demo() { "$HERE/bin/train_resume" "$@" --device cuda:0; }
W="$HERE/logs/demo"; mkdir -p "$W"
(
  cd "$W" || exit 1
  demo --seed 7 --steps 200 --out a.csv > straight.log 2>&1 || echo "straight run failed"
  demo --seed 7 --steps 200 --save-at 120 --checkpoint ck.safetensors --out b.csv > save.log 2>&1 || echo "save run failed"
  demo --resume ck.safetensors --steps 200 --out c.csv --compare a.csv > resume.log 2>&1 || echo "resume run failed"
  echo "straight run, last progress line: $(grep 'steps/s' straight.log | tail -1)"
  grep -E "identical|error" resume.log | tail -2
  if [ -s a.csv ] && [ -s c.csv ] && cmp -s <(sed -n '122,201p' a.csv) <(sed -n '2,81p' c.csv); then echo "rows 121..200 of a.csv and c.csv: byte-identical"; else echo "rows 121..200 of a.csv and c.csv: DIFFER"; fi
  demo --seed 7 --steps 200 --workers 3 --out a3.csv > workers.log 2>&1 || echo "workers run failed"
  if [ -s a.csv ] && cmp -s a.csv a3.csv; then echo "--workers 3: identical to --workers 0"; else echo "--workers 3: DIFFERS"; fi
  head -c 5000 ck.safetensors > truncated.safetensors
  demo --resume truncated.safetensors --steps 200 > truncated.log 2>&1; echo "truncated checkpoint: exit $? ($(grep -m1 -o 'truncated[^.]*' truncated.log | head -1))"
  cp ck.safetensors flipped.safetensors
  python3 -c 'import sys; p=sys.argv[1]; b=bytearray(open(p,"rb").read()); b[-100]^=1; open(p,"wb").write(b)' flipped.safetensors
  demo --resume flipped.safetensors --steps 200 > flipped.log 2>&1; echo "bit-flipped checkpoint: exit $? ($(grep -m1 -o 'corrupted[^.]*' flipped.log))"
  grep -c panicked ./*.log | grep -v ':0' || echo "no panics"
) >> "$HERE/results.md" 2>&1
grep -q "identical: yes" "$W/resume.log" || status=1
echo '```' >> "$HERE/results.md"

# Issue 11 on the GPU: ddp_train over NCCL at world size 1 (one GPU), straight and
# saved at 50 / resumed, rows 51..100 compared byte for byte.
{
  echo
  echo "## ddp_train --backend nccl, world size 1 (seed 7, 100 steps, --invariant, save at 50)"
  echo
  echo '```'
} >> "$HERE/results.md"
N="$HERE/logs/nccl"; mkdir -p "$N"
(
  cd "$N" || exit 1
  export RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 DITTO_EXPECT_NCCL=1
  ddp() { "$HERE/bin/ddp_train" --backend nccl --seed 7 --invariant "$@"; }
  ddp --steps 100 --out n.csv > straight.log 2>&1 || echo "straight run failed: $(tail -1 straight.log)"
  ddp --steps 100 --save-at 50 --checkpoint n.safetensors --out s.csv > save.log 2>&1 || echo "save run failed"
  "$HERE/bin/ddp_train" --backend nccl --resume n.safetensors --steps 100 --out r.csv --compare n.csv > resume.log 2>&1 || echo "resume run failed"
  echo "straight run, last progress line: $(grep 'steps/s' straight.log | tail -1)"
  grep -E "identical|error" resume.log | tail -2
  if [ -s n.csv ] && [ -s r.csv ] && cmp -s <(sed -n '52,101p' n.csv) <(sed -n '2,51p' r.csv); then echo "rows 51..100: byte-identical"; else echo "rows 51..100: DIFFER"; fi
  # The same run on the CPU threads backend: informational, since cuBLAS and the CPU gemm
  # may round differently; the random stream (dropout masks) is the same on both.
  "$HERE/bin/ddp_train" --backend threads --world-size 1 --seed 7 --steps 100 --invariant --out t.csv > cpu.log 2>&1 || echo "CPU threads run failed"
  if cmp -s n.csv t.csv; then echo "NCCL cuda:0 vs CPU threads loss curve: byte-identical"; else echo "NCCL cuda:0 vs CPU threads loss curve: differ (first: $(cmp n.csv t.csv 2>&1 | head -1))"; fi
  # With --portable the two must be the same bytes (issue 19).
  ddp --portable --steps 100 --out np.csv > portable.log 2>&1 || echo "portable NCCL run failed"
  "$HERE/bin/ddp_train" --backend threads --world-size 4 --portable --seed 7 --steps 100 --invariant --out tp.csv > tp.log 2>&1 || echo "portable threads run failed"
  if [ -s np.csv ] && cmp -s np.csv tp.csv; then echo "portable: NCCL cuda:0 and CPU threads (world size 4) byte-identical"; else echo "portable: NCCL cuda:0 and CPU threads (world size 4) DIFFER"; fi
) >> "$HERE/results.md" 2>&1
grep -q "identical: yes" "$N/resume.log" || status=1
echo '```' >> "$HERE/results.md"

# Issue 19 on the GPU: portable arithmetic. The demo with --portable on cuda:0 must write
# the CPU's CSV bytes; the CSV's sha256 is recorded with the GPU model, so bundles run on
# two GPU models can be compared hash for hash. A checkpoint saved on cuda:0 resumes on
# the CPU; a portable CPU trace and a portable cuda:0 trace agree op by op.
{
  echo
  echo "## Portable arithmetic on cuda:0 (seed 7, 200 steps)"
  echo
  echo '```'
} >> "$HERE/results.md"
P="$HERE/logs/portable"; mkdir -p "$P"
(
  cd "$P" || exit 1
  run_demo() { "$HERE/bin/train_resume" --seed 7 --no-plot "$@"; }
  run_demo --portable --device cuda:0 --steps 200 --out g.csv > g.log 2>&1 || echo "portable cuda:0 run failed: $(tail -1 g.log)"
  run_demo --portable --device cpu --steps 200 --out c.csv > c.log 2>&1 || echo "portable cpu run failed: $(tail -1 c.log)"
  run_demo --device cuda:0 --steps 200 --out d.csv > d.log 2>&1 || echo "default cuda:0 run failed: $(tail -1 d.log)"
  echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  echo "portable cuda:0 CSV sha256: $(sha256sum g.csv | cut -d' ' -f1)"
  echo "portable cpu    CSV sha256: $(sha256sum c.csv | cut -d' ' -f1)"
  echo "default cuda:0  CSV sha256: $(sha256sum d.csv | cut -d' ' -f1)"
  if [ -s g.csv ] && cmp -s g.csv c.csv; then echo "portable: cuda:0 and cpu byte-identical"; else echo "portable: cuda:0 and cpu DIFFER"; fi
  if cmp -s d.csv c.csv; then echo "default cuda:0 equals the portable cpu run"; else echo "default cuda:0 differs from the portable run (cuBLAS, libdevice): expected"; fi
  echo "last progress line, default:  $(grep 'steps/s' d.log | tail -1)"
  echo "last progress line, portable: $(grep 'steps/s' g.log | tail -1)"
  run_demo --portable --device cuda:0 --steps 200 --save-at 120 --checkpoint ck.safetensors --out s.csv > s.log 2>&1 || echo "portable save run failed"
  run_demo --portable --resume ck.safetensors --device cpu --steps 200 --out r.csv --compare c.csv > r.log 2>&1 || echo "portable resume on cpu failed"
  grep -E "identical|error" r.log | tail -1 | sed 's/^/saved on cuda:0, resumed on cpu: /'
  DITTO_AUDIT=c.trace run_demo --portable --device cpu --steps 20 --out ac.csv > /dev/null 2>&1
  DITTO_AUDIT=g.trace run_demo --portable --device cuda:0 --steps 20 --out ag.csv > /dev/null 2>&1
  "$HERE/bin/ditto-audit" diff c.trace g.trace | tail -1 | sed 's/^/ditto-audit, portable cpu vs cuda:0: /'
) >> "$HERE/results.md" 2>&1
grep -q "portable: cuda:0 and cpu byte-identical" "$HERE/results.md" || status=1
echo '```' >> "$HERE/results.md"
# run_bench BIN TITLE: the table bench BIN prints, under a heading of results.md (a
# failing bench fails the run and points at its log).
run_bench() {
  printf '\n## %s\n\n' "$2" >> "$HERE/results.md"
  if "$HERE/bin/$1" > "$HERE/logs/$1.log" 2>&1; then
    cat "$HERE/logs/$1.log" >> "$HERE/results.md"
  else
    status=1
    echo "$1 failed: see logs/$1.log" >> "$HERE/results.md"
  fi
}
run_bench gpu_portable_bench "Portable matmul vs cuBLAS (issue 19)"
run_bench gpu_bench "Throughput"
run_bench gpu_determinism_bench "Fast (atomic) vs deterministic paths (issue 12)"
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  echo >> "$HERE/results.md"
  python3 "$HERE/compare_torch.py" >> "$HERE/results.md" 2>"$HERE/logs/compare_torch.err" || echo "compare_torch.py failed" >> "$HERE/results.md"
fi

# A training step on this GPU next to its PyTorch twin (issue 18's GPU-step targets, issue
# 30 item 7): the MLP demo eager and CUDA-graphed, and the default GPT. ditto's numbers are
# the runs' own steps/s (averaged from the start, so start-up and kernel compiles count;
# each step also uploads a new batch); PyTorch's are medians of timed rounds on a fixed
# batch (benches/compare_torch_train.py, benches/compare_torch_gpt.py).
{
  echo
  echo "## Training step on cuda:0, ditto and PyTorch eager (MLP demo eager / graphed, GPT)"
  echo
  echo '```'
} >> "$HERE/results.md"
S="$HERE/logs/step"; mkdir -p "$S"
(
  cd "$S" || exit 1
  "$HERE/bin/train_resume" --device cuda:0 --seed 7 --steps 3000 --out e.csv > eager.log 2>&1 || echo "ditto MLP eager run failed"
  "$HERE/bin/train_resume" --device cuda:0 --seed 7 --steps 3000 --cuda-graph --out g.csv > graph.log 2>&1 || echo "ditto MLP graphed run failed"
  echo "ditto MLP eager, 3000 steps:   $(grep 'steps/s' eager.log | tail -1)"
  echo "ditto MLP graphed, 3000 steps: $(grep 'steps/s' graph.log | tail -1)"
  if [ -s e.csv ] && cmp -s e.csv g.csv; then echo "eager and graphed CSVs: byte-identical"; else echo "eager and graphed CSVs: DIFFER"; fi
  "$HERE/bin/train_gpt" --device cuda:0 --data "$HERE/emma.txt" --steps 300 --sample 0 --out gpt.csv > gpt.log 2>&1 || echo "ditto GPT run failed"
  echo "ditto GPT (default size), 300 steps: $(grep 'steps/s' gpt.log | tail -1)"
  if python3 -c 'import torch; assert torch.cuda.is_available()' 2> /dev/null; then
    python3 "$HERE/compare_torch_gpt.py" --device cuda --rounds 5 2> "$HERE/logs/compare_torch_gpt.err" || echo "compare_torch_gpt.py failed"
    # The step alone (fixed batch on the device, no loader, no compile time), ditto's
    # benches/train_step and its twin with the same flags, alternating, 3 rounds each:
    # the demo's MLP and issue 18's large one, eager and graphed.
    for round in 1 2 3; do
      for shape in "64,256,256,10 128" "1024,4096,4096,10 1024"; do
        set -- $shape
        for graph in "" --cuda-graph; do
          "$HERE/bin/train_step" --device cuda:0 $graph --widths "$1" --batch "$2" --rounds 5 --seconds 0.5 2>> "$HERE/logs/train_step.err" || echo "train_step $graph $1 failed"
          python3 "$HERE/compare_torch_train.py" --device cuda $graph --widths "$1" --batch "$2" --rounds 5 --seconds 0.5 2>> "$HERE/logs/compare_torch_train.err" || echo "compare_torch_train.py $graph $1 failed"
        done
      done
      echo "(round $round done)"
    done
    # Issue 43's targets: nanoGPT's Shakespeare recipe shape (6 layers, 6 heads, width 384,
    # block 256, batch 64, dropout 0.2), the step alone, ditto (f32 and bf16 autocast, fused
    # attention, eager and CUDA-graphed) and PyTorch eager alternating: f32 with TF32 off (masked softmax, and
    # SDPA), bf16 autocast with SDPA, and bf16 compiled. Each line ends with its process's
    # peak device memory.
    gpt=(--layers 6 --heads 6 --width 384 --block 256 --batch 64 --dropout 0.2)
    for round in 1 2 3; do
      for ditto_flags in "--precision f32" "--precision f32 --cuda-graph" "--precision bf16" \
                         "--precision bf16 --cuda-graph"; do
        "$HERE/bin/train_step" --device cuda:0 --gpt 6,6,384,256 --batch 64 --dropout 0.2 $ditto_flags \
          --data "$HERE/tinyshakespeare.txt" --rounds 3 --seconds 2 2>> "$HERE/logs/train_step.err" || echo "train_step --gpt $ditto_flags failed"
      done
      for torch_flags in "--attention manual" "--attention sdpa" "--precision bf16 --attention sdpa" \
                         "--precision bf16 --attention sdpa --compile"; do
        python3 "$HERE/compare_torch_gpt.py" --device cuda "${gpt[@]}" $torch_flags --rounds 3 --steps-per-round 10 \
          2>> "$HERE/logs/compare_torch_gpt.err" | tail -2 || echo "compare_torch_gpt.py $torch_flags failed"
      done
      echo "(GPT round $round done)"
    done
  else
    echo "PyTorch with CUDA is not importable here: no PyTorch numbers"
  fi
) >> "$HERE/results.md" 2>&1
echo '```' >> "$HERE/results.md"
cat "$HERE/results.md"
exit $status
RUN
chmod +x "$BUNDLE/run.sh"

du -sh "$BUNDLE" >&2
echo "bundle ready: $(ls "$BUNDLE/bin" | tr '\n' ' ')" >&2
echo "on the GPU machine, run:  bash gpu-bundle/run.sh" >&2
echo "where a step's GPU time goes (Nsight Compute):  bash gpu-bundle/gpu_profile_step.sh [OUT] [--gpt 6,6,384,256 --batch 64 --dropout 0.2]" >&2
