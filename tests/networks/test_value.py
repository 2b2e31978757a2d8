import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from cadence.data.specs import BoundedTensorSpec, TensorSpec
from cadence.networks.config import NetworkConfig
from cadence.networks.encoders import make_encoder
from cadence.networks.ensemble import EnsembleLayerNorm, EnsembleLinear, EnsembleMLP
from cadence.networks.mlp import MLP
from cadence.networks.value import CriticEnsemble, QNetwork, ValueNetwork


def test_value_and_q_network_shapes():
    encoder = make_encoder(TensorSpec((4,)))
    assert ValueNetwork(encoder, (32, 32))(torch.zeros(5, 7, 4)).shape == (5, 7)
    assert QNetwork(encoder, 3, (32,))(torch.zeros(5, 4)).shape == (5, 3)


def test_value_network_over_images():
    spec = BoundedTensorSpec((3, 64, 64), torch.uint8, 0, 255)
    encoder = make_encoder(spec, NetworkConfig(cnn="small"))
    assert ValueNetwork(encoder, (64,))(spec.sample((2,))).shape == (2,)


def member_forward(mlp: EnsembleMLP, member: int, x: torch.Tensor) -> torch.Tensor:
    """What member ``member`` computes, as a plain MLP would (F.linear with weight[e].T)."""
    for layer in mlp:
        if isinstance(layer, EnsembleLinear):
            x = F.linear(x, layer.weight[member].T, layer.bias[member, 0])
        elif isinstance(layer, EnsembleLayerNorm):
            x = F.layer_norm(x, x.shape[-1:], layer.weight[member, 0], layer.bias[member, 0])
        else:
            x = layer(x)
    return x


@pytest.mark.parametrize("layer_norm", [False, True])
def test_critic_ensemble_equals_per_member_computation(layer_norm):
    torch.manual_seed(0)
    critic = CriticEnsemble(make_encoder(TensorSpec((5,))), 2, (16, 16), 3, layer_norm=layer_norm)
    if layer_norm:  # make per-member affine parameters differ, as after training
        for module in critic.mlp:
            if isinstance(module, EnsembleLayerNorm):
                nn.init.normal_(module.weight)
    observation, action = torch.randn(4, 6, 5), torch.randn(4, 6, 2)
    q = critic(observation, action)
    assert q.shape == (3, 4, 6)
    inputs = torch.cat([observation, action], -1)
    for member in range(3):
        expected = member_forward(critic.mlp, member, inputs).squeeze(-1)
        torch.testing.assert_close(q[member], expected)
    assert not torch.allclose(q[0], q[1])  # members are initialised independently


def test_ensemble_members_have_independent_gradients():
    critic = CriticEnsemble(make_encoder(TensorSpec((3,))), 1, (8,), 2)
    critic(torch.randn(10, 3), torch.randn(10, 1))[0].sum().backward()
    grad = critic.mlp[0].weight.grad
    assert grad[0].abs().sum() > 0 and grad[1].abs().sum() == 0


def test_ensemble_orthogonal_init_per_member():
    layer = EnsembleLinear(32, 32, 4, gain=2.0)
    for member in range(4):
        w = layer.weight[member]
        torch.testing.assert_close(w.T @ w, 4 * torch.eye(32), atol=1e-4, rtol=0)
    assert (layer.bias == 0).all()


class _CountOps(TorchDispatchMode):
    """Counts the ATen ops dispatched (on a GPU, roughly the kernels launched)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def _ops_per_call(fn) -> int:
    with _CountOps() as counter:
        fn()
    return counter.count


def test_a_batched_ensemble_runs_the_same_ops_whatever_its_size():
    """Forward and backward at batch 256, 256x256 hidden (SAC's sizes): the batched
    ensemble dispatches as many ops for 10 members as for 2, a loop over members 5x as
    many. On a GPU each op is a kernel launch, which bounds small networks; on a CPU
    both are bound by the same matmul FLOPs (speed: ``benchmarks/update_speed.py``)."""
    torch.manual_seed(0)
    in_dim, batch = 17 + 6, 256
    x = torch.randn(batch, in_dim)
    batched, looped = {}, {}
    for num_critics in (2, 10):
        ensemble = EnsembleMLP(in_dim, (256, 256), 1, num_critics)
        loop = nn.ModuleList(MLP(in_dim, (256, 256), 1, "relu") for _ in range(num_critics))
        batched[num_critics] = _ops_per_call(
            lambda e=ensemble, n=num_critics: e(x.expand(n, batch, in_dim)).sum().backward()
        )
        looped[num_critics] = _ops_per_call(
            lambda m=loop: torch.stack([mlp(x) for mlp in m]).sum().backward()
        )
    assert batched[10] == batched[2] < looped[2]
    assert looped[10] > 4 * looped[2] - 10


def _critic_values_and_gradients(critic, observation, action, policy_action, paired: bool):
    action, policy_action = action.clone(), policy_action.clone().requires_grad_(True)
    if paired:
        q, q_policy = critic.with_policy_actions(observation, action, policy_action)
    else:
        q = critic(observation, action)
        q_policy = critic(observation, policy_action, detach_parameters=True)
    critic.zero_grad(set_to_none=True)
    (q.square().sum() + 3 * q_policy.sum()).backward()
    grads = [p.grad.clone() for p in critic.parameters()]
    return q.detach(), q_policy.detach(), policy_action.grad, grads


@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=pytest.mark.compile)])
@pytest.mark.parametrize(("obs_dim", "action_dim", "layer_norm"), [(3, 1, False), (17, 6, True)])
def test_with_policy_actions_matches_two_separate_passes(compiled, obs_dim, action_dim, layer_norm):
    torch.manual_seed(0)
    critic = CriticEnsemble(
        make_encoder(TensorSpec((obs_dim,))), action_dim, (32, 32), 2, layer_norm=layer_norm
    )
    observation, action, policy_action = (
        torch.randn(16, obs_dim),
        torch.randn(16, action_dim),
        torch.randn(16, action_dim),
    )
    reference = _critic_values_and_gradients(critic, observation, action, policy_action, False)

    def paired(*args):
        return _critic_values_and_gradients(critic, *args, True)

    if compiled:  # the compiled path unrolls the small action matmul
        forward = torch.compile(critic.with_policy_actions, dynamic=False)
        critic.with_policy_actions = forward
    result = paired(observation, action, policy_action)
    for expected, actual in zip(reference[:3], result[:3], strict=True):
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    # The critics' gradients come from the first term only, as with detach_parameters.
    for expected, actual in zip(reference[3], result[3], strict=True):
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
