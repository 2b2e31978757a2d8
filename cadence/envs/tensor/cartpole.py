"""CartPole-v1 in torch: Gymnasium's ``CartPoleEnv`` dynamics for a batch of carts.

Constants, Euler integration, thresholds, rewards, the reset distribution
(uniform in ``[-0.05, 0.05]^4``) and the 500-step limit are those of
``gymnasium/envs/classic_control/cartpole.py``; in float64 the trajectories
match Gymnasium's to rounding.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from cadence.data.specs import BoundedTensorSpec, DiscreteTensorSpec
from cadence.envs.tensor import drawing
from cadence.envs.tensor.environment import TensorEnvironment, check_render_mode

GRAVITY = 9.8
MASS_CART = 1.0
MASS_POLE = 0.1
TOTAL_MASS = MASS_POLE + MASS_CART
HALF_POLE_LENGTH = 0.5
POLEMASS_LENGTH = MASS_POLE * HALF_POLE_LENGTH
FORCE_MAG = 10.0
TAU = 0.02
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4
RESET_BOUND = 0.05

_SCREEN_WIDTH, _SCREEN_HEIGHT = 600, 400
_POLE_COLOR, _CART_COLOR, _AXLE_COLOR = (202, 152, 101), (0, 0, 0), (129, 132, 203)


class CartPoleDynamics:
    """Batched cart-pole physics; the state is ``[B, 4]``: x, x_dot, theta, theta_dot.

    Args:
        dtype: the dtype of the physical state (float64 to match Gymnasium exactly).
        sutton_barto_reward: Gymnasium's option: reward 0 per step and -1 on termination.
    """

    state_size = 4
    max_episode_steps = 500

    def __init__(self, dtype: torch.dtype = torch.float32, sutton_barto_reward: bool = False):
        self.dtype = dtype
        self.sutton_barto_reward = sutton_barto_reward
        # Built exactly as Gymnasium builds its observation space's bounds.
        high = np.array([X_THRESHOLD * 2, np.inf, THETA_THRESHOLD * 2, np.inf], dtype=np.float32)
        self.observation_spec = BoundedTensorSpec((4,), torch.float32, -high, high)
        self.action_spec = DiscreteTensorSpec((), torch.int64, 2)

    def initial_state(self, uniform: torch.Tensor) -> torch.Tensor:
        """Gymnasium's reset distribution, ``U[-0.05, 0.05]`` per component, from ``U[0, 1)``."""
        return uniform.mul(2 * RESET_BOUND).sub_(RESET_BOUND)

    def step(
        self, state: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One Euler step for actions ``[B]`` (1 pushes right, 0 left); see `TensorDynamics`."""
        x, x_dot, theta, theta_dot = state
        force = torch.where(action == 1, FORCE_MAG, -FORCE_MAG).to(self.dtype)
        cos_theta, sin_theta = torch.cos(theta), torch.sin(theta)
        # Gymnasium's operation order (products of commuted factors are identical), so
        # float64 results agree with it to the last bit but for libm's sin/cos.
        temp = theta_dot.square().mul_(POLEMASS_LENGTH).mul_(sin_theta).add_(force).div_(TOTAL_MASS)
        denominator = cos_theta.square().mul_(MASS_POLE).div_(TOTAL_MASS).neg_().add_(4.0 / 3.0)
        theta_acc = (
            (sin_theta * GRAVITY).sub_(cos_theta * temp).div_(denominator.mul_(HALF_POLE_LENGTH))
        )
        x_acc = temp.sub_((theta_acc * POLEMASS_LENGTH).mul_(cos_theta).div_(TOTAL_MASS))
        # Euler: state + TAU * d(state)/dt, per element exactly Gymnasium's `x + tau * x_dot`,
        # in three whole-state ops rather than three per component.
        derivative = torch.stack((x_dot, x_acc, theta_dot, theta_acc))
        next_state = derivative.mul_(TAU).add_(state)
        terminated = (next_state[0].abs() > X_THRESHOLD).logical_or_(
            next_state[2].abs() > THETA_THRESHOLD
        )
        return next_state, self._reward(terminated), terminated

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        return state.T.to(torch.float32, memory_format=torch.contiguous_format, copy=True)

    def render(self, state: np.ndarray) -> np.ndarray:
        """A 400x600 frame: the track, the cart and the pole, scaled as Gymnasium's."""
        x, _, theta, _ = (float(v) for v in state)
        scale = _SCREEN_WIDTH / (X_THRESHOLD * 2)
        frame = drawing.blank_canvas(_SCREEN_HEIGHT, _SCREEN_WIDTH)
        track_y = _SCREEN_HEIGHT - 100.0
        frame[int(track_y), :] = drawing.BLACK
        cart_x, cart_y = x * scale + _SCREEN_WIDTH / 2, track_y - 15.0
        half_w, half_h = 25.0, 15.0
        cart = [
            (cart_x - half_w, cart_y - half_h),
            (cart_x + half_w, cart_y - half_h),
            (cart_x + half_w, cart_y + half_h),
            (cart_x - half_w, cart_y + half_h),
        ]
        drawing.fill_convex_polygon(frame, cart, _CART_COLOR)
        pole_length = scale * 2 * HALF_POLE_LENGTH
        # theta > 0 leans the pole right; image y grows downwards.
        tip = (cart_x + pole_length * math.sin(theta), cart_y - pole_length * math.cos(theta))
        drawing.fill_convex_polygon(
            frame, drawing.thick_segment((cart_x, cart_y), tip, 10.0), _POLE_COLOR
        )
        drawing.fill_circle(frame, (cart_x, cart_y), 5.0, _AXLE_COLOR)
        return frame

    def _reward(self, terminated: torch.Tensor) -> torch.Tensor:
        if self.sutton_barto_reward:
            return -terminated.to(self.dtype)
        return torch.ones(terminated.shape, dtype=self.dtype, device=terminated.device)


def make_cartpole(
    num_envs: int,
    *,
    seed: int = 0,
    device: Any = "cpu",
    max_episode_steps: int | None = None,
    dtype: torch.dtype = torch.float32,
    sutton_barto_reward: bool = False,
    render_mode: str | None = None,
) -> TensorEnvironment:
    """A batch of tensor-native ``CartPole-v1`` envs.

    Args:
        num_envs: the batch size.
        seed: env ``i`` is seeded ``seed + i`` (see `TensorEnvironment`).
        device: where the envs run.
        max_episode_steps: the time limit (default Gymnasium's 500).
        dtype: the physical state's dtype.
        sutton_barto_reward: Gymnasium's ``sutton_barto_reward`` option.
        render_mode: accepted for Gymnasium compatibility; only ``"rgb_array"``
            (or ``None``) is supported, and frames come from ``env.render(i)``.

    >>> env = make_cartpole(4, seed=0)
    >>> env.reset().observation.shape
    torch.Size([4, 4])
    """
    check_render_mode(render_mode)
    dynamics = CartPoleDynamics(dtype, sutton_barto_reward)
    return TensorEnvironment(dynamics, num_envs, seed, device, max_episode_steps)
