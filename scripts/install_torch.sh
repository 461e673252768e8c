#!/usr/bin/env bash
# Installs PyTorch into a cached virtual environment outside the checkout, for the tests
# that run ditto under torch's own launcher and store (issue 27): `torchrun`, and torch's
# TCPStore server for tests/integration/tcpstore_torch.rs. Only their CPU side is used.
#
#   eval "$(bash scripts/install_torch.sh --print-env)"   # install if needed, then export
#                                                         # TORCHRUN (the launcher) and
#                                                         # DITTO_TORCH_PYTHON
#   bash scripts/install_torch.sh                         # install only
#   bash scripts/install_torch.sh --with-launchers ...    # also Ray and PySpark (below)
#
# The venv lives in $DITTO_TORCH_VENV (default ~/.cache/ditto/venv-torch), so CI runs and
# work trees on one machine reuse it. torch is pinned to 2.15.0, the version the TCPStore
# frames in crates/distributed/tests/fixtures were recorded from. PyPI's Linux wheel
# brings CUDA libraries (about 5 GB installed; torch imports them even for CPU use, so
# they cannot be left out); PyTorch's CPU-only wheels live on an index of its own.
#
# --with-launchers adds, to the same venv, the launchers of examples/launchers/ (issue
# 45): ray (core) and pyspark with its `ml` extra (numpy; TorchDistributor imports it), so
# that PySpark's TorchDistributor finds torchrun in its own interpreter. PySpark also
# needs Java 17 (Debian: openjdk-17-jre-headless), which this script does not install.
#
# A failed install warns and prints nothing to export (the torch tests then say they were
# skipped), except under CI=true, where it fails: CI must run them.
set -euo pipefail

VENV="${DITTO_TORCH_VENV:-$HOME/.cache/ditto/venv-torch}"
TORCH_PIN="torch==2.15.0"
RAY_VERSION=2.60.0
PYSPARK_VERSION=4.3.0
LAUNCHER_PINS=("ray==$RAY_VERSION" "pyspark[ml]==$PYSPARK_VERSION")

print_env=0
launchers=0
for arg in "$@"; do
  case "$arg" in
    --print-env) print_env=1 ;;
    --with-launchers) launchers=1 ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done

installed() {
  [ -x "$VENV/bin/torchrun" ] &&
    "$VENV/bin/python" -c "import importlib.metadata as m; assert m.version('torch') == '${TORCH_PIN#torch==}'" 2> /dev/null
}

if ! installed; then
  echo "installing $TORCH_PIN into $VENV (cached; a few GB) ..." >&2
  if ! { python3 -m venv "$VENV" >&2 && "$VENV/bin/pip" install --quiet "$TORCH_PIN" >&2 && installed; }; then
    if [ "${CI:-}" = true ]; then
      echo "install_torch: installing $TORCH_PIN failed, and CI=true requires it" >&2
      exit 1
    fi
    echo "install_torch: installing $TORCH_PIN failed; the torch tests will be skipped" >&2
    exit 0
  fi
fi
echo "torch: $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))') in $VENV" >&2

launchers_installed() {
  "$VENV/bin/python" -c "import importlib.metadata as m, numpy
assert m.version('ray') == '$RAY_VERSION' and m.version('pyspark') == '$PYSPARK_VERSION'" 2> /dev/null
}
if [ "$launchers" = 1 ] && ! launchers_installed; then
  echo "installing ${LAUNCHER_PINS[*]} into $VENV ..." >&2
  if ! { "$VENV/bin/pip" install --quiet "${LAUNCHER_PINS[@]}" >&2 && launchers_installed; }; then
    if [ "${CI:-}" = true ]; then
      echo "install_torch: installing ${LAUNCHER_PINS[*]} failed, and CI=true requires it" >&2
      exit 1
    fi
    echo "install_torch: installing ${LAUNCHER_PINS[*]} failed; the launcher tests need them" >&2
  fi
fi
[ "$launchers" = 1 ] && launchers_installed &&
  echo "launchers: $("$VENV/bin/python" -c 'import importlib.metadata as m; print("ray", m.version("ray"), "pyspark", m.version("pyspark"))')" >&2

if [ "$print_env" = 1 ]; then
  echo "export TORCHRUN=$VENV/bin/torchrun"
  echo "export DITTO_TORCH_PYTHON=$VENV/bin/python"
fi
