"""The compiled update (`cadence.accel.compile_update`): every algorithm's minibatch step as one
graph gives eager's numbers, keeps eager's state-dict keys, and checkpoints load both ways.

Each case starts two copies of an algorithm from the same parameters, runs the same
minibatches through one eagerly and through the other compiled, and compares parameters,
optimizer state and logged terms after every update.
"""

from __future__ import annotations

import copy
import functools
import json
import logging

import pytest
import torch

from cadence import machine_record
from cadence.accel import compile_cache, cuda_graphs, graph_optimizer, update_compiler
from cadence.accel.update_compiler import compile_update
from cadence.algorithms.a2c import A2CConfig, make_a2c
from cadence.algorithms.algorithm import select_rows
from cadence.algorithms.ddpg import DDPGConfig, make_ddpg
from cadence.algorithms.dqn import DQNConfig, make_dqn
from cadence.algorithms.off_policy import replay_minibatches
from cadence.algorithms.off_policy_config import OffPolicyConfig
from cadence.algorithms.ppo import PPOConfig, make_ppo
from cadence.algorithms.sac import SACConfig, make_sac
from cadence.algorithms.td3 import TD3Config, make_td3
from cadence.data.experience import Experience
from cadence.data.nest import flatten, map_structure
from cadence.data.specs import BoundedTensorSpec, DiscreteTensorSpec, TensorSpec
from cadence.data.time_step import StepType, TimeStep
from cadence.machine_record import machine_key
from cadence.networks import NetworkConfig
from cadence.replay.buffer import ReplayBuffer
from cadence.testing.resume import assert_close_states

OBS_DIM, N, UPDATES = 3, 32, 4
NETWORK = NetworkConfig(hidden_sizes=(16, 16))
DISCRETE = DiscreteTensorSpec((), torch.int64, 2)
CONTINUOUS = BoundedTensorSpec((1,), minimum=-2.0, maximum=2.0)


def _on_policy_batches(discrete: bool) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    action = (
        torch.randint(0, 2, (N,), generator=generator)
        if discrete
        else torch.rand(N, 1, generator=generator) * 4 - 2
    )
    return [
        {
            "observation": torch.randn(N, OBS_DIM, generator=generator),
            "action": action,
            "old_log_prob": torch.full((N,), -0.7),
            "advantage": torch.randn(N, generator=generator),
            "return": torch.randn(N, generator=generator),
            "old_value": torch.randn(N, generator=generator),
        }
        for _ in range(UPDATES)
    ]


def _off_policy_batches(algorithm, config, discrete: bool) -> list[dict]:
    torch.manual_seed(2)
    steps = 200
    action = torch.randint(0, 2, (steps, 1)) if discrete else torch.rand(steps, 1, 1) * 4 - 2
    buffer = ReplayBuffer(num_envs=1, capacity=steps)
    buffer.add_sequence(
        {
            "time_step": {
                "step_type": torch.randint(0, 3, (steps, 1)),
                "reward": torch.randn(steps, 1),
                "discount": torch.ones(steps, 1),
                "observation": torch.randn(steps, 1, OBS_DIM),
                "prev_action": torch.zeros_like(action),
                "env_id": torch.zeros(steps, 1, dtype=torch.int64),
                "env_info": {},
            },
            "action": action,
            "info": {},
        }
    )
    off_policy = OffPolicyConfig(
        mini_batch_size=N,
        mini_batch_length=config.off_policy.mini_batch_length,
        num_updates_per_train_iter=UPDATES,
    )
    samples = replay_minibatches(buffer, off_policy, algorithm.replay_fields)
    return [algorithm.preprocess_experience(sample) for sample in samples]


def _ppo():
    algorithm = make_ppo(PPOConfig(), TensorSpec((OBS_DIM,)), DISCRETE, NETWORK)
    return algorithm, _on_policy_batches(True)


def _a2c():  # RMSprop, A2C's default optimizer
    algorithm = make_a2c(A2CConfig(), TensorSpec((OBS_DIM,)), CONTINUOUS, NETWORK)
    return algorithm, _on_policy_batches(False)


def _dqn():
    config = DQNConfig(target_update_period=2)
    algorithm = make_dqn(config, TensorSpec((OBS_DIM,)), DISCRETE, NETWORK)
    return algorithm, _off_policy_batches(algorithm, config, True)


def _sac():
    config = SACConfig(off_policy=OffPolicyConfig(mini_batch_length=2))
    algorithm = make_sac(config, TensorSpec((OBS_DIM,)), CONTINUOUS, NETWORK)
    return algorithm, _off_policy_batches(algorithm, config, False)


def _td3():
    config = TD3Config()
    algorithm = make_td3(config, TensorSpec((OBS_DIM,)), CONTINUOUS, NETWORK)
    return algorithm, _off_policy_batches(algorithm, config, False)


def _ddpg():
    config = DDPGConfig(max_grad_norm=0.5)
    algorithm = make_ddpg(config, TensorSpec((OBS_DIM,)), CONTINUOUS, NETWORK)
    return algorithm, _off_policy_batches(algorithm, config, False)


CASES = {"ppo": _ppo, "a2c": _a2c, "dqn": _dqn, "sac": _sac, "td3": _td3, "ddpg": _ddpg}


def _eager_and_compiled(name: str, device: str = "cpu"):
    """A case's algorithm, a compiled copy (both training, on ``device``) and its batches;
    dynamo's counters cleared."""
    eager, batches = CASES[name]()
    eager.to(device)
    batches = [map_structure(lambda x: x.to(device), batch) for batch in batches]
    graph = copy.deepcopy(eager)
    compile_update(graph, "default")
    eager.train()
    graph.train()
    torch._dynamo.utils.counters.clear()
    return eager, graph, batches


# TD3 is DDPG's update with twin critics and a delayed actor: half a minute on a cold compile
# cache, so CI runs it beside the learning tests.
COMPILED_CASES = [
    pytest.param(name, marks=[pytest.mark.slow, pytest.mark.ci_budget]) if name == "td3" else name
    for name in CASES
]


@pytest.mark.compile
@pytest.mark.parametrize("name", COMPILED_CASES)
def test_a_compiled_update_gives_the_eager_numbers(name, cpu_or_gpu):
    device = cpu_or_gpu
    eager, graph, batches = _eager_and_compiled(name, device)
    for index, batch in enumerate(batches):
        fraction = index / len(batches)  # a learning-rate schedule must not recompile
        eager.set_progress(fraction)
        graph.set_progress(fraction)
        torch.manual_seed(index)  # SAC and TD3 draw noise: the same for both
        expected = eager.update(batch)
        torch.manual_seed(index)
        result = graph.update(batch)
        assert set(result.metrics) == set(expected.metrics)
        for key, value in expected.metrics.items():
            torch.testing.assert_close(result.metrics[key], value, rtol=1e-4, atol=1e-5)
        assert_close_states(eager, graph)
    assert graph.accelerator.compile_seconds > 0  # it did compile rather than fall back
    assert not torch._dynamo.utils.counters["graph_break"]  # one graph per update
    assert all(g.is_compiled for g in graph.accelerator.graphs.values())
    # On the CPU the graphs' kernels are called from C++; on a GPU, Triton's from Python.
    options = compile_cache.graph_options(torch.device(device))
    assert all(g.options == options for g in graph.accelerator.graphs.values())
    # A compiled run's checkpoint loads into an eager algorithm and the other way round.
    fresh, _ = CASES[name]()
    fresh.to(device)
    fresh.load_state_dict(graph.state_dict())
    assert_close_states(eager, fresh)
    graph.load_state_dict(eager.state_dict())


@pytest.mark.compile
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", list(CASES))
def test_cuda_graphs_replay_the_eager_numbers(name):
    """``compile=reduce-overhead`` on a GPU: after its warm-up calls each update replays a
    recorded CUDA graph, and its results (kept from update to update: each is a copy,
    not the graph's outputs that the next replay overwrites), parameters and optimizer
    state, Adam's step counts included, are eager's; checkpoints load both ways."""
    eager, graph, batches = _eager_and_compiled(name, "cuda")
    compile_update(graph, "reduce-overhead")
    expected, results = [], []
    for index in range(3 * len(batches)):
        batch = batches[index % len(batches)]
        torch.manual_seed(index)
        expected.append(eager.update(batch))
        torch.manual_seed(index)
        results.append(graph.update(batch))
    for result, want in zip(results, expected, strict=True):
        for key, value in want.metrics.items():
            torch.testing.assert_close(result.metrics[key], value, rtol=1e-4, atol=1e-5)
    assert_close_states(eager, graph)
    replays = graph.accelerator.replays
    assert replays and all(r.replays > 0 and not r.failed for r in replays.values())
    fresh, _ = CASES[name]()
    fresh.to("cuda")
    fresh.load_state_dict(graph.state_dict())
    assert_close_states(eager, fresh)
    graph.load_state_dict(eager.state_dict())
    replayed = sum(r.replays for r in replays.values())
    torch.manual_seed(0)
    after_load = graph.update(batches[0])  # replays on the loaded state
    torch.manual_seed(0)
    expected = eager.update(batches[0])
    assert sum(r.replays for r in replays.values()) == replayed + 1
    for key, value in expected.metrics.items():
        torch.testing.assert_close(after_load.metrics[key], value, rtol=1e-4, atol=1e-5)
    assert_close_states(eager, graph)


@pytest.mark.compile
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_auto_on_a_gpu_times_cuda_graphs_too():
    """``compile=auto`` on a GPU: the update timed eager, compiled and replayed as CUDA
    graphs (recorded without failing), each way giving eager's numbers."""
    eager, auto, batches = _eager_and_compiled("sac", "cuda")
    compile_update(auto, "auto")
    assert_same_updates(
        eager,
        auto,
        batches,
        2 + cuda_graphs.WARMUP_CALLS + 1 + 3 * update_compiler.AUTO_TIMED_CALLS,
    )
    ((key, timings),) = auto.accelerator.timings.items()
    assert list(timings) == ["eager", "compiled", "graphs"]
    replay = auto.accelerator.replays[key]
    assert replay.replays >= update_compiler.AUTO_TIMED_CALLS and not replay.failed
    assert key in auto.accelerator.choices


def assert_same_updates(eager, other, batches, count: int, first_seed: int = 0) -> None:
    """``count`` updates of each algorithm on ``batches`` in turn, each pair from one seed,
    give the same metrics."""
    for index in range(count):
        batch = batches[index % len(batches)]
        torch.manual_seed(first_seed + index)
        want = eager.update(batch)
        torch.manual_seed(first_seed + index)
        got = other.update(batch)
        for key, value in want.metrics.items():
            torch.testing.assert_close(got.metrics[key], value, rtol=1e-4, atol=1e-5)


@pytest.mark.compile
def test_reduce_overhead_on_the_cpu_is_the_default_mode():
    """Without a GPU ``reduce-overhead`` compiles as ``default`` and records no CUDA graph."""
    eager, graph, batches = _eager_and_compiled("ppo")
    compile_update(graph, "reduce-overhead")
    for batch in batches:
        expected = eager.update(batch)
        result = graph.update(batch)
        torch.testing.assert_close(result.metrics["loss/total"], expected.metrics["loss/total"])
    assert_close_states(eager, graph)
    assert graph.accelerator.graphs["Algorithm.update_step"].is_compiled
    assert graph.accelerator.graphs["Algorithm.update_step"].mode == "default"
    assert not graph.accelerator.replays
    with pytest.raises(TypeError):  # statistics to read, not a way to change the compiler
        graph.accelerator.graphs["Algorithm.update_step"] = None


@pytest.mark.compile
@pytest.mark.parametrize("name", ["ppo", "a2c"])
def test_a_compiled_update_of_rows_gathers_them_in_its_graph(name):
    """`Algorithm.update_rows` (the on-policy scheme's minibatches): compiled, the rows are
    gathered inside the update's graph; the numbers are eager ``update(batch[rows])``'s,
    for minibatches of varying size."""
    eager, graph, batches = _eager_and_compiled(name)
    generator = torch.Generator().manual_seed(0)
    for index, batch in enumerate(batches):
        size = flatten(batch)[0].shape[0]
        rows = torch.randperm(size, generator=generator)[: size - 3 * (index % 2)]
        expected = eager.update(select_rows(batch, rows))
        result = graph.update_rows(batch, rows)
        for key, value in expected.metrics.items():
            torch.testing.assert_close(result.metrics[key], value, rtol=1e-4, atol=1e-5)
        assert_close_states(eager, graph)
    assert list(graph.accelerator.graphs) == ["Algorithm._update_step_on_rows"]
    assert not torch._dynamo.utils.counters["graph_break"]


@pytest.mark.compile
def test_several_updates_in_one_compiled_call_give_the_eager_numbers(monkeypatch):
    """`Algorithm.update_rows_many` (the on-policy scheme's calls of several updates): one
    graph takes an optimizer step per update, each with its own step's Adam bias
    corrections, and its stacked results and the states after it are eager's, update by
    update, for minibatches of different sizes. Here the graph computes the corrections
    itself, as for step counts on an accelerator; those computed before the call (step
    counts on the CPU) are the scheme's case
    (`test_a_compiled_scheme_runs_several_updates_per_call_with_the_eager_minibatches`)."""
    init = graph_optimizer.GraphOptimizer.__init__
    in_graph = functools.partialmethod(init, host_corrections=False)
    monkeypatch.setattr(graph_optimizer.GraphOptimizer, "__init__", in_graph)
    eager, graph, batches = _eager_and_compiled("ppo")
    assert graph.fuses_updates and not eager.fuses_updates
    generator = torch.Generator().manual_seed(0)
    for batch in batches[:2]:
        minibatches = [torch.randperm(N, generator=generator)[: N - 3 * k] for k in range(2)]
        expected = [eager.update_rows(batch, rows) for rows in minibatches]
        result = graph.update_rows_many(batch, minibatches)
        assert result.nonfinite.shape == (2,) and not result.nonfinite.any()
        for key in expected[0].metrics:
            values = torch.stack([e.metrics[key] for e in expected])
            torch.testing.assert_close(result.metrics[key], values, rtol=1e-4, atol=1e-5)
        assert_close_states(eager, graph)
    optimizer = graph.optimizers()["actor_critic"]
    assert all(int(state["step"]) == 4 for state in optimizer.state.values())
    stepper = graph.accelerator.graph_optimizer(optimizer)
    assert stepper.corrections[0] is None
    assert list(graph.accelerator.graphs) == ["Algorithm._update_steps_on_rows"]
    assert graph.accelerator.graphs["Algorithm._update_steps_on_rows"].is_compiled
    assert not torch._dynamo.utils.counters["graph_break"]


@pytest.mark.compile
@pytest.mark.slow
@pytest.mark.ci_budget  # twenty seconds on a cold compile cache
def test_a_fused_update_first_called_on_equal_minibatches_takes_unequal_ones(
    tmp_path, monkeypatch, caplog
):
    """An on-policy batch loses the steps dropped at episode ends, so the minibatches of
    a fused call are equal in size until the first episode ends, unequal after: one
    dynamic graph takes both (duck sizing made the first graph guard on their equality,
    and the first unequal call compiled a second one, in every run).

    The graph is traced here, in a compile cache of the test's own: in CI's second pytest
    process the shared cache held a graph of the same name saved by the default suite
    (`test_several_updates_in_one_compiled_call_give_the_eager_numbers`, whose Adam
    corrections are computed in the graph), so what this test saw depended on the tests
    before it."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    caplog.set_level(logging.INFO, logger="cadence.accel")
    _, graph, batches = _eager_and_compiled("ppo")
    generator = torch.Generator().manual_seed(0)
    for sizes in ([8, 8], [8, 5], [7, 3]):
        rows = torch.randperm(N, generator=generator)[: sum(sizes)].split(sizes)
        graph.update_rows_many(batches[0], list(rows))
    update = graph.accelerator.graphs["Algorithm._update_steps_on_rows"]
    assert update.precompile and update.num_precompiled_signatures == 1
    # Every call ran the graph of the first: no call fell back to a torch.compile of its own.
    assert update.compiled is None, f"not run by the graph saved whole: {caplog.text}"


def test_the_bias_corrections_of_several_steps_are_each_steps_own():
    """`GraphOptimizer.refresh` for a call of several steps fills a row per step, for
    parameters whose step counts differ too (one left without gradients falls behind)."""
    params, optimizer = _optimizer_case("adam")
    stepper = graph_optimizer.GraphOptimizer(optimizer)
    beta1, beta2 = optimizer.param_groups[0]["betas"]
    lr = optimizer.param_groups[0]["lr"]
    stepper.flat[0]["step"].copy_(torch.tensor([4.0, 7.0]))
    stepper.refresh(steps=3)
    step_sizes, roots = stepper.corrections[0]
    for row in range(3):
        for column, count in enumerate((4, 7)):
            step = count + row + 1
            assert step_sizes[row, column].item() == pytest.approx(lr / (1 - beta1**step))
            assert roots[row, column].item() == pytest.approx((1 - beta2**step) ** 0.5)
    with pytest.raises(ValueError, match="1 to 32 optimizer steps"):
        stepper.refresh(steps=33)


def _unroll(discrete: bool, steps: int = 9, envs: int = 4) -> Experience:
    """An on-policy unroll whose episodes end (LAST steps, one of them terminal)."""
    generator = torch.Generator().manual_seed(3)
    step_type = torch.full((steps + 1, envs), int(StepType.MID))
    step_type[0] = int(StepType.FIRST)
    step_type[3, 1] = step_type[6, 2] = int(StepType.LAST)
    step_type[4, 1] = step_type[7, 2] = int(StepType.FIRST)
    discount = torch.ones(steps + 1, envs)
    discount[3, 1] = 0.0
    action = (
        torch.randint(0, 2, (steps, envs), generator=generator)
        if discrete
        else torch.rand(steps, envs, 1, generator=generator) * 4 - 2
    )
    time_step = TimeStep(
        step_type=step_type,
        reward=torch.randn(steps + 1, envs, generator=generator),
        discount=discount,
        observation=torch.randn(steps + 1, envs, OBS_DIM, generator=generator),
        prev_action=torch.zeros(steps + 1, *action.shape[1:], dtype=action.dtype),
        env_id=torch.arange(envs).expand(steps + 1, envs),
    )
    info = {"action": action, "log_prob": torch.randn(steps, envs, generator=generator)}
    return Experience(time_step=time_step, action=action, info=info)


@pytest.mark.compile
@pytest.mark.parametrize("name", ["ppo", "a2c"])
def test_a_compiled_preprocess_gives_the_eager_samples(name):
    """On-policy: the values and GAE advantages of an unroll are one graph, whose samples
    (LAST steps dropped) are eager's."""
    eager, graph, _ = _eager_and_compiled(name)
    unroll = _unroll(discrete=name == "ppo")
    expected = eager.preprocess_experience(unroll)
    for _ in range(2):
        samples = graph.preprocess_experience(unroll)
        assert samples.keys() == expected.keys()
        for key, value in expected.items():
            torch.testing.assert_close(samples[key], value, rtol=1e-5, atol=1e-6)
    assert expected["advantage"].shape == (9 * 4 - 2,)
    assert graph.accelerator.graphs["ActorCriticAlgorithm._samples"].is_compiled
    assert not torch._dynamo.utils.counters["graph_break"]


@pytest.mark.compile
def test_auto_times_both_ways_records_its_choice_and_a_checkpoint_keeps_it(caplog):
    algorithm, batches = _ppo()
    compile_update(algorithm, "auto")
    algorithm.train()
    with caplog.at_level(logging.INFO, logger=update_compiler.__name__):
        for _ in range(2 * (update_compiler.AUTO_TIMED_CALLS + 1)):
            algorithm.update(batches[0])
    (key, choice), *others = algorithm.accelerator.choices.items()
    assert not others and choice in ("eager", "compiled") and "update_step" in key
    assert "compile=auto" in caplog.text
    resumed, _ = _ppo()
    compile_update(resumed, "auto")
    resumed.load_state_dict(algorithm.state_dict())
    assert resumed.accelerator.choices == {key: choice}
    eager, _ = _ppo()
    eager.load_state_dict(algorithm.state_dict())  # the choice is no parameter


@pytest.mark.compile
def test_auto_records_its_choice_and_later_runs_take_it_from_their_first_call(caplog):
    algorithm, batches = _ppo()
    compile_update(algorithm, "auto")
    algorithm.train()
    for _ in range(2 * (update_compiler.AUTO_TIMED_CALLS + 1)):
        algorithm.update(batches[0])
    (name, choice), *_ = algorithm.accelerator.choices.items()
    (key, recorded), *others = json.loads(update_compiler.AUTO_RECORD.read_text()).items()
    assert not others and recorded == choice and machine_key() in key
    other = "eager" if choice == "compiled" else "compiled"
    update_compiler.record_auto_choice(key, other)  # a second run to choose leaves the first's
    assert json.loads(update_compiler.AUTO_RECORD.read_text()) == {key: choice}
    # A later run takes the recorded way from its first call (eager here, to tell).
    update_compiler.AUTO_RECORD.write_text(json.dumps({key: "eager"}))
    later, _ = _ppo()
    compile_update(later, "auto")
    later.train()
    with caplog.at_level(logging.INFO, logger=update_compiler.__name__):
        later.update(batches[0])
    assert later.accelerator.choices == {name: "eager"} and not later.accelerator.timings
    assert not later.accelerator.graphs[name].is_compiled  # its first call ran eagerly
    assert "as first measured on this machine" in caplog.text


def test_auto_without_a_cpp_compiler_runs_eagerly_with_one_warning(monkeypatch, caplog):
    monkeypatch.setattr(update_compiler, "cpp_compiler_available", lambda: False)
    algorithm, batches = _ppo()
    compile_update(algorithm, "auto")
    algorithm.update(batches[0])
    assert algorithm.accelerator.mode == "eager" and not algorithm.accelerator.graphs
    assert caplog.text.count("no C++ compiler") == 1


def test_the_compile_cache_is_per_machine_and_overridable(monkeypatch, tmp_path):
    monkeypatch.setenv("CADENCE_COMPILE_CACHE", str(tmp_path / "cache"))
    assert machine_record.compile_cache_dir() == tmp_path / "cache"
    monkeypatch.delenv("CADENCE_COMPILE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert machine_record.compile_cache_dir().is_relative_to(tmp_path / "cadence" / "torch-compile")


def _optimizer_case(kind: str) -> tuple[list[torch.nn.Parameter], torch.optim.Optimizer]:
    generator = torch.Generator().manual_seed(0)
    params = [
        torch.nn.Parameter(torch.randn(shape, generator=generator))
        for shape in ((4, 3), (4,), (2, 4), ())
    ]
    groups = [
        {"params": params[:2]},  # two groups with their own rates
        {"params": params[2:], "lr": 3e-3},
    ]
    if kind == "rmsprop":
        return params, torch.optim.RMSprop(groups, lr=1e-2, alpha=0.9, eps=1e-5)
    decay = 0.1 if kind == "adam+decay" else 0.0
    return params, torch.optim.Adam(groups, lr=1e-2, betas=(0.8, 0.95), weight_decay=decay)


@pytest.mark.parametrize("kind", ["adam", "adam+decay", "rmsprop"])
@pytest.mark.parametrize("compile_step", [False, pytest.param(True, marks=pytest.mark.compile)])
@pytest.mark.parametrize("host_corrections", [None, False], ids=["host", "in-graph"])
def test_the_graph_optimizer_steps_as_torch_does(kind, compile_step, host_corrections):
    """`GraphOptimizer.step` against ``optimizer.step()``: both param groups, a parameter
    left without a gradient (skipped, as eager skips one without ``.grad``, so that its
    step count falls behind its group's), and a non-applied step that changes nothing;
    with Adam's bias corrections computed before the call (the default for step counts
    on the CPU) and in the graph (as for counts on an accelerator)."""
    params, optimizer = _optimizer_case(kind)
    mirror, reference = _optimizer_case(kind)
    stepper = graph_optimizer.GraphOptimizer(optimizer, host_corrections)
    has_corrections = [c is not None for c in stepper.corrections]
    assert has_corrections == [kind != "rmsprop" and host_corrections is None] * 2
    # one graph (a graph break fails), dynamic as an on-policy update's; every case
    # compiles the same method, so each starts afresh under dynamo's recompile limit
    torch._dynamo.reset()
    step = (
        torch.compile(stepper.step, fullgraph=True, dynamic=True) if compile_step else stepper.step
    )
    generator = torch.Generator().manual_seed(1)
    for index in range(4):
        grads = [torch.randn(p.shape, generator=generator) for p in params]
        grads[1] = None if index == 2 else grads[1]
        before = [p.detach().clone() for p in params]
        stepper.refresh()
        with torch.no_grad():
            step(grads, torch.tensor(index != 3))
        if index == 3:  # not applied: every parameter and state as it was
            for param, old in zip(params, before, strict=True):
                torch.testing.assert_close(param.detach(), old, rtol=0, atol=0)
            continue
        for param, grad in zip(mirror, grads, strict=True):
            param.grad = grad
        reference.step()
        reference.zero_grad(set_to_none=True)
        for param, expected in zip(params, mirror, strict=True):
            torch.testing.assert_close(param.detach(), expected.detach(), rtol=1e-5, atol=1e-6)
    for param, expected in zip(params, mirror, strict=True):
        for name, value in reference.state[expected].items():
            torch.testing.assert_close(optimizer.state[param][name], value, rtol=1e-5, atol=1e-6)


def test_each_groups_state_is_one_flat_tensor_per_name_that_the_optimizer_sees():
    """The graph reads a group's states as one tensor per name; the optimizer's own
    tensors are views of it, so eager steps, ``state_dict`` and a checkpoint's load (with
    `reattach`) all act on what the graph reads. A group whose tensors differ in dtype
    keeps them apart."""
    params, optimizer = _optimizer_case("adam")
    stepper = graph_optimizer.GraphOptimizer(optimizer)
    for members, flat in zip(stepper.members, stepper.flat, strict=True):
        assert set(flat) == {"step", "exp_avg", "exp_avg_sq"}
        for name, tensor in flat.items():
            for index in members:
                view = optimizer.state[params[index]][name]
                assert view.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr()
    for param in params:  # an eager step moves the flat tensors
        param.grad = torch.ones_like(param)
    optimizer.step()
    assert stepper.flat[0]["step"].tolist() == [1.0, 1.0]
    assert torch.equal(stepper.flat[1]["exp_avg"], torch.full((9,), 0.2))
    saved = optimizer.state_dict()
    optimizer.load_state_dict(saved)  # new state tensors, which reattach copies back
    stepper.reattach()
    optimizer.step()
    assert stepper.flat[0]["step"].tolist() == [2.0, 2.0]

    mixed = [torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2).double())]
    assert graph_optimizer.GraphOptimizer(torch.optim.Adam(mixed)).flat == [None]


@pytest.mark.compile
@pytest.mark.slow
@pytest.mark.ci_budget  # half a minute on a cold compile cache
def test_a_compiled_cnn_update_gives_the_eager_numbers():
    # Image encoders keep channels-last filters (faster CPU convolutions): the compiled
    # graph, its optimizer's flat state and a checkpoint must all see through the layout.
    spec = BoundedTensorSpec((2, 8, 8), torch.uint8, 0, 255)
    network = NetworkConfig(hidden_sizes=(8,), cnn="small", share_encoder=True)
    eager = make_ppo(PPOConfig(), spec, DISCRETE, network)
    conv = eager.network.actor_encoder.conv[0].weight
    assert conv.is_contiguous(memory_format=torch.channels_last)
    graph = copy.deepcopy(eager)
    compile_update(graph, "default")
    generator = torch.Generator().manual_seed(1)
    for _ in range(2):
        batch = _on_policy_batches(True)[0]
        batch["observation"] = torch.randint(0, 256, (N, *spec.shape), generator=generator)
        batch["observation"] = batch["observation"].to(torch.uint8)
        expected, result = eager.update(batch), graph.update(batch)
        for key, value in expected.metrics.items():
            torch.testing.assert_close(result.metrics[key], value, rtol=1e-4, atol=1e-5)
        assert_close_states(eager, graph)
    assert graph.accelerator.compile_seconds > 0
    fresh = make_ppo(PPOConfig(), spec, DISCRETE, network)
    fresh.load_state_dict(graph.state_dict())
    assert_close_states(eager, fresh)
