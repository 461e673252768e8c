#!/usr/bin/env bash
# Installs the pinned CUDA 13.0 wheels that ditto's NVRTC tests need into a cached venv
# and prints the LD_LIBRARY_PATH line to export (docs/contract.md §11).
#
# Why wheels: they need no CUDA toolkit and no GPU, only PyPI. Why these pins: newer
# NVRTC releases emit PTX that the CUDA 13.0 drivers on our GPU machines reject.
#
# Usage:
#   scripts/install_cuda_wheels.sh            # NVRTC only (enough for the compile test)
#   scripts/install_cuda_wheels.sh --ptxas    # also ptxas + headers, for register reports
#   scripts/install_cuda_wheels.sh --nccl     # also NCCL (252 MB), for ddp_train --backend nccl
#   eval "$(scripts/install_cuda_wheels.sh --print-env)"   # install if needed, then
#                                                          # stdout is only the exports
#
# The venv lives in $DITTO_CUDA_VENV (default: ~/.cache/ditto/venv-cu13), so CI runs and
# fresh work trees on the same machine reuse it.
set -euo pipefail

VENV="${DITTO_CUDA_VENV:-$HOME/.cache/ditto/venv-cu13}"
NVRTC_PIN="nvidia-cuda-nvrtc==13.0.88"
PTXAS_PINS=(
  "nvidia-cuda-nvcc==13.0.88"    # ptxas
  "nvidia-nvvm==13.0.88"         # libnvvm, which nvcc's wheel expects beside it
  "nvidia-cuda-crt==13.0.88"     # crt/ headers
  "nvidia-cuda-runtime==13.0.96" # cuda_fp16.h / cuda_bf16.h (13.0.96 is that wheel's 13.0 release)
)
# NCCL 2.27.7 is built against CUDA 13.0 like the pins above (2.30.x needs 13.3). It
# installs nvidia/nccl/lib/libnccl.so.2; cudarc looks for libnccl.so, so a link is added.
NCCL_PIN="nvidia-nccl-cu13==2.27.7"

want_ptxas=0
want_nccl=0
print_env_only=0
for arg in "$@"; do
  case "$arg" in
    --ptxas) want_ptxas=1 ;;
    --nccl) want_nccl=1 ;;
    --print-env) print_env_only=1 ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done

lib_dir() {
  # The wheels put their libraries under site-packages/nvidia/cu13/lib.
  local d
  for d in "$VENV"/lib/python3*/site-packages/nvidia/cu13/lib; do
    [ -d "$d" ] && { echo "$d"; return 0; }
  done
  return 1
}

# Everything but the export lines goes to stderr, so `eval "$(... --print-env)"` works.
if [ ! -x "$VENV/bin/python" ]; then
  echo "creating venv $VENV" >&2
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV" >&2
fi
pins=("$NVRTC_PIN")
[ "$want_ptxas" = 1 ] && pins+=("${PTXAS_PINS[@]}")
[ "$want_nccl" = 1 ] && pins+=("$NCCL_PIN")
# pip does not touch the network for exact pins that are already installed.
"$VENV/bin/python" -m pip install --disable-pip-version-check -q "${pins[@]}" >&2

LIB="$(lib_dir)" || { echo "no nvidia/cu13/lib under $VENV after installing" >&2; exit 1; }

# cudarc's loader asks for libnvrtc.so.13 (and libnvrtc.so); the wheel ships the
# versioned name only, so add the unversioned link too.
if [ -e "$LIB/libnvrtc.so.13" ] && [ ! -e "$LIB/libnvrtc.so" ]; then
  ln -s libnvrtc.so.13 "$LIB/libnvrtc.so"
fi

NCCL_LIB=""
if [ "$want_nccl" = 1 ]; then
  for d in "$VENV"/lib/python3*/site-packages/nvidia/nccl/lib; do
    [ -e "$d/libnccl.so.2" ] && NCCL_LIB="$d"
  done
  [ -n "$NCCL_LIB" ] || { echo "no nvidia/nccl/lib/libnccl.so.2 under $VENV after installing" >&2; exit 1; }
  [ -e "$NCCL_LIB/libnccl.so" ] || ln -s libnccl.so.2 "$NCCL_LIB/libnccl.so"
  LIB="$LIB:$NCCL_LIB"
fi

BIN="$(dirname "${LIB%%:*}")/bin"
if [ "$print_env_only" = 0 ]; then
  echo "NVRTC: $(ls "${LIB%%:*}"/libnvrtc.so* | tr '\n' ' ')" >&2
  [ -n "$NCCL_LIB" ] && echo "NCCL: $NCCL_LIB/libnccl.so" >&2
  [ -x "$BIN/ptxas" ] && echo "ptxas: $BIN/ptxas" >&2
  echo "# run this (or eval the output of: $0 --print-env):" >&2
fi
echo "export LD_LIBRARY_PATH=$LIB\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
[ -x "$BIN/ptxas" ] && echo "export DITTO_PTXAS=$BIN/ptxas"
exit 0
