"""MuJoCo set up per process: its warnings reach Python's (not stdout and a MUJOCO_LOG.TXT in
the working directory), and an offscreen OpenGL back end is picked where there is no display."""

from __future__ import annotations

import ctypes.util
import functools
import logging
import os
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest

from cadence.envs import GymEnvFactory, MujocoWarning, make_env, mujoco_setup
from cadence.envs.mujoco_setup import is_mujoco_env, route_mujoco_warnings, use_offscreen_gl

mujoco = pytest.importorskip("mujoco")

_BODY = "<mujoco><worldbody><body><joint/><geom size='.1'/></body></worldbody></mujoco>"


@pytest.fixture
def no_handler(tmp_path, monkeypatch):
    """MuJoCo without a warning handler, in an empty working directory; restored after."""
    before = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(None)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    mujoco.set_mju_user_warning(before)


def unstable_step() -> None:
    """A simulation step that makes MuJoCo warn, whatever its version ("Nan ... in QPOS")."""
    model = mujoco.MjModel.from_xml_string(_BODY)
    data = mujoco.MjData(model)
    data.qpos[:] = np.nan
    mujoco.mj_step(model, data)


def test_building_a_mujoco_env_routes_the_warnings(no_handler, capfd):
    GymEnvFactory("Hopper-v5", 0, 0)().close()
    with pytest.warns(MujocoWarning, match="QPOS"):
        unstable_step()
    assert capfd.readouterr().out == ""
    assert not (no_handler / "MUJOCO_LOG.TXT").exists()


def test_a_mujoco_batch_writes_no_log_file(no_handler):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MujocoWarning)
        with make_env("HalfCheetah-v5", 2, backend="serial") as env:
            env.step(env.action_spec.sample((2,)))
    assert not (no_handler / "MUJOCO_LOG.TXT").exists()


def test_a_non_mujoco_env_does_not_import_mujoco():
    # Importing MuJoCo takes ~0.1 s, which every CartPole worker would pay.
    code = (
        "import sys; from cadence.envs import GymEnvFactory; "
        "GymEnvFactory('CartPole-v1', 0, 0)().close(); print('mujoco' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_a_handler_of_the_users_stays(no_handler):
    seen = []
    mujoco.set_mju_user_warning(seen.append)
    assert not route_mujoco_warnings()
    unstable_step()
    assert len(seen) == 1 and "QPOS" in seen[0]


def test_a_warning_filtered_into_an_error_is_logged_not_fatal(no_handler, caplog):
    # Raised inside MuJoCo's C callback, the error would abort the process.
    assert route_mujoco_warnings()
    with warnings.catch_warnings(), caplog.at_level(logging.WARNING):
        warnings.simplefilter("error", MujocoWarning)
        unstable_step()
    assert "QPOS" in caplog.text


def test_mujoco_ids_are_told_by_their_entry_point():
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv
    from gymnasium.envs.mujoco.hopper_v5 import HopperEnv

    gym.register("cadence-test/HopperClass-v0", entry_point=HopperEnv)
    gym.register("cadence-test/CartPolePartial-v0", entry_point=functools.partial(CartPoleEnv))
    try:
        assert is_mujoco_env("HalfCheetah-v5") and is_mujoco_env("cadence-test/HopperClass-v0")
        assert not is_mujoco_env("CartPole-v1")
        assert not is_mujoco_env("cadence-test/CartPolePartial-v0")
        assert not is_mujoco_env("no_such_module:Env-v0")
    finally:
        del gym.registry["cadence-test/HopperClass-v0"]
        del gym.registry["cadence-test/CartPolePartial-v0"]


@pytest.fixture
def headless(monkeypatch):
    """Linux without a display or a MUJOCO_GL choice; the libraries found are the test's."""
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(mujoco_setup.sys, "platform", "linux")
    installed = set()
    monkeypatch.setattr(
        mujoco_setup.ctypes.util,
        "find_library",
        lambda name: f"lib{name}.so" if name in installed else None,
    )
    return installed


@pytest.mark.parametrize(
    ("installed", "expected"),
    [({"EGL", "OSMesa"}, "egl"), ({"OSMesa"}, "osmesa"), (set(), None)],
)
def test_without_a_display_an_installed_offscreen_back_end_is_picked(headless, installed, expected):
    headless.update(installed)
    assert use_offscreen_gl() == expected
    assert os.environ.get("MUJOCO_GL") == expected


def test_a_display_or_a_users_choice_is_left_alone(headless, monkeypatch):
    headless.add("EGL")
    monkeypatch.setenv("DISPLAY", ":0")
    assert use_offscreen_gl() is None and "MUJOCO_GL" not in os.environ
    monkeypatch.delenv("DISPLAY")
    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    assert use_offscreen_gl() == "osmesa"


@pytest.mark.skipif(bool(ctypes.util.find_library("OSMesa")), reason="OSMesa is installed")
def test_a_mujoco_gl_whose_library_is_missing_is_explained():
    code = "from cadence.envs import GymEnvFactory; GymEnvFactory('Hopper-v5', 0, 0)()"
    env = {k: v for k, v in os.environ.items() if k != "PYOPENGL_PLATFORM"}
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "MUJOCO_GL": "osmesa"},
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "importing MuJoCo failed" in result.stderr and "apt install" in result.stderr
