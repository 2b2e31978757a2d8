#!/usr/bin/env bash
# (Re)create the TorchRL virtual environment that benchmarks/peers/torchrl_dreamer.py runs in.
#
#   bash benchmarks/peer_env.sh [VENV_DIR]        # default: .venvs/torchrl
#
# The venv sees the system site-packages, so the peer runs on the very torch build cadence
# runs on (the same BLAS and convolutions, so the speeds compare); only what TorchRL needs beyond it
# is installed inside, pinned. torchrl 0.14.1 asks for tensordict >=0.14.3,<0.15, while
# cadence's environment has tensordict 0.15.3: hence the separate venv, whose tensordict
# shadows the system one. Before installing, a dry run must show that pip would not pull
# a torch of its own (a CUDA build would otherwise replace the CPU one inside the venv).
# pip's complaint that cadence wants tensordict ~=0.15 is expected: cadence is visible
# through the system site-packages but is not imported by the peer.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venvs/torchrl}"
TORCH_VERSION="2.13.0+cpu"   # the system torch the venv must keep using
PINS=(
  torchrl==0.14.1
  tensordict==0.14.3
  hoptorch==0.1.4
  importlib_metadata==10.2.0
  lazy-importer==0.1.0
)

system_torch="$(python -c 'import torch; print(torch.__version__)')"
if [[ "$system_torch" != "$TORCH_VERSION" ]]; then
  echo "system torch is $system_torch, expected $TORCH_VERSION" >&2
  exit 1
fi

rm -rf "$VENV"
python -m venv --system-site-packages "$VENV"
pip="$VENV/bin/pip"

plan="$("$pip" install --dry-run "${PINS[@]}" 2>&1)"
if grep -Eq '^Would install.* torch-[0-9]' <<<"$plan"; then
  echo "pip would install its own torch; refusing:" >&2
  echo "$plan" >&2
  exit 1
fi
"$pip" install --quiet "${PINS[@]}"

"$VENV/bin/python" - "$TORCH_VERSION" <<'EOF'
import sys

import tensordict
import torch
import torchrl

assert torch.__version__ == sys.argv[1], torch.__version__
print(f"torch {torch.__version__}, tensordict {tensordict.__version__}, torchrl {torchrl.__version__}")
EOF
