"""Tests of the ``cadence`` command line: list, train, play, eval and --use-snapshot.

Most commands run in-process through `main` with the trainer and play modules
replaced by fakes that record their arguments; the tests at the end run every
command for real on a tiny run, and a few run the console command as a process.
"""

from __future__ import annotations

import io
import logging
import subprocess
import sys
import tarfile
import types
from pathlib import Path

import pytest

from cadence.cli import main
from cadence.config import from_yaml, list_configs, load_config, to_yaml
from cadence.trainer.metrics import read_metrics


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def fake_train(monkeypatch):
    """Replaces `cadence.trainer.run` with a module whose `train` records its call."""
    calls = []
    module = types.ModuleType("cadence.trainer.run")
    module.train = lambda config, resume_with_changes=False: calls.append(config) or "complete"
    monkeypatch.setitem(sys.modules, "cadence.trainer.run", module)
    return calls


@pytest.fixture
def fake_play(monkeypatch):
    """Replaces `cadence.trainer.play` with a module whose functions record their calls."""
    calls = []
    module = types.ModuleType("cadence.trainer.play")

    def play(config, run_dir, episodes, video_path):
        calls.append(("play", config, run_dir, episodes, video_path))
        return types.SimpleNamespace(returns=[10.0, 12.5], lengths=[10, 12], num_frames=24)

    def evaluate(config, run_dir, episodes):
        calls.append(("evaluate", config, run_dir, episodes))
        return {
            "mean_return": 11.0,
            "std_return": 1.5,
            "mean_length": 11.0,
            "episodes": float(episodes),
        }

    module.play, module.evaluate = play, evaluate
    monkeypatch.setitem(sys.modules, "cadence.trainer.play", module)
    return calls


@pytest.fixture
def run_dir(tmp_path):
    """A run directory holding the config.yaml of ppo_cartpole."""
    directory = tmp_path / "run"
    directory.mkdir()
    (directory / "config.yaml").write_text(to_yaml(load_config("ppo_cartpole", root_dir=directory)))
    return directory


def test_version_and_help(capsys):
    code, out, _ = _run(capsys, "--version")
    assert code == 0 and out.startswith("cadence ")
    code, out, _ = _run(capsys, "--help")
    assert code == 0
    assert all(command in out for command in ("list", "train", "play", "eval"))


def test_no_command_prints_help_and_fails(capsys):
    code, _, err = _run(capsys)
    assert code == 2 and "usage: cadence" in err


def test_list_shows_every_named_config_with_its_description(capsys):
    code, out, _ = _run(capsys, "list")
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == len(list_configs()) >= 5
    for line, (name, description) in zip(lines, list_configs().items(), strict=True):
        assert line.split()[0] == name and line.endswith(description)


def test_train_help_lists_keys_with_docs_and_values(capsys, fake_train):
    code, out, _ = _run(capsys, "train", "ppo_cartpole", "--help")
    assert code == 0
    assert "usage: cadence train" in out
    assert "  env.num_envs=8  (int)\n      Environments stepped together as one batch." in out
    assert "  algorithm.learning_rate=0.0005  (float)" in out
    assert fake_train == []


def test_train_help_lists_the_keys_of_the_algorithm_switched_to(capsys, fake_train):
    code, out, _ = _run(
        capsys, "train", "ppo_cartpole", "algorithm=dqn", "env.num_envs=3", "--help"
    )
    assert code == 0 and "  algorithm.name=dqn  (str)" in out
    assert "algorithm.name=ppo" not in out and "algorithm.clip_coef=" not in out
    assert "  env.num_envs=8  (int)" in out  # value overrides do not change the listing
    assert fake_train == []


def test_train_loads_config_with_overrides_and_calls_the_trainer(capsys, tmp_path, fake_train):
    root = tmp_path / "my_run"
    code, out, _ = _run(
        capsys,
        "train",
        "ppo_cartpole",
        "env.num_envs=16",
        "--root-dir",
        str(root),
        "algorithm.learning_rate=3e-4",
    )
    assert code == 0
    [config] = fake_train  # train(config) writes config.yaml itself
    assert (config.env.num_envs, config.algorithm.learning_rate) == (16, 3e-4)
    assert config.root_dir == str(root)
    assert f"{root}: complete" in out


def test_train_unknown_key_fails_before_creating_the_run_dir(
    capsys, tmp_path, monkeypatch, fake_train
):
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(
        capsys, "train", "ppo_cartpole", "algorithm.no_such_key=1", "--root-dir", "run"
    )
    assert code == 2
    assert "algorithm.no_such_key" in err and out == ""
    assert not (tmp_path / "run").exists()
    assert list(tmp_path.iterdir()) == []
    assert fake_train == []


def test_train_out_of_range_value_fails_naming_the_key(capsys, tmp_path, fake_train):
    code, _, err = _run(
        capsys, "train", "ppo_cartpole", "env.num_envs=-3", "--root-dir", str(tmp_path / "r")
    )
    assert code == 2
    assert "env.num_envs=-3: must be >= 1" in err
    assert not (tmp_path / "r").exists() and fake_train == []


def test_train_unknown_name_suggests_close_names(capsys, fake_train):
    code, _, err = _run(capsys, "train", "ppo_cartpol")
    assert code == 2 and "did you mean ppo_cartpole" in err


def test_train_refuses_unknown_options_and_a_missing_name(capsys, fake_train):
    assert _run(capsys, "train", "ppo_cartpole", "--bogus")[0] == 2
    code, _, err = _run(capsys, "train")
    assert code == 2 and "NAME is required" in err
    assert fake_train == []


def test_play_loads_the_runs_config_and_prints_returns(capsys, run_dir, fake_play):
    code, out, _ = _run(
        capsys, "play", str(run_dir), "--episodes", "2", "--video", str(run_dir / "v.mp4")
    )
    assert code == 0
    [(_, config, played_dir, episodes, video)] = fake_play
    assert config == from_yaml((run_dir / "config.yaml").read_text())
    assert (played_dir, episodes, video) == (run_dir, 2, run_dir / "v.mp4")
    assert "episode 2: return 12.50, length 12 env steps" in out and "wrote 24 frames" in out


def test_eval_prints_mean_return(capsys, run_dir, fake_play):
    code, out, _ = _run(capsys, "eval", str(run_dir), "--episodes", "4")
    assert code == 0
    assert fake_play[0][0] == "evaluate" and fake_play[0][3] == 4
    assert "return 11.00 +- 1.50" in out and "over 4 episodes" in out


def test_play_without_config_yaml_fails(capsys, tmp_path, fake_play):
    code, _, err = _run(capsys, "play", str(tmp_path))
    assert code == 2 and "config.yaml is missing" in err


def _runs_tree(root: Path) -> None:
    """runs/ppo_cartpole with four seeds' runs; runs/pendulum with two checkpoints."""
    for seed in range(4):
        (root / "runs" / "ppo_cartpole" / f"seed{seed}-abc").mkdir(parents=True)
        (root / "runs" / "ppo_cartpole" / f"seed{seed}-abc" / "config.yaml").touch()
    for iteration in (40, 80):
        (root / "runs" / "pendulum" / "checkpoints" / f"{iteration:08d}").mkdir(parents=True)
    (root / "runs" / "pendulum" / "config.yaml").touch()


def test_eval_names_the_run_directory_meant_by_a_near_miss_path(
    capsys, tmp_path, monkeypatch, fake_play
):
    _runs_tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(capsys, "eval", "nonexistent")
    assert code == 2 and "nonexistent does not exist" in err
    code, _, err = _run(capsys, "eval", "runs/ppo_cartpole")
    assert code == 2 and "holds 4 run directories: runs/ppo_cartpole/seed0-abc, " in err
    assert "seed2-abc and 1 more; pass one of them" in err
    code, _, err = _run(capsys, "play", "runs/pendulum/checkpoints/00000080")
    assert code == 2 and "pass the run directory" in err
    assert "runs/pendulum --checkpoint 80" in err
    code, _, err = _run(capsys, "eval", "runs/pendulum/checkpoints")
    assert code == 2 and "inside the run directory runs/pendulum; pass that" in err
    assert fake_play == []


def test_eval_of_a_missing_checkpoint_lists_the_saved_ones(capsys, run_dir, fake_play):
    for iteration in (40, 80):
        (run_dir / "checkpoints" / f"{iteration:08d}").mkdir(parents=True)
    code, _, err = _run(capsys, "eval", str(run_dir), "--checkpoint", "7")
    assert code == 2 and "it has iterations 40, 80: pass --checkpoint with one" in err
    assert err.rstrip().endswith("or latest")
    (run_dir / "checkpoints" / "00000080" / "MANIFEST.json").write_text('{"eval_return": 1.5}')
    code, _, err = _run(capsys, "eval", str(run_dir), "--checkpoint", "7")
    assert code == 2 and err.rstrip().endswith("or latest or best") and fake_play == []


# A cadence package unlike the installed one: its play reports where it runs from.
SNAPSHOT_FILES = {
    "cadence/__init__.py": "SNAPSHOT = True\n",
    "cadence/config/__init__.py": (
        "class ConfigError(ValueError):\n    pass\n\n"
        "def from_yaml(text, source=''):\n    return {'loaded_by': 'snapshot'}\n"
    ),
    "cadence/trainer/__init__.py": "",
    "cadence/trainer/play.py": (
        "import types\nimport cadence\n\n"
        "def play(config, run_dir, episodes, video_path):\n"
        "    assert cadence.SNAPSHOT and config == {'loaded_by': 'snapshot'}\n"
        "    return types.SimpleNamespace(returns=[42.0], lengths=[7], num_frames=0)\n"
    ),
}


def _write_tarball(path: Path, files: dict[str, str]) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def restore_cadence():
    """Puts the installed cadence modules and sys.path back after a snapshot import."""
    saved = {
        name: module for name, module in sys.modules.items() if name.split(".")[0] == "cadence"
    }
    path = list(sys.path)
    yield
    for name in [name for name in sys.modules if name.split(".")[0] == "cadence"]:
        del sys.modules[name]
    sys.modules.update(saved)
    sys.path[:] = path


def test_use_snapshot_runs_the_snapshots_code(capsys, run_dir, restore_cadence):
    _write_tarball(run_dir / "snapshot.tar.gz", SNAPSHOT_FILES)
    code, out, err = _run(capsys, "play", str(run_dir), "--use-snapshot")
    assert code == 0, err
    assert "episode 1: return 42.00, length 7 env steps" in out
    [cache] = run_dir.glob(".snapshot-*")
    assert Path(sys.modules["cadence.trainer.play"].__file__).is_relative_to(cache)
    assert sys.path[0] == str(cache)


def test_use_snapshot_refuses_entries_outside_the_package(capsys, run_dir, restore_cadence):
    _write_tarball(
        run_dir / "snapshot.tar.gz", {**SNAPSHOT_FILES, "../evil.py": "raise SystemExit\n"}
    )
    code, _, err = _run(capsys, "play", str(run_dir), "--use-snapshot")
    assert code == 2 and "unexpected entry '../evil.py'" in err
    assert not (run_dir.parent / "evil.py").exists()
    assert "cadence" in sys.modules  # nothing was dropped


def test_use_snapshot_without_snapshot_fails(capsys, run_dir, restore_cadence):
    code, _, err = _run(capsys, "play", str(run_dir), "--use-snapshot")
    assert code == 2 and "has no snapshot.tar.gz" in err


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("algorithm.no_such_key=1", "algorithm.no_such_key: unknown key"),
        # The other refusal the issue names; in-process above, as a process only when slow.
        pytest.param("env.num_envs=-3", "env.num_envs=-3: must be >= 1", marks=pytest.mark.slow),
    ],
)
def test_console_entry_point_exits_2_without_creating_the_run_dir(tmp_path, override, message):
    # The real process: exit status, stderr, and Hydra leaving the cwd alone.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cadence.cli",
            "train",
            "ppo_cartpole",
            override,
            "--root-dir",
            "run",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert message in result.stderr and result.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_episodes_must_be_positive(capsys, run_dir, fake_play):
    code, _, err = _run(capsys, "eval", str(run_dir), "--episodes", "0")
    assert code == 2 and "must be >= 1" in err and fake_play == []


def test_missing_checkpoint_is_reported_without_a_traceback(
    capsys, run_dir, monkeypatch, fake_play
):
    def no_checkpoint(config, run_dir, episodes):
        raise FileNotFoundError(f"{run_dir} has no checkpoint yet")

    monkeypatch.setattr(sys.modules["cadence.trainer.play"], "evaluate", no_checkpoint)
    code, _, err = _run(capsys, "eval", str(run_dir))
    assert code == 1 and "has no checkpoint yet" in err


# ---------------------------------------------------------------------------------------
# Every command for real (no fakes): a tiny run trained by `cadence train`, then played,
# filmed, evaluated and played again from its own code snapshot.

TINY_RUN = [
    "env.num_envs=2",
    "env.max_episode_steps=25",
    "trainer.unroll_length=8",
    "trainer.num_env_steps=32",
    "trainer.num_eval_episodes=2",
    "trainer.progress_bar=off",
    "algorithm.mini_batch_size=8",
]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli") / "run"
    assert main(["train", "ppo_cartpole", "--root-dir", str(root), *TINY_RUN]) == 0
    return root


def test_real_train_writes_a_complete_run(trained_run):
    assert (trained_run / "COMPLETE").exists()
    assert (trained_run / "snapshot.tar.gz").exists()
    config = from_yaml((trained_run / "config.yaml").read_text())
    assert config.trainer.num_env_steps == 32 and config.root_dir == str(trained_run)


def test_real_play_prints_returns_and_writes_one_frame_per_step(capsys, trained_run, tmp_path):
    import imageio.v2 as imageio

    video = tmp_path / "out.mp4"
    code, out, err = _run(
        capsys, "play", str(trained_run), "--episodes", "2", "--video", str(video)
    )
    assert code == 0, err
    lengths = [
        int(line.split("length ")[1].split()[0])
        for line in out.splitlines()
        if line.startswith("episode")
    ]
    assert len(lengths) == 2 and all(1 <= n <= 25 for n in lengths)
    frames = sum(lengths) + 2  # each episode's FIRST step and one per action
    assert f"wrote {frames} frames to {video}" in out
    with imageio.get_reader(video, "ffmpeg") as reader:
        assert sum(1 for _ in reader) == frames


def test_real_eval_prints_the_mean_over_the_episodes(capsys, trained_run):
    code, out, err = _run(capsys, "eval", str(trained_run), "--episodes", "3")
    assert code == 0, err
    assert out.startswith("return ") and "over 3 episodes" in out


def test_real_eval_acts_with_the_checkpoint_asked_for(capsys, caplog, trained_run):
    caplog.set_level(logging.INFO, logger="cadence")
    code, out, err = _run(
        capsys, "eval", str(trained_run), "--episodes", "2", "--checkpoint", "best"
    )
    assert code == 0, err
    assert "--checkpoint best" in caplog.text and "over 2 episodes" in out
    code, _, err = _run(capsys, "eval", str(trained_run), "--checkpoint", "999")
    assert code == 2 and "no checkpoint of iteration 999; it has iterations " in err
    code, _, err = _run(capsys, "play", str(trained_run), "--checkpoint", "newest")
    assert code == 2 and "'latest', 'best' or an iteration" in err


def test_real_play_use_snapshot_imports_the_runs_own_code(trained_run):
    # Its own process: --use-snapshot replaces the cadence modules of the interpreter.
    script = (
        "import sys\n"
        "from cadence.cli import main\n"
        f"code = main(['play', {str(trained_run)!r}, '--use-snapshot'])\n"
        "import cadence.trainer.play\n"
        "print('PLAYED FROM', cadence.trainer.play.__file__)\n"
        "sys.exit(code)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "episode 1: return" in result.stdout
    [cache] = trained_run.glob(".snapshot-*")
    played_from = Path(result.stdout.split("PLAYED FROM ", 1)[1].strip())
    assert played_from.is_relative_to(cache)


# ---------------------------------------------------------------------------------------
# env.wrappers from the command line: refused before anything is written, or trained with.


def test_train_refuses_an_unknown_wrapper_before_creating_the_run_dir(capsys, tmp_path, fake_train):
    code, out, err = _run(
        capsys,
        "train",
        "ppo_cartpole",
        "env.wrappers=[{name:FrameSkip,skip:2},{name:NoSuchWrapper}]",
        "--root-dir",
        str(tmp_path / "r"),
    )
    assert code == 2 and out == ""
    assert "env.wrappers=[" in err and "item 1 ({'name': 'NoSuchWrapper'})" in err
    assert not (tmp_path / "r").exists() and fake_train == []


def test_real_train_eval_and_play_with_wrappers_from_the_command_line(capsys, tmp_path):
    # CartPole without its velocities; "auto" must leave the tensor-native CartPole aside.
    root = tmp_path / "run"
    wrappers = "env.wrappers=[{name:ObservationMask,keep:[0,2]},{name:FrameSkip,skip:2}]"
    argv = ["train", "ppo_cartpole", wrappers, "env.backend=auto", *TINY_RUN]
    code, _, err = _run(capsys, *argv, "--root-dir", str(root))
    assert code == 0, err
    config = from_yaml((root / "config.yaml").read_text())
    assert [item["name"] for item in config.env.wrappers] == ["ObservationMask", "FrameSkip"]
    code, out, err = _run(capsys, "eval", str(root), "--episodes", "2")
    assert code == 0 and "over 2 episodes" in out, err
    code, out, err = _run(capsys, "play", str(root))
    assert code == 0 and "episode 1: return" in out, err


def test_a_changed_extracted_snapshot_is_never_imported(capsys, caplog, run_dir, restore_cadence):
    _write_tarball(run_dir / "snapshot.tar.gz", SNAPSHOT_FILES)
    assert _run(capsys, "play", str(run_dir), "--use-snapshot")[0] == 0
    [cache] = run_dir.glob(".snapshot-*")
    (cache / "cadence" / "trainer" / "play.py").write_text("raise SystemExit('tampered')\n")
    for name in [name for name in sys.modules if name.split(".")[0] == "cadence"]:
        del sys.modules[name]
    code, out, err = _run(capsys, "play", str(run_dir), "--use-snapshot")
    assert code == 0, err
    assert "episode 1: return 42.00" in out
    # A warning the library logs (the terminal shows it: nothing has configured logging yet).
    assert "no longer matches" in caplog.text
    assert "tampered" not in (cache / "cadence" / "trainer" / "play.py").read_text()


def test_episode_lengths_count_env_steps_as_budgets_do_with_action_repeat(tmp_path, capsys):
    """Pendulum's episodes are 200 simulator steps; with action_repeat 2 they are 100 steps
    of the wrapped env, and every reported length says 200 env steps, as the budget counts."""
    run_dir = tmp_path / "run"
    overrides = [
        "env.action_repeat=2", "env.num_envs=2", "trainer.unroll_length=100",
        "trainer.num_env_steps=400", "trainer.eval_interval=1", "trainer.num_eval_episodes=1",
        "trainer.progress_bar=off",
    ]  # fmt: skip
    assert main(["train", "ppo_pendulum", *overrides, "--root-dir", str(run_dir)]) == 0
    rows = read_metrics(run_dir)
    assert rows[-1]["env_steps"] == 400
    assert rows[-1]["eval/episode_length"] == 200.0
    assert rows[-1]["rollout/episode_length"] == 200.0
    capsys.readouterr()
    assert main(["eval", str(run_dir), "--episodes", "1"]) == 0
    assert "(mean length 200.0 env steps)" in capsys.readouterr().out
    assert main(["play", str(run_dir), "--episodes", "1"]) == 0
    assert "length 200 env steps" in capsys.readouterr().out
