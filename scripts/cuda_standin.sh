#!/usr/bin/env bash
# Builds the CUDA stand-in (host-executed): one shared library, from tools/cuda-standin/ and
# every kernel source of the repository, that answers to the names cudarc and NVRTC open
# (libcuda.so, libcuda.so.1, libcublas.so.13, and NCCL's libnccl.so.2 next to it) and runs
# ditto's CUDA code paths on the host. See docs/cuda-standin.md.
#
#   eval "$(bash scripts/cuda_standin.sh --print-env)"   # build if needed, then export
#                                                         # LD_LIBRARY_PATH (stand-in
#                                                         # first, then NVRTC) and
#                                                         # DITTO_CUDA_STANDIN=1 (and
#                                                         # DITTO_CUDA_STANDIN_DIR)
#   bash scripts/cuda_standin.sh                          # build only
#
# DITTO_CUDA_STANDIN_SANITIZE=address builds it with AddressSanitizer (heap and globals;
# not the stack, which the block fibers switch by hand) into target/cuda-standin-asan,
# and --print-env then also exports cargo's runner, which puts the ASan runtime in
# LD_PRELOAD (it must come first in an uninstrumented Rust process; rustc itself must
# not get it), and ASAN_OPTIONS (the stand-in's own fault trap
# keeps SIGSEGV/SIGBUS/SIGFPE; it leaks its registries on purpose).
#
# Output goes to $DITTO_CUDA_STANDIN_DIR (default target/cuda-standin, git-ignored);
# nothing is installed system-wide. A rebuild happens only when an input changed.
# Kernels are compiled as C++17 with -ffp-contract=off -fno-fast-math
# (docs/contract.md §11), each .cu its own translation unit, and found from the sources:
# every `__global__` in crates/kernels/cuda/*.cu and crates/tensor-core/cuda/*.cu, so new
# kernels are picked up, and in the custom random op example's
# examples/custom_random_op/*.cu (which includes ditto's headers by name, as a
# downstream kernel does: crates/kernels/cuda and crates/tensor-core/cuda are on its
# path, the folders ditto_build::ditto_include_dirs hands a build script).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SANITIZE="${DITTO_CUDA_STANDIN_SANITIZE:-}"
case "$SANITIZE" in
  "") OUT="${DITTO_CUDA_STANDIN_DIR:-$ROOT/target/cuda-standin}" ;;
  address) OUT="${DITTO_CUDA_STANDIN_DIR:-$ROOT/target/cuda-standin-asan}" ;;
  *) echo "DITTO_CUDA_STANDIN_SANITIZE=$SANITIZE: expected address (or unset)" >&2; exit 2 ;;
esac
SRC="$ROOT/tools/cuda-standin"
CXX="${CXX:-g++}"

print_env=0
for arg in "$@"; do
  case "$arg" in
    --print-env) print_env=1 ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done

# cudarc's bindings name every call the stand-in must answer (and the error codes).
cudarc_dir() {
  local version d
  version="$(awk '/^name = "cudarc"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' "$ROOT/Cargo.lock")"
  for d in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-"$version"; do
    [ -f "$d/src/driver/sys/mod.rs" ] && { echo "$d"; return 0; }
  done
  return 1
}
CUDARC="$(cudarc_dir)" || { (cd "$ROOT" && cargo fetch >&2); CUDARC="$(cudarc_dir)"; } || {
  echo "cudarc's sources are not in the cargo registry (cargo fetch failed?)" >&2; exit 1; }

# The folders of kernel sources. Every `__global__` of their .cu files gets a host build;
# the .cu files and the headers beside them are what those builds are made from, which
# the rebuild stamp covers and the manifest lists that the stand-in checks them against
# before it runs a kernel (tools/cuda-standin/src/freshness.cpp).
KERNEL_DIRS=("$ROOT"/crates/kernels/cuda "$ROOT"/crates/tensor-core/cuda "$ROOT"/examples/custom_random_op)
KERNEL_SOURCES=()
KERNEL_FILES=()
shopt -s nullglob
for dir in "${KERNEL_DIRS[@]}"; do
  KERNEL_SOURCES+=("$dir"/*.cu)
  KERNEL_FILES+=("$dir"/*.cu "$dir"/*.cuh)
done
shopt -u nullglob
[ "${#KERNEL_SOURCES[@]}" -gt 0 ] || { echo "no kernel sources found" >&2; exit 1; }

CXXFLAGS=(-std=c++17 -O2 -fPIC -ffp-contract=off -fno-fast-math -Wall -Wextra -Werror=return-type)
LINKFLAGS=()
if [ "$SANITIZE" = address ]; then
  CXXFLAGS+=(-fsanitize=address -fno-omit-frame-pointer --param asan-stack=0)
  LINKFLAGS+=(-fsanitize=address)
fi
LIB="$OUT/lib/libditto_cuda_standin.so"

# Everything the library depends on, hashed: a change anywhere means a rebuild.
stamp() {
  {
    echo "${CXXFLAGS[*]}"; "$CXX" --version | sed -n 1p
    cat "$0" "$SRC"/generate.py "$SRC"/src/* "$SRC"/shim/* "$CUDARC"/src/driver/sys/mod.rs "$CUDARC"/src/cublas/sys/mod.rs
    for f in "${KERNEL_SOURCES[@]}"; do echo "$f"; done
    cat "${KERNEL_FILES[@]}"
  } | sha256sum | cut -d' ' -f1
}

build() {
  local gen="$OUT/gen" obj="$OUT/obj"
  rm -rf "$gen" "$obj" "$OUT/lib" "$OUT/half-installed"
  mkdir -p "$gen" "$obj" "$OUT/lib"
  python3 "$SRC/generate.py" errors "$CUDARC" "$gen/cuda_error_table.inc"

  # One registration unit per kernel source: the .cu, unchanged, then a registration for
  # each __global__ its preprocessed text defines.
  local cu rel unit units=()
  for cu in "${KERNEL_SOURCES[@]}"; do
    rel="${cu#"$ROOT"/}"
    unit="$gen/kernels_$(echo "$rel" | tr '/.-' '___').cpp"
    "$CXX" -std=c++17 -E -P -D__global__=__standin_global__ -include "$SRC/shim/cuda_host_shim.h" \
      -I"$ROOT/crates/kernels/cuda" -I"$ROOT/crates/tensor-core/cuda" -x c++ "$cu" -o "$unit.i"
    python3 "$SRC/generate.py" kernels "$unit.i" "$rel" "$cu" "$unit"
    units+=("$unit")
  done

  # Compile everything, two at a time per core.
  local jobs
  jobs="$(nproc 2>/dev/null || echo 2)"
  printf '%s\n' "$SRC"/src/*.cpp "${units[@]}" | xargs -P "$jobs" -I{} sh -c '
    f="$1"; shift; out="$1"; shift
    exec "$@" -c "$f" -o "$out/$(basename "$f" .cpp).o"' _ {} "$obj" \
    "$CXX" "${CXXFLAGS[@]}" -I"$SRC/src" -I"$SRC/shim" -I"$gen" \
    -I"$ROOT/crates/kernels/cuda" -I"$ROOT/crates/tensor-core/cuda"

  # Stubs for the rest of cudarc's surface, then one library.
  nm --defined-only -g "$obj"/*.o | awk 'NF == 3 { print $3 }' | sort -u > "$gen/defined.txt"
  python3 "$SRC/generate.py" stubs "$CUDARC" "$gen/defined.txt" "$gen/stubs.cpp"
  "$CXX" "${CXXFLAGS[@]}" -w -c "$gen/stubs.cpp" -o "$obj/stubs.o"

  # Call counting (DITTO_CUDA_STANDIN_STATS, tools/cuda-standin/src/call_stats.cpp): each entry
  # point's body is renamed, and a generated trampoline under its name counts the call.
  nm --defined-only -g "$obj"/*.o | awk 'NF == 3 { print $3 }' | sort -u > "$gen/entry_points.txt"
  python3 "$SRC/generate.py" counters "$gen/entry_points.txt" "$gen/entry_renames.txt" \
    "$gen/call_trampolines.S" "$gen/call_names.cpp"
  local o
  for o in "$obj"/*.o; do objcopy --redefine-syms="$gen/entry_renames.txt" "$o"; done
  "$CXX" "${CXXFLAGS[@]}" -c "$gen/call_trampolines.S" -o "$obj/call_trampolines.o"
  "$CXX" "${CXXFLAGS[@]}" -c "$gen/call_names.cpp" -o "$obj/call_names.o"
  printf '{\n  global: cu*; nccl*; ditto_standin_*;\n  local: *;\n};\n' > "$gen/exports.map"
  "$CXX" -shared "${LINKFLAGS[@]}" -o "$LIB" "$obj"/*.o -Wl,-soname,libcuda.so.1 -Wl,--version-script="$gen/exports.map" \
    -Wl,-z,defs -lpthread -ldl
  # What these host builds were compiled from, beside the library: a kernel edited after
  # this build makes module loads fail with a request to rebuild, not run old code.
  python3 "$SRC/generate.py" manifest "$OUT/lib/kernel_sources.txt" "${KERNEL_FILES[@]}"
  # The names cudarc (libcuda.so, libcublas.so.13) and NVRTC (libcuda.so.1) open; one
  # library behind all of them, so the driver and cuBLAS share devices and memory.
  local name
  for name in libcuda.so libcuda.so.1 libcublas.so libcublas.so.13; do
    ln -sf libditto_cuda_standin.so "$OUT/lib/$name"
  done
  # NCCL (tools/cuda-standin/src/nccl.cpp) under its real soname, libnccl.so.2: a library of no
  # code of its own that needs the stand-in, so its calls share the stand-in's devices and
  # memory (dlsym on a handle searches its dependencies). cudarc opens libnccl.so, which
  # is a symlink, as it must be next to the real wheel's libnccl.so.2.
  : > "$gen/nccl_soname.cpp"
  "$CXX" "${CXXFLAGS[@]}" -shared -o "$OUT/lib/libnccl.so.2" "$gen/nccl_soname.cpp" -Wl,-soname,libnccl.so.2 \
    -Wl,--no-as-needed -L"$OUT/lib" -lditto_cuda_standin -Wl,-rpath,'$ORIGIN'
  ln -sf libnccl.so.2 "$OUT/lib/libnccl.so"

  # A half-installed driver for the tests of ditto's typed errors: the same library with
  # the calls that allocate on a memory-pool device, upload and launch left unexported
  # (cudarc panics on a missing symbol; ditto must turn that into an error).
  mkdir -p "$OUT/half-installed"
  printf '{\n  global: cu*; ditto_standin_*;\n  local: cuMemAllocAsync; cuMemcpyHtoDAsync_v2; cuLaunchKernel; *;\n};\n' \
    > "$gen/half-installed.map"
  "$CXX" -shared "${LINKFLAGS[@]}" -o "$OUT/half-installed/libditto_cuda_standin.so" "$obj"/*.o -Wl,-soname,libcuda.so.1 \
    -Wl,--version-script="$gen/half-installed.map" -Wl,-z,defs -lpthread -ldl
  cp "$OUT/lib/kernel_sources.txt" "$OUT/half-installed/"
  for name in libcuda.so libcuda.so.1 libcublas.so libcublas.so.13; do
    ln -sf libditto_cuda_standin.so "$OUT/half-installed/$name"
  done
}

mkdir -p "$OUT"
want="$(stamp)"
if [ -f "$LIB" ] && [ "$(cat "$OUT/stamp" 2>/dev/null)" = "$want" ]; then
  echo "CUDA stand-in (host-executed): up to date in $OUT/lib" >&2
else
  echo "building the CUDA stand-in (host-executed) in $OUT ..." >&2
  build
  echo "$want" > "$OUT/stamp"
  echo "CUDA stand-in (host-executed): built $LIB" >&2
fi

if [ "$print_env" = 1 ]; then
  # NVRTC (the pinned wheel) still compiles every kernel: its folder follows ours.
  nvrtc_env="$(bash "$ROOT/scripts/install_cuda_wheels.sh" --print-env)"
  nvrtc_lib="$(echo "$nvrtc_env" | sed -n 's/^export LD_LIBRARY_PATH=\([^$]*\).*/\1/p')"
  echo "export LD_LIBRARY_PATH=$OUT/lib${nvrtc_lib:+:$nvrtc_lib}\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
  echo "export DITTO_CUDA_STANDIN=1"
  echo "export DITTO_CUDA_STANDIN_DIR=$OUT"
  if [ "$SANITIZE" = address ]; then
    # Through cargo's runner, so only the programs cargo runs get the runtime: rustc
    # itself crashes with it preloaded.
    echo "export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER='env LD_PRELOAD=$("$CXX" -print-file-name=libasan.so)'"
    echo "export ASAN_OPTIONS=detect_leaks=0:handle_segv=0:handle_sigbus=0:handle_sigfpe=0:allow_user_segv_handler=1:abort_on_error=1"
  fi
fi
