"""The DeepMind Control Suite as a Gymnasium env, from its state or from 64x64 pixels.

``cadence/DMC-v0`` with ``env_kwargs: {domain: cheetah, task: run, pixels: true}`` runs
``dm_control.suite.load(domain, task)`` through Shimmy's Gymnasium compatibility layer
(episodes of 1000 steps end with a time-limit truncation, as the suite's do). With
``pixels`` the observation is the camera's frame, channel-first ``[3, size, size]``
uint8, rendered offscreen (EGL or OSMesa, chosen as for ``play``, see
`cadence.envs.mujoco_setup`); without, the suite's observation dict flattened to one
float32 vector in the suite's key order.

Needs the ``dmc`` extra (``pip install -e '.[dmc]'``). Action repeat is the config's
``env.action_repeat`` (the paper repeats each action twice).

For pixel distractors, `background_mask` marks the pixels of the current frame that show
the sky or the floor (MuJoCo's segmentation render), which
`cadence.envs.distractors.BackgroundDistractor` replaces with ``mask="segmentation"``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from cadence.envs.mujoco_setup import route_mujoco_warnings, use_offscreen_gl


class DMCEnv(gym.Env):
    """A DeepMind Control Suite task (see the module docstring).

    Args:
        domain, task: the suite's names (``cheetah``/``run``, ``walker``/``walk``, ...).
        pixels: observe 64x64 frames instead of the state.
        size: the frame's height and width.
        camera_id: the camera (0 is the suite's usual tracking camera).
        render_mode: ``None`` or ``"rgb_array"``.

    >>> env = DMCEnv("cheetah", "run", pixels=True)  # doctest: +SKIP
    >>> env.reset(seed=0)[0].shape  # doctest: +SKIP
    (3, 64, 64)
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(
        self,
        domain: str = "cheetah",
        task: str = "run",
        pixels: bool = False,
        size: int = 64,
        camera_id: int = 0,
        render_mode: str | None = None,
    ):
        use_offscreen_gl()
        try:
            from dm_control import suite
            from shimmy.dm_control_compatibility import DmControlCompatibilityV0
        except ImportError as error:
            raise ImportError(
                f"cadence/DMC-v0 needs dm_control and shimmy ({error}); install them with "
                "pip install -e '.[dmc]'"
            ) from None
        _take_mujoco_warnings_from_dm_control()
        self.domain, self.task, self.pixels = domain, task, pixels
        self.size, self.camera_id = size, camera_id
        self.render_mode = render_mode
        self._env = DmControlCompatibilityV0(suite.load(domain, task, task_kwargs={"random": 0}))
        self.action_space = self._env.action_space
        if pixels:
            self.observation_space = spaces.Box(0, 255, (3, size, size), dtype=np.uint8)
        else:
            dim = sum(int(np.prod(s.shape)) for s in self._env.observation_space.values())
            self.observation_space = spaces.Box(-np.inf, np.inf, (dim,), dtype=np.float32)

    @property
    def physics(self) -> Any:
        return self._env.physics

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        observation, info = self._env.reset(seed=int(self.np_random.integers(2**31)))
        return self._observation(observation), info

    def step(self, action: Any):
        observation, reward, terminated, truncated, info = self._env.step(action)
        return self._observation(observation), float(reward), terminated, truncated, info

    def render(self) -> np.ndarray:
        return self.physics.render(self.size, self.size, camera_id=self.camera_id)

    def background_mask(self) -> np.ndarray:
        """``[size, size]`` True where the current frame shows the sky or the floor."""
        segmentation = self.physics.render(
            self.size, self.size, camera_id=self.camera_id, segmentation=True
        )
        ids, types = segmentation[..., 0], segmentation[..., 1]
        floor = self._floor_geoms()
        return (ids == -1) | ((types == 5) & np.isin(ids, floor))  # 5: mjOBJ_GEOM

    def _floor_geoms(self) -> np.ndarray:
        model = self.physics.model
        names = [model.id2name(i, "geom") or "" for i in range(model.ngeom)]
        return np.array([i for i, name in enumerate(names) if "floor" in name or "ground" in name])

    def close(self) -> None:
        self._env.close()

    def _observation(self, observation: dict[str, np.ndarray]) -> np.ndarray:
        if self.pixels:
            return np.ascontiguousarray(self.render().transpose(2, 0, 1))
        return np.concatenate([np.asarray(v, np.float32).reshape(-1) for v in observation.values()])


def _take_mujoco_warnings_from_dm_control() -> None:
    """Routes MuJoCo's warnings through cadence's `MujocoWarning` instead of dm_control's.

    Importing dm_control installs a callback that logs every MuJoCo warning through absl,
    so each model it compiles logs the same deprecation again (cheetah's
    ``settotalmass``, once per env and worker); as a `MujocoWarning` it shows once per
    process and filters like any Python warning.
    """
    import mujoco

    mujoco.set_mju_user_warning(None)
    route_mujoco_warnings()
