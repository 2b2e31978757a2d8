"""An eager run never loads the optional fast path (DESIGN §1): with ``algorithm.compile=off``
a run of an on-policy and an off-policy config imports no module of `cadence.accel`, which
the trainer imports only for a compiled run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

LAYER_BEFORE_ITS_PACKAGE = (
    "cadence.algorithms.compiled",
    "cadence.algorithms.precompiled",
    "cadence.algorithms.cuda_graphs",
    "cadence.algorithms.sac.joint_adam",
    "cadence.networks.matmul",
    "cadence.networks.native",
)
"""Where the layer's modules lived before `cadence.accel` held them: none may come back."""

SCRIPT = """
import json, sys, tempfile
from cadence.config import load_config
from cadence.testing.resume import cpu_sized_overrides
from cadence.trainer.run import train

for name in sys.argv[1:-1]:
    overrides = [*cpu_sized_overrides(name, iterations=2), *sys.argv[-1].split()]
    with tempfile.TemporaryDirectory() as run_dir:
        train(load_config(name, [*overrides, f"root_dir={run_dir}"]))
print(json.dumps(sorted(m for m in sys.modules if m.startswith("cadence."))))
"""


def _modules_after(names: list[str], overrides: str) -> list[str]:
    """The ``cadence`` modules a fresh process holds after training ``names``."""
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, *names, overrides],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_an_eager_run_imports_no_module_of_the_acceleration_layer():
    modules = _modules_after(["ppo_cartpole", "sac_pendulum"], "algorithm.compile=off")
    assert "cadence.trainer.run" in modules and "cadence.algorithms.sac.algorithm" in modules
    loaded = [m for m in modules if m.startswith("cadence.accel") or m in LAYER_BEFORE_ITS_PACKAGE]
    assert not loaded, f"an eager run imported the acceleration layer: {loaded}"
