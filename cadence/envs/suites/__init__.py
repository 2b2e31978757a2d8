"""cadence's own Gymnasium environments, registered under the ``cadence/`` namespace.

Importing this package registers them (as Gymnasium packages do); `make_env`
imports it when it meets an id that Gymnasium does not know yet.

| id | what |
|---|---|
| ``cadence/PixelCartPole-v1`` | CartPole-v1 observed as stacked grayscale frames (`PixelCartPoleEnv`) |
| ``cadence/BitFlip-v0`` | HER's bit flipping, ``n_bits`` kwarg (`BitFlipEnv`, a goal Dict observation) |
| ``cadence/PixelPendulum-v0`` | Pendulum-v1 observed as 64x64 RGB frames on a flat background (`PixelPendulumEnv`) |
| ``cadence/DMC-v0`` | a DeepMind Control Suite task, ``domain``/``task``/``pixels`` kwargs (`DMCEnv`, the ``dmc`` extra) |
| ``cadence/NoisyPendulum-v0`` | Pendulum-v1 plus uncontrollable oscillators, some in the reward (`NoisyPendulumEnv`) |
"""

import gymnasium as gym

from cadence.envs.suites.bit_flip import BitFlipEnv
from cadence.envs.suites.noisy_pendulum import NoisyPendulumEnv
from cadence.envs.suites.pixel_cartpole import PixelCartPoleEnv, draw_cartpole
from cadence.envs.suites.pixel_pendulum import PixelPendulumEnv

__all__ = [
    "BIT_FLIP_ID",
    "DMC_ID",
    "NOISY_PENDULUM_ID",
    "PIXEL_CARTPOLE_ID",
    "PIXEL_PENDULUM_ID",
    "BitFlipEnv",
    "NoisyPendulumEnv",
    "PixelCartPoleEnv",
    "PixelPendulumEnv",
    "draw_cartpole",
]

PIXEL_CARTPOLE_ID = "cadence/PixelCartPole-v1"

if PIXEL_CARTPOLE_ID not in gym.registry:
    gym.register(
        id=PIXEL_CARTPOLE_ID,
        entry_point="cadence.envs.suites.pixel_cartpole:PixelCartPoleEnv",
        max_episode_steps=500,  # CartPole-v1's limit
        reward_threshold=475.0,
    )

BIT_FLIP_ID = "cadence/BitFlip-v0"

if BIT_FLIP_ID not in gym.registry:
    # No registered step limit: the env cuts its episodes itself after n_bits steps.
    gym.register(id=BIT_FLIP_ID, entry_point="cadence.envs.suites.bit_flip:BitFlipEnv")

NOISY_PENDULUM_ID = "cadence/NoisyPendulum-v0"

if NOISY_PENDULUM_ID not in gym.registry:
    gym.register(
        id=NOISY_PENDULUM_ID,
        entry_point="cadence.envs.suites.noisy_pendulum:NoisyPendulumEnv",
        max_episode_steps=200,  # Pendulum-v1's limit
    )

PIXEL_PENDULUM_ID = "cadence/PixelPendulum-v0"

if PIXEL_PENDULUM_ID not in gym.registry:
    gym.register(
        id=PIXEL_PENDULUM_ID,
        entry_point="cadence.envs.suites.pixel_pendulum:PixelPendulumEnv",
        max_episode_steps=200,  # Pendulum-v1's limit
    )

DMC_ID = "cadence/DMC-v0"

if DMC_ID not in gym.registry:
    # dm_control is imported when an env is built: the ``dmc`` extra is optional.
    gym.register(id=DMC_ID, entry_point="cadence.envs.suites.dmc:DMCEnv")
