"""Collection throughput with a policy: the `Batcher` vs TorchRL's collector and Gymnasium.

Env steps per second of whole acquisitions (``T`` steps of every env, the policy
acting at every step, the steps handed to the caller) with one small policy on every
side: an MLP ``obs -> 64 -> tanh -> 64 -> tanh -> actions`` built from the same seed,
acting greedily (argmax for a discrete action, ``tanh`` of the output for a
continuous one), torch on the CPU with one thread in every process. Columns:

- ``batcher 1x16``, ``batcher 2x16``: `cadence.collect.Batcher` with 1 and 2 worker
  processes of 16 envs (``make_gym_env``), continuing mode; a round is
  ``execute()`` + ``get()``, and the steps counted are the segments' lengths;
- ``ray 2x16``: the same with ``backend="ray"`` (2 Ray actors), where Ray is
  installed and the Batcher has that back end;
- ``unroll x32``: cadence's own in-process collection, the trainer's `Collector`
  unrolling 32 envs of ``make_env(backend="auto")`` (the back end ``cadence train``
  gets; the notes say which);
- ``torchrl 2x16``: TorchRL's ``MultiSyncCollector`` over 2 workers, each a
  ``SerialEnv`` of 16 ``GymEnv``\\ s (`benchmarks/peers/torchrl_collector.py`, run in
  TorchRL's own virtual environment, driven round by round over a pipe);
- ``replay mlp 2x16``, ``replay gru 2x16``: the learner's side of rlstructures' loop
  on one acquisition of the ``batcher 2x16`` shape, `replay_agent` with autograd on
  and a REINFORCE loss's backward (a log-likelihood of the actions taken, masked),
  for the policy's MLP (stateless: one batched call) and for a GRU of 64 before its
  head (state: step by step); the steps counted are the segments' lengths, so these
  compare with the acquisition's env steps/s (the bars: >= 1x and >= 0.5x);
- ``gym async x32``: the loop a Gymnasium user writes, an ``AsyncVectorEnv`` of 32
  envs (one process each: it cannot put several envs in a process) with the policy
  in the parent, storing observations, actions, rewards and dones in preallocated
  tensors; ``gym sync x32``: the same loop over a ``SyncVectorEnv`` (every env in the
  parent), which on few cores and cheap envs is the faster of the two. These count
  every step they take, Gymnasium's autoreset steps included (an env whose episode
  ended spends its next step resetting, that step's action ignored), which flatters
  them where episodes are short; the other columns reset within the step that ends
  an episode.

Every column is built and warmed up first, then timed in ``--repeats`` interleaved
rounds and its median round kept, so that load from other processes falls on every
column of a row alike; the ratios compare columns of one row. On a machine shared with
other jobs, compare ratios, not absolute rates, and repeat a run that looks noisy.

TorchRL runs in ``.venvs/torchrl``; make it with ``bash benchmarks/peer_env.sh`` (without
it, that column reads n/a). Run::

    python benchmarks/batcher_throughput.py            # the full table, about 2 minutes
    python benchmarks/batcher_throughput.py --quick    # a smoke run: 4 envs a process, short rounds
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from cadence.algorithms.algorithm import AlgStep
from cadence.collect import Agent, Batcher, Collector, make_gym_env, replay_agent, reset_where
from cadence.data import DictTensor
from cadence.envs import make_env

ROOT = Path(__file__).resolve().parents[1]
PEER = ROOT / "benchmarks" / "peers" / "torchrl_collector.py"
PEER_PYTHON = ROOT / ".venvs" / "torchrl" / "bin" / "python"
HIDDEN = 64


class NotAvailable(Exception):
    """A column that cannot run here; the message says why."""


# -- the policy --------------------------------------------------------------------------------


class GreedyPolicy(nn.Module):
    """The benchmark's MLP: ``[B, obs_dim]`` -> a greedy action ``[B]`` (discrete) or ``[B, A]``."""

    def __init__(self, obs_dim: int, action_dim: int, discrete: bool):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(obs_dim, HIDDEN),
            nn.Tanh(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.Tanh(),
            nn.Linear(HIDDEN, action_dim),
        )
        self.discrete = discrete

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        out = self.layers(observation.float())
        return out.argmax(-1) if self.discrete else torch.tanh(out)


@dataclass(frozen=True)
class PolicySpec:
    """What builds the same policy on every side: sizes and the seed of its weights."""

    obs_dim: int
    action_dim: int
    discrete: bool
    seed: int

    @classmethod
    def of(cls, name: str, seed: int) -> PolicySpec:
        env = gym.make(name)
        try:
            discrete = isinstance(env.action_space, gym.spaces.Discrete)
            action_dim = env.action_space.n if discrete else env.action_space.shape[0]
            return cls(env.observation_space.shape[0], int(action_dim), discrete, seed)
        finally:
            env.close()

    def build(self) -> GreedyPolicy:
        torch.manual_seed(self.seed)
        return GreedyPolicy(self.obs_dim, self.action_dim, self.discrete)


class GreedyAgent(Agent):
    """The policy as a `Batcher` agent (stateless; acts on the observation's ``frame``)."""

    def __init__(self, spec: PolicySpec):
        self.policy = spec.build()

    def __call__(self, state, observation, agent_info, history=None):
        return DictTensor({"action": self.policy(observation["frame"])}), state


class ReplayAgent(Agent):
    """The learner's agent of the replay columns: the MLP's raw output (``recurrent``: a GRU
    of ``HIDDEN`` on the frame, then the MLP on its state), as a REINFORCE loss reads it."""

    def __init__(self, spec: PolicySpec, recurrent: bool):
        torch.manual_seed(spec.seed)
        self.gru = nn.GRUCell(spec.obs_dim, HIDDEN) if recurrent else None
        self.head = spec.build().layers if self.gru is None else spec.build().layers[2:]

    def initial_state(self, agent_info, n_elems):
        if self.gru is None:
            return DictTensor({}, batch_size=n_elems)
        return DictTensor({"h": torch.zeros(n_elems, HIDDEN)})

    def __call__(self, state, observation, agent_info, history=None):
        frame = observation["frame"].float()
        if self.gru is None:
            return DictTensor({"out": self.head(frame)}), state
        initial = self.initial_state(agent_info, frame.shape[0])
        h = self.gru(frame, reset_where(state, initial, observation["initial_state"])["h"])
        return DictTensor({"out": self.head(h)}), DictTensor({"h": h})

    def parameters(self) -> list[nn.Parameter]:
        modules = [self.head] if self.gru is None else [self.gru, self.head]
        return [p for m in modules for p in m.parameters()]


class GreedyAlgorithm:
    """The policy as what `Collector` unrolls (its ``initial_state`` and ``rollout_step``)."""

    def __init__(self, spec: PolicySpec):
        self.policy = spec.build()

    def initial_state(self, batch_size: int) -> tuple:
        return ()

    def rollout_step(self, time_step, state, agent_info=()) -> AlgStep:
        return AlgStep(output=self.policy(time_step.observation))


# -- the columns -------------------------------------------------------------------------------


class Runner:
    """One column of a row: ``round()`` acquires once and says how many env steps, how fast."""

    def round(self) -> tuple[int, float]:
        start = time.perf_counter()
        steps = self.acquire()
        return steps, time.perf_counter() - start

    def acquire(self) -> int:
        raise NotImplementedError

    def close(self) -> None:
        pass


class BatcherRunner(Runner):
    """``execute()`` + ``get()`` of a `Batcher`; the steps are the segments' lengths."""

    def __init__(self, name: str, spec: PolicySpec, processes: int, envs: int, steps: int, **kw):
        self.batcher = Batcher(
            n_timesteps=steps,
            n_processes=processes,
            n_envs=envs,
            create_env=make_gym_env,
            env_args={"name": name},
            create_agent=GreedyAgent,
            agent_args={"spec": spec},
            seed=spec.seed,
            **kw,
        )
        self.batcher.reset()

    def acquire(self) -> int:
        self.batcher.execute()
        trajectories, _ = self.batcher.get()
        return int(trajectories.trajectories.lengths.sum())

    def close(self) -> None:
        self.batcher.close()


def ray_runner(name: str, spec: PolicySpec, processes: int, envs: int, steps: int) -> Runner:
    if "backend" not in inspect.signature(Batcher).parameters:
        raise NotAvailable("this Batcher has no backend= argument")
    try:
        import ray  # noqa: F401 - only whether it imports
    except ImportError as error:
        raise NotAvailable(f"Ray is not installed ({error})") from error
    return BatcherRunner(name, spec, processes, envs, steps, backend="ray")


class ReplayRunner(Runner):
    """`replay_agent` + a REINFORCE loss's backward over one acquisition of ``processes x envs``."""

    def __init__(self, name: str, spec: PolicySpec, processes: int, envs: int, steps: int, gru):
        acquisition = BatcherRunner(name, spec, processes, envs, steps)
        try:
            acquisition.batcher.execute()
            trajectories, _ = acquisition.batcher.get()
        finally:
            acquisition.close()
        self.agent = ReplayAgent(spec, recurrent=gru)
        state = self.agent.initial_state(None, trajectories.n_elems()).prepend_key("agent_state/")
        self.trajectories = type(trajectories)(trajectories.info + state, trajectories.trajectories)
        self.spec = spec

    def acquire(self) -> int:
        steps = self.trajectories.trajectories
        out = replay_agent(self.agent, self.trajectories)["out"]
        action = steps["action/action"]
        if self.spec.discrete:
            log_prob = torch.log_softmax(out, -1).gather(-1, action[..., None])[..., 0]
        else:
            log_prob = -(out - action).pow(2).sum(-1)
        loss = -(log_prob * steps["_observation/reward"] * steps.mask()).sum()
        loss.backward()
        for parameter in self.agent.parameters():
            parameter.grad = None
        return int(steps.lengths.sum())


class UnrollRunner(Runner):
    """cadence's trainer collection: `Collector.unroll` over ``make_env(backend=...)``."""

    def __init__(self, name: str, spec: PolicySpec, envs: int, steps: int, backend: str):
        self.env = make_env(name, envs, backend, seed=spec.seed)
        self.backend = type(self.env).__name__
        self.collector = Collector(self.env, GreedyAlgorithm(spec), unroll_length=steps)

    def acquire(self) -> int:
        self.collector.unroll()
        return self.collector.num_env_steps_per_unroll

    def close(self) -> None:
        self.env.close()


class GymVectorRunner(Runner):
    """A Gymnasium user's loop: a vector env, the policy in this process, stored steps."""

    def __init__(self, name: str, spec: PolicySpec, envs: int, steps: int, asynchronous: bool):
        vector = gym.vector.AsyncVectorEnv if asynchronous else gym.vector.SyncVectorEnv
        self.env = vector([lambda: gym.make(name)] * envs)
        self.policy = spec.build()
        self.steps = steps
        obs, _ = self.env.reset(seed=spec.seed)
        self.obs = torch.as_tensor(obs)
        action_shape = () if spec.discrete else (spec.action_dim,)
        self.buffers = {
            "obs": torch.zeros(steps, envs, spec.obs_dim),
            "action": torch.zeros(
                steps, envs, *action_shape, dtype=torch.int64 if spec.discrete else torch.float32
            ),
            "reward": torch.zeros(steps, envs),
            "done": torch.zeros(steps, envs, dtype=torch.bool),
        }

    @torch.no_grad()
    def acquire(self) -> int:
        buffers = self.buffers
        for t in range(self.steps):
            action = self.policy(self.obs)
            buffers["obs"][t] = self.obs
            buffers["action"][t] = action
            obs, reward, terminated, truncated, _ = self.env.step(action.numpy())
            self.obs = torch.as_tensor(obs)
            buffers["reward"][t] = torch.as_tensor(reward)
            buffers["done"][t] = torch.as_tensor(np.logical_or(terminated, truncated))
        return self.steps * self.env.num_envs

    def close(self) -> None:
        self.env.close()


class TorchRLRunner(Runner):
    """TorchRL's collector in its own venv (`benchmarks/peers/torchrl_collector.py`)."""

    def __init__(self, name: str, spec: PolicySpec, workers: int, envs: int, steps: int):
        if not PEER_PYTHON.exists():
            raise NotAvailable(f"no TorchRL venv at {PEER_PYTHON}: bash benchmarks/peer_env.sh")
        command = [str(PEER_PYTHON), str(PEER), "--env", name, "--workers", str(workers)]
        command += ["--envs", str(envs), "--steps", str(steps), "--seed", str(spec.seed)]
        # A file, not a pipe: warnings nobody reads would fill a pipe and stall the peer.
        self.log = tempfile.TemporaryFile("w+")
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )

    def wait_ready(self, timeout_s: float = 300.0) -> str:
        """Waits for the peer to be built and warmed up; its TorchRL version."""
        started, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        line = self.process.stdout.readline() if started else f"no answer in {timeout_s:g} s"
        if not line.startswith("ready"):
            self.process.kill()
            error = self.stderr_tail().strip().splitlines() or [line.strip()]
            raise NotAvailable(f"the TorchRL peer failed to start: {error[-1]}")
        return line.split(maxsplit=1)[1].strip()

    def round(self) -> tuple[int, float]:
        self.process.stdin.write("round\n")
        self.process.stdin.flush()
        reply = self.process.stdout.readline()
        if not reply:
            raise RuntimeError(f"the TorchRL peer died: {self.stderr_tail()}")
        result = json.loads(reply)
        return result["env_steps"], result["seconds"]

    def stderr_tail(self) -> str:
        self.process.wait(timeout=60)
        self.log.seek(0)
        return self.log.read()[-2000:]

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.communicate("quit\n", timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.communicate()
        self.log.close()


# -- the run -----------------------------------------------------------------------------------

COLUMNS = (
    "batcher 1x16",
    "batcher 2x16",
    "ray 2x16",
    "unroll x32",
    "replay mlp 2x16",
    "replay gru 2x16",
    "torchrl 2x16",
    "gym async x32",
    "gym sync x32",
)


@dataclass
class Setup:
    envs: int  # per process (the single-process columns run 2 x envs)
    steps: int  # per acquisition
    repeats: int
    warmup: int  # untimed acquisitions per column
    unroll_backend: str
    seed: int


def build_row(name: str, setup: Setup) -> tuple[dict[str, Runner], dict[str, str]]:
    """The runners of ``name``'s row, and a reason for each column that cannot run."""
    spec = PolicySpec.of(name, setup.seed)
    n, steps = setup.envs, setup.steps
    makers: dict[str, Callable[[], Runner]] = {
        "torchrl 2x16": lambda: TorchRLRunner(name, spec, 2, n, steps),  # first: it starts slowly
        "batcher 1x16": lambda: BatcherRunner(name, spec, 1, n, steps),
        "batcher 2x16": lambda: BatcherRunner(name, spec, 2, n, steps),
        "ray 2x16": lambda: ray_runner(name, spec, 2, n, steps),
        "unroll x32": lambda: UnrollRunner(name, spec, 2 * n, steps, setup.unroll_backend),
        "replay mlp 2x16": lambda: ReplayRunner(name, spec, 2, n, steps, gru=False),
        "replay gru 2x16": lambda: ReplayRunner(name, spec, 2, n, steps, gru=True),
        "gym async x32": lambda: GymVectorRunner(name, spec, 2 * n, steps, asynchronous=True),
        "gym sync x32": lambda: GymVectorRunner(name, spec, 2 * n, steps, asynchronous=False),
    }
    runners: dict[str, Runner] = {}
    missing: dict[str, str] = {}
    try:
        for column, make in makers.items():
            try:
                runners[column] = make()
            except NotAvailable as reason:
                missing[column] = str(reason)
        if isinstance(runners.get("torchrl 2x16"), TorchRLRunner):
            try:
                runners["torchrl 2x16"].wait_ready()
            except NotAvailable as reason:
                missing["torchrl 2x16"] = str(reason)
                runners.pop("torchrl 2x16").close()
    except BaseException:
        close_all(runners)
        raise
    return runners, missing


def measure_row(runners: dict[str, Runner], setup: Setup) -> dict[str, float]:
    """Median env steps/s of ``setup.repeats`` interleaved rounds of every column."""
    for runner in runners.values():
        for _ in range(setup.warmup):
            runner.round()
    rates: dict[str, list[float]] = {column: [] for column in runners}
    for _ in range(setup.repeats):
        for column, runner in runners.items():
            steps, seconds = runner.round()
            rates[column].append(steps / seconds)
    return {column: statistics.median(values) for column, values in rates.items()}


def close_all(runners: dict[str, Runner]) -> None:
    for runner in runners.values():
        runner.close()


def format_rate(rate: float | None) -> str:
    if rate is None:
        return "n/a"
    return f"{rate / 1e6:.2f}M" if rate >= 1e6 else f"{rate / 1e3:.1f}k"


def column_labels(envs: int) -> dict[str, str]:
    """The printed name of each column at ``envs`` per process (16 by default)."""
    return {c: c.replace("16", str(envs)).replace("32", str(2 * envs)) for c in COLUMNS}


@dataclass
class Bar:
    text: str
    value: float | None
    target: float

    def line(self) -> str:
        if self.value is None:
            return f"  SKIP  {self.text} (not measured in this run)"
        verdict = "PASS" if self.value >= self.target else "FAIL"
        return f"  {verdict}  {self.text:<48} {self.value:>6.2f}x  (bar >= {self.target:g}x)"


def ratio(rates: dict[str, float], top: str, bottom: str) -> float | None:
    if top not in rates or bottom not in rates:
        return None
    return rates[top] / rates[bottom]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--envs-names", nargs="+", default=["CartPole-v1", "HalfCheetah-v5"])
    parser.add_argument("--envs", type=int, default=16, help="envs per worker process")
    parser.add_argument("--steps", type=int, default=100, help="steps of every env per round")
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds; the median is kept")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds per column first")
    parser.add_argument(
        "--unroll-backend",
        default="auto",
        help="make_env back end of the unroll column (auto: what cadence train picks)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 4 envs a process, 3 rounds of 20 steps"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup = Setup(args.envs, args.steps, args.repeats, args.warmup, args.unroll_backend, args.seed)
    if args.quick:
        setup = Setup(4, 20, 3, 1, args.unroll_backend, args.seed)
    torch.set_num_threads(1)
    labels = column_labels(setup.envs)
    print(
        f"env steps/s of whole acquisitions of {setup.steps} steps, greedy MLP 2x{HIDDEN} tanh,"
        f" 1 torch thread a process, median of {setup.repeats} rounds | "
        f"{len(os.sched_getaffinity(0))} cores, load {os.getloadavg()[0]:.1f},"
        f" torch {torch.__version__}, gymnasium {gym.__version__}"
    )
    print(f"{'env':<16}" + "".join(f"{labels[c]:>17}" for c in COLUMNS), flush=True)
    table: dict[str, dict[str, float]] = {}
    notes: dict[str, str] = {}
    start = time.perf_counter()
    for name in args.envs_names:
        runners, missing = build_row(name, setup)
        try:
            table[name] = measure_row(runners, setup)
            unroll = runners.get("unroll x32")
            if isinstance(unroll, UnrollRunner):
                notes[f"{labels['unroll x32']}, {name}"] = f"make_env gave a {unroll.backend}"
        finally:
            close_all(runners)
        for column, reason in missing.items():
            notes.setdefault(labels[column], reason)
        print(f"{name:<16}" + "".join(f"{format_rate(table[name].get(c)):>17}" for c in COLUMNS))
    print(f"\n(total {time.perf_counter() - start:.0f} s, load {os.getloadavg()[0]:.1f})")
    for what, note in notes.items():
        print(f"  {what}: {note}")
    print_ratios(table, labels)
    print_bars(table, labels, setup.envs)
    return 0


def print_ratios(table: dict[str, dict[str, float]], labels: dict[str, str]) -> None:
    print("Ratios of columns of one row of this run:")
    top = "batcher 2x16"
    for name, rates in table.items():
        for other in COLUMNS:
            if other == top:
                continue
            value = ratio(rates, top, other)
            if value is not None:
                print(f"  {name:<16} {labels[top]} / {labels[other]:<16} {value:6.2f}x")


def print_bars(table: dict[str, dict[str, float]], labels: dict[str, str], envs: int) -> None:
    """The project's bars (issue 16), set at 2 processes x 16 envs on CartPole-v1."""
    print("Bars:")
    if envs != 16:
        print(f"  SKIP  the bars are set at 16 envs a process; this run has {envs}")
        return
    top = "batcher 2x16"
    cartpole = table.get("CartPole-v1", {})
    for other, text in (
        ("torchrl 2x16", "TorchRL's collector"),
        ("gym async x32", "AsyncVectorEnv"),
    ):
        bar = Bar(f"CartPole-v1 {labels[top]} / {text}", ratio(cartpole, top, other), 1.5)
        print(bar.line())
    for replay, target in (("replay mlp 2x16", 1.0), ("replay gru 2x16", 0.5)):
        bar = Bar(
            f"CartPole-v1 {labels[replay]} / {labels[top]}", ratio(cartpole, replay, top), target
        )
        print(bar.line())


if __name__ == "__main__":
    sys.exit(main())
