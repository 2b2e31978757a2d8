"""Finding run directories from the user's arguments and reading their curves."""

import json
from pathlib import Path

import pytest

from cadence.plot.runs import PlotError, check_metric, find_runs, load_run, metric_series


def _write_run(directory: Path, records: list[dict] | None = None, seed: int = 0) -> Path:
    directory.mkdir(parents=True)
    (directory / "config.yaml").write_text(
        f"name: ppo_cartpole\nseed: {seed}\nalgorithm:\n  name: ppo\n  learning_rate: 0.0005\n"
    )
    if records is not None:
        lines = [json.dumps({"iteration": i + 1, **r}) for i, r in enumerate(records)]
        (directory / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
    return directory


def _point(steps: int, value: float | None, **metrics) -> dict:
    point = {"env_steps": steps, "wall_time": steps / 100, "train_time": 0.0, **metrics}
    if value is not None:
        point["eval/episode_return"] = value
    return point


@pytest.fixture
def sweep(tmp_path):
    root = tmp_path / "sweep"
    for trial in range(2):
        for seed in range(2):
            _write_run(root / f"trial_{trial:04d}" / f"seed_{seed}", [_point(8, 1.0)], seed)
    # An extracted snapshot inside a run directory is not a run.
    hidden = root / "trial_0000" / "seed_0" / ".snapshot-abc" / "config.yaml"
    hidden.parent.mkdir()
    hidden.write_text("name: not_a_run\n")
    (root / "study.db").write_text("")
    return root


def test_a_directory_holding_runs_gives_every_run_under_it(sweep):
    assert [str(p.relative_to(sweep)) for p in find_runs([str(sweep)])] == [
        "trial_0000/seed_0",
        "trial_0000/seed_1",
        "trial_0001/seed_0",
        "trial_0001/seed_1",
    ]


def test_runs_globs_and_files_name_each_run_once(sweep):
    run = sweep / "trial_0001" / "seed_1"
    found = find_runs([str(run), str(sweep / "trial_*/seed_1"), str(run / "config.yaml")])
    assert found == [run, sweep / "trial_0000" / "seed_1"]
    assert find_runs([str(sweep / "**" / "metrics.jsonl")])[0] == sweep / "trial_0000" / "seed_0"


def test_arguments_naming_no_run_are_refused_saying_what_a_run_is(tmp_path, sweep):
    with pytest.raises(PlotError, match="missing does not exist.*config.yaml and metrics.jsonl"):
        find_runs([str(tmp_path / "missing")])
    with pytest.raises(PlotError, match="matches no file"):
        find_runs([str(sweep / "trial_9*")])
    with pytest.raises(PlotError, match=r"study\.d\* matches no run"):
        find_runs([str(sweep / "study.d*")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(PlotError, match="empty holds no run"):
        find_runs([str(sweep), str(tmp_path / "empty")])


def test_the_same_run_given_two_ways_counts_once(sweep, monkeypatch):
    monkeypatch.chdir(sweep)
    assert find_runs(["trial_0000/seed_0", f"{sweep}/trial_0000/seed_0/"]) == [
        Path("trial_0000/seed_0")
    ]


def test_a_run_without_metrics_is_refused(tmp_path):
    with pytest.raises(PlotError, match="has no metrics.*let it train"):
        load_run(_write_run(tmp_path / "fresh"))
    with pytest.raises(PlotError, match="has no metrics"):
        load_run(_write_run(tmp_path / "empty", []))


def test_load_run_flattens_the_config(tmp_path):
    run = load_run(_write_run(tmp_path / "run", [_point(8, 1.0)], seed=3))
    assert run.seed == 3 and run.config["algorithm.learning_rate"] == 0.0005
    assert run.records[0]["env_steps"] == 8


def test_a_missing_metric_is_refused_listing_the_metrics_every_run_has(tmp_path):
    a = load_run(_write_run(tmp_path / "a", [_point(8, None, **{"train/kl": 0.1, "x/y": 1})]))
    b = load_run(_write_run(tmp_path / "b", [_point(8, 2.0, **{"train/kl": 0.2})]))
    check_metric([b], "eval/episode_return")
    with pytest.raises(PlotError) as error:
        check_metric([a, b], "eval/episode_return")
    message = str(error.value)
    assert f"{tmp_path / 'a'} logged no 'eval/episode_return'" in message
    assert "trainer.eval_interval" in message
    assert "Metrics every run has: train/kl. Choose one with --metric" in message


def test_a_metric_no_run_logged_is_refused_as_a_misspelling_with_close_names(tmp_path):
    run = load_run(_write_run(tmp_path / "a", [_point(8, 1.0, **{"rollout/episode_return": 3})]))
    with pytest.raises(PlotError) as error:
        check_metric([run], "eval/return")
    message = str(error.value)
    assert "no run logged a metric named 'eval/return'." in message
    assert "Did you mean 'eval/episode_return'?" in message
    assert "Metrics the runs logged: eval/episode_return, rollout/episode_return." in message
    assert "trainer.eval_interval" not in message  # it is not a matter of waiting


def test_a_run_not_yet_evaluated_is_told_so_for_the_evaluation_metrics(tmp_path):
    run = load_run(_write_run(tmp_path / "a", [_point(8, None, **{"train/kl": 0.1})]))
    for metric in ("eval/episode_return", "eval/episode_length"):
        with pytest.raises(PlotError, match="no evaluation yet: trainer.eval_interval"):
            check_metric([run], metric)
    with pytest.raises(PlotError, match="no run logged a metric named 'eval/retrun'"):
        check_metric([run], "eval/retrun")


def test_metric_series_skips_points_without_a_finite_value_and_sorts_by_x(tmp_path):
    records = [_point(16, 3.0), _point(8, 1.0), _point(24, None), _point(32, None)]
    records[3]["eval/episode_return"] = None  # a non-finite value is logged as null
    run = load_run(_write_run(tmp_path / "run", records))
    xs, ys = metric_series(run, "eval/episode_return", "env_steps")
    assert xs.tolist() == [8.0, 16.0] and ys.tolist() == [1.0, 3.0]
    xs, _ = metric_series(run, "eval/episode_return", "wall_time")
    assert xs.tolist() == [0.08, 0.16]
