#!/usr/bin/env bash
# Builds Horovod 0.28.1 (its last release) into a cached virtual environment outside the
# checkout, for tests/scripts/horovod_tests.sh: ditto's ranks launched by `horovodrun`.
#
#   eval "$(bash scripts/install_horovod.sh --print-env)"   # build if needed, then export
#                                                           # HOROVODRUN
#   bash scripts/install_horovod.sh --packages-only         # only the Debian packages (so
#                                                           # the build can run in the
#                                                           # background without apt)
#
# Horovod ships only a source distribution, and 0.28.1 does not build against
# torch >= 2.1, so it is built against Debian's python3-torch (1.13.1) with Debian's
# python3 (not a pyenv or venv interpreter, which would not see it), with its Gloo and
# MPI controllers. Measured on the 2-core Xeon VM, 2026-11-29: 69 s of apt, 335 s of
# build. Only the launcher is used; ditto never imports horovod.
#
# The venv lives in $DITTO_HOROVOD_VENV (default ~/.cache/ditto/venv-horovod). A failed
# build fails the script.
set -euo pipefail

VENV="${DITTO_HOROVOD_VENV:-$HOME/.cache/ditto/venv-horovod}"
VERSION=0.28.1

print_env=0 packages_only=0
for arg in "$@"; do
  case "$arg" in
    --print-env) print_env=1 ;;
    --packages-only) packages_only=1 ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done

packages=(python3-torch python3-dev python3-venv python3-pip cmake g++ libopenmpi-dev openmpi-bin)
if ! dpkg -s "${packages[@]}" >/dev/null 2>&1; then
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >&2
fi
[ "$packages_only" = 1 ] && exit 0

# The report is read whole before it is searched: `horovodrun ... | grep -q` under
# pipefail fails whenever grep exits before horovodrun's last write (with Python's output
# unbuffered, as CI's is, that depends on the machine's load).
installed() {
  local report
  [ -x "$VENV/bin/horovodrun" ] && report="$("$VENV/bin/horovodrun" --check-build 2>/dev/null)" &&
    [[ "$report" == *"v$VERSION"* ]]
}

if ! installed; then
  echo "building horovod $VERSION into $VENV (cached; about 6 minutes on 2 cores) ..." >&2
  rm -rf "$VENV"
  /usr/bin/python3 -m venv --system-site-packages "$VENV" >&2
  "$VENV/bin/pip" install --quiet cloudpickle psutil pyyaml packaging "cffi>=1.4.0" >&2
  HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
    HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="-j$(nproc)" \
    "$VENV/bin/pip" install --quiet --no-build-isolation --no-cache-dir "horovod==$VERSION" >&2
  installed || { echo "install_horovod: horovodrun --check-build does not report v$VERSION" >&2; exit 1; }
fi
echo "horovod: $("$VENV/bin/horovodrun" --version 2>/dev/null) in $VENV" >&2

if [ "$print_env" = 1 ]; then
  echo "export HOROVODRUN=$VENV/bin/horovodrun"
fi
