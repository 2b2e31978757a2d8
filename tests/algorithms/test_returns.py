import pytest
import torch

from cadence.algorithms.returns import (
    discounted_return,
    generalized_advantage_estimation,
    n_step_return,
    td_lambda_return,
)
from cadence.data.time_step import StepType

F, M, L = StepType.FIRST, StepType.MID, StepType.LAST


def tensor(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def three_steps():
    """FIRST, MID, MID with rewards 1, 2 after the first step; one column."""
    step_type = torch.tensor([[F], [M], [M]])
    reward = tensor([[0.0], [1.0], [2.0]])
    discount = torch.ones(3, 1)
    value = tensor([[0.5], [1.0], [2.0]])
    return reward, discount, step_type, value


def boundaries():
    """Two columns: a truncation (LAST, discount 1) at step 2 in column 0, a
    termination (LAST, discount 0) at step 2 in column 1; both reset at step 3.

    The reward of the FIRST step (100) belongs to no action and must never count.
    """
    step_type = torch.tensor([[F, F], [M, M], [L, L], [F, F], [M, M]])
    reward = tensor([[0, 0], [1, 1], [2, 2], [100, 100], [3, 3]])
    discount = tensor([[1, 1], [1, 1], [1, 0], [1, 1], [1, 1]])
    value = tensor([[1, 1], [2, 2], [4, 4], [8, 8], [16, 16]])
    return reward, discount, step_type, value


def random_episodes(num_steps: int = 12, batch_size: int = 6, seed: int = 0):
    """Well-formed streams: FIRST after every LAST, LAST with discount 0 or 1."""
    generator = torch.Generator().manual_seed(seed)
    is_last = torch.rand(num_steps, batch_size, generator=generator) < 0.25
    is_first = torch.zeros_like(is_last)
    is_first[0] = True
    is_first[1:] = is_last[:-1]
    is_last &= ~is_first
    step_type = torch.full((num_steps, batch_size), int(M))
    step_type[is_first] = int(F)
    step_type[is_last] = int(L)
    terminated = torch.rand(num_steps, batch_size, generator=generator) < 0.5
    discount = (~(is_last & terminated)).float()
    reward = torch.randn(num_steps, batch_size, generator=generator)
    value = torch.randn(num_steps, batch_size, generator=generator)
    return reward, discount, step_type, value


def test_three_step_trajectory_by_hand():
    reward, discount, step_type, value = three_steps()
    # delta_1 = 2 + 0.9 * 2 - 1 = 2.8; delta_0 = 1 + 0.9 * 1 - 0.5 = 1.4
    gae = generalized_advantage_estimation(reward, discount, step_type, value, 0.9, 0.5)
    torch.testing.assert_close(gae, tensor([[1.4 + 0.45 * 2.8], [2.8]]))
    mc = discounted_return(reward, discount, step_type, value, 0.9)
    torch.testing.assert_close(mc, tensor([[1 + 0.9 * 3.8], [3.8]]))
    td = td_lambda_return(reward, discount, step_type, value, 0.9, 0.5)
    torch.testing.assert_close(td, tensor([[1 + 0.9 * (0.5 * 1.0 + 0.5 * 3.8)], [3.8]]))


def test_discounted_return_bootstraps_at_truncation_not_at_termination():
    ret = discounted_return(*boundaries(), gamma=0.5)
    # column 0: G1 = 2 + 0.5 * V2 = 4, G0 = 1 + 0.5 * 4; column 1: G1 = 2 + 0 = 2.
    # step 2 is LAST: 0; step 3 (FIRST) = 3 + 0.5 * 16 ignores the 100.
    torch.testing.assert_close(ret, tensor([[3, 2], [4, 2], [0, 0], [11, 11]]))


def test_gae_at_truncation_and_termination():
    gae = generalized_advantage_estimation(*boundaries(), gamma=0.5, gae_lambda=0.5)
    # column 0: delta = [1 + 1 - 1, 2 + 2 - 2, -, 3 + 8 - 8]; A0 = 1 + 0.25 * 2
    # column 1: delta = [1 + 1 - 1, 2 + 0 - 2, -, 3]; A0 = 1 + 0.25 * 0
    torch.testing.assert_close(gae, tensor([[1.5, 1], [2, 0], [0, 0], [3, 3]]))


def test_n_step_return_at_boundaries():
    ret = n_step_return(*boundaries(), gamma=0.5, n=2)
    torch.testing.assert_close(ret, tensor([[3, 2], [4, 2], [0, 0], [11, 11]]))


def test_n_step_return_sums_n_rewards_then_bootstraps():
    step_type = torch.tensor([[F], [M], [M], [M], [M], [M]])
    reward = tensor([[0], [1], [1], [1], [1], [1]])
    value = tensor([[0], [10], [20], [30], [40], [50]])
    ret = n_step_return(reward, torch.ones(6, 1), step_type, value, gamma=0.5, n=2)
    # r + 0.5 r + 0.25 V_{t+2}; the last step only has one reward before the end.
    expected = tensor([[1.5 + 5], [1.5 + 7.5], [1.5 + 10], [1.5 + 12.5], [1 + 25]])
    torch.testing.assert_close(ret, expected)


def test_first_after_last_reads_nothing_of_the_new_episode():
    reward, discount, step_type, value = boundaries()
    changed_reward, changed_value = reward.clone(), value.clone()
    changed_reward[3:] += 7.0
    changed_value[3:] += 7.0
    args = {"gamma": 0.9}
    for fn, extra in [
        (discounted_return, {}),
        (generalized_advantage_estimation, {"gae_lambda": 0.8}),
        (td_lambda_return, {"lambda_": 0.8}),
        (n_step_return, {"n": 3}),
    ]:
        before = fn(reward, discount, step_type, value, **args, **extra)
        after = fn(changed_reward, discount, step_type, changed_value, **args, **extra)
        torch.testing.assert_close(after[:3], before[:3], msg=fn.__name__)
        assert not torch.allclose(after[3], before[3]), fn.__name__


def test_last_at_the_end_of_the_unroll():
    step_type = torch.tensor([[F, F], [M, M], [L, L]])
    reward = tensor([[0, 0], [1, 1], [2, 2]])
    discount = tensor([[1, 1], [1, 1], [1, 0]])
    value = tensor([[1, 1], [2, 2], [4, 4]])
    ret = discounted_return(reward, discount, step_type, value, 0.5)
    torch.testing.assert_close(ret, tensor([[1 + 0.5 * 4, 1 + 0.5 * 2], [4, 2]]))


def test_gae_lambda_one_is_discounted_return_minus_value():
    reward, discount, step_type, value = random_episodes()
    gae = generalized_advantage_estimation(reward, discount, step_type, value, 0.97, 1.0)
    mc = discounted_return(reward, discount, step_type, value, 0.97)
    valid = step_type[:-1] != L
    torch.testing.assert_close(gae[valid], (mc - value[:-1])[valid])
    assert (gae[~valid] == 0).all() and (mc[~valid] == 0).all() and (~valid).any()


def test_lambda_zero_is_one_step_td():
    reward, discount, step_type, value = random_episodes()
    valid = (step_type[:-1] != L).float()
    target = (reward[1:] + 0.9 * discount[1:] * value[1:]) * valid
    td = td_lambda_return(reward, discount, step_type, value, 0.9, 0.0)
    torch.testing.assert_close(td, target)
    gae = generalized_advantage_estimation(reward, discount, step_type, value, 0.9, 0.0)
    torch.testing.assert_close(gae, (target - value[:-1]) * valid)
    torch.testing.assert_close(n_step_return(reward, discount, step_type, value, 0.9, 1), target)


@pytest.mark.parametrize("lambda_", [0.0, 0.3, 0.95, 1.0])
def test_td_lambda_return_is_gae_plus_value(lambda_):
    reward, discount, step_type, value = random_episodes(seed=1)
    gae = generalized_advantage_estimation(reward, discount, step_type, value, 0.99, lambda_)
    td = td_lambda_return(reward, discount, step_type, value, 0.99, lambda_)
    valid = step_type[:-1] != L
    torch.testing.assert_close(td[valid], (gae + value[:-1])[valid])


def test_n_step_over_the_whole_unroll_is_the_discounted_return():
    reward, discount, step_type, value = random_episodes(seed=2)
    mc = discounted_return(reward, discount, step_type, value, 0.9)
    torch.testing.assert_close(n_step_return(reward, discount, step_type, value, 0.9, 50), mc)


def test_columns_are_independent():
    reward, discount, step_type, value = random_episodes(seed=3)
    gae = generalized_advantage_estimation(reward, discount, step_type, value, 0.9, 0.7)
    for b in range(reward.shape[1]):
        column = (x[:, b : b + 1] for x in (reward, discount, step_type, value))
        alone = generalized_advantage_estimation(*column, 0.9, 0.7)
        torch.testing.assert_close(gae[:, b : b + 1], alone)


@pytest.mark.parametrize(
    "fn, extra",
    [
        (discounted_return, {}),
        (generalized_advantage_estimation, {"gae_lambda": 0.9}),
        (td_lambda_return, {"lambda_": 0.9}),
        (n_step_return, {"n": 3}),
    ],
)
def test_batch_major_windows_match_time_major(fn, extra):
    reward, discount, step_type, value = random_episodes(seed=4)
    time_major = fn(reward, discount, step_type, value, 0.9, **extra)
    batch_major = fn(reward.T, discount.T, step_type.T, value.T, 0.9, **extra, time_dim=1)
    assert batch_major.shape == (reward.shape[1], reward.shape[0] - 1)
    torch.testing.assert_close(batch_major, time_major.T)


def test_td_lambda_return_is_differentiable():
    reward, discount, step_type, value = three_steps()
    value.requires_grad_(True)
    td_lambda_return(reward, discount, step_type, value, 0.9, 0.5).sum().backward()
    # d/dV of G0 + G1 = [0, 0.9 * 0.5, 0.9 + 0.9 * 0.9 * 0.5]
    torch.testing.assert_close(value.grad, tensor([[0.0], [0.45], [0.9 + 0.405]]))


def test_shape_errors_name_the_tensor():
    reward, discount, step_type, value = three_steps()
    with pytest.raises(ValueError, match="value"):
        discounted_return(reward, discount, step_type, value[:2], 0.9)
    with pytest.raises(ValueError, match="at least 2 time steps"):
        discounted_return(reward[:1], discount[:1], step_type[:1], value[:1], 0.9)
    with pytest.raises(ValueError, match="n must be"):
        n_step_return(reward, discount, step_type, value, 0.9, 0)
