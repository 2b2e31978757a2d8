"""`ExperimentConfig`: the one config tree of an experiment (DESIGN §10)."""

from __future__ import annotations

from typing import Any

import attrs
from attrs import field
from attrs.validators import ge, instance_of, matches_re, optional

from cadence.algorithms.ppo.config import PPOConfig
from cadence.algorithms.registry import (
    BUILTIN_ALGORITHMS,
    REGISTER_HINT,
    AlgorithmConfig,
    AlgorithmConfigClasses,
    algorithm_capabilities,
)
from cadence.data.typed_fields import CHECKED_SETATTR
from cadence.envs.config import EnvConfig
from cadence.networks.config import NetworkConfig
from cadence.trainer.config import TrainerConfig
from cadence.transforms.config import DataTransformersConfig

ALGORITHM_CONFIGS = AlgorithmConfigClasses()
"""The config class of each registered algorithm, chosen by the ``algorithm.name`` key
(`cadence.algorithms.registry`; each class is imported when it is looked up)."""


def _registered_algorithm(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """Refuses an algorithm config whose class is not the one registered for its name."""
    name = getattr(value, "name", None)
    expected = ALGORITHM_CONFIGS.get(name) if isinstance(name, str) else None
    if expected is None or type(value) is not expected:
        names = ", ".join(ALGORITHM_CONFIGS)
        raise TypeError(f"'{attribute.name}' must be the config of one of {names} (got {value!r})")


def _network_fits_algorithm(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """Refuses ``network.recurrent`` for an algorithm whose registration declares that its
    network takes no recurrent core (``recurrent_network=False``)."""
    name = instance.algorithm.name
    if value.recurrent != "none" and not algorithm_capabilities(name).recurrent_network:
        supported = " and ".join(
            sorted(n for n, r in BUILTIN_ALGORITHMS.items() if r.capabilities.recurrent_network)
        )
        raise ValueError(
            f"network.recurrent={value.recurrent!r}: {name} takes no recurrent core (its "
            f"registration declares recurrent_network=False; of cadence's own, only "
            f"{supported} take one); set network.recurrent=none"
        )


@attrs.define(kw_only=True, on_setattr=CHECKED_SETATTR)
class ExperimentConfig:
    """Everything that defines a run: environment, algorithm, network, trainer, seed.

    It holds only primitives; `to_yaml` writes it and `from_yaml` reads it back
    equal, so a run's ``config.yaml`` alone reproduces the run.

    Example:
        >>> from cadence.algorithms.a2c.config import A2CConfig
        >>> config = ExperimentConfig(name="demo", algorithm=A2CConfig())
        >>> config.env.name, config.algorithm.name
        ('CartPole-v1', 'a2c')
    """

    name: str = field(
        validator=matches_re(r"[\w.-]+"),
        metadata={
            "doc": "Experiment name (letters, digits, '_', '-', '.'); names the default run dir."
        },
    )
    description: str = field(
        default="",
        metadata={"doc": "One line saying what the experiment is (shown by `cadence list`)."},
    )
    seed: int = field(
        default=0,
        validator=ge(0),
        metadata={"doc": "Seed of torch, numpy, python and env i (seed + i)."},
    )
    env: EnvConfig = field(
        factory=EnvConfig,
        validator=instance_of(EnvConfig),
        metadata={"doc": "Training environments."},
    )
    algorithm: AlgorithmConfig = field(
        factory=PPOConfig,
        validator=_registered_algorithm,
        metadata={
            "doc": "The algorithm, chosen by algorithm.name.",
            "registry": ALGORITHM_CONFIGS,
            "unknown_hint": REGISTER_HINT,
        },
    )
    network: NetworkConfig = field(
        factory=NetworkConfig,
        validator=[instance_of(NetworkConfig), _network_fits_algorithm],
        metadata={"doc": "Networks."},
    )
    trainer: TrainerConfig = field(
        factory=TrainerConfig,
        validator=instance_of(TrainerConfig),
        metadata={"doc": "Training loop."},
    )
    data_transformers: DataTransformersConfig = field(
        factory=DataTransformersConfig,
        validator=instance_of(DataTransformersConfig),
        metadata={"doc": "Data transformers applied to rollout steps and replayed minibatches."},
    )
    root_dir: str | None = field(
        default=None,
        validator=optional(instance_of(str)),
        metadata={
            "doc": "Run directory. None: load_config sets runs/<name>/seed<seed>-<digest> under the "
            "current directory, the digest hashing the rest of the config but the budget and "
            "the display-only trainer.progress_* keys, so rerunning the same command resumes "
            "the same run and a changed hyperparameter starts a new one."
        },
    )

    def to_yaml(self) -> str:
        """The whole resolved config as YAML (what a run writes to its ``config.yaml``)."""
        from cadence.config.serialize import to_yaml  # serialize imports this module

        return to_yaml(self)
