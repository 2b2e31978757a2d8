"""`examples/reinforce_batcher.py` runs as a plain script (no ``__main__`` guard, its agent
class defined in the script) from any directory."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "reinforce_batcher.py"


@pytest.mark.timeout(180)
def test_the_reinforce_example_runs_quickly_as_a_plain_script(tmp_path):
    assert "__main__" not in EXAMPLE.read_text().split('"""')[2]  # no guard in the code
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--quick"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert result.returncode == 0, result.stderr
    returns = re.findall(r"train return\s+([\d.]+)", result.stdout)
    assert len(returns) == 3 and all(float(r) > 0 for r in returns)
    assert "greedy return" in result.stdout and "done in" in result.stdout
