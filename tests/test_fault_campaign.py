"""`benchmarks/fault_campaign.py` and its `fault_tools.py`: the helpers judge what they
should, and the quick campaign (real ``cadence train`` processes killed, pre-empted and
fed damaged files) loses nothing."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPT = BENCHMARKS / "fault_campaign.py"


@pytest.fixture(scope="module")
def campaign():
    """The script as a module (it imports its sibling `fault_tools` by name, as when run)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("fault_campaign")
    finally:
        sys.path.remove(str(BENCHMARKS))
        sys.modules.pop("fault_campaign", None)
        sys.modules.pop("fault_tools", None)


@pytest.fixture(scope="module")
def tools(campaign):
    return sys.modules["fault_tools"]


def _rows(*iterations):
    return [{"iteration": i, "env_steps": 10 * i} for i in iterations]


def test_flip_byte_changes_exactly_the_middle_byte(tools, tmp_path):
    path = tmp_path / "state.pt"
    path.write_bytes(bytes(range(10)))
    assert tools.flip_byte(path) == 5
    data = path.read_bytes()
    assert data[5] == 5 ^ 0xFF
    assert data[:5] + data[6:] == bytes(range(10))[:5] + bytes(range(10))[6:]
    tools.flip_byte(path)
    assert path.read_bytes() == bytes(range(10))


def test_truncate_file_halves_it(tools, tmp_path):
    path = tmp_path / "MANIFEST.json"
    path.write_bytes(b"x" * 11)
    assert tools.truncate_file(path) == 5
    assert path.read_bytes() == b"x" * 5


def test_metrics_problems_accepts_exactly_the_expected_rows(tools):
    assert tools.metrics_problems(_rows(1, 2, 3), [1, 2, 3]) == []


@pytest.mark.parametrize(
    ("iterations", "problem"),
    [
        ((1, 2, 2, 3), "iterations logged twice: 2"),
        ((1, 3), "iterations missing: 2"),
        ((1, 3, 2), "iterations out of order"),
        ((1, 2, 3, 4), "iterations not in the uninterrupted run: 4"),
    ],
)
def test_metrics_problems_names_each_defect(tools, iterations, problem):
    assert problem in tools.metrics_problems(_rows(*iterations), [1, 2, 3])


def test_file_kinds_come_from_listing_the_run(tools, tmp_path):
    checkpoints = tmp_path / "checkpoints"
    for name in ("00000003", "00000006"):
        (checkpoints / name).mkdir(parents=True)
        (checkpoints / name / "state.pt").write_bytes(b"s")
        (checkpoints / name / "MANIFEST.json").write_bytes(b"m")
    (checkpoints / "LATEST").write_text("00000006 abc\n")
    (tmp_path / "replay" / "chunks").mkdir(parents=True)
    for i in range(3):
        (tmp_path / "replay" / "chunks" / f"{i:06d}.npz").write_bytes(b"c")
    (tmp_path / "replay" / "MANIFEST.json").write_bytes(b"r")
    for log in ("metrics.jsonl", "config.yaml", "snapshot.tar.gz"):
        (tmp_path / log).write_bytes(b"l")
    (tmp_path / "tb").mkdir()
    (tmp_path / "tb" / "events.out").write_bytes(b"t")
    (tmp_path / "videos").mkdir()  # a model-based run's imagination videos: outputs too
    (tmp_path / "videos" / "video_model-64.mp4").write_bytes(b"v")
    kinds = tools.corruptible_files(tmp_path)
    assert sorted(kinds) == [
        "checkpoints/LATEST",
        "checkpoints/N/MANIFEST.json",
        "checkpoints/N/state.pt",
        "replay/MANIFEST.json",
        "replay/chunks/N.npz",
    ]
    assert kinds["checkpoints/N/state.pt"] == [checkpoints / "00000006" / "state.pt"]
    assert len(kinds["replay/chunks/N.npz"]) == 3


def test_a_file_counts_as_named_only_with_what_identifies_it(tools, tmp_path):
    for name in ("00000003", "00000006"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "state.pt").write_bytes(b"s")
    (tmp_path / "LATEST").write_text("x")
    state = tmp_path / "00000006" / "state.pt"
    assert "state.pt" not in tools.identifying_names(state, tmp_path)
    assert "00000006/state.pt" in tools.identifying_names(state, tmp_path)
    assert "LATEST" in tools.identifying_names(tmp_path / "LATEST", tmp_path)


def test_resumed_iteration_reads_the_trainers_log(tools):
    output = (
        "12:00:01 cadence.trainer.trainer: resumed from /r/checkpoints/00000006 (iteration 6)\n"
    )
    assert tools.resumed_iteration(output) == 6
    assert tools.resumed_iteration("fresh start\n") == 0


def test_redone_work_beyond_the_allowance_is_lost(campaign):
    result = campaign.Result("c", "sigkill", 0)
    campaign.check_redone(result, logged=9, resumed=6, allowed=3, why="one interval")
    assert result.lost == []
    campaign.check_redone(result, logged=10, resumed=6, allowed=3, why="one interval")
    assert result.lost and "10" in result.lost[0]


def test_summary_counts_and_marks_what_does_not_apply(campaign):
    ok = campaign.Result("c", "sigkill", 0, landed=True, finished=True, equal=True, wall_s=2)
    bad = campaign.Result("c", "sigkill", 1, finished=True, equal=False, lost=["x"], wall_s=3)
    na = campaign.Result("c", "worker-hang", 0, skipped="n/a (FaultyEnv not available)")
    rows = campaign.summarize([ok, bad, na])
    assert rows[0] | {"notes": ""} == {
        "config": "c",
        "fault": "sigkill",
        "skipped": "",
        "attempts": 2,
        "landed": 1,
        "finished": 2,
        "equal": "1/2",
        "lost": 1,
        "named": None,
        "wall_s": 5,
        "notes": "",
    }
    assert rows[1]["skipped"] == "n/a (FaultyEnv not available)"
    table = campaign.format_table(rows)
    assert "worker-hang  n/a (FaultyEnv not available)" in table


def test_the_attempts_choices_depend_on_the_seed_alone(campaign):
    reference = campaign.Reference(Path("r"), [], 10.0, 4.0, 8.0, list(range(1, 33)), [], {})
    faults = [
        campaign.draw_signal_fault(kind, campaign.Campaign(Path("w"), 0, {}).rng("c", kind, 3),
                                   reference, 3)
        for kind in ("sigkill", "sigkill")
    ]  # fmt: skip
    assert faults[0] == faults[1]
    moments = [
        campaign.draw_signal_fault("sigterm", random.Random(i), reference, 3) for i in range(200)
    ]
    during_startup = [f for f in moments if f.after_row is None]
    assert during_startup and all(0 <= f.at_s <= 4.0 for f in during_startup)
    rows = {f.after_row for f in moments if f.after_row is not None}
    assert rows <= set(range(1, 33)) and {1, 31, 32} <= rows
    between_rows = [f for f in moments if f.after_row is not None and f.after_row < 32]
    assert all(0 <= f.delay_s <= (8.0 - 4.0) / 31 for f in between_rows)  # the rows' pace
    assert all(0 <= f.delay_s <= 10.0 - 8.0 for f in moments if f.after_row == 32)  # the exit
    staged = campaign.draw_signal_fault(
        "sigkill-checkpoint", campaign.Campaign(Path("w"), 0, {}).rng("c", "k", 0), reference, 3
    )
    assert 1 <= staged.staging <= 10 and 0 <= staged.delay_s <= 0.04


def test_a_fault_between_rows_follows_the_live_runs_pace(campaign, tools):
    reference = campaign.Reference(Path("r"), [], 10.0, 1.5, 2.0, list(range(1, 9)), [], {})
    moments = [campaign.draw_signal_fault("sigkill", random.Random(i), reference, 2) for i in range(50)]  # fmt: skip
    between = [f for f in moments if f.after_row is not None and f.after_row < 8]
    assert between and all(f.row_fraction is not None for f in between)
    assert all(f.row_fraction is None for f in moments if f.after_row == 8)  # the exit's own
    fault = tools.Fault(9, after_row=5, delay_s=0.07, row_fraction=0.5)
    # A live run four times slower than the reference: 0.4 s from iteration 3's row to 5's.
    assert tools._row_delay(fault, [(3, 10.0), (5, 10.4)]) == pytest.approx(0.1)
    assert tools._row_delay(fault, [(5, 10.4)]) == 0.07  # one row seen: the reference's
    assert tools._row_delay(tools.Fault(9, after_row=5, delay_s=0.07), [(3, 10.0), (5, 10.4)]) == 0.07  # fmt: skip


def test_a_reference_that_measured_auto_is_told_from_one_that_read_the_record(campaign):
    measured = [
        "cadence.accel.update_compiler: compile=auto: SACAlgorithm.update_step: eager "
        "23.078 ms, compiled 0.508 ms per call: compiled",
        "cadence.accel.unroll_compiler: compile=auto: the unroll: eager 43.54 ms, compiled "
        "6.23 ms: compiled",
    ]
    read = "compile=auto: SACAlgorithm.update_step: compiled, as first measured on this machine"
    assert all(campaign.AUTO_MEASURED.search(line) for line in measured)
    assert not campaign.AUTO_MEASURED.search(read)


def test_a_short_runs_long_exit_does_not_push_its_faults_past_the_end(campaign):
    # 8 iterations in half a second, then 8 s of final save and interpreter exit: a moment
    # between rows must be a fraction of the rows' pace, not of the whole tail's.
    reference = campaign.Reference(Path("r"), [], 10.0, 1.5, 2.0, list(range(1, 9)), [], {})
    moments = [
        campaign.draw_signal_fault("sigkill", random.Random(i), reference, 2) for i in range(200)
    ]
    between_rows = [f for f in moments if f.after_row is not None and f.after_row < 8]
    assert len(between_rows) > 100 and all(f.delay_s <= 0.5 / 7 for f in between_rows)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_ci_budget_quick_fault_campaign_loses_nothing(tmp_path):
    """The quick campaign on the on-policy config: SIGKILL at a random moment and during
    a checkpoint write, SIGTERM, every kind of damaged file, and a worker's death
    (n/a without FaultyEnv); ~3 minutes on 2 idle cores."""
    report = tmp_path / "report.json"
    kinds = ["sigkill", "sigkill-checkpoint", "sigterm", "flip", "truncate", "worker-exit"]
    result = subprocess.run(
        [
            sys.executable, str(SCRIPT), "--quick", "--attempts", "1", "--configs",
            "ppo_cartpole", "--kinds", *kinds, "--workdir", str(tmp_path / "runs"),
            "--json", str(report),
        ],
        capture_output=True,
        text=True,
        timeout=850,
        env={**os.environ, "PYTHONPATH": str(SCRIPT.parents[1])},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    rows = {row["fault"]: row for row in json.loads(report.read_text())["rows"]}
    ran = [row for row in rows.values() if not row["skipped"]]
    assert all(row["finished"] == row["attempts"] and row["lost"] == 0 for row in ran), ran
    for kind in ("checkpoints/N/state.pt", "checkpoints/N/MANIFEST.json", "checkpoints/LATEST"):
        for damage in ("flip", "truncate"):
            row = rows[f"{damage} {kind}"]
            assert row["attempts"] == 1 and row["named"] == 1, row
    assert rows["sigkill"]["equal"] == "1/1" and rows["sigterm"]["equal"] == "1/1"
    assert "total wall time" in result.stdout


def test_last_logged_iteration_skips_a_torn_last_line(tools, tmp_path):
    assert tools.last_logged_iteration(tmp_path) == 0
    (tmp_path / "metrics.jsonl").write_text('{"iteration": 1}\n')
    assert tools.last_logged_iteration(tmp_path) == 1
    (tmp_path / "metrics.jsonl").write_text('{"iteration": 1}\n{"iteration": 2}\n{"itera')
    assert tools.last_logged_iteration(tmp_path) == 2
    assert tools.torn_lines(tmp_path) == 1


def test_configs_all_takes_every_named_config_cpu_sized(campaign, tmp_path):
    from cadence.config import list_configs

    args = campaign.parse_args(["--configs", "all", "--workdir", str(tmp_path)])
    assert args.configs == sorted(list_configs())
    spec = campaign.CONFIGS["dreamer_pendulum_pixels"]
    assert spec.checkpoint_interval == 2 and spec.worker_overrides is None
    assert "trainer.num_threads=1" in spec.overrides
    # The tuned entries keep their own overrides.
    assert "trainer.checkpoint_interval=3" in campaign.CONFIGS["ppo_cartpole"].overrides
    with pytest.raises(SystemExit, match="ppo_cartpol"):
        campaign.parse_args(["--configs", "ppo_cartpol", "--workdir", str(tmp_path)])
