"""The Batcher's examples run as plain scripts (no ``__main__`` guard, their agents defined
in the script) from any directory; the A2C one learns CartPole-v1 (slow)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _run(name: str, *args: str, cwd: Path, timeout: float) -> str:
    script = EXAMPLES / name
    assert "__main__" not in script.read_text().split('"""')[2]  # no guard in the code
    result = subprocess.run(
        [sys.executable, str(script), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", ["a2c_batcher.py", "recurrent_a2c_batcher.py"])
def test_the_a2c_examples_run_quickly_as_plain_scripts(tmp_path, name):
    out = _run(name, "--quick", cwd=tmp_path, timeout=170)
    evaluations = re.findall(r"evaluation return\s+([\d.]+)", out)
    assert len(evaluations) >= 2 and all(float(r) > 0 for r in evaluations)
    assert re.search(r"best evaluation return [\d.]+, done in", out)


@pytest.mark.timeout(180)
def test_the_two_policies_example_prints_each_policys_own_statistics(tmp_path):
    out = _run("two_policies_batcher.py", "--quick", cwd=tmp_path, timeout=170)
    rows = {
        m[0]: (float(m[1]), float(m[2]))
        for m in re.findall(
            r"^(greedy|sampling|epsilon 0.2|uniform)\s.*?([\d.]+)\s+([\d.]+)$", out, re.M
        )
    }
    assert set(rows) == {"greedy", "sampling", "epsilon 0.2", "uniform"}
    assert rows["greedy"][1] == 0.0 and rows["uniform"][1] == 1.0  # the fraction explored
    assert rows["greedy"][0] > rows["uniform"][0]  # the controller outlasts random actions


@pytest.mark.timeout(180)
def test_the_multi_task_example_gives_each_slot_the_goal_its_env_info_names(tmp_path):
    out = _run("multi_task_batcher.py", "--quick", cwd=tmp_path, timeout=170)
    reached = re.findall(
        r"^slot (\d): goal ([-+]\d+), reached ([-+]\d+) in (\d+) steps$", out, re.M
    )
    goals = [int(goal) for _, goal, _, _ in reached]
    assert goals == [3, -2, 7, -6, -6, 7, -2, 3]  # the second reset swapped them
    assert all(goal == end and int(n) == abs(int(goal)) for _, goal, end, n in reached)


@pytest.mark.timeout(240)
def test_the_ray_example_runs_quickly_as_a_plain_script(tmp_path):
    pytest.importorskip("ray")
    out = _run("ray_batcher.py", "--quick", cwd=tmp_path, timeout=230)
    assert len(re.findall(r"^actor \d: pid \d+ on ", out, re.M)) == 2
    assert re.findall(r"weights version (\d+)", out) == ["1", "2", "3"]


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_a2c_example_reaches_an_evaluation_return_of_475(tmp_path, seed):
    out = _run("a2c_batcher.py", "--seed", str(seed), cwd=tmp_path, timeout=1780)
    best = float(re.search(r"best evaluation return ([\d.]+)", out).group(1))
    assert best >= 475.0, out[-2000:]
