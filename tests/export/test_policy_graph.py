"""`PolicyGraph` and the writers on algorithms built from named configs (no training):
TD3's and DDPG's files act as their ``predict_step`` at batch sizes other than the traced
one, the observation normaliser's statistics are inside the file, and what cannot be one
graph is refused with a reason."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import onnxruntime
import pytest
import torch

from cadence.algorithms.build import build_algorithm
from cadence.config import load_config
from cadence.data.time_step import StepType, TimeStep
from cadence.envs.make import GymEnvFactory, make_env
from cadence.envs.wrapper_config import gym_wrappers
from cadence.export.action_wrappers import fold_action_wrappers
from cadence.export.errors import ExportError
from cadence.export.graph import PolicyGraph
from cadence.export.writers import write_onnx, write_torchscript
from cadence.transforms.build import make_data_transformer
from cadence.transforms.transformer import DataTransformer


def _graph(name: str, overrides=()) -> tuple[PolicyGraph, object]:
    """The graph of ``name``'s freshly built algorithm and transformers, and its env."""
    config = load_config(name, list(overrides))
    env = make_env(
        config.env.name,
        1,
        "serial",
        0,
        gym_wrappers=gym_wrappers(config.env.all_wrappers),
        env_kwargs=dict(config.env.env_kwargs or {}),
    )
    env.close()
    transformer = make_data_transformer(config.data_transformers, env.observation_spec)
    spec = env.observation_spec
    if transformer is not None:
        transformer.eval()
        spec = transformer.transformed_observation_spec(spec)
    algorithm = build_algorithm(config.algorithm, spec, env.action_spec, config.network).eval()
    action_map = fold_action_wrappers(config).action_map
    graph = PolicyGraph(
        algorithm, transformer, env.observation_spec, env.action_spec, False, action_map
    )
    return graph, env


def _observations(env, batch: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return 2 * torch.randn((batch, *env.observation_spec.shape), generator=generator)


def _cadence_actions(graph: PolicyGraph, observation: torch.Tensor) -> torch.Tensor:
    batch = observation.shape[0]
    time_step = TimeStep(
        step_type=torch.full((batch,), int(StepType.MID)),
        reward=torch.zeros(batch),
        discount=torch.ones(batch),
        observation=observation,
        prev_action=graph.action_spec.zeros((batch,)),
        env_id=torch.arange(batch),
    )
    if graph.transformer is not None:
        time_step, _ = graph.transformer.transform_time_step(time_step, ())
    with torch.no_grad():
        return graph.algorithm.predict_step(time_step, ()).output


# PPO, A2C, SAC, DQN and Dreamer are exported from real runs in test_export_run.py.
@pytest.mark.parametrize("name", ["td3_pendulum", "ddpg_pendulum"])
def test_both_files_act_as_predict_step_at_any_batch(name, tmp_path):
    graph, env = _graph(name)
    write_onnx(graph, tmp_path / "p.onnx", ["observation"], ["action"])
    write_torchscript(graph, tmp_path / "p.pt")
    session = onnxruntime.InferenceSession(str(tmp_path / "p.onnx"))
    module = torch.jit.load(str(tmp_path / "p.pt"))
    for batch in (1, 7):
        observation = _observations(env, batch, seed=batch)
        expected = _cadence_actions(graph, observation).numpy()
        onnx_action = session.run(None, {"observation": observation.numpy()})[0]
        (script_action,) = (out.numpy() for out in module(observation))
        assert onnx_action.shape == script_action.shape == expected.shape
        np.testing.assert_allclose(onnx_action, expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(script_action, expected, rtol=1e-5, atol=1e-6)
        assert np.all(np.abs(expected) <= 2.0) and np.abs(expected).max() > 0  # the bounds


def test_the_normalizer_statistics_are_in_the_file(tmp_path):
    names = "data_transformers.names=[observation_normalizer]"
    graph, env = _graph("td3_pendulum", [names])
    stats = graph.transformer.transformers[0].stats["observation"]
    stats.mean.fill_(3.0)
    stats.var.fill_(4.0)
    write_torchscript(graph, tmp_path / "p.pt")
    module = torch.jit.load(str(tmp_path / "p.pt"))
    observation = _observations(env, 6, seed=0)
    normalized = ((observation - 3.0) / 2.0).clamp(-10.0, 10.0)
    with torch.no_grad():
        on_normalized = graph.algorithm.actor(normalized)
        expected = graph.algorithm.to_env_action(on_normalized)
    torch.testing.assert_close(module(observation)[0], expected)
    assert not torch.allclose(module(normalized)[0], expected)


def test_a_frame_history_is_state_the_file_carries_and_restarts_with_an_episode(tmp_path):
    """replay_frame_stack's history goes in and out of the file as state: stepped through
    two episodes, both files act as the transformer and policy do in cadence."""
    stack = [
        "data_transformers.names=[replay_frame_stack]",
        "data_transformers.replay_frame_stack.num_frames=3",
    ]
    graph, env = _graph("td3_pendulum", stack)
    inputs = [info.name for info in graph.input_infos()]
    outputs = [info.name for info in graph.output_infos()]
    assert inputs == ["observation", "is_first", "state/transformer/0"]
    assert outputs == ["action", "next_state/transformer/0"]
    assert graph.initial_state()["state/transformer/0"].shape == (1, 2, 3)  # 2 earlier frames
    write_onnx(graph, tmp_path / "p.onnx", inputs, outputs)
    write_torchscript(graph, tmp_path / "p.pt")
    session = onnxruntime.InferenceSession(str(tmp_path / "p.onnx"))
    module = torch.jit.load(str(tmp_path / "p.pt"))

    firsts = [True, False, False, False, True, False]  # a second episode at step 4
    observations = [_observations(env, 2, seed=t) for t in range(len(firsts))]
    history = torch.full((2, 2, 3), 7.0)  # any state: the first step restarts it
    onnx_state, script_state = history.numpy(), history
    cadence_state = ()
    for first, observation in zip(firsts, observations, strict=True):
        is_first = torch.full((2,), first)
        time_step = TimeStep(
            step_type=torch.full((2,), int(StepType.FIRST if first else StepType.MID)),
            reward=torch.zeros(2),
            discount=torch.ones(2),
            observation=observation,
            prev_action=graph.action_spec.zeros((2,)),
            env_id=torch.arange(2),
        )
        stacked, cadence_state = graph.transformer.transform_time_step(time_step, cadence_state)
        with torch.no_grad():
            expected = graph.algorithm.predict_step(stacked, ()).output.numpy()
        feed = {"observation": observation.numpy(), "is_first": is_first.numpy()}
        onnx_action, onnx_state = session.run(None, {**feed, "state/transformer/0": onnx_state})
        script_action, script_state = module(observation, is_first, script_state)
        np.testing.assert_allclose(onnx_action, expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(script_action.numpy(), expected, rtol=1e-5, atol=1e-6)
    # After a FIRST and one more step, the history is [first frame, first frame, latest].
    np.testing.assert_allclose(onnx_state[:, 0], observations[4].numpy(), rtol=1e-6)
    torch.testing.assert_close(script_state[:, 1], observations[5])
    # The stacks matter: the same last frame with the history left at 7 acts otherwise.
    stale, _ = module(observations[5], torch.full((2,), False), history)
    assert not torch.allclose(stale, script_action)


class _RunningCount(DataTransformer):
    """A transformer whose acting state (a step count) runs on across episodes."""

    def initial_state(self, batch_size):
        return {"count": torch.zeros(batch_size)}

    def transform_time_step(self, time_step, state):
        return time_step, {"count": state["count"] + 1}

    def transform_sample(self, sample):
        return sample


def test_a_transformer_state_that_outlives_an_episode_start_is_refused():
    config = load_config("td3_pendulum")
    env = make_env("Pendulum-v1", 1, "serial")
    env.close()
    algorithm = build_algorithm(
        config.algorithm, env.observation_spec, env.action_spec, config.network
    ).eval()
    with pytest.raises(ExportError, match=r"\(_RunningCount\) keep a state .* does not restart"):
        PolicyGraph(algorithm, _RunningCount(), env.observation_spec, env.action_spec, False)


def test_action_wrappers_fold_into_the_file_outermost_first(tmp_path):
    wrappers = [
        {"name": "NormalizedAction"},
        {"name": "RescaleAction", "min_action": -3.0, "max_action": 3.0},
    ]
    override = (
        "env.wrappers=[{name:NormalizedAction},{name:RescaleAction,min_action:-3.0,max_action:3.0}]"
    )
    graph, env = _graph("td3_pendulum", [override])
    assert env.action_spec.minimum.tolist() == [-3.0] and env.action_spec.maximum.tolist() == [3.0]
    write_torchscript(graph, tmp_path / "p.pt")
    observation = _observations(env, 16, seed=0)
    (action,) = torch.jit.load(str(tmp_path / "p.pt"))(observation)
    # cadence's actions, in [-3, 3], through the Gymnasium wrappers themselves.
    policy_action = _cadence_actions(graph, observation).numpy()
    gym_env = GymEnvFactory("Pendulum-v1", 0, 0, gym_wrappers=gym_wrappers(wrappers)).make_gym()
    expected = np.stack([_through_action_wrappers(gym_env, row) for row in policy_action])
    np.testing.assert_allclose(action.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert np.abs(expected).max() <= 2.0 and not np.allclose(expected, policy_action)


def test_normalized_action_clips_before_it_rescales():
    from cadence.export.action_wrappers import ActionWrapperMap

    low, high = np.array([0.0, -4.0]), np.array([1.0, 4.0])
    action_map = ActionWrapperMap([("normalize", -np.ones(2), np.ones(2), low, high)])
    action = action_map(torch.tensor([[5.0, -0.5], [-2.0, 0.25]]))
    torch.testing.assert_close(action, torch.tensor([[1.0, -2.0], [0.0, 1.0]]))


def _through_action_wrappers(env: gym.Env, action: np.ndarray) -> np.ndarray:
    """``action`` as each action wrapper of ``env`` passes it on, outermost first."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.ActionWrapper):
            action = env.action(action)
        env = env.env
    return np.asarray(action)


class _DictActions(gym.Env):
    """A Dict action of a discrete and a bounded continuous entry (and a Tuple of them)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Dict(
        {
            "pick": gym.spaces.Discrete(3),
            "aim": gym.spaces.Tuple((gym.spaces.Box(-0.5, 0.5, (2,), np.float32),)),
        }
    )

    def reset(self, *, seed=None, options=None):
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 0.0, True, False, {}


def test_a_dict_action_is_one_output_per_entry(tmp_path):
    env = make_env(_DictActions, 1, "serial")
    env.close()
    config = load_config("ppo_cartpole")
    algorithm = build_algorithm(
        config.algorithm, env.observation_spec, env.action_spec, config.network
    ).eval()
    with torch.no_grad():  # a mean far outside the bounds, which the file must clip too
        algorithm.network.action_head.parts["aim"].parts["0"].mean.bias.fill_(3.0)
    graph = PolicyGraph(algorithm, None, env.observation_spec, env.action_spec, False)
    names = [info.name for info in graph.output_infos()]
    assert names == ["action/aim/0", "action/pick"]  # the space's order: Gymnasium sorts keys
    write_onnx(graph, tmp_path / "p.onnx", ["observation"], names)
    write_torchscript(graph, tmp_path / "p.pt")
    session = onnxruntime.InferenceSession(str(tmp_path / "p.onnx"))
    module = torch.jit.load(str(tmp_path / "p.pt"))
    observation = _observations(env, 5, seed=0)
    expected = _cadence_actions(graph, observation)
    aim, pick = session.run(None, {"observation": observation.numpy()})
    np.testing.assert_array_equal(pick, expected["pick"].numpy())
    np.testing.assert_allclose(aim, expected["aim"]["0"].numpy(), rtol=1e-5, atol=1e-6)
    assert np.all(np.abs(aim) <= 0.5) and np.abs(aim).max() == 0.5  # clipped to the bounds
    script_aim, script_pick = module(observation)
    assert torch.equal(script_pick, expected["pick"])
    torch.testing.assert_close(script_aim, expected["aim"]["0"])
