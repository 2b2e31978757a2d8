"""`CudaGraphReplay`'s bookkeeping, on the CPU with a stand-in for CUDA's graph capture.

The stand-in runs the recording call for real (CUDA only records it) and makes a replay
run the recorded call again on the graph's own inputs, writing into its own outputs, as
a replayed CUDA graph does, and undoing what that call rebinds in Python, which a replay
does not run. The GPU tests (`test_update_compiler.py`, ``-m gpu``) replay
real graphs of every algorithm's update.
"""

from __future__ import annotations

import contextlib
import copy
import logging

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from cadence.accel import cuda_graphs, update_compiler
from cadence.accel.compiled_function import CompiledWithFallback
from cadence.accel.cuda_graphs import CudaGraphReplay
from cadence.accel.update_compiler import UpdateCompiler, compile_update
from cadence.algorithms.ppo import PPOConfig, make_ppo
from cadence.config import load_config
from cadence.networks import NetworkConfig
from cadence.testing.resume import assert_close_states
from cadence.trainer.run import build_trainer
from tests.accel.test_unroll_compiler import _assert_same_unrolls, _specs, _unrolls
from tests.accel.test_update_compiler import _eager_and_compiled, assert_same_updates

_recording: list[_FakeGraph] = []


class _FakeGraph:
    def __init__(self):
        self.call = None
        self.outputs = None
        self.python_state = []  # objects whose attributes a replay must leave as they are

    def replay(self) -> None:
        # A CUDA graph replays kernels, not Python: attributes the recorded call rebound
        # stay as they were before the replay.
        attributes = [dict(vars(owner)) for owner in self.python_state]
        pairs = [(o, n) for o, n in zip(self.outputs, self.call(), strict=True) if o is not None]
        torch._foreach_copy_(*map(list, zip(*pairs, strict=True)))
        for owner, kept in zip(self.python_state, attributes, strict=True):
            vars(owner).clear()
            vars(owner).update(kept)


@contextlib.contextmanager
def _fake_capture(graph: _FakeGraph):
    _recording.append(graph)
    try:
        yield
    finally:
        _recording.pop()


class _Update:
    """A pure function of its inputs that counts its direct calls and, when recorded,
    tells the stand-in graph how to replay it."""

    def __init__(self, fails_to_record: bool = False):
        self.calls = 0
        self.forbid_compile = False
        self.fails_to_record = fails_to_record
        self.forbidden_while_recording = []

    def __call__(self, x: torch.Tensor, scale: float) -> dict[str, torch.Tensor]:
        if _recording:
            self.forbidden_while_recording.append(self.forbid_compile)
            if self.fails_to_record:
                raise RuntimeError("operation not permitted when stream is capturing")
            graph = _recording[-1]
            graph.call = lambda: list(self._compute(x, scale).values())
            graph.outputs = list(self._compute(x, scale).values())
            return dict(zip(("sum", "max"), graph.outputs, strict=True))
        self.calls += 1
        return self._compute(x, scale)

    @staticmethod
    def _compute(x: torch.Tensor, scale: float) -> dict[str, torch.Tensor]:
        return {"sum": (x * scale).sum(), "max": (x * scale).max()}


@pytest.fixture
def fake_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "CUDAGraph", _FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", _fake_capture)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: None)


def _signature(args):
    x, scale = args
    return tuple(x.shape), x.stride(), scale


def test_a_signature_is_recorded_after_its_warm_up_and_then_replayed(fake_cuda):
    update = _Update()
    replay = CudaGraphReplay(update, _signature, "update")
    results = []
    for k in range(cuda_graphs.WARMUP_CALLS + 3):
        x = torch.arange(6.0) + k
        results.append((x, replay(x, 2.0)))
    assert update.calls == cuda_graphs.WARMUP_CALLS  # the rest were recorded or replayed
    assert replay.num_graphs == 1 and replay.replays == 3
    assert update.forbidden_while_recording == [True] and not update.forbid_compile
    # Each result is the call's own, kept while later replays overwrite the graph's outputs.
    for x, result in results:
        torch.testing.assert_close(result["sum"], (2 * x).sum())
        torch.testing.assert_close(result["max"], (2 * x).max())


def test_each_signature_gets_its_graph_up_to_the_cap(fake_cuda, monkeypatch):
    monkeypatch.setattr(cuda_graphs, "MAX_GRAPHS", 2)
    update = _Update()
    replay = CudaGraphReplay(update, _signature, "update")
    for scale in (1.0, 2.0, 3.0):  # a non-tensor input: part of the signature
        for _ in range(cuda_graphs.WARMUP_CALLS + 2):
            result = replay(torch.ones(4), scale)
            torch.testing.assert_close(result["sum"], torch.tensor(4 * scale))
    assert replay.num_graphs == 2
    # The third signature ran directly every time.
    assert update.calls == 2 * cuda_graphs.WARMUP_CALLS + (cuda_graphs.WARMUP_CALLS + 2)


def test_recorded_inputs_keep_the_strides_of_the_call(fake_cuda):
    """A replayed window's first step is a strided view: a contiguous copy would be
    another layout, which the compiled graph does not take without compiling again."""
    update = _Update()
    replay = CudaGraphReplay(update, _signature, "update")
    windows = torch.arange(12.0).reshape(6, 2)
    for _ in range(cuda_graphs.WARMUP_CALLS + 2):
        replay(windows[:, 0], 1.0)
    (inputs,) = replay.recorded_inputs
    assert inputs[0].stride() == windows[:, 0].stride() == (2,)
    result = replay(windows[:, 1], 1.0)
    torch.testing.assert_close(result["sum"], windows[:, 1].sum())


@pytest.mark.compile
def test_a_recording_copies_views_with_their_base(fake_cuda, monkeypatch):
    """The on-policy updates' minibatch indices are slices of one permutation, and the
    compiled graph guards on their base (that it has the batch's size): recorded on
    copies without one, the call failed its guards and ran without graphs on the GPU."""
    monkeypatch.setenv("CADENCE_PRECOMPILE", "0")  # torch.compile's own guards
    monkeypatch.setattr(_FakeGraph, "replay", lambda self: None)  # only the recording here

    def gathered_sums(x: torch.Tensor, indices: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack([x[rows].sum() for rows in indices])

    graph = CompiledWithFallback(gathered_sums, "default", dynamic=True)
    replay = CudaGraphReplay(graph, graph.exact_signature, "gathered_sums")
    x = torch.arange(12.0)
    for _ in range(cuda_graphs.WARMUP_CALLS + 1):
        replay(x, list(torch.randperm(12).split(4)))
    assert not replay.failed and replay.num_graphs == 1
    (inputs,) = replay.recorded_inputs
    bases = {id(rows._base) for rows in inputs[1:]}
    assert len(bases) == 1 and inputs[1]._base.shape == (12,)


def test_a_recording_that_fails_leaves_the_function_running_without_graphs(fake_cuda, caplog):
    update = _Update(fails_to_record=True)
    replay = CudaGraphReplay(update, _signature, "update")
    with caplog.at_level(logging.WARNING):
        for _ in range(cuda_graphs.WARMUP_CALLS + 3):
            result = replay(torch.ones(3), 1.0)
            torch.testing.assert_close(result["sum"], torch.tensor(3.0))
    assert replay.failed and replay.num_graphs == 0 and not update.forbid_compile
    assert update.calls == cuda_graphs.WARMUP_CALLS + 3
    assert "runs compiled without graphs" in caplog.text


@pytest.mark.compile
def test_a_replayed_unroll_steps_the_env_through_its_inputs_and_outputs(fake_cuda, monkeypatch):
    """The compiled unroll's calls, replayed: the env's state must pass through the graph's
    inputs and outputs, as a replay rebinds none of the env's attributes."""
    eager_algorithm = make_ppo(PPOConfig(), *_specs(), NetworkConfig(hidden_sizes=(16,)))
    replayed_algorithm = copy.deepcopy(eager_algorithm)
    _, expected = _unrolls("off", eager_algorithm, count=4)
    # `UnrollSteps.replayable_steps`' env: its attributes stay as they are in a replay.
    _replay_compiled_calls(monkeypatch, python_state=lambda fn: [fn.__self__.env])
    monkeypatch.setattr(UpdateCompiler, "replays_on", lambda self, device: True)  # as on a GPU
    collector, got = _unrolls("default", replayed_algorithm, count=4)
    replay = collector.strategy.steps_replay
    assert replay.num_graphs == 1 and replay.replays > 5
    _assert_same_unrolls(got, expected)


@pytest.mark.compile
def test_auto_times_cuda_graphs_too_and_a_resumed_choice_of_them_replays(fake_cuda, monkeypatch):
    """``compile=auto`` on a GPU times the update three ways, replayed as CUDA graphs the
    third, and keeps the fastest; a choice of graphs (as a checkpoint restores it) replays."""
    _replay_compiled_calls(monkeypatch, tensors=lambda fn: _update_state(fn.__self__))
    monkeypatch.setattr(UpdateCompiler, "_may_replay", lambda self, device: self.mode == "auto")
    eager, auto, batches = _eager_and_compiled("ppo")
    compile_update(auto, "auto")
    untimed = 1 + 1 + cuda_graphs.WARMUP_CALLS + 1
    assert_same_updates(eager, auto, batches, untimed + 3 * update_compiler.AUTO_TIMED_CALLS + 4)
    _assert_close_states(eager, auto)
    compiler = auto.accelerator
    ((key, timings),) = compiler.timings.items()
    assert [len(t) for t in timings.values()] == [
        1 + update_compiler.AUTO_TIMED_CALLS,
        1 + update_compiler.AUTO_TIMED_CALLS,
        cuda_graphs.WARMUP_CALLS + 1 + update_compiler.AUTO_TIMED_CALLS,
    ]
    replay = compiler.replays[key]
    assert replay.num_graphs == 1 and replay.replays >= update_compiler.AUTO_TIMED_CALLS + 1
    medians = {way: sorted(t[-update_compiler.AUTO_TIMED_CALLS :])[2] for way, t in timings.items()}
    assert compiler.choices == {key: min(medians, key=medians.__getitem__)}
    compiler.choices[key] = "graphs"
    replayed = replay.replays
    assert_same_updates(eager, auto, batches, 3, first_seed=100)
    assert replay.replays == replayed + 3
    _assert_close_states(eager, auto)


def _assert_close_states(eager, auto) -> None:
    """`assert_close_states` for an algorithm with ``auto``'s choices in its state dict:
    through a copy of the eager one that loaded it."""
    loaded = copy.deepcopy(eager)
    loaded.load_state_dict(auto.state_dict())
    assert_close_states(eager, loaded)


def _replay_compiled_calls(monkeypatch, python_state=lambda fn: [], tensors=lambda fn: []):
    """Makes a compiled function's recording call register its replay with the stand-in
    graph: the call again on the recording's inputs. ``python_state(fn)``: the objects
    whose attributes a replay must leave alone; ``tensors(fn)``: those the call writes in
    place, which the recording must leave alone, as a capture runs no kernel."""
    original = CompiledWithFallback.__call__

    def recorded(self, *args):
        if not _recording:
            return original(self, *args)
        graph = _recording[-1]
        graph.python_state = python_state(self.fn)
        graph.call = lambda: tree_flatten(original(self, *args))[0]
        kept = [(tensor, tensor.clone()) for tensor in tensors(self.fn)]
        with torch.random.fork_rng():  # nor does it draw random numbers
            graph.outputs, spec = tree_flatten(original(self, *args))
        with torch.no_grad():
            for tensor, value in kept:
                tensor.copy_(value)
        return tree_unflatten(graph.outputs, spec)

    monkeypatch.setattr(CompiledWithFallback, "__call__", recorded)


def _update_state(algorithm) -> list[torch.Tensor]:
    """What an update writes in place: the parameters, buffers and optimizer state."""
    optimizers = algorithm.optimizers().values()
    states = [t for o in optimizers for state in o.state.values() for t in state.values()]
    return [*algorithm.parameters(), *algorithm.buffers(), *states]


@pytest.mark.compile
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_training_run_replays_its_unroll_and_fused_updates_as_cuda_graphs(tmp_path, caplog):
    """``reduce-overhead`` through the trainer (a tensor-native env on the GPU): the
    unroll and the on-policy updates, several per call, record and replay. The updates'
    minibatch indices are views of one permutation, which the unit tests do not pass."""
    config = load_config(
        "ppo_cartpole",
        [
            "env.backend=tensor",
            "env.num_envs=64",
            "trainer.unroll_length=32",
            "trainer.num_env_steps=12288",
            "trainer.device=cuda",
            "trainer.eval_interval=0",
            "trainer.checkpoint_interval=0",
            "trainer.progress_bar=off",
            "algorithm.compile=reduce-overhead",
            f"root_dir={tmp_path}/run",
        ],
    )
    trainer = build_trainer(config, tmp_path / "run")
    with caplog.at_level(logging.WARNING):
        assert trainer.run() == "complete"
    assert "failed" not in caplog.text  # compiling or recording
    unroll = trainer.collector.strategy.steps_replay
    assert unroll.replays > 0 and not unroll.failed
    updates = trainer.algorithm.accelerator.replays
    assert updates and all(r.replays > 0 and not r.failed for r in updates.values())
