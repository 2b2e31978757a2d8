"""Data transformers (DESIGN §6): maps of rollout time steps and replayed minibatches."""

from cadence._lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "make_data_transformer": "build",
        "DataTransformersConfig": "config",
        "HindsightExperienceTransformer": "hindsight",
        "sparse_goal_reward": "hindsight",
        "ImageScaleTransformer": "image_scale",
        "ObservationNormalizer": "observation_normalizer",
        "OrderGroup": "order",
        "TransformerOrderError": "order",
        "check_order": "order",
        "ReplayFrameStack": "replay_frame_stack",
        "RewardClipping": "reward",
        "RewardScaling": "reward",
        "RewardNormalizer": "reward_normalizer",
        "RunningMeanStd": "running_stats",
        "DataTransformerSequence": "sequence",
        "DataTransformer": "transformer",
        "UntransformedTimeStep": "untransformed",
    },
)

__all__ = [
    "DataTransformer",
    "DataTransformerSequence",
    "DataTransformersConfig",
    "HindsightExperienceTransformer",
    "ImageScaleTransformer",
    "ObservationNormalizer",
    "OrderGroup",
    "ReplayFrameStack",
    "RewardClipping",
    "RewardNormalizer",
    "RewardScaling",
    "RunningMeanStd",
    "TransformerOrderError",
    "UntransformedTimeStep",
    "check_order",
    "make_data_transformer",
    "sparse_goal_reward",
]
