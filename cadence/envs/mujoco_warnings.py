"""MuJoCo's warnings as Python warnings.

Left alone, MuJoCo's C library prints every warning it raises (a deprecated attribute
in a model's XML, an unstable simulation) to stdout and appends it to
``MUJOCO_LOG.TXT`` in the working directory: with MuJoCo 4, eight HalfCheetah-v5 envs
print the same deprecation eight times and leave a growing file in the user's folder.
Routed through `warnings.warn` as a `MujocoWarning`, a message shows once per process
(and worker), written to stderr, and filters like any other Python warning::

    import warnings
    from cadence.envs import MujocoWarning
    warnings.filterwarnings("ignore", category=MujocoWarning)

`GymEnvFactory` routes them before it builds an env whose Gymnasium entry point names
MuJoCo, and after any env that imported MuJoCo itself.
"""

from __future__ import annotations

import logging
import sys
import warnings

logger = logging.getLogger(__name__)


class MujocoWarning(UserWarning):
    """A warning of MuJoCo's C library (its text as MuJoCo words it)."""


def route_mujoco_warnings(*, import_mujoco: bool = False) -> bool:
    """Sends this process's MuJoCo warnings through `warnings.warn` as `MujocoWarning`.

    Leaves a handler installed by anyone else in place. Importing MuJoCo takes ~0.1 s,
    so it is not imported unless asked.

    Args:
        import_mujoco: import MuJoCo if it is installed and not imported yet (else
            nothing happens until something else imports it).

    Returns:
        Whether MuJoCo's warnings now come through `_warn`.
    """
    mujoco = sys.modules.get("mujoco")
    if mujoco is None and import_mujoco:
        try:
            import mujoco
        except ImportError:
            return False
    if mujoco is None:
        return False
    handler = mujoco.get_mju_user_warning()
    if handler is None:
        mujoco.set_mju_user_warning(_warn)
        return True
    return handler is _warn


def _warn(message: str) -> None:
    # MuJoCo calls this from C, where an exception aborts the whole process, so a
    # warning that the filters turn into an error is logged instead.
    try:
        warnings.warn(message, MujocoWarning, stacklevel=2)
    except Exception:
        logger.warning("MuJoCo: %s", message)
