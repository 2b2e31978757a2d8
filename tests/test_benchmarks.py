"""The benchmark scripts still run (smoke runs, nothing timed is asserted).

They import cadence's internals on purpose (`parallel_ceiling.py` times the parallel
worker's own hot path), so a rename inside the package would otherwise surface only
when someone next measures. The runs that take over ten seconds (worker processes,
Ray, a CNN) are `slow` and `ci_budget`: CI runs them, the default suite does not.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run_benchmark(script: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


@pytest.mark.slow
@pytest.mark.ci_budget
def test_env_throughput_prints_its_table_and_bars():
    out = run_benchmark("env_throughput.py", "--quick", "--tensor-envs", "256")
    assert "HalfCheetah-v5 x8" in out and "CartPole-v1 x256" in out
    assert "parallel / serial, HalfCheetah-v5 x8" in out
    # CartPole registers a vector env: its row has Gymnasium's and cadence's vector columns.
    cartpole = next(line for line in out.splitlines() if line.startswith("CartPole-v1 x8 "))
    assert len(cartpole.split()) == 2 + 10 and "-" not in cartpole.split()[2:]
    assert "cadence vector / its gym vector env" in out
    # The async column (M = 4 of 8 on two or more cores), with its ratio to lockstep.
    assert "async (M=4) / parallel, HalfCheetah-v5 x8: " in out


@pytest.mark.slow
@pytest.mark.ci_budget
def test_collect_step_prints_its_table_and_bar():
    out = run_benchmark(
        "collect_step.py", "--quick", "--envs", "CartPole-v1", "--num-envs", "2", "4"
    )
    for count in (2, 4):
        row = next(line for line in out.splitlines() if line.startswith(f"CartPole-v1 x{count} "))
        assert len(row.split()) == 2 + 4  # the label, then every column (SB3's "-" without it)
        assert f"cadence's per-step Python / the envs' own cost, CartPole-v1 x{count}" in out
    assert "cadence's per-step Python, CartPole-v1: " in out  # split per step and per env


@pytest.mark.slow
@pytest.mark.ci_budget
def test_parallel_ceiling_measures_every_column():
    out = run_benchmark(
        "parallel_ceiling.py", "--env", "CartPole-v1", "--envs", "4", "--rounds", "2",
        "--seconds", "0.02",
    )  # fmt: skip
    for row in (
        "free two processes / one",
        "lockstep, cadence work / serial",
        "parallel / serial",
        "async, cadence work / serial",
        "cadence async / that ceiling",
    ):
        assert row in out


@pytest.mark.parametrize("algorithm", ["sac", "ddpg"])
def test_update_speed_times_cadence_updates(algorithm):
    out = run_benchmark(
        "update_speed.py", "--skip-sb3", "--shapes", "pendulum", "--compile", "off",
        "--block", "3", "--repeats", "1", "--algorithm", algorithm,
    )  # fmt: skip
    assert f"{algorithm.upper()} updates/s" in out and "cadence[off]" in out


def test_time_to_solve_answers_help():
    # Its runs train to a return bar (minutes); without Stable-Baselines3 it must still load.
    assert "--task" in run_benchmark("time_to_solve.py", "--help")


@pytest.mark.slow
@pytest.mark.ci_budget
def test_batcher_async_prints_both_columns():
    out = run_benchmark("batcher_async.py", "--quick")
    rows = [line.split() for line in out.splitlines() if line.endswith("env steps/s")]
    rates = {row[0]: row[1] for row in rows}
    assert sorted(rates) == ["async", "lockstep"], out
    assert all(rate.endswith("k") for rate in rates.values()), out
    assert "async / lockstep" in out


@pytest.mark.slow
@pytest.mark.ci_budget
def test_batcher_throughput_prints_every_row():
    out = run_benchmark("batcher_throughput.py", "--quick")
    for env in ("CartPole-v1", "HalfCheetah-v5"):
        (row,) = [line.split()[1:] for line in out.splitlines() if line.startswith(env)]
        assert len(row) == 9, row  # a cell per column, "n/a" where one cannot run here
        batcher_1, batcher_2, unroll, gym_async = row[0], row[1], row[3], row[7]
        replays = row[4], row[5]
        cells = (batcher_1, batcher_2, unroll, gym_async, *replays)
        assert all(cell.endswith(("k", "M")) for cell in cells), row
        if importlib.util.find_spec("ray") is not None:
            assert row[2].endswith(("k", "M")), row  # the Ray back end's column
    assert "batcher 2x4 / gym async x8" in out
    assert "SKIP  the bars are set at 16 envs a process" in out


def test_world_model_speed_times_cadence_updates(monkeypatch):
    # Its peer, TorchRL, lives in a virtual environment of its own: time cadence's side.
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(
        "world_model_speed", BENCHMARKS / "world_model_speed.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rates = module.cadence_updates(module.SHAPES["pendulum"], iters=1, warmup=0, flops=True)
    for kind in ("world_model", "actor_critic"):
        assert rates[f"{kind}_updates_per_s"] > 0 and rates[f"{kind}_flops"] > 1e9


@pytest.mark.slow
@pytest.mark.ci_budget  # a training iteration on the CNN costs seconds; DQN's side trains twice
@pytest.mark.parametrize("algorithm", ["ppo", "dqn"])
def test_atari_throughput_prints_its_table(algorithm):
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    # cadence's side only: a training iteration of each side costs seconds on the CNN.
    args = ["--algorithm", algorithm, "--env-steps", "256", "--learning-starts", "128"]
    out = run_benchmark("atari_throughput.py", *args, "--rounds", "1", "--skip-sb3")
    assert "round 0: cadence" in out and f"{algorithm.upper()} on ALE/Pong-v5" in out
    if algorithm == "dqn":  # a stored step: one 84x84 frame and its few scalars
        bytes_per_step = int(out.split("cadence 2Q")[-1].split()[-1].replace(",", ""))
        assert 84 * 84 < bytes_per_step < 2 * 84 * 84


def _shared_machine():
    spec = importlib.util.spec_from_file_location(
        "shared_machine", BENCHMARKS / "shared_machine.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shared_machine_tables_the_medians_and_checks_the_bar(capsys):
    module = _shared_machine()
    todo = [
        {"label": "updates/s", "higher": True},
        {"label": "run, s", "higher": False},
    ]

    def rows(default, one, two):
        return {
            "default": [{"value": v, "threads": 1} for v in default],
            "1 thread": [{"value": v, "threads": 1} for v in one],
            "2 threads": [{"value": v, "threads": 2} for v in two],
        }

    met = {"updates/s": rows([8, 9, 10], [10, 12, 9], [1, 2, 3]), "run, s": rows([5, 6, 7], [6, 6, 6], [20, 30, 40])}  # fmt: skip
    assert module.report(todo, met) == 0
    out = capsys.readouterr().out
    assert "1.11x" in out and "1.00x" in out and "bar: default <= 1.25x" in out and "met" in out
    missed = {**met, "run, s": rows([9, 9, 9], [6, 6, 6], [7, 7, 7])}
    assert module.report(todo, missed) == 1
    assert "1.50x" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.ci_budget  # 12 fresh processes, each training a little
def test_shared_machine_measures_every_row_with_a_busy_core():
    out = run_benchmark("shared_machine.py", "--quick", "--timeout", "250")
    for label in ("sac_pendulum updates/s", "dreamer_pendulum updates/s", "sac_pendulum 150-step run", "dreamer_pendulum 300-step run"):  # fmt: skip
        assert label in out
    assert "busy loop: one process" in out and "bar: default <= 1.25x" in out
    assert "the bar is reported, not enforced" in out  # one round of tiny sizes is noise


def test_numerics_harness_finds_one_differing_value(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("numerics_harness", BENCHMARKS / "numerics_harness.py")  # fmt: skip
    harness = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(harness)
    import torch

    weights = {"w": torch.tensor([1.0, 2.0]), "lr": 1e-3, "steps": [3, 4]}
    run = {"metrics": [{"iteration": 1, "loss": 0.5}], "wall_s": 1.0}
    same = {"ppo_cartpole compile=off": {**run, "state": harness.digest(weights)}}
    nudged = {**weights, "w": torch.tensor([1.0, torch.nextafter(torch.tensor(2.0), torch.tensor(3.0)).item()])}  # fmt: skip
    changed = {"ppo_cartpole compile=off": {**run, "state": harness.digest(nudged)}}
    for name, content in (("a", same), ("b", same), ("c", changed)):
        (tmp_path / f"{name}.json").write_text(json.dumps(content))
    assert harness.main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    assert "0 differing values" in capsys.readouterr().out
    assert harness.main(["compare", str(tmp_path / "a.json"), str(tmp_path / "c.json")]) == 1
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("ppo_cartpole"))  # fmt: skip
    assert row.split()[-3:] == ["0", "1", "0"]  # metric values, state entries, one side only


def _benchmark_module(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_async_learning_reports_the_ratio_and_whether_async_is_inside_locksteps_interval(capsys):
    module = _benchmark_module("async_learning")
    returns = {"lockstep": [1000.0, 1200.0, 1100.0], "async": [1050.0, 1150.0, 1000.0]}
    rows = [
        {
            "config": "ppo_hopper",
            "mode": mode,
            "seed": seed,
            "final_return": value,
            "wall_time": wall,
        }
        for mode, wall in (("lockstep", 100.0), ("async", 80.0))
        for seed, value in enumerate(returns[mode])
    ]
    module.print_report(rows)
    out = capsys.readouterr().out
    # async's mean 1066.7 over lockstep's 1100.0; lockstep's interval holds it.
    assert "return 0.97x (bar 0.90x), inside lockstep's interval: True; wall time 0.80x" in out
    assert module.interval([5.0, 5.0, 5.0]) == (5.0, 5.0, 5.0)
    # Only async is asked of the stepping: the modes share every other override.
    lockstep, async_ = (module.overrides("sac_hopper", m, 1000) for m in module.MODES)
    assert async_ == [*lockstep, "env.async_batch_size=2"]


def test_denoising_study_summarises_returns_and_the_per_seed_difference(capsys):
    module = _benchmark_module("denoising_study")
    rows = [
        {"config": config, "seed": seed, "final_return": value, "probes": {}}
        for config, values in (("noisy", [-300.0, -500.0]), ("denoised", [-250.0, -450.0]))
        for seed, value in zip((3, 4), values, strict=True)
    ]
    module.print_summary(rows, ["noisy", "denoised"], "noisy")
    out = capsys.readouterr().out
    # The per-seed difference is +50 in both seeds, so its interval is that one value.
    assert "- noisy:    +50.0 [   +50.0,    +50.0]" in out
    mean, low, high = module.bootstrap_mean([-300.0, -500.0])
    assert mean == -400.0 and -500.0 <= low < high <= -300.0
