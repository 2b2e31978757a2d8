"""`cadence plot` on real runs: 2 seeds of 2 configs of a tiny ppo_cartpole, drawn into a
PNG that is decoded and checked to hold both curves; SVG and PDF; the errors exit 2."""

import json
import logging
import sys

import numpy as np
import pytest

from cadence.cli import main
from cadence.plot import PlotError, plot_runs
from cadence.trainer.metrics import read_metrics

matplotlib_image = pytest.importorskip("matplotlib.image")

TINY_RUN = [
    "env.num_envs=2",
    "env.max_episode_steps=25",
    "trainer.unroll_length=8",
    "trainer.num_env_steps=96",
    "trainer.eval_interval=1",
    "trainer.num_eval_episodes=2",
    "trainer.progress_bar=off",
    # One update an iteration and one torch thread: seconds a run on a busy machine.
    "algorithm.mini_batch_size=16",
    "algorithm.num_updates_per_train_iter=1",
    "trainer.num_threads=1",
]
# Two network sizes: two initial policies, so two curves even at this budget.
HIDDEN_SIZES = ("[64,64]", "[8]")
C0, C1 = (31, 119, 180), (255, 127, 14)  # matplotlib's first two line colours


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("plot")
    for index, sizes in enumerate(HIDDEN_SIZES):
        for seed in (0, 1):
            run_dir = root / f"net{index}" / f"seed{seed}"
            overrides = [f"seed={seed}", f"network.hidden_sizes={sizes}", *TINY_RUN]
            assert main(["train", "ppo_cartpole", "--root-dir", str(run_dir), *overrides]) == 0
    return root


def _pixels_near(image: np.ndarray, color: tuple[int, int, int], tolerance: int = 30) -> int:
    rgb = (image[..., :3] * 255).astype(int)
    return int((np.abs(rgb - np.array(color)).max(axis=-1) <= tolerance).sum())


def test_plot_draws_one_line_per_config_into_a_png(runs, tmp_path, capsys):
    out = tmp_path / "curves.png"
    assert main(["plot", str(runs), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "network.hidden_sizes=[64,64] (2 seeds): eval/episode_return" in printed
    assert "network.hidden_sizes=[8] (2 seeds)" in printed and f"wrote {out}" in printed
    image = matplotlib_image.imread(out)
    assert image.shape == (600, 960, 4)
    drawn = (image[..., :3] < 0.95).any(axis=-1)
    assert drawn.mean() > 0.02, "the canvas is nearly blank"
    assert _pixels_near(image, C0) > 50 and _pixels_near(image, C1) > 50, "a curve is missing"
    plot_area = (image[60:540, 80:940, :3] * 255).astype(np.uint8).reshape(-1, 3)
    assert len(np.unique(plot_area, axis=0)) > 20
    again = tmp_path / "again.png"
    assert main(["plot", str(runs), "--out", str(again)]) == 0
    assert again.read_bytes() == out.read_bytes(), "the seeded bootstrap gives the same picture"


def test_the_curve_is_the_mean_of_the_seeds_and_the_band_lies_around_it(runs, tmp_path):
    lines = plot_runs([str(runs / "net*")], tmp_path / "curves.png")
    assert [line.curve.num_runs for line in lines] == [2, 2]
    for line, sizes in zip(lines, HIDDEN_SIZES, strict=True):
        assert line.label == f"network.hidden_sizes={sizes} (2 seeds)"
        seeds = [
            {r["env_steps"]: r["eval/episode_return"] for r in read_metrics(run.directory)}
            for run in line.runs
        ]
        assert line.curve.x.tolist() == sorted(seeds[0]) == sorted(seeds[1])
        expected = [(seeds[0][x] + seeds[1][x]) / 2 for x in sorted(seeds[0])]
        np.testing.assert_allclose(line.curve.mean, expected)
        lowest = np.minimum(*[[s[x] for x in sorted(s)] for s in seeds])
        np.testing.assert_allclose(line.curve.low, lowest)  # two seeds: the band spans them


@pytest.mark.parametrize(("suffix", "magic"), [(".svg", b"<?xml"), (".pdf", b"%PDF")])
def test_svg_and_pdf_by_the_suffix_with_wall_time_and_smoothing(runs, tmp_path, suffix, magic):
    out = tmp_path / f"curves{suffix}"
    seeds_of_one = str(runs / "net0" / "seed*")
    argv = ["plot", seeds_of_one, "--out", str(out), "--metric", "rollout/episode_return"]
    assert main([*argv, "--x", "env_steps", "--smooth", "3", "--title", "tiny"]) == 0
    assert out.read_bytes().startswith(magic)
    if suffix == ".svg":
        text = out.read_text()
        assert "tiny" in text and "ppo_cartpole (2 seeds)" in text


def test_errors_exit_2_saying_what_to_do(runs, tmp_path, capsys):
    assert main(["plot", str(tmp_path / "nothing*"), "--out", str(tmp_path / "a.png")]) == 2
    assert "matches no file" in capsys.readouterr().err
    assert main(["plot", str(runs), "--metric", "eval/nope", "--out", str(tmp_path / "a.png")]) == 2
    err = capsys.readouterr().err
    assert "no run logged a metric named 'eval/nope'" in err and "rollout/episode_return" in err
    misspelt = ["plot", str(runs), "--metric", "eval/return", "--out", str(tmp_path / "a.png")]
    assert main(misspelt) == 2
    err = capsys.readouterr().err
    assert "Did you mean 'eval/episode_return'" in err and "no evaluation yet" not in err
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "config.yaml").write_text("name: ppo_cartpole\nseed: 0\n")
    assert main(["plot", str(fresh), "--out", str(tmp_path / "a.png")]) == 2
    assert "has no metrics" in capsys.readouterr().err
    assert main(["plot", str(runs), "--out", str(tmp_path / "a.jpg")]) == 2
    assert ".png, .svg, .pdf" in capsys.readouterr().err
    assert not list(tmp_path.glob("a.*"))


def test_without_matplotlib_the_command_exits_2_with_the_pip_line(runs, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises
    out = tmp_path / "a.png"
    with pytest.raises(Exception, match=r"pip install 'cadence\[plot\]'"):
        plot_runs([str(runs)], out)
    assert main(["plot", str(runs), "--out", str(out)]) == 2
    assert not out.exists()


def _synthetic_run(directory, seed: int, points: dict[int, float]) -> None:
    directory.mkdir(parents=True)
    (directory / "config.yaml").write_text(f"name: demo\nseed: {seed}\nenv:\n  name: E\n")
    lines = [
        json.dumps({"iteration": i, "env_steps": x, "wall_time": float(x), "m": y})
        for i, (x, y) in enumerate(points.items(), start=1)
    ]
    (directory / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_a_group_is_drawn_where_all_its_seeds_have_data_with_a_warning(tmp_path, caplog):
    _synthetic_run(tmp_path / "a", 0, {10: 1.0, 20: 3.0, 30: 5.0, 40: 7.0})
    _synthetic_run(tmp_path / "b", 1, {10: 3.0, 25: 6.0})
    with caplog.at_level(logging.WARNING, logger="cadence.plot"):
        (line,) = plot_runs([str(tmp_path)], tmp_path / "c.png", metric="m")
    assert line.curve.x.tolist() == [10.0, 20.0, 25.0]
    assert line.curve.mean.tolist() == [2.0, 4.0, 5.0]  # run a at 25 interpolates to 4
    assert "drawn up to env_steps 25, where the m of" in caplog.text
    assert line.label == "demo (2 seeds)"


def test_seeds_without_a_common_range_are_refused(tmp_path):
    _synthetic_run(tmp_path / "a", 0, {10: 1.0, 20: 3.0})
    _synthetic_run(tmp_path / "b", 1, {30: 3.0, 40: 6.0})
    with pytest.raises(PlotError, match="share no range of wall_time.*--x env_steps"):
        plot_runs([str(tmp_path)], tmp_path / "c.png", metric="m", x="wall_time")


def test_runs_sharing_a_seed_are_drawn_counted_as_runs_with_a_warning(tmp_path, caplog, capsys):
    # Three directories of seed 0 (e.g. one config trained under three roots): all drawn,
    # but the label does not call them 3 seeds, and the warning names them.
    for name, value in (("a", 1.0), ("b", 1.0), ("c", 4.0)):
        _synthetic_run(tmp_path / name, 0, {10: value, 20: value})
    _synthetic_run(tmp_path / "d", 1, {10: 2.0, 20: 2.0})
    with caplog.at_level(logging.WARNING, logger="cadence.plot"):
        (line,) = plot_runs([str(tmp_path)], tmp_path / "c.png", metric="m")
    assert line.label == "demo (4 runs, 2 seeds)" and line.curve.num_runs == 4
    assert line.curve.mean.tolist() == [2.0, 2.0]
    names = ", ".join(str(tmp_path / name) for name in "abc")
    assert f"demo (4 runs, 2 seeds): 3 runs share seed 0 ({names})" in caplog.text
    assert main(["plot", str(tmp_path), "--metric", "m", "--out", str(tmp_path / "c.png")]) == 0
    assert "demo (4 runs, 2 seeds): m 2" in capsys.readouterr().out


def test_a_run_without_metrics_yet_is_left_out_with_a_warning(runs, tmp_path, caplog):
    fresh = tmp_path / "fresh"  # a run that has just started: no iteration logged yet
    fresh.mkdir()
    (fresh / "config.yaml").write_text("name: ppo_cartpole\nseed: 7\n")
    with caplog.at_level(logging.WARNING, logger="cadence.plot"):
        curves = plot_runs([str(runs / "net0" / "*"), str(fresh)], tmp_path / "a.png")
    assert [len(curve.runs) for curve in curves] == [2]
    assert "left out 1 run(s) without metrics yet (a run logs" in caplog.text
    assert str(fresh) in caplog.text
