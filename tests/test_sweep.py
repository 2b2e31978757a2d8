"""`cadence sweep`: parameter parsing, a real tiny sweep, pruning, two processes sharing one
SQLite study, and a sweep killed mid-trial whose trial resumes from its checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cadence.cli import build_parser, main
from cadence.config import ConfigError
from cadence.trainer.metrics import read_metrics

optuna = pytest.importorskip("optuna")
pytestmark = pytest.mark.timeout(240)  # a sweep that waits forever fails fast

from cadence import sweep  # noqa: E402 - after the skip: it needs optuna to run sweeps

# 256 env steps per iteration (8 envs x 32 steps), one evaluation of 1 episode each.
TINY = [
    "trainer.num_eval_episodes=1",
    "trainer.eval_interval=1",
    "trainer.num_threads=1",
]
LEARNING_RATE = "algorithm.learning_rate=loguniform(1e-4,1e-2)"


# ------------------------------------------------------------------ parsing
@pytest.mark.parametrize(
    ("text", "kind", "args"),
    [
        ("algorithm.learning_rate=loguniform(1e-4,1e-2)", "loguniform", (1e-4, 1e-2)),
        ("algorithm.ent_coef = uniform( 0 , 0.02 )", "uniform", (0.0, 0.02)),
        ("env.num_envs=int(2,16)", "int", (2, 16)),
        ("network.activation=choice(relu,tanh)", "choice", ("relu", "tanh")),
        ("algorithm.norm_adv=choice(true,false)", "choice", (True, False)),
        ("algorithm.clip_coef=choice(0.1,0.2,1)", "choice", (0.1, 0.2, 1)),
    ],
)
def test_parse_param(text: str, kind: str, args: tuple) -> None:
    param = sweep.parse_param(text)
    assert (param.kind, param.args) == (kind, args)
    assert sweep.parse_param(str(param)) == param  # the stored form reads back


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("algorithm.learning_rate", "expected KEY=KIND(ARGS)"),
        ("algorithm.learning_rate=1e-3", "expected KEY=KIND(ARGS)"),
        ("algorithm.learning_rate=lognormal(1,2)", "unknown kind 'lognormal'"),
        ("algorithm.learning_rate=loguniform(1e-2)", "two bounds"),
        ("algorithm.learning_rate=loguniform(0,1e-2)", "positive low bound"),
        ("algorithm.learning_rate=uniform(0.2,0.1)", "must be below"),
        ("algorithm.learning_rate=uniform(a,0.1)", "'a' is not a number"),
        ("algorithm.learning_rate=uniform(0,inf)", "not finite"),
        ("env.num_envs=int(1.5,4)", "'1.5' is not an integer"),
        ("network.activation=choice(relu)", "two or more"),
        ("network.activation=choice(relu,relu)", "twice"),
        ("network.activation=choice(relu,'x y')", "plain words"),
        ("seed=int(0,9)", "set by the sweep itself"),
        ("1bad.key=uniform(0,1)", "expected KEY=KIND(ARGS)"),
    ],
)
def test_parse_param_refuses(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match="--param") as error:
        sweep.parse_param(text)
    assert message in str(error.value)


def test_pruner_specs() -> None:
    assert isinstance(sweep.make_pruner("median"), optuna.pruners.MedianPruner)
    pruner = sweep.make_pruner("percentile(percentile=75.0,n_startup_trials=1)")
    assert isinstance(pruner, optuna.pruners.PercentilePruner)
    assert isinstance(sweep.make_pruner("none"), optuna.pruners.NopPruner)
    for bad, message in [("fastest", "unknown pruner"), ("median(speed=2)", "speed")]:
        with pytest.raises(ConfigError, match=message):
            sweep.make_pruner(bad)


def test_spec_refuses_unknown_key_and_clashes(tmp_path: Path) -> None:
    unknown = sweep.SweepSpec("ppo_cartpole", (), (sweep.parse_param("algorithm.lr=uniform(0,1)"),))
    with pytest.raises(ConfigError, match="algorithm.lr"):
        sweep.open_sweep(unknown, "s", tmp_path)
    assert not (tmp_path / "study.db").exists()  # refused before the study was created
    with pytest.raises(ConfigError, match="both swept and set"):
        sweep.SweepSpec(
            "ppo_cartpole", ("algorithm.learning_rate=1e-3",), (sweep.parse_param(LEARNING_RATE),)
        )
    with pytest.raises(TypeError, match='list of "key=value" strings, got the string'):
        sweep.SweepSpec("ppo_cartpole", "env.num_envs=4", (sweep.parse_param(LEARNING_RATE),))


def test_rerun_with_other_params_is_refused(tmp_path: Path) -> None:
    spec = sweep.SweepSpec("ppo_cartpole", tuple(TINY), (sweep.parse_param(LEARNING_RATE),))
    sweep.open_sweep(spec, "s", tmp_path)
    other = sweep.SweepSpec(
        "ppo_cartpole", tuple(TINY), (sweep.parse_param("algorithm.ent_coef=uniform(0,0.1)"),)
    )
    with pytest.raises(ConfigError, match="sweeps something else") as error:
        sweep.open_sweep(other, "s", tmp_path)
    assert "algorithm.learning_rate" in str(error.value)


def test_missing_optuna_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(ConfigError, match=r"pip install 'cadence\[sweep\]'"):
        sweep.require_optuna()


# ------------------------------------------------------------------ real sweeps
def _eval_curve(run_dir: Path) -> list[tuple[int, float]]:
    rows = read_metrics(run_dir)  # skips a torn last line
    return [(r["env_steps"], r["eval/episode_return"]) for r in rows if "eval/episode_return" in r]


def _load(sweep_dir: Path, name: str = "ppo_cartpole") -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{sweep_dir / 'study.db'}")


def test_tiny_sweep_objective_is_mean_over_seeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    args = ["sweep", "ppo_cartpole", "trainer.num_env_steps=768", *TINY, "--param", LEARNING_RATE]
    assert main([*args, "--trials", "3", "--seeds", "2", "--pruner", "none"]) == 0
    summary = capsys.readouterr().out
    sweep_dir = tmp_path / "runs" / "sweeps" / "ppo_cartpole"
    trials = _load(sweep_dir).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    runs = sorted(str(p.relative_to(sweep_dir)) for p in sweep_dir.glob("trial_*/seed_*"))
    assert runs == [f"trial_000{t}/seed_{s}" for t in range(3) for s in (0, 1)]
    for trial in trials:
        curves = [
            _eval_curve(sweep_dir / f"trial_{trial.number:04d}" / f"seed_{s}") for s in (0, 1)
        ]
        assert [step for step, _ in curves[0]] == [256, 512, 768] == [s for s, _ in curves[1]]
        means = {step: (a + b) / 2 for (step, a), (_, b) in zip(*curves, strict=True)}
        assert trial.intermediate_values == pytest.approx(means)
        assert trial.value == pytest.approx(means[768])
    assert "3 complete, 0 pruned, 0 failed" in summary
    best = max(trials, key=lambda t: t.value)
    assert f"algorithm.learning_rate={best.params['algorithm.learning_rate']!r}" in summary

    # A run paused at every evaluation and resumed equals `cadence train` of its overrides.
    line = next(line for line in summary.splitlines() if "cadence train" in line).split()
    assert main(["train", *line[2:], "trainer.progress_bar=off", "--root-dir", "plain"]) == 0
    run = sweep_dir / f"trial_{best.number:04d}" / "seed_0"
    assert _eval_curve(tmp_path / "plain") == _eval_curve(run)

    assert main(["sweep", "ppo_cartpole", "--summary"]) == 0  # for an existing study
    assert "3 complete" in capsys.readouterr().out


def test_a_sweep_trial_is_continued_by_cadence_train_as_the_docs_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    # docs/sweeps.md: `cadence train NAME ... --root-dir .../seed_0` with the trial's
    # overrides continues one. Its config.yaml says progress_bar 'off', the command not.
    monkeypatch.chdir(tmp_path)
    args = ["sweep", "ppo_cartpole", "trainer.num_env_steps=256", *TINY, "--param", LEARNING_RATE]
    assert main([*args, "--trials", "1", "--seeds", "1", "--pruner", "none"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if "cadence train" in line)
    run = tmp_path / "runs" / "sweeps" / "ppo_cartpole" / "trial_0000" / "seed_0"
    train = ["train", *line.split()[2:], "--root-dir", str(run)]
    assert main(train) == 0
    assert "already complete" in capsys.readouterr().out
    assert main([*train, "trainer.num_env_steps=512", "--resume-with-changes"]) == 0
    [change] = (run / "config_changes.jsonl").read_text().splitlines()
    assert list(json.loads(change)["changes"]) == ["trainer.num_env_steps"]
    assert [step for step, _ in _eval_curve(run)] == [256, 512]


def test_a_clearly_worse_trial_is_pruned(tmp_path: Path) -> None:
    # Episodes capped at 8 steps return at most 8; uncapped ones of an untrained policy ~20.
    spec = sweep.SweepSpec(
        "ppo_cartpole",
        ("trainer.num_env_steps=768", *TINY),
        (sweep.parse_param("env.max_episode_steps=choice(8,500)"),),
        num_seeds=2,
    )
    study = sweep.open_sweep(spec, "pruning", tmp_path, pruner="median(n_startup_trials=1)")
    study.study.enqueue_trial({"env.max_episode_steps": 500})
    study.study.enqueue_trial({"env.max_episode_steps": 8})
    assert study.run(2) == "complete"
    good, capped = study.study.trials
    assert (good.state.name, capped.state.name) == ("COMPLETE", "PRUNED")
    assert capped.last_step == 256  # stopped at its first evaluation
    assert capped.intermediate_values[256] <= 8 < good.intermediate_values[256]
    for seed in (0, 1):  # its run directories stay, paused at the step it was pruned
        run = tmp_path / "trial_0001" / f"seed_{seed}"
        assert [step for step, _ in _eval_curve(run)] == [256]
        assert (run / "checkpoints" / "LATEST").exists() and not (run / "COMPLETE").exists()
    assert "1 complete, 1 pruned" in study.summary()


def _sweep_command(tmp_path: Path, trials: int, *extra: str) -> list[str]:
    return [
        *(sys.executable, "-m", "cadence", "sweep", "ppo_cartpole", *TINY),
        *("--param", LEARNING_RATE, "--trials", str(trials), "--pruner", "none"),
        *("--sweep-dir", str(tmp_path / "sweep"), *extra),
    ]


def _started_trials(log: str) -> set[int]:
    return {
        int(line.split("trial ")[1].split()[0]) for line in log.splitlines() if " (trial_" in line
    }


@pytest.mark.slow  # ~15 s of processes each: CI runs it in its budgeted subset
@pytest.mark.ci_budget
def test_two_processes_share_one_sqlite_study(tmp_path: Path) -> None:
    command = _sweep_command(tmp_path, 4, "trainer.num_env_steps=512")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    processes = [
        subprocess.Popen(command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    logs = [process.communicate(timeout=240)[1] for process in processes]
    assert [process.returncode for process in processes] == [0, 0], logs
    trials = _load(tmp_path / "sweep").trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 4  # exactly T, none surplus
    started = [_started_trials(log) for log in logs]
    assert started[0].isdisjoint(started[1]) and started[0] | started[1] == set(range(4))
    assert len(list((tmp_path / "sweep").glob("trial_*/seed_0/COMPLETE"))) == 4


@pytest.mark.slow  # ~15 s of processes each: CI runs it in its budgeted subset
@pytest.mark.ci_budget
def test_killed_sweep_resumes_its_trial_from_the_checkpoint(tmp_path: Path) -> None:
    command = _sweep_command(
        tmp_path,
        2,
        "trainer.num_env_steps=5120",
        "--heartbeat-interval",
        "1",
        "--sampler",
        "random",
    )
    run = tmp_path / "sweep" / "trial_0000" / "seed_0"
    first = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(_eval_curve(run)) < 3:
        assert first.poll() is None and time.monotonic() < deadline, "the sweep did not start"
        time.sleep(0.2)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert not (run / "COMPLETE").exists()
    head = (run / "metrics.jsonl").read_text().splitlines()[:2]  # covered by a checkpoint

    second = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert second.returncode == 0, second.stderr
    assert "resuming trial 0" in second.stderr
    trials = _load(tmp_path / "sweep").trials
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE", "COMPLETE"]
    (rerun,) = [t for t in trials if t.user_attrs.get("retry_of") == 0]
    assert rerun.user_attrs["run"] == 0 and rerun.params == trials[0].params
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert lines[:2] == head  # continued from its checkpoint: the old rows are untouched
    steps = [json.loads(line)["env_steps"] for line in lines]
    assert steps == list(range(256, 5121, 256))
    assert rerun.value == pytest.approx(_eval_curve(run)[-1][1])
    assert "1 failed (1 of them rerun from their checkpoints)" in second.stdout


@pytest.mark.parametrize("flag", ["--root-dir", "--sweep-dir"])
def test_the_sweep_directory_is_given_as_train_gives_a_run_directory(flag: str) -> None:
    args = build_parser().parse_args(["sweep", "ppo_cartpole", flag, "runs/mine"])
    assert args.sweep_dir == Path("runs/mine")
