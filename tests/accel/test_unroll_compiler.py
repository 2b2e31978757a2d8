"""The compiled unroll step: with a compiled update and a tensor-native env, each step's
``rollout_step`` and env step run as one graph, and the unroll is the eager one's."""

from __future__ import annotations

import copy
import json
import logging

import pytest
import torch

from cadence.accel import unroll_compiler, update_compiler
from cadence.accel.compile_cache import graph_options
from cadence.accel.compiled_function import GUARDED_CALLS, CompiledWithFallback
from cadence.accel.precompiled import saves_whole
from cadence.accel.unroll_compiler import MAX_STEPS_PER_GRAPH, CompiledUnroll
from cadence.accel.update_compiler import compile_update
from cadence.algorithms.dqn import DQNConfig, make_dqn
from cadence.algorithms.ppo import PPOConfig, make_ppo
from cadence.collect import Collector
from cadence.config.errors import ConfigError
from cadence.config.loading import compose_config
from cadence.envs import make_env
from cadence.networks import NetworkConfig
from cadence.trainer.run import build_trainer
from cadence.trainer.run_plan import RunPlan, unroll_graph_steps

_saves_whole = pytest.mark.skipif(
    not saves_whole(), reason="this torch does not save compiled graphs whole"
)


def _unrolls(
    compile_mode: str,
    algorithm,
    count: int = 3,
    unroll_length: int = 40,
    steps_per_graph: int = 8,
    device: str = "cpu",
    backend: str = "tensor",
):
    env = make_env("CartPole-v1", num_envs=4, backend=backend, seed=11, device=device)
    algorithm.to(device)
    compile_update(algorithm, compile_mode)
    # 40 steps: episodes end and reset inside, and the unroll takes 5 calls of 8 steps.
    collector = _compiled(Collector(env, algorithm, unroll_length=unroll_length), steps_per_graph)
    torch.manual_seed(0)
    return collector, [collector.unroll() for _ in range(count)]


@pytest.mark.compile
def test_compiled_steps_give_the_eager_unroll(cpu_or_gpu):
    device = cpu_or_gpu
    eager_algorithm = make_ppo(PPOConfig(), *_specs(), NetworkConfig(hidden_sizes=(16, 16)))
    compiled_algorithm = copy.deepcopy(eager_algorithm)
    _, expected = _unrolls("off", eager_algorithm, device=device)
    collector, got = _unrolls("default", compiled_algorithm, device=device)
    assert (
        collector.strategy.compiled_steps is not None
        and collector.strategy.compiled_steps.is_compiled
    )
    # on the CPU the graph's kernels are called from C++, not a Python wrapper
    options = graph_options(torch.device(device))
    assert collector.strategy.compiled_steps.options == options
    if device == "cpu":
        assert options == {"cpp_wrapper": True}
    assert got[0][0].time_step.observation.device.type == device
    _assert_same_unrolls(got, expected)


@pytest.mark.compile
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_unroll_replayed_as_cuda_graphs_gives_the_eager_one():
    """``compile=reduce-overhead`` on a GPU: after its warm-up calls the compiled unroll
    replays one CUDA graph, which steps the env through its inputs and outputs and draws
    the actions eager draws."""
    eager_algorithm = make_ppo(PPOConfig(), *_specs(), NetworkConfig(hidden_sizes=(16, 16)))
    graphed_algorithm = copy.deepcopy(eager_algorithm)
    _, expected = _unrolls("off", eager_algorithm, count=4, device="cuda")
    collector, got = _unrolls("reduce-overhead", graphed_algorithm, count=4, device="cuda")
    replay = collector.strategy.steps_replay
    assert replay is not None and not replay.failed
    assert replay.num_graphs == 1 and replay.replays > 5  # of 20 calls
    _assert_same_unrolls(got, expected)


@pytest.mark.compile
@pytest.mark.parametrize("backend", ["tensor", "serial"])
def test_auto_times_the_unroll_both_ways_and_keeps_the_faster_through_a_checkpoint(backend, caplog):
    """``compile: auto``: the first unrolls run eagerly and compiled in turn (the steps in
    one graph with a tensor env, the acting step beside a Gymnasium one), each giving the
    eager unroll; the faster way is kept, logged and checkpointed."""
    eager_algorithm = make_ppo(PPOConfig(), *_specs(), NetworkConfig(hidden_sizes=(16,)))
    auto_algorithm = copy.deepcopy(eager_algorithm)
    count = 2 * (1 + unroll_compiler.AUTO_TIMED_UNROLLS) + 1
    _, expected = _unrolls("off", eager_algorithm, count=count, backend=backend)
    with caplog.at_level(
        logging.INFO, logger=unroll_compiler.__name__
    ):  # 2 steps a graph: compiles fast
        collector, got = _unrolls(
            "auto", auto_algorithm, count=count, steps_per_graph=2, backend=backend
        )
    _assert_same_unrolls(got, expected)
    timings = collector.strategy.unroll_timings
    assert [len(t) for t in timings.values()] == [1 + unroll_compiler.AUTO_TIMED_UNROLLS] * 2
    medians = {
        way: sorted(t[1:])[unroll_compiler.AUTO_TIMED_UNROLLS // 2] for way, t in timings.items()
    }
    assert collector.strategy.choice == min(medians, key=medians.__getitem__)
    assert "compile=auto: the unroll" in caplog.text
    graph = (
        collector.strategy.compiled_steps
        if backend == "tensor"
        else collector.strategy.compiled_act
    )
    assert graph is not None and graph.is_compiled
    resumed = _compiled(Collector(collector.env, auto_algorithm, unroll_length=40), 2)
    resumed.load_state_dict(collector.state_dict())
    assert resumed.strategy.choice == collector.strategy.choice
    resumed.unroll()
    assert resumed.strategy.unroll_timings == {"eager": [], "compiled": []}  # not measured again
    # The choice is recorded for the machine: a later run's collector takes it from its
    # first unroll, without measuring (a recorded "eager" acts eagerly from the start).
    (key, recorded), *others = json.loads(update_compiler.AUTO_RECORD.read_text()).items()
    assert not others and recorded == collector.strategy.choice
    update_compiler.AUTO_RECORD.write_text(json.dumps({key: "eager"}))
    later = _compiled(Collector(collector.env, auto_algorithm, unroll_length=40), 2)
    later.unroll()
    assert later.strategy.choice == "eager" and later.strategy.compiled_act is None
    assert later.strategy.compiled_steps is None and not any(later.strategy.unroll_timings.values())


def _compiled(collector: Collector, steps_per_graph: int = MAX_STEPS_PER_GRAPH) -> Collector:
    """``collector`` with the compiled unroll strategy, as the trainer injects it."""
    collector.set_unroll_strategy(CompiledUnroll(collector, steps_per_graph))
    return collector


def _assert_same_unrolls(got, expected):
    for (experience, stats), (eager_experience, eager_stats) in zip(got, expected, strict=True):
        time_step, eager_step = experience.time_step, eager_experience.time_step
        assert torch.equal(time_step.step_type, eager_step.step_type)
        assert (time_step.step_type == 0).sum() > 4  # resets happened inside the graph
        torch.testing.assert_close(time_step.observation, eager_step.observation)
        torch.testing.assert_close(time_step.reward, eager_step.reward)
        assert torch.equal(experience.action, eager_experience.action)
        torch.testing.assert_close(experience.info["log_prob"], eager_experience.info["log_prob"])
        torch.testing.assert_close(stats["return"], eager_stats["return"])


@pytest.mark.compile
@_saves_whole
def test_a_later_collector_loads_the_saved_unroll_graph(tmp_path, monkeypatch):
    # The unroll's graph is saved whole: a second collector (a later start) loads it instead
    # of tracing it, and the loaded graph steps the live env with the live parameters.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    eager_algorithm = make_ppo(PPOConfig(), *_specs(), NetworkConfig(hidden_sizes=(16, 16)))
    first_algorithm, later_algorithm = (copy.deepcopy(eager_algorithm) for _ in range(2))
    eager_collector, expected = _unrolls("off", eager_algorithm, count=2, unroll_length=4)
    _unrolls("default", first_algorithm, count=1, unroll_length=4)
    assert len(list((tmp_path / "cadence" / "graphs").glob("unroll_steps-*.bin"))) == 1

    def traced(*args, **kwargs):
        raise AssertionError("traced although a saved graph fits")

    monkeypatch.setattr(torch, "compile", traced)
    collector, got = _unrolls("default", later_algorithm, count=2, unroll_length=4)
    assert (
        collector.strategy.compiled_steps is not None
        and collector.strategy.compiled_steps.is_compiled
    )
    assert collector.strategy.compiled_steps.compiled is None  # nothing went through dynamo
    for (experience, _), (eager_experience, _) in zip(got, expected, strict=True):
        assert torch.equal(experience.time_step.step_type, eager_experience.time_step.step_type)
        torch.testing.assert_close(
            experience.time_step.observation, eager_experience.time_step.observation
        )
        assert torch.equal(experience.action, eager_experience.action)
    # The loaded graph stepped this collector's env, as the eager steps did theirs.
    env_state, eager_env_state = collector.env.get_state(), eager_collector.env.get_state()
    assert torch.equal(env_state["episode_steps"], eager_env_state["episode_steps"])
    torch.testing.assert_close(env_state["state"], eager_env_state["state"])


@pytest.mark.compile
@_saves_whole
def test_an_off_policy_run_loads_its_unroll_graph_saved_after_its_updates(tmp_path, monkeypatch):
    # An off-policy run compiles its unroll after its first updates, with the optimizers'
    # state filled in; the saved graph must still load in the next run (the guards pickle
    # the algorithm's attributes with it).
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    overrides = [
        "algorithm.compile=default",
        "algorithm.off_policy.initial_collect_steps=8",
        "algorithm.off_policy.mini_batch_size=8",
        "algorithm.off_policy.num_updates_per_train_iter=1",
        "network.hidden_sizes=[8]",
        "trainer.unroll_length=4",
        "trainer.progress_bar=off",
    ]
    for run in ("first", "later"):
        trainer = build_trainer(compose_config("sac_pendulum", overrides), tmp_path / run)
        try:
            for _ in range(4):
                trainer.scheme.train_iter()
            steps = trainer.collector.strategy.compiled_steps
            assert steps is not None and steps.is_compiled
        finally:
            trainer.collector.env.close()
        graphs = tmp_path / "cache" / "cadence" / "graphs"
        assert not list(graphs.glob("unroll_steps-*.unsupported"))
        if run == "later":  # loaded, not traced again
            assert steps.compiled is None
        assert len(list(graphs.glob("unroll_steps-*.bin"))) == 1


@pytest.mark.compile
@pytest.mark.slow
@pytest.mark.ci_budget  # half a minute on a cold compile cache
def test_a_compiled_recurrent_unroll_gives_the_eager_one():
    # The state resets at FIRST steps inside the graph; unroll_length 12 runs as 2 calls of 6.
    network = NetworkConfig(hidden_sizes=(16,), recurrent="gru", recurrent_size=8)
    eager_algorithm = make_ppo(PPOConfig(), *_specs(), network)
    compiled_algorithm = copy.deepcopy(eager_algorithm)
    _, expected = _unrolls("off", eager_algorithm, unroll_length=12)
    collector, got = _unrolls("default", compiled_algorithm, unroll_length=12)
    assert (
        collector.strategy.compiled_steps is not None
        and collector.strategy.compiled_steps.is_compiled
    )
    for (experience, _), (eager_experience, _) in zip(got, expected, strict=True):
        assert torch.equal(experience.time_step.step_type, eager_experience.time_step.step_type)
        assert torch.equal(experience.action, eager_experience.action)
        torch.testing.assert_close(experience.state, eager_experience.state)
    assert (got[-1][0].time_step.step_type == 0).any()  # some state was reset in the graph


@pytest.mark.compile
def test_steps_per_graph_sets_the_steps_of_each_call(monkeypatch):
    # 12 steps in calls of at most 5: the largest divisor is 4, so 3 calls of 4 steps.
    eager_algorithm = make_ppo(PPOConfig(), *_specs(), NetworkConfig(hidden_sizes=(16, 16)))
    compiled_algorithm = copy.deepcopy(eager_algorithm)
    _, expected = _unrolls("off", eager_algorithm, count=2, unroll_length=12)
    lengths = []
    original = CompiledWithFallback.__call__

    def recording(self, *args):
        lengths.append(args[4])
        return original(self, *args)

    monkeypatch.setattr(CompiledWithFallback, "__call__", recording)
    _, got = _unrolls("default", compiled_algorithm, count=2, unroll_length=12, steps_per_graph=5)
    assert lengths == [4] * 6
    for (experience, _), (eager_experience, _) in zip(got, expected, strict=True):
        assert torch.equal(experience.time_step.step_type, eager_experience.time_step.step_type)
        assert torch.equal(experience.action, eager_experience.action)


def test_the_trainer_unrolls_off_policy_one_step_per_graph(tmp_path):
    # On-policy iterations are mostly unroll: 8 steps a call; off-policy ones mostly updates,
    # and a warm start traces each step of the graph: 1. The key overrides both.
    assert (
        unroll_graph_steps(RunPlan.from_config(compose_config("ppo_cartpole")))
        == MAX_STEPS_PER_GRAPH
        == 8
    )
    assert unroll_graph_steps(RunPlan.from_config(compose_config("sac_pendulum"))) == 1
    chosen = compose_config(
        "sac_pendulum", ["trainer.unroll_graph_steps=5", "algorithm.compile=auto"]
    )
    assert unroll_graph_steps(RunPlan.from_config(chosen)) == 5
    trainer = build_trainer(chosen, tmp_path)  # what the CLI builds
    try:
        assert trainer.collector.strategy.steps_per_graph == 5
    finally:
        trainer.collector.env.close()


@pytest.mark.compile
@pytest.mark.parametrize(
    ("backend", "uniform"), [("serial", True), ("vector", True), ("serial", False)]
)
def test_gymnasium_envs_step_eagerly_beside_a_compiled_policy_step(backend, uniform):
    # A Gymnasium env steps outside any graph; the policy's step alone runs compiled, with
    # the eager one's actions. Time steps of one layout (cadence's back ends) have their
    # signature worked out at an unroll's first two steps only; others' at every step.
    def unrolls(compile_mode: str, algorithm):
        env = make_env("CartPole-v1", num_envs=2, backend=backend, seed=1)
        if not uniform:
            env.uniform_time_steps = False
        compile_update(algorithm, compile_mode)
        collector = _compiled(Collector(env, algorithm, unroll_length=16))
        torch.manual_seed(0)
        try:
            return collector, [collector.unroll()[0] for _ in range(GUARDED_CALLS + 1)]
        finally:
            env.close()

    eager_algorithm = make_ppo(PPOConfig(), *_specs(), NetworkConfig(hidden_sizes=(16, 16)))
    compiled_algorithm = copy.deepcopy(eager_algorithm)
    _, expected = unrolls("off", eager_algorithm)
    collector, got = unrolls("default", compiled_algorithm)
    assert collector.strategy.compiled_steps is None
    act = collector.strategy.compiled_act
    assert act is not None and act.is_compiled
    assert act.signatures_worked_out == (2 if uniform else 16) * len(got)
    for experience, eager_experience in zip(got, expected, strict=True):
        assert torch.equal(experience.action, eager_experience.action)
        torch.testing.assert_close(experience.info["log_prob"], eager_experience.info["log_prob"])
        assert torch.equal(experience.time_step.step_type, eager_experience.time_step.step_type)
    assert any((e.time_step.step_type == 0).any() for e in got[1:])  # episodes reset inside


@pytest.mark.compile
def test_a_compiled_unroll_follows_the_exploration_schedule():
    # DQN's epsilon changes every iteration (set_progress); the unroll's graph, which skips
    # its guards after a few calls, must read the current one.
    env = make_env("CartPole-v1", num_envs=8, backend="tensor", seed=3)
    config = DQNConfig(compile="default", epsilon_start=1.0, epsilon_end=0.0)
    dqn = make_dqn(
        config, env.observation_spec, env.action_spec, NetworkConfig(hidden_sizes=(16, 16))
    )
    compile_update(dqn, config.compile)  # as the trainer does
    collector = _compiled(Collector(env, dqn, unroll_length=8))
    for _ in range(3):  # epsilon 1: random actions, past the guarded calls
        collector.unroll()
    dqn.set_progress(1.0)  # epsilon 0: greedy
    experience, _ = collector.unroll()
    assert (
        collector.strategy.compiled_steps is not None
        and collector.strategy.compiled_steps.is_compiled
    )
    with torch.no_grad():
        greedy = dqn.q_network(experience.time_step.observation[:-1]).argmax(-1)
    assert torch.equal(experience.action, greedy)


def _specs():
    env = make_env("CartPole-v1", num_envs=1, backend="tensor", seed=0)
    return env.observation_spec, env.action_spec


def test_the_trainer_runs_on_policy_updates_as_many_per_graph_as_configured(tmp_path):
    assert compose_config("ppo_cartpole").trainer.updates_per_graph == 5
    chosen = compose_config("ppo_cartpole", ["trainer.updates_per_graph=3"])
    trainer = build_trainer(chosen, tmp_path)  # what the CLI builds
    try:
        assert trainer.scheme.updates_per_graph == 3
    finally:
        trainer.collector.env.close()
    with pytest.raises(ConfigError, match="updates_per_graph=33: must be <= 32"):
        compose_config("ppo_cartpole", ["trainer.updates_per_graph=33"])
