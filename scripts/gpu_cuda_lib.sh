# Sourced by the GPU bundle's scripts (run.sh, gpu_profile_step.sh; scripts/gpu_bundle.sh
# copies it beside them): what both need before they start a ditto binary on a GPU machine.

# Prints the folder holding CUDA 13's libnvrtc.so.13: DITTO_CUDA_LIB, else the active
# venv's, ditto's own (scripts/install_cuda_wheels.sh), or python3's site-packages' nvidia
# wheels. The GPU machines keep CUDA's libraries there, and cargo's [env] cannot set
# LD_LIBRARY_PATH for a binary run outside cargo.
find_cuda_lib() {
  local d
  for d in "${DITTO_CUDA_LIB:-}" \
           "${VIRTUAL_ENV:-/nonexistent}"/lib/python3*/site-packages/nvidia/cu13/lib \
           "$HOME"/.cache/ditto/venv-cu13/lib/python3*/site-packages/nvidia/cu13/lib \
           $(python3 -c 'import site; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null | tr ' ' '\n' | sed 's|$|/nvidia/cu13/lib|'); do
    [ -n "$d" ] && [ -e "$d/libnvrtc.so.13" ] && { echo "$d"; return 0; }
  done
  return 1
}

# Exits with 2 when the host-executed CUDA stand-in (scripts/cuda_standin.sh) is in this
# environment: the bundle's results must be a real GPU's.
refuse_cuda_standin() {
  if [ -n "${DITTO_CUDA_STANDIN:-}" ] || [[ "${LD_LIBRARY_PATH:-}" == *cuda-standin* ]]; then
    echo "the CUDA stand-in (host-executed) is in this environment; run from a shell without it" >&2
    exit 2
  fi
}
