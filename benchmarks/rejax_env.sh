#!/usr/bin/env bash
# (Re)create the virtual environment of rejax, the JAX peer of benchmarks/compiled_loop.py.
#
#   bash benchmarks/rejax_env.sh [VENV_DIR]        # default: .venvs/rejax
#
# rejax 0.1.3 needs gymnax < 1.0 and brings its own JAX (CPU), Flax and Optax; none of it
# touches cadence's environment, so the venv does not see the system site-packages.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venvs/rejax}"
rm -rf "$VENV"
python -m venv "$VENV"
"$VENV/bin/pip" install --quiet rejax==0.1.3 'gymnax<1.0'
"$VENV/bin/python" -c 'import jax, rejax; print("rejax venv ready: jax", jax.__version__)'
