"""The multi-process learner (docs/ddp.md): 2 gloo ranks of E envs train PPO as 1 process
of 2E envs does; rank 0 writes, every rank's part is checkpointed; a signal to one rank
pre-empts the group, which resumes exactly; a rank that dies stops the others."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from cadence.config import load_config
from cadence.testing.resume import (
    assert_equal_nests,
    cli_train_command,
    comparable_metrics,
    final_state,
)
from cadence.trainer.checkpoint import STATE_FILE, latest_iteration
from cadence.trainer.launch import GroupStore
from cadence.trainer.metrics import read_metrics

# One rank of a group (or one process): trains the config in argv[1] with deterministic
# rollouts. Sampled actions cannot match between the two set-ups (one torch generator
# over 2E envs vs one per rank over E), so the rollout acts with the policy's mode; all
# else (env seeds, advantages, normaliser, gradients, loss means) is as in training.
_RANK_SCRIPT = """
import faulthandler
import os
import sys
import torch
from cadence.collect import unroll
from cadence.config import from_yaml
from cadence.trainer.run import train

original = unroll.Collector.unroll
seen_threads = set()

def thread_names():  # Linux
    if not os.path.isdir("/proc/self/task"):
        return []
    return [open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")]

def deterministic_unroll(self, policy=None):
    seen_threads.update(thread_names())
    self.agent_info = {"deterministic": torch.ones(self.env.batch_size, dtype=torch.bool)}
    return original(self, policy)

faulthandler.enable()  # a rank that aborts says where
unroll.Collector.unroll = deterministic_unroll
train(from_yaml(open(sys.argv[1]).read()))
# The group is gone with its gloo threads (one left running may abort the interpreter's
# exit); seen while training, they are known by name.
if int(os.environ.get("WORLD_SIZE", "1")) > 1 and os.path.isdir("/proc/self/task"):
    assert "pt_gloo_runloop" in seen_threads, f"no gloo thread seen: {seen_threads}"
    names = thread_names()
    assert "pt_gloo_runloop" not in names, f"the process group outlived train(): threads {names}"
"""

ITERATIONS = 4
UNROLL = 16


def _config_file(tmp_path: Path, name: str, num_ranks: int, num_envs: int) -> Path:
    config = load_config(
        "ppo_cartpole",
        [
            f"env.num_envs={num_envs}",
            f"trainer.num_ranks={num_ranks}",
            f"trainer.unroll_length={UNROLL}",
            f"trainer.num_env_steps={ITERATIONS * UNROLL * 8}",
            "trainer.eval_interval=0",
            "trainer.num_eval_episodes=1",
            "trainer.checkpoint_interval=0",
            "trainer.progress_bar=off",
            "algorithm.mini_batch_size=100000",  # one full-batch minibatch per epoch
            "algorithm.num_updates_per_train_iter=2",
            "data_transformers.names=[observation_normalizer]",
            "seed=3",
        ],
        root_dir=tmp_path / name,
    )
    path = tmp_path / f"{name}.yaml"
    path.write_text(config.to_yaml())
    return path


def _start(config_file: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _RANK_SCRIPT, str(config_file)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _wait_all(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err.decode()[-3000:]


def _rank_state(run_dir: Path, rank: int) -> dict:
    path = run_dir / "checkpoints" / f"{latest_iteration(run_dir / 'checkpoints'):08d}"
    return torch.load(path / f"rank_{rank}" / STATE_FILE, weights_only=True)


def test_two_gloo_ranks_of_e_envs_train_ppo_as_one_process_of_2e_envs(tmp_path):
    with GroupStore(2, timeout_s=120) as store:
        group_config = _config_file(tmp_path, "group", 2, 4)
        group = [_start(group_config, store.rank_environment(r)) for r in range(2)]
        single = _start(_config_file(tmp_path, "single", 1, 8), dict(os.environ))
        _wait_all([*group, single])
    got, want = final_state(tmp_path / "group"), final_state(tmp_path / "single")
    assert got["counters"]["env_steps"] == want["counters"]["env_steps"] == ITERATIONS * UNROLL * 8
    assert got["counters"]["num_episodes"] == want["counters"]["num_episodes"] > 0
    for key, value in want["algorithm"].items():
        if isinstance(value, torch.Tensor):
            torch.testing.assert_close(got["algorithm"][key], value, rtol=1e-4, atol=1e-5)
    adam = want["algorithm"]["optim/actor_critic"]["state"]
    for index, moments in adam.items():
        for name in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(
                got["algorithm"]["optim/actor_critic"]["state"][index][name],
                moments[name],
                rtol=1e-3,
                atol=1e-8,
            )
    # The normaliser's statistics are those of all 8 envs, on each rank.
    rank1 = _rank_state(tmp_path / "group", 1)
    for stats in (got["data_transformers"], rank1["data_transformers"]):
        for key, value in want["data_transformers"].items():
            torch.testing.assert_close(stats[key], value, rtol=1e-9, atol=1e-9)
    # The ranks stay in step exactly: same parameters and optimizer state on both.
    assert_equal_nests(rank1["algorithm"], got["algorithm"], "rank 1 vs rank 0")
    # Only rank 0 wrote the run directory, and rank 1 kept its own environments.
    assert not (tmp_path / "group" / "rank_1").exists()
    assert not torch.equal(
        rank1["collector"]["time_step"]["observation"],
        got["collector"]["time_step"]["observation"],
    )


def test_a_world_size_that_disagrees_with_the_config_is_refused(tmp_path):
    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}
    command = cli_train_command("ppo_cartpole", tmp_path / "run", ["trainer.num_ranks=3"])
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "trainer.num_ranks=3 but torchrun started 2 ranks" in result.stderr
    assert not (tmp_path / "run").exists()


MUST_SHOW_OVERRIDES = [
    "trainer.num_env_steps=20480",  # 40 iterations of 2 ranks x 8 envs x 32 steps
    "trainer.checkpoint_interval=4",
    "trainer.eval_interval=8",
    "trainer.num_eval_episodes=3",
    "trainer.progress_bar=off",
    "seed=5",
]


def _group_command(root: Path) -> list[str]:
    return [*cli_train_command("ppo_cartpole", root, MUST_SHOW_OVERRIDES), "--nproc", "2"]


def _rank_pids(launcher: subprocess.Popen) -> list[int]:
    children = Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children")
    return [int(pid) for pid in children.read_text().split()]


@pytest.mark.slow
def test_sigterm_to_one_rank_preempts_the_group_which_resumes_exactly(tmp_path):
    """The must-show of issue 17: SIGTERM to rank 1 of a 2-rank ppo_cartpole run; both
    ranks checkpoint the same iteration and exit 0; the same command resumes to the end,
    equal to an uninterrupted 2-rank run."""
    reference = tmp_path / "uninterrupted"
    subprocess.run(_group_command(reference), check=True, capture_output=True, timeout=600)
    root = tmp_path / "preempted"
    launcher = subprocess.Popen(
        _group_command(root), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 300
    while len(read_metrics(root)) < 10:  # mid-run, past the checkpoint of iteration 8
        assert launcher.poll() is None, launcher.communicate()[1].decode()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.kill(_rank_pids(launcher)[1], signal.SIGTERM)
    out, err = launcher.communicate(timeout=300)
    assert launcher.returncode == 0, err.decode()[-3000:]
    assert b"preempted" in out
    stopped_at = latest_iteration(root / "checkpoints")
    assert 10 <= stopped_at < 40 and not (root / "COMPLETE").exists()
    checkpoint = root / "checkpoints" / f"{stopped_at:08d}"
    assert (checkpoint / "rank_1" / STATE_FILE).is_file()
    subprocess.run(_group_command(root), check=True, capture_output=True, timeout=600)
    assert (root / "COMPLETE").exists()
    assert comparable_metrics(read_metrics(root)) == comparable_metrics(read_metrics(reference))
    state, want = final_state(root), final_state(reference)
    assert_equal_nests(state["algorithm"], want["algorithm"], "algorithm")
    assert_equal_nests(_rank_state(root, 1)["rng"], _rank_state(reference, 1)["rng"], "rank 1")


def test_a_rank_that_dies_stops_the_group_with_an_error(tmp_path):
    root = tmp_path / "run"
    overrides = [o for o in MUST_SHOW_OVERRIDES if "checkpoint_interval" not in o]
    command = [*cli_train_command("ppo_cartpole", root, overrides), "--nproc", "2"]
    launcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while not (root / "metrics.jsonl").exists() or not (root / "metrics.jsonl").read_text():
        assert launcher.poll() is None, launcher.communicate()[1].decode()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.kill(_rank_pids(launcher)[1], signal.SIGKILL)
    _, err = launcher.communicate(timeout=200)
    assert launcher.returncode == 1
    assert "rank 1 was killed by SIGKILL" in err.decode()


def _rank1_with_replay(run_dir: Path) -> dict:
    """Rank 1's part of the latest checkpoint, its replay buffer read from its chunk files."""
    from cadence.replay.persistence import snapshot_state
    from cadence.trainer.checkpoint import CheckpointManager

    manager = CheckpointManager(run_dir / "checkpoints")
    path = manager.latest()
    files = manager.verify(path)
    state = torch.load(path / "rank_1" / STATE_FILE, weights_only=True)
    prefix = "rank_1/data/"
    digests = {k.removeprefix(prefix): v for k, v in files.items() if k.startswith(prefix)}
    state["scheme"]["replay_buffer"] = snapshot_state(path / "rank_1" / "data", digests)
    return state


@pytest.mark.slow
def test_an_off_policy_group_keeps_a_replay_buffer_per_rank_and_resumes_exactly(tmp_path):
    overrides = [
        "trainer.num_env_steps=8192",  # 16 iterations of 2 ranks x 8 envs x 32 steps
        "trainer.checkpoint_interval=4",
        "trainer.eval_interval=4",
        "trainer.num_eval_episodes=2",
        "trainer.progress_bar=off",
    ]

    def command(root: Path) -> list[str]:
        return [*cli_train_command("dqn_cartpole", root, overrides), "--nproc", "2"]

    reference = tmp_path / "uninterrupted"
    subprocess.run(command(reference), check=True, capture_output=True, timeout=600)
    root = tmp_path / "preempted"
    launcher = subprocess.Popen(command(root), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while len(read_metrics(root)) < 6:
        assert launcher.poll() is None, launcher.communicate()[1].decode()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.kill(_rank_pids(launcher)[0], signal.SIGUSR1)
    _, err = launcher.communicate(timeout=300)
    assert launcher.returncode == 0, err.decode()[-3000:]
    assert not (root / "COMPLETE").exists()
    assert (root / "replay_rank_1").is_dir()  # rank 1 streams its own buffer's chunks
    subprocess.run(command(root), check=True, capture_output=True, timeout=600)
    assert comparable_metrics(read_metrics(root)) == comparable_metrics(read_metrics(reference))
    state, want = final_state(root), final_state(reference)
    assert_equal_nests(state["algorithm"], want["algorithm"], "algorithm")
    assert_equal_nests(state["scheme"], want["scheme"], "rank 0's replay")
    rank1, rank1_want = _rank1_with_replay(root), _rank1_with_replay(reference)
    assert_equal_nests(rank1["scheme"], rank1_want["scheme"], "rank 1's replay")
    assert_equal_nests(rank1["algorithm"], state["algorithm"], "rank 1's networks vs rank 0's")
    # The two ranks' buffers hold different envs' experience.
    observations = [
        part["scheme"]["replay_buffer"]["storage"]["fields"]["time_step/observation"]
        for part in (rank1, state)
    ]
    assert not torch.equal(*observations)


_PLAIN_SCRIPT = """
import sys
import cadence

config = cadence.load_config("ppo_cartpole", sys.argv[2:], root_dir=sys.argv[1])
print("outcome", cadence.train(config))
"""


@pytest.mark.slow  # ~15 s: three processes import torch
@pytest.mark.ci_budget
def test_cadence_train_of_a_multi_rank_config_from_a_plain_script_starts_the_ranks(tmp_path):
    """As `cadence train` does; the script has no __main__ guard and runs once."""
    script = tmp_path / "plain.py"
    script.write_text(_PLAIN_SCRIPT)
    overrides = [
        "trainer.num_ranks=2",
        "env.num_envs=2",
        "trainer.unroll_length=8",
        "trainer.num_env_steps=64",
        "trainer.eval_interval=0",
        "trainer.num_eval_episodes=1",
        "trainer.progress_bar=off",
    ]
    run = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, str(script), str(run), *overrides],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("outcome") == 1 and "outcome complete" in result.stdout
    assert (run / "COMPLETE").exists()
    assert (_rank_state(run, 1)["counters"]["env_steps"]) == 64
