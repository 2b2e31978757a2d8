"""The public surface: ``import cadence`` exposes a small, pinned set of names."""

import importlib
import re
from pathlib import Path

import cadence

PUBLIC = {
    "AlgStep",
    "Algorithm",
    "DataTransformer",
    "DataTransformerSequence",
    "DictTensor",
    "Environment",
    "ExperimentConfig",
    "LossInfo",
    "OffPolicyConfig",
    "OffPolicyScheme",
    "OnPolicyScheme",
    "ParallelEnvironment",
    "ReplayBuffer",
    "SerialEnvironment",
    "StepType",
    "TemporalDictTensor",
    "ThreadEnvironment",
    "TimeStep",
    "Trainer",
    "Trajectories",
    "__version__",
    "build_algorithm",
    "list_configs",
    "load_config",
    "make_env",
    "read_metrics",
    "train",
}


def test_top_level_names_are_pinned():
    assert set(cadence.__all__) == PUBLIC, "update PUBLIC (and the README) when the surface changes"
    assert len(cadence.__all__) == len(PUBLIC), "no duplicates in __all__"


def test_every_public_name_is_the_object_defined_under_that_name():
    for name in cadence.__all__:
        if name == "__version__":
            continue
        value = getattr(cadence, name)
        # The class or function itself, defined in cadence under its own name: not an
        # alias of another name, and the very object its module holds (isinstance agrees).
        assert (value.__name__, value.__module__.split(".")[0]) == (name, "cadence"), name
        assert getattr(importlib.import_module(value.__module__), name) is value, name


def test_the_version_is_the_one_the_package_is_built_with():
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert f'\nversion = "{cadence.__version__}"\n' in pyproject
    assert re.fullmatch(r"\d+\.\d+\.\d+", cadence.__version__)


def test_subpackages_list_their_names():
    import cadence.algorithms
    import cadence.data
    import cadence.envs
    import cadence.networks
    import cadence.plot
    import cadence.replay
    import cadence.transforms

    for package in (
        cadence.algorithms,
        cadence.data,
        cadence.envs,
        cadence.networks,
        cadence.plot,
        cadence.replay,
        cadence.transforms,
    ):
        assert package.__all__, package.__name__
        for name in package.__all__:
            assert hasattr(package, name), f"{package.__name__}.{name}"
