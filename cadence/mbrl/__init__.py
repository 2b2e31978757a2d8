"""Model-based RL (DESIGN §9): the grouped RSSM world model (Dreamer, Denoised MDP), policy
learning in imagination or with SAC on its latent, trained by the off-policy scheme.

Names load on first use (`cadence._lazy`), so reading a config imports no torch.
"""

from cadence._lazy import lazy_exports

__all__ = [
    "ActorCriticConfig",
    "DenoisedMDPConfig",
    "DreamerConfig",
    "ImaginedActorCritic",
    "LatentSAC",
    "LatentSACConfig",
    "ModelBasedAlgorithm",
    "SACLatentConfig",
    "WorldModel",
    "WorldModelConfig",
    "make_model_based",
    "noisy_pendulum_signals",
    "probe_policy",
    "ridge_r2",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ActorCriticConfig": "config",
        "DenoisedMDPConfig": "config",
        "DreamerConfig": "config",
        "LatentSACConfig": "config",
        "SACLatentConfig": "config",
        "WorldModelConfig": "config",
        "ImaginedActorCritic": "policies",
        "LatentSAC": "policies",
        "ModelBasedAlgorithm": "algorithm",
        "WorldModel": "world_model",
        "make_model_based": "build",
        "noisy_pendulum_signals": "probe",
        "probe_policy": "probe",
        "ridge_r2": "probe",
    },
)
