"""What a process needs of MuJoCo before it builds and renders Gymnasium's MuJoCo envs.

**Warnings.** Left alone, MuJoCo's C library prints every warning it raises (a
deprecated attribute in a model's XML, an unstable simulation) to stdout and appends
it to ``MUJOCO_LOG.TXT`` in the working directory: with MuJoCo 4, eight HalfCheetah-v5
envs print the same deprecation eight times and leave a growing file in the user's
folder. Routed through `warnings.warn` as a `MujocoWarning`, a message shows once per
process (and worker), written to stderr, and filters like any other Python warning::

    import warnings
    from cadence.envs import MujocoWarning
    warnings.filterwarnings("ignore", category=MujocoWarning)

**Rendering without a display.** With ``MUJOCO_GL`` unset, Gymnasium tries glfw
first; on a machine without a display glfw "succeeds" without an OpenGL context and
the first frame fails with "an OpenGL platform library has not been loaded". There,
`use_offscreen_gl` sets ``MUJOCO_GL`` to EGL or OSMesa, whichever is installed.

`GymEnvFactory` calls `prepare_for_mujoco` before it builds a MuJoCo env (and after
any env that imported MuJoCo itself).
"""

from __future__ import annotations

import ctypes.util
import logging
import os
import sys
import warnings

import gymnasium as gym

logger = logging.getLogger(__name__)

# The render modes that draw into an offscreen buffer (not a window).
OFFSCREEN_RENDER_MODES = ("rgb_array", "depth_array", "rgbd_tuple")
# MuJoCo's headless back ends, in order of preference, and the library each loads.
_OFFSCREEN_GL = (("egl", "EGL"), ("osmesa", "OSMesa"))


class MujocoWarning(UserWarning):
    """A warning of MuJoCo's C library (its text as MuJoCo words it)."""


def prepare_for_mujoco(render_mode: str | None) -> None:
    """Sets this process up for a MuJoCo env that renders in ``render_mode``.

    Called before the env is built (MuJoCo reads ``MUJOCO_GL`` when it is imported,
    Gymnasium again when an env first renders), and after an env that imported MuJoCo
    itself, for the next ones. Imports MuJoCo (~0.1 s) if it is not imported yet.
    """
    if render_mode in OFFSCREEN_RENDER_MODES:
        use_offscreen_gl()
    route_mujoco_warnings()


def is_mujoco_env(name: str) -> bool:
    """Whether the Gymnasium entry point of id ``name`` names MuJoCo (its package or class)."""
    try:
        entry_point = gym.spec(name).entry_point
    except (gym.error.Error, ImportError):
        return False  # gym.make raises the error that says what is wrong
    if not isinstance(entry_point, str):
        # A class or function; a functools.partial or other callable may name neither.
        entry_point = (
            f"{getattr(entry_point, '__module__', '')}.{getattr(entry_point, '__qualname__', '')}"
        )
    return "mujoco" in entry_point.lower()


def route_mujoco_warnings() -> bool:
    """Sends this process's MuJoCo warnings through `warnings.warn` as `MujocoWarning`.

    Imports MuJoCo if it is installed and not imported yet. Leaves a handler installed
    by anyone else in place.

    Returns:
        Whether MuJoCo's warnings now come through `_warn` (``False`` without MuJoCo).
    """
    try:
        import mujoco
    except ImportError:
        return False
    except Exception as error:  # e.g. MUJOCO_GL names a back end whose library is missing
        raise RuntimeError(f"importing MuJoCo failed: {error!r}. {offscreen_gl_hint()}") from error
    handler = mujoco.get_mju_user_warning()
    if handler is None:
        mujoco.set_mju_user_warning(_warn)
        return True
    return handler is _warn


def use_offscreen_gl() -> str | None:
    """Sets ``MUJOCO_GL`` to a back end that renders without a display, where one is needed.

    Only on Linux without ``DISPLAY`` or ``WAYLAND_DISPLAY``, and only while
    ``MUJOCO_GL`` is unset (a user's choice stays): EGL if its library is installed,
    else OSMesa. Gymnasium reads ``MUJOCO_GL`` when an env first renders.

    Returns:
        ``MUJOCO_GL`` as it now stands (``None``: unset, and no offscreen library found).
    """
    chosen = os.environ.get("MUJOCO_GL")
    has_display = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    if chosen is not None or has_display or not sys.platform.startswith("linux"):
        return chosen
    for backend, library in _OFFSCREEN_GL:
        if ctypes.util.find_library(library):
            os.environ["MUJOCO_GL"] = backend
            return backend
    return None


def offscreen_gl_hint() -> str:
    """How to get MuJoCo to render here, for an error message."""
    return (
        "MuJoCo renders without a display through EGL or OSMesa: install one (Debian/Ubuntu: "
        "apt install libegl1, or libosmesa6) or set MUJOCO_GL to a back end that works here "
        f"(now MUJOCO_GL={os.environ.get('MUJOCO_GL')!r}, DISPLAY={os.environ.get('DISPLAY')!r})"
    )


def _warn(message: str) -> None:
    # MuJoCo calls this from C, where an exception aborts the whole process, so a
    # warning that the filters turn into an error is logged instead.
    try:
        warnings.warn(message, MujocoWarning, stacklevel=2)
    except Exception:
        logger.warning("MuJoCo: %s", message)
