"""One registration per algorithm: cadence's own, `register_algorithm`, and entry points.

The example algorithm of docs/adding-an-algorithm.md (examples/custom_algorithm/reinforce.py)
is registered once and trained through the CLI, in this process and as an installed
package's entry point in a fresh `cadence` process.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cadence.algorithms import registry
from cadence.cli import main
from cadence.config import ConfigError, config_help, load_config
from cadence.trainer.metrics import read_metrics

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_algorithm"
SHORT_RUN = ["trainer.num_env_steps=2048", "trainer.eval_interval=4", "trainer.progress_bar=off"]


@pytest.fixture
def reinforce(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    registry.register_algorithm(
        "reinforce", "reinforce:ReinforceConfig", "reinforce:make_reinforce"
    )
    yield
    registry.unregister_algorithm("reinforce")


def test_builtin_registrations_resolve_to_their_config_classes_and_builders():
    assert registry.algorithm_names()[:6] == ["ppo", "a2c", "dqn", "sac", "td3", "ddpg"]
    for name in registry.BUILTIN_ALGORITHMS:
        config_class = registry.algorithm_config_class(name)
        assert config_class().name == name
        assert callable(registry.algorithm_builder(name))


def test_an_unknown_algorithm_names_the_known_ones():
    with pytest.raises(KeyError, match="known: ppo, a2c"):
        registry.algorithm_registration("nope")
    with pytest.raises(ConfigError, match="algorithm"):
        load_config("ppo_cartpole", ["algorithm=nope"])


def test_a_builtin_name_cannot_be_taken():
    with pytest.raises(ValueError, match="cadence's own"):
        registry.register_algorithm("ppo", "x:Y", "x:z")


def test_one_registration_trains_a_new_algorithm_through_the_cli(reinforce, tmp_path, capsys):
    run_dir = tmp_path / "run"
    argv = ["train", "ppo_cartpole", "algorithm=reinforce", *SHORT_RUN, "--root-dir", str(run_dir)]
    assert main(argv) == 0
    assert "complete" in capsys.readouterr().out
    rows = read_metrics(run_dir)
    assert rows[-1]["env_steps"] == 2048
    assert all(row["train/num_updates"] == 1.0 for row in rows)
    assert any("eval/episode_return" in row for row in rows)
    assert {"loss/policy", "loss/value", "loss/total", "train/grad_norm"} <= set(rows[-1])
    assert "name: reinforce" in (run_dir / "config.yaml").read_text()
    assert main(["eval", str(run_dir), "--episodes", "2"]) == 0
    assert "reinforce" in config_help("ppo_cartpole")


def test_a_run_of_an_algorithm_registered_from_python_opens_in_a_fresh_process(
    reinforce, tmp_path, capsys
):
    run_dir = tmp_path / "run"
    short = ["trainer.num_env_steps=256", "trainer.eval_interval=1", "trainer.progress_bar=off"]
    argv = ["train", "ppo_cartpole", "algorithm=reinforce", *short, "--root-dir", str(run_dir)]
    assert main(argv) == 0
    record = json.loads((run_dir / registry.RECORD_FILE).read_text())
    assert record["config"] == "reinforce:ReinforceConfig"
    assert record["sys_path"] == [str(EXAMPLE)]
    elsewhere = tmp_path / "elsewhere"  # neither the example's folder nor the run's
    elsewhere.mkdir()
    command = [sys.executable, "-m", "cadence", "eval", str(run_dir), "--episodes", "1"]
    done = subprocess.run(command, cwd=elsewhere, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "over 1 episodes" in done.stdout
    # Without the record (a run from before it, or an algorithm of a script's __main__):
    (run_dir / registry.RECORD_FILE).unlink()
    registry.unregister_algorithm("reinforce")
    capsys.readouterr()
    assert main(["eval", str(run_dir), "--episodes", "1"]) == 2
    error = capsys.readouterr().err
    assert "trained algorithm 'reinforce', which is not registered" in error
    assert "register_algorithm(NAME" in error and registry.RECORD_FILE in error


def test_a_registered_algorithm_has_its_keys_checked(reinforce):
    config = load_config("ppo_cartpole", ["algorithm=reinforce", "algorithm.learning_rate=0.5"])
    assert config.algorithm.learning_rate == 0.5
    with pytest.raises(ConfigError, match="algorithm.gamma"):
        load_config("ppo_cartpole", ["algorithm=reinforce", "algorithm.gamma=2.0"])


def _install_entry_point(site: Path) -> None:
    """A minimal installed distribution whose entry point registers the example."""
    (site / "reinforce.py").write_text((EXAMPLE / "reinforce.py").read_text())
    dist_info = site / "reinforce_example-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: reinforce-example\nVersion: 0.1\n"
    )
    (dist_info / "entry_points.txt").write_text(
        "[cadence.algorithms]\nreinforce = reinforce:REGISTRATION\n"
    )


def test_an_installed_entry_point_makes_the_cadence_command_know_the_algorithm(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _install_entry_point(site)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
    }
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "cadence", "train", "ppo_cartpole", "algorithm=reinforce"]
    result = subprocess.run(
        [*command, *SHORT_RUN, "--root-dir", str(run_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["env_steps"] == 2048
    listing = subprocess.run(
        [sys.executable, "-m", "cadence", "train", "ppo_cartpole", "--help"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "reinforce" in listing.stdout


def test_an_algorithm_defined_in_the_main_script_is_not_recorded(tmp_path, caplog, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    import reinforce as example

    class MainConfig(example.ReinforceConfig):
        pass

    MainConfig.__module__ = "__main__"
    registry.register_algorithm("main_only", MainConfig, example.make_reinforce)
    try:
        registry.record_registration(tmp_path, "main_only")
    finally:
        registry.unregister_algorithm("main_only")
    assert not (tmp_path / registry.RECORD_FILE).exists()
    assert "defined in the main script" in caplog.text
    registry.record_registration(tmp_path, "ppo")  # cadence's own need no record
    assert not (tmp_path / registry.RECORD_FILE).exists()


def test_an_unknown_name_in_a_config_says_how_to_register_one():
    for override in ("algorithm=nope", "algorithm.name=nope"):
        with pytest.raises(ConfigError, match="register_algorithm"):
            load_config("ppo_cartpole", [override])


def test_the_cli_looks_for_the_record_the_registry_writes():
    from cadence.cli.run_dir import ALGORITHM_RECORD_FILE

    assert ALGORITHM_RECORD_FILE == registry.RECORD_FILE


def test_the_config_check_reads_the_recurrent_network_its_registration_declares(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    recurrent = ["algorithm=reinforce", "network.recurrent=gru"]
    registry.register_algorithm(
        "reinforce", "reinforce:ReinforceConfig", "reinforce:make_reinforce",
        recurrent_network=False,
    )  # fmt: skip
    try:
        with pytest.raises(ConfigError, match="reinforce takes no recurrent core"):
            load_config("ppo_cartpole", recurrent)
        # The one-line form declares nothing: the builder gets the core and decides.
        registry.register_algorithm(
            "reinforce", "reinforce:ReinforceConfig", "reinforce:make_reinforce"
        )
        assert load_config("ppo_cartpole", recurrent).network.recurrent == "gru"
    finally:
        registry.unregister_algorithm("reinforce")
    assert registry.algorithm_capabilities("ppo").recurrent_network
    assert not registry.algorithm_capabilities("sac").recurrent_network


def test_the_scheme_its_registration_declares_is_the_one_a_run_trains_with(reinforce):
    from cadence.algorithms.off_policy_config import OffPolicyConfig, off_policy_config
    from cadence.algorithms.sac.config import SACConfig

    config = load_config("ppo_cartpole", ["algorithm=reinforce"]).algorithm
    assert registry.algorithm_capabilities("reinforce").scheme is None
    assert off_policy_config(config) is None  # no off_policy field: on-policy
    registry.register_algorithm(
        "reinforce", "reinforce:ReinforceConfig", "reinforce:make_reinforce", scheme="off_policy"
    )
    with pytest.raises(TypeError, match="scheme='off_policy'.*no 'off_policy' field"):
        off_policy_config(config)
    assert isinstance(off_policy_config(SACConfig()), OffPolicyConfig)
    with pytest.raises(ValueError, match="scheme='offline' is not one of"):
        registry.register_algorithm("reinforce", "x:Y", "x:z", scheme="offline")
    schemes = {name: registry.algorithm_capabilities(name).scheme for name in ("ppo", "dqn")}
    assert schemes == {"ppo": "on_policy", "dqn": "off_policy"}


def test_a_run_records_the_capabilities_its_algorithm_declared(reinforce, tmp_path):
    registry.register_algorithm(
        "reinforce", "reinforce:ReinforceConfig", "reinforce:make_reinforce",
        recurrent_network=False, previous_action=True, agent_view=True,
    )  # fmt: skip
    declared = registry.algorithm_capabilities("reinforce")
    assert registry.agent_view_algorithms() == ["ppo", "a2c", "sac", "reinforce"]
    registry.record_registration(tmp_path, "reinforce")
    registry.unregister_algorithm("reinforce")
    assert registry.register_recorded(tmp_path) == "reinforce"
    assert registry.algorithm_capabilities("reinforce") == declared
    record = json.loads((tmp_path / registry.RECORD_FILE).read_text())
    del record["capabilities"]  # a record written before capabilities: the defaults
    (tmp_path / registry.RECORD_FILE).write_text(json.dumps(record))
    registry.unregister_algorithm("reinforce")
    registry.register_recorded(tmp_path)
    assert registry.algorithm_capabilities("reinforce") == registry.AlgorithmCapabilities()


def test_the_one_line_form_declares_no_agent_view_and_as_agent_says_which_have_one(reinforce):
    from cadence.algorithms.build import build_algorithm
    from cadence.data.specs import DiscreteTensorSpec, TensorSpec
    from cadence.networks import NetworkConfig

    assert not registry.algorithm_capabilities("reinforce").agent_view
    config = registry.algorithm_config_class("reinforce")()
    spec, action_spec = TensorSpec((4,)), DiscreteTensorSpec((), torch.int64, 2)
    algorithm = build_algorithm(config, spec, action_spec, NetworkConfig())
    with pytest.raises(NotImplementedError, match="agent_view.*: ppo, a2c, sac$"):
        algorithm.as_agent()
