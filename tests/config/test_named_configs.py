"""Smoke runs of every named config (`cadence list`): two tiny training iterations
each, through the real ``cadence train`` command, in a temporary directory.

The overrides shrink the budget, the batch and the episodes so that each run
takes seconds, whatever the config trains normally; its env, algorithm, network
and data transformers are its own.
"""

from __future__ import annotations

import importlib.util

import pytest

from cadence.cli import main
from cadence.config import list_configs, load_config
from cadence.envs.errors import UnknownEnvironmentError
from cadence.envs.ids import check_env_id
from cadence.trainer.checkpoint import CheckpointManager
from cadence.trainer.metrics import read_metrics


def _budget(name: str) -> int:
    """Simulator steps in two iterations of 2 envs x 4 steps, after the config's action repeat."""
    return 16 * load_config(name).env.action_repeat


def _cheap_overrides(name: str) -> list[str]:
    """Two iterations of 2 envs x 4 steps, one short evaluation, a checkpoint each iteration."""
    config = load_config(name)
    overrides = [
        "env.num_envs=2",
        "env.backend=serial",
        "env.max_episode_steps=10",
        "trainer.unroll_length=4",
        f"trainer.num_env_steps={_budget(name)}",
        "trainer.summary_interval=1",
        "trainer.eval_interval=1",
        "trainer.num_eval_episodes=1",
        "trainer.checkpoint_interval=1",
        "trainer.progress_bar=off",
    ]
    algorithm = config.algorithm
    if hasattr(algorithm, "mini_batch_size"):
        overrides.append("algorithm.mini_batch_size=4")
    if getattr(algorithm, "compile", "off") != "off":
        overrides.append("algorithm.compile=off")  # compiling alone takes a minute
    if getattr(algorithm, "off_policy", None) is not None:
        # Train from the second iteration on, on small minibatches.
        overrides += [
            f"algorithm.off_policy.initial_collect_steps={_budget(name) // 2}",
            "algorithm.off_policy.mini_batch_size=4",
            f"algorithm.off_policy.mini_batch_length={min(algorithm.off_policy.mini_batch_length, 4)}",
            "algorithm.off_policy.num_updates_per_train_iter=1",
            "algorithm.off_policy.replay_buffer_length=64",
        ]
    return overrides


def _skip_if_env_missing(name: str) -> None:
    env_name = load_config(name).env.name
    module = env_name.split(":")[0] if ":" in env_name else None
    if module is not None and importlib.util.find_spec(module) is None:
        pytest.skip(f"{name} needs {module!r}, which is not installed (an optional extra)")
    if module is None:
        try:
            check_env_id(env_name)
        except UnknownEnvironmentError as error:
            pytest.skip(f"{name}: {error}")


@pytest.mark.parametrize("name", sorted(list_configs()))
def test_named_config_trains_two_iterations(name, tmp_path, capsys):
    _skip_if_env_missing(name)
    root = tmp_path / "run"
    code = main(["train", name, "--root-dir", str(root), *_cheap_overrides(name)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"{root}: complete" in captured.out
    assert (root / "COMPLETE").exists() and (root / "config.yaml").exists()
    records = read_metrics(root)
    assert [r["iteration"] for r in records] == [1, 2]
    assert records[-1]["env_steps"] == _budget(name)
    assert any(key.startswith("loss/") for key in records[-1]), records[-1]
    assert all("eval/episode_return" in r for r in records)
    assert CheckpointManager(root / "checkpoints").load()["counters"]["iteration"] == 2
