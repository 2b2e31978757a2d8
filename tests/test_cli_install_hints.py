"""A missing optional extra is named with the command that installs it.

The extras are installed here (the test extra pulls them all in), so each test hides the
package from the import system (``sys.modules[name] = None`` makes importing it raise
``ModuleNotFoundError``), as on a machine without it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

from cadence.cli import main
from cadence.envs.errors import EnvBuildError
from cadence.envs.make import check_env_id

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def without_robotics(monkeypatch):
    for name in [m for m in sys.modules if m.split(".")[0] == "gymnasium_robotics"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "gymnasium_robotics", None)


def test_sac_her_fetchreach_without_the_robotics_extra_says_how_to_install_it(
    without_robotics, tmp_path, capsys
):
    code = main(["train", "sac_her_fetchreach", "--root-dir", str(tmp_path / "run")])
    error = capsys.readouterr().err
    assert code == 2
    assert "'gymnasium_robotics'" in error and "pip install 'cadence[robotics]'" in error
    assert not (tmp_path / "run").exists()


def test_an_atari_and_a_robotics_id_give_their_hints_alike(without_robotics, monkeypatch):
    with pytest.raises(EnvBuildError, match=r"cadence\[robotics\]"):
        check_env_id("gymnasium_robotics:FetchReach-v4")
    monkeypatch.setitem(sys.modules, "ale_py", None)
    # An earlier test in this process may have imported ale_py, which registered its ids.
    for env_id in [i for i in gym.registry if i.startswith("ALE/")]:
        monkeypatch.delitem(gym.registry, env_id)
    with pytest.raises(EnvBuildError, match="'atari' extra"):
        check_env_id("ALE/Pong-v5")


def test_a_module_of_no_known_extra_keeps_the_plain_message(tmp_path):
    with pytest.raises(EnvBuildError, match="must be an installed package or a module"):
        check_env_id("no_such_module_anywhere:Env-v0")


def test_the_ray_example_without_ray_says_how_to_install_it():
    hide_ray = (
        "import runpy, sys; sys.modules['ray'] = None; "
        "sys.argv = ['ray_batcher.py', '--quick']; "
        "runpy.run_path('examples/ray_batcher.py', run_name='__main__')"
    )
    done = subprocess.run(
        [sys.executable, "-c", hide_ray], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "needs Ray" in done.stderr and "pip install 'cadence[ray]'" in done.stderr
