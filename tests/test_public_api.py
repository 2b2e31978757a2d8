"""The public surface: ``import cadence`` exposes a small, pinned set of names."""

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


def test_every_public_name_resolves():
    for name in cadence.__all__:
        assert getattr(cadence, name) is not None, name


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
