"""What an older run's ``config.yaml`` means: the config keys added and removed since runs
were first recorded.

A run written before a key was added lacks it; `ADDED_KEYS` gives each the value that means
what the run's writer did (a resume compares, a run directory's name hashes, and a
model-based run's config is read back with it). A key that was removed (`REMOVED_KEYS`) is
refused in a new config with why, and read out of an old run's config with a warning
(`removed_key_warning`), so that the run still resumes, evaluates and plays.
"""

from __future__ import annotations

from typing import Any

# Keys added since runs were first recorded, with the value that means what a run made
# before them did: a config.yaml without the key compares as having it (where the config
# it is compared with has the key: a model-based key means nothing to a PPO run).
MODEL_BASED_ADDED_KEYS = {
    # The model-based keys added when the Denoised MDP original's structure became the
    # default (docs/model-based.md, "Structure"): runs written before were built with
    # cadence's earlier structure. A run's config.yaml read back takes these too
    # (`cadence.config.from_yaml`), so the networks it builds fit its checkpoint.
    "algorithm.world_model.z_inputs": "cadence",
    "algorithm.world_model.layer_widths": "hidden_size",
    "algorithm.world_model.conv_stack": "cadence",
    "algorithm.sac.actor_layers": None,
    "algorithm.eval_mode": "mean",
}
ADDED_KEYS = {
    "trainer.schedule_horizon": 0,
    "env.async_batch_size": None,
    **MODEL_BASED_ADDED_KEYS,
}


REMOVED_KEYS = {
    "trainer.cpu_matmul": (
        "removed: cadence multiplies the CPU layers' matrices with torch's own BLAS (the "
        "oneDNN route this key chose gained no whole run the 1.3x that would have kept it; "
        "docs/compile.md)"
    ),
}
"""Keys of earlier versions that were removed, with why. A config that sets one is refused
with this and told to drop it (`cadence.config`); a run's ``config.yaml`` that holds one is
read without it, with a warning (`removed_key_warning`), so that the run still resumes."""


def removed_key_warning(key: str, value: Any, source: str) -> str:
    """The warning for a run's config (from ``source``) that holds the removed ``key`` (one
    of `REMOVED_KEYS`) at ``value``: it is read without the key, and where the value made
    the run's numbers what they are (oneDNN's multiplies), the ones it computes from here
    on differ from the recorded ones."""
    text = f"{source} holds {key}={value!r}, {REMOVED_KEYS[key]}; it is read without the key"
    if key == "trainer.cpu_matmul" and value == "onednn":
        text += (
            "; the run multiplied its CPU matrices with oneDNN, so the numbers it computes "
            "from here on differ from the ones it recorded"
        )
    return text
