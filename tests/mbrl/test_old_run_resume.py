"""Model-based runs written before the Denoised MDP original's structure became the default.

Their ``config.yaml`` lacks the keys added then (`MODEL_BASED_ADDED_KEYS`): read back, it
builds the structure the run was written with, and a resume compares it as such. A run
whose structure differs from the config it is resumed with is refused, naming the cadence
version and the overrides that resume it as it was written.
"""

from __future__ import annotations

import re

import pytest
import torch
import yaml

from cadence.cli import main
from cadence.config import from_yaml, load_config, to_yaml
from cadence.data.config_history import MODEL_BASED_ADDED_KEYS
from cadence.data.specs import BoundedTensorSpec, TensorSpec
from cadence.mbrl.build import make_model_based
from cadence.testing.resume import cpu_sized_overrides
from cadence.trainer.errors import RunConfigMismatchError
from cadence.trainer.metrics import read_metrics
from cadence.trainer.run_config import check_resume_config

IMAGE = TensorSpec((3, 64, 64), dtype=torch.uint8)
ACTION = BoundedTensorSpec((6,), minimum=-1.0, maximum=1.0)


def _as_written_before(config_yaml: str, **old_values) -> str:
    """``config_yaml`` as a cadence before the change wrote it: no added keys, and the
    earlier defaults of the keys that existed (``section.key=value``)."""
    tree = yaml.safe_load(config_yaml)
    for dotted in MODEL_BASED_ADDED_KEYS:
        *parents, leaf = dotted.split(".")
        section = tree
        for key in parents:
            section = section.get(key, {})
        section.pop(leaf, None)
    for dotted, value in old_values.items():
        *parents, leaf = dotted.split(".")
        section = tree
        for key in parents:
            section = section[key]
        section[leaf] = value
    return yaml.safe_dump(tree)


OLD_DEFAULTS = {
    "algorithm.world_model.joint_posterior": False,
    "algorithm.world_model.z_prior_uses_y": False,
    "algorithm.actor_critic.num_layers": 3,
}


def test_an_old_config_yaml_builds_the_networks_its_checkpoint_holds():
    name = "denoised_mdp_cheetah_noisy"
    old_yaml = _as_written_before(to_yaml(load_config(name)), **OLD_DEFAULTS)
    config = from_yaml(old_yaml)
    wm = config.algorithm.world_model
    assert (wm.z_inputs, wm.layer_widths, wm.conv_stack) == ("cadence", "hidden_size", "cadence")
    assert config.algorithm.eval_mode == "mean"
    # The state dict of cadence's earlier structure, built explicitly, loads into it.
    overrides = [f"{k}={v}" for k, v in MODEL_BASED_ADDED_KEYS.items() if v is not None]
    overrides += [f"{k}={str(v).lower()}" for k, v in OLD_DEFAULTS.items()]
    earlier = make_model_based(load_config(name, overrides).algorithm, IMAGE, ACTION)
    rebuilt = make_model_based(config.algorithm, IMAGE, ACTION)
    rebuilt.load_state_dict(earlier.state_dict())
    new = make_model_based(load_config(name).algorithm, IMAGE, ACTION)
    with pytest.raises(RuntimeError, match="size mismatch|Missing key|Unexpected key"):
        new.world_model.load_state_dict(earlier.world_model.state_dict())


def test_other_algorithms_config_yaml_takes_no_model_based_keys():
    config = load_config("ppo_cartpole")
    assert from_yaml(to_yaml(config)) == config


def test_resuming_an_old_dmc_run_with_the_new_defaults_is_refused_with_the_way_back(tmp_path):
    name = "denoised_mdp_cheetah_noisy"
    (tmp_path / "config.yaml").write_text(
        _as_written_before(to_yaml(load_config(name)), **OLD_DEFAULTS)
    )
    with pytest.raises(RunConfigMismatchError) as refused:
        check_resume_config(tmp_path, to_yaml(load_config(name)), True, 3)
    message = str(refused.value)
    assert "written by cadence 0.1.0 before the Denoised MDP original's structure" in message
    overrides = re.search(r"\n  (algorithm\.\S+=\S+(?: \S+=\S+)*)\n", message).group(1).split()
    assert sorted(overrides) == sorted(
        [
            "algorithm.world_model.joint_posterior=false",
            "algorithm.world_model.z_prior_uses_y=false",
            "algorithm.world_model.z_inputs=cadence",
            "algorithm.world_model.layer_widths=hidden_size",
            "algorithm.world_model.conv_stack=cadence",
            "algorithm.actor_critic.num_layers=3",
        ]
    )
    # Given them back, the run resumes as it was; or, asked to, with the new evaluation.
    again = to_yaml(load_config(name, [*overrides, "algorithm.eval_mode=mean"]))
    assert not check_resume_config(tmp_path, again, False, 3)
    assert check_resume_config(tmp_path, to_yaml(load_config(name, overrides)), True, 3)


def test_an_old_pendulum_run_resumes_from_its_checkpoint(tmp_path, capsys):
    """A run of dreamer_pendulum (which pins cadence's earlier structure) whose config.yaml
    lacks the added keys, as the earlier code wrote it, resumes and trains on."""
    run = tmp_path / "run"
    overrides = cpu_sized_overrides("dreamer_pendulum", iterations=2)
    argv = ["train", "dreamer_pendulum", "--root-dir", str(run), "seed=0", *overrides]
    assert main(argv) == 0
    path = run / "config.yaml"
    path.write_text(_as_written_before(path.read_text()))
    steps = read_metrics(run)[-1]["env_steps"]
    assert main([*argv, f"trainer.num_env_steps={2 * steps}", "--resume-with-changes"]) == 0
    assert "complete" in capsys.readouterr().out
    assert read_metrics(run)[-1]["env_steps"] == 2 * steps
