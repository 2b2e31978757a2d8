"""The compiled update of the model-based algorithms (``algorithm.compile``): the world-model
step and the policy step, each one graph, give the eager numbers, keep eager's state-dict
keys, and their checkpoints load both ways.

As for the model-free algorithms (tests/accel/test_update_compiler.py): two copies
from the same parameters, the same minibatches and random draws, compared after every
update. The models are tiny, and still compiling each one's two graphs takes most of a
minute on a cold cache.
"""

from __future__ import annotations

import copy

import pytest
import torch

from cadence.accel import compile_update
from cadence.algorithms.off_policy_config import OffPolicyConfig
from cadence.data.specs import BoundedTensorSpec, TensorSpec
from cadence.data.time_step import StepType
from cadence.mbrl import make_model_based
from cadence.mbrl.config import (
    ActorCriticConfig,
    DenoisedMDPConfig,
    DreamerConfig,
    LatentSACConfig,
    SACLatentConfig,
    WorldModelConfig,
)
from cadence.testing.resume import assert_close_states

pytestmark = pytest.mark.compile

OBS_DIM, ACTION_DIM, BATCH, LENGTH, UPDATES = 5, 2, 3, 3, 4
SMALL = {
    "hidden_size": 16,
    "mlp_hidden_size": 16,
    "mlp_layers": 1,
    "embedding_size": 16,
    "x_belief_size": 8,
    "x_state_size": 4,
}
OFF_POLICY = OffPolicyConfig(mini_batch_size=BATCH, mini_batch_length=LENGTH)
ACTOR_CRITIC = ActorCriticConfig(horizon=2, hidden_size=16, num_layers=1)

CONFIGS = {
    "dreamer": DreamerConfig(
        world_model=WorldModelConfig(**SMALL, y_belief_size=0, y_state_size=0),
        actor_critic=ACTOR_CRITIC,
        off_policy=OFF_POLICY,
    ),
    "denoised_mdp": DenoisedMDPConfig(  # x, y and z groups
        world_model=WorldModelConfig(
            **SMALL, y_belief_size=8, y_state_size=4, z_belief_size=8, z_state_size=4
        ),
        actor_critic=ACTOR_CRITIC,
        off_policy=OFF_POLICY,
    ),
    "sac_latent": SACLatentConfig(
        world_model=WorldModelConfig(**SMALL, y_belief_size=8, y_state_size=4),
        sac=LatentSACConfig(hidden_size=16, num_layers=1),
        off_policy=OFF_POLICY,
    ),
}


def _make(name: str):
    torch.manual_seed(0)
    return make_model_based(
        CONFIGS[name],
        TensorSpec((OBS_DIM,)),
        BoundedTensorSpec((ACTION_DIM,), minimum=-2.0, maximum=2.0),
    )


def _batches() -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    batches = []
    for index in range(UPDATES):
        # Episodes start at other steps in every minibatch (the last one's runs on the
        # graph without its guards), in windows that start an episode or cross a boundary.
        step_type = torch.full((BATCH, LENGTH), int(StepType.MID))
        step_type[0, index % LENGTH] = int(StepType.FIRST)
        step_type[1, 1 + index % 2] = int(StepType.FIRST)
        step_type[1, index % 2] = int(StepType.LAST)
        action = torch.rand(BATCH, LENGTH, ACTION_DIM, generator=generator) * 4 - 2
        batches.append(
            {
                "observation": torch.randn(BATCH, LENGTH, OBS_DIM, generator=generator),
                "prev_action": torch.roll(action, 1, dims=1),
                "reward": torch.randn(BATCH, LENGTH, generator=generator),
                "step_type": step_type,
                "discount": (step_type != int(StepType.LAST)).float(),
                "action": action,
            }
        )
    return batches


@pytest.mark.parametrize(
    "name",
    [
        # Dreamer's model is Denoised MDP's without y and z: the same code, compiled again.
        pytest.param("dreamer", marks=pytest.mark.slow),
        # 1.5 min on a cold compile cache: CI runs it beside the learning tests, as it runs
        # sac_latent's (test_ci_budget_a_compiled_sac_latent_update_...).
        pytest.param("denoised_mdp", marks=[pytest.mark.slow, pytest.mark.ci_budget]),
    ],
)
def test_a_compiled_model_based_update_gives_the_eager_numbers(name):
    torch._dynamo.utils.counters.clear()
    eager = _make(name)
    graph = copy.deepcopy(eager)
    compile_update(graph, "default")
    eager.train()
    graph.train()
    for index, batch in enumerate(_batches()):
        torch.manual_seed(index)  # the posterior samples and the imagined actions
        expected = eager.update(batch)
        torch.manual_seed(index)
        result = graph.update(batch)
        assert list(result.metrics) == list(expected.metrics)
        for key, value in expected.metrics.items():
            torch.testing.assert_close(result.metrics[key], value, rtol=1e-4, atol=1e-5)
        assert not bool(result.nonfinite) and not bool(expected.nonfinite)
        assert_close_states(eager, graph, atol=1e-5)
    # Both steps compiled whole (no graph break, none fell back to eager).
    assert not torch._dynamo.utils.counters["graph_break"]
    steps = sorted(key.rsplit(".", 1)[-1] for key in graph.accelerator.graphs)
    assert steps == ["model_step", "policy_step"]
    assert all(g.is_compiled for g in graph.accelerator.graphs.values())
    fresh = _make(name)
    fresh.load_state_dict(graph.state_dict())
    assert_close_states(eager, fresh, atol=1e-5)
    graph.load_state_dict(eager.state_dict())


@pytest.mark.slow
def test_ci_budget_a_compiled_sac_latent_update_gives_the_eager_numbers():
    """The test above for SAC on latents, in CI's budgeted slow run rather than the default
    one: on CI's empty cache its two graphs compile for 40 s, which the default run's 15
    minutes cannot spare."""
    test_a_compiled_model_based_update_gives_the_eager_numbers("sac_latent")
