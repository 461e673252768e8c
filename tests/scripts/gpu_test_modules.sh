#!/usr/bin/env bash
# The GPU test modules of the crates' integration-test binaries, in one place for CI (the
# CUDA stand-in) and scripts/gpu_bundle.sh (a real GPU).
#
#   bash tests/scripts/gpu_test_modules.sh --list           # "package module" per line (CI's set)
#   bash tests/scripts/gpu_test_modules.sh --list --bundle  # the set a real GPU runs
#   bash tests/scripts/gpu_test_modules.sh --run [cargo args...]
#
# --run runs each module in a process of its own (`cargo test --workspace --test
# integration -- module::`), as when each was a test binary of its own: a device, its
# caching allocator and the stand-in's call counters are process-wide. A module whose
# filter ran no test fails the run, so a renamed module cannot pass by running nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."

# Modules a real GPU runs: every test that needs a CUDA device.
bundle_modules="
ditto gpu_random
ditto gpu_custom_op
ditto gpu_tensor_ops
ditto gpu_train_resume
ditto gpu_transformer_ops
ditto gpu_attention
ditto gpu_gpt
ditto gpu_multi_device
ditto cuda_driver_checks
ditto cuda_gemm_checks
ditto gpu_determinism
ditto gpu_portable
ditto gpu_portable_train
ditto gpu_graphs
ditto gpu_graph_rng
ditto gpu_graph_memory
kernels nvrtc_compile
tensor-core cuda
tensor-core nvrtc_tensor_ops
"
# The stand-in also checks its own promises (faults it injects, stale host builds) and
# counts driver calls, which a real driver does not report (gpu_step_budget).
standin_only="
ditto gpu_step_budget
ditto cuda_driver_version
ditto cuda_standin_deferred
ditto cuda_standin_faults
ditto cuda_standin_freshness
"

case "${1:-}" in
  --list)
    if [ "${2:-}" = --bundle ]; then echo "$bundle_modules"; else echo "$bundle_modules$standin_only"; fi \
      | sed '/^$/d'
    ;;
  --run)
    shift
    while read -r package module; do
      [ -n "$module" ] || continue
      echo "== $package: $module"
      log="$(mktemp)"
      status=0
      cargo test --workspace "$@" --test integration -- "$module::" > "$log" 2>&1 || status=$?
      grep -E "^test result:|^test .* FAILED|panicked" "$log" | grep -v " 0 passed" || true
      if [ "$status" -ne 0 ]; then
        cat "$log" >&2; rm -f "$log"
        echo "gpu_test_modules: $package $module failed (cargo exit $status)" >&2; exit 1
      fi
      ran=$(grep -E "^test result: ok" "$log" | sed -E 's/.* ([0-9]+) passed.*/\1/' | awk '{ s += $1 } END { print s + 0 }')
      rm -f "$log"
      if [ "$ran" -eq 0 ]; then
        echo "gpu_test_modules: no test of $package ran for the filter '$module::'" >&2; exit 1
      fi
    done < <(bash "$0" --list)
    ;;
  *)
    echo "usage: $0 --list [--bundle] | --run [cargo args...]" >&2; exit 2 ;;
esac
