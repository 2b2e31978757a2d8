"""Configs of the model-based algorithms: the world model, the policy learners, and the three
registered algorithms (``dreamer``, ``denoised_mdp``, ``sac_latent``).

The three differ only in their defaults: Dreamer is the Denoised MDP world model with the
y and z groups empty, and ``sac_latent`` learns its policy with SAC on the x features
instead of by backpropagation through imagined dynamics. The class defaults are the
Denoised MDP authors' code's structure and sizes (Wang et al. 2022, "Denoised MDPs";
Hafner et al. 2020, "Dream to Control"); cadence's earlier structure stays available as
named options (``joint_posterior``, ``z_inputs``, ``layer_widths``, ``conv_stack``,
``eval_mode``; docs/model-based.md, "Structure"). The Pendulum configs under
``cadence/config/named`` keep that earlier structure and shrink the shapes to fit a 2-core
CPU.
"""

from __future__ import annotations

from typing import Literal

import attrs
from attrs import field
from attrs.validators import ge, gt, in_, instance_of, le, optional

from cadence.algorithms.compile_config import CompileMode, compile_field
from cadence.algorithms.off_policy_config import OffPolicyConfig
from cadence.data.typed_fields import CHECKED_SETATTR


@attrs.define(kw_only=True, on_setattr=CHECKED_SETATTR)
class WorldModelConfig:
    """The RSSM, its encoder, decoder and reward heads, and its loss.

    Each latent group has a deterministic GRU "belief" and a diagonal-Gaussian
    stochastic "state"; a group whose belief and state sizes are both 0 is absent.
    """

    x_belief_size: int = field(
        default=120,
        validator=ge(1),
        metadata={"doc": "GRU size of x (controllable, reward-relevant; the policy's input)."},
    )
    x_state_size: int = field(
        default=20, validator=ge(1), metadata={"doc": "Gaussian state size of x."}
    )
    y_belief_size: int = field(
        default=120,
        validator=ge(0),
        metadata={
            "doc": "GRU size of y (uncontrollable, reward-relevant); 0 with y_state_size 0: no y."
        },
    )
    y_state_size: int = field(
        default=20, validator=ge(0), metadata={"doc": "Gaussian state size of y."}
    )
    z_belief_size: int = field(
        default=0,
        validator=ge(0),
        metadata={"doc": "GRU size of z (everything else); 0 with z_state_size 0: no z."},
    )
    z_state_size: int = field(
        default=0, validator=ge(0), metadata={"doc": "Gaussian state size of z."}
    )
    z_prior_uses_y: bool = field(
        default=True,
        validator=instance_of(bool),
        metadata={
            "doc": "Whether z's prior also sees y (with z_inputs 'original': the current y "
            "belief and state; 'cadence': the previous y state). The original's: true."
        },
    )
    z_inputs: Literal["original", "cadence"] = field(
        default="original",
        validator=in_(["original", "cadence"]),
        metadata={
            "doc": "What the z group reads. 'original' (the Denoised MDP code's): z's prior "
            "reads the current x belief and state, the previous z state and the action (and "
            "the current y belief and state with z_prior_uses_y), through two layers; z's "
            "posterior reads the x, y and z beliefs, the x and y states and the embedding; "
            "the x and y posteriors also read the previous z belief and state. 'cadence' "
            "(cadence's earlier structure): z's prior reads the previous x and z states and "
            "the action (and the previous y state), one layer; every posterior reads only "
            "its groups' beliefs and the embedding."
        },
    )
    joint_posterior: bool = field(
        default=True,
        validator=instance_of(bool),
        metadata={
            "doc": "Whether x and y share one posterior network that sees both beliefs (the "
            "Denoised MDP original's), so an observed signal can be explained by either "
            "group; false (cadence's earlier structure): each group's posterior sees only "
            "its own belief."
        },
    )
    layer_widths: Literal["belief", "hidden_size"] = field(
        default="belief",
        validator=in_(["belief", "hidden_size"]),
        metadata={
            "doc": "How wide the RSSM's layers are. 'belief' (the original's): each group's "
            "input, prior and posterior layers are as wide as its belief, a joint x/y "
            "posterior as x_belief_size + y_belief_size. 'hidden_size' (cadence's earlier "
            "structure): all of them hidden_size wide."
        },
    )
    hidden_size: int = field(
        default=200,
        validator=ge(1),
        metadata={
            "doc": "Width of the RSSM's input, prior and posterior layers with layer_widths "
            "'hidden_size' (unused with 'belief')."
        },
    )
    mlp_hidden_size: int = field(
        default=400,
        validator=ge(1),
        metadata={"doc": "Width of the reward heads and of the vector encoder/decoder."},
    )
    mlp_layers: int = field(
        default=2,
        validator=ge(1),
        metadata={"doc": "Hidden layers of the reward heads and the vector encoder/decoder."},
    )
    embedding_size: int = field(
        default=1024,
        validator=ge(1),
        metadata={
            "doc": "Observation embedding size (images with conv_stack 'cadence': fixed by "
            "the conv stack, 1024)."
        },
    )
    activation: Literal["elu", "relu"] = field(
        default="elu",
        validator=in_(["elu", "relu"]),
        metadata={"doc": "Hidden activation of the RSSM and the MLPs."},
    )
    conv_stack: Literal["original", "cadence"] = field(
        default="original",
        validator=in_(["original", "cadence"]),
        metadata={
            "doc": "The image encoder and decoder. 'original' (the Denoised MDP code's): ReLU "
            "convolutions, the encoder ending in a linear layer to embedding_size, the "
            "decoder's projection followed by a ReLU. 'cadence' (cadence's earlier stack): "
            "the convolutions use `activation`, the encoder's 1024 conv features are the "
            "embedding, the decoder's projection has no activation after it."
        },
    )
    min_std: float = field(
        default=0.1,
        validator=gt(0),
        metadata={"doc": "Minimum std of every prior and posterior (std = softplus + min_std)."},
    )
    free_nats_x: float = field(
        default=3.0, validator=ge(0), metadata={"doc": "Free nats of KL_x, per sample."}
    )
    free_nats_y: float = field(
        default=0.0, validator=ge(0), metadata={"doc": "Free nats of KL_y, per sample."}
    )
    free_nats_z: float = field(
        default=0.0, validator=ge(0), metadata={"doc": "Free nats of KL_z, per sample."}
    )
    reward_weight: float = field(
        default=1.0,
        validator=ge(0),
        metadata={
            "doc": "Weight of the reward NLL (the reference's reward loss weight, 1). Above 1 "
            "for small vector observations, whose reconstruction alone asks the latent for "
            "little precision: the reward then decides how precisely x must track what it "
            "controls, and y what it does not."
        },
    )
    kl_alpha: float = field(
        default=1.0, validator=ge(0), metadata={"doc": "alpha: the weight of all KL terms."}
    )
    beta_x: float = field(default=1.0, validator=ge(0), metadata={"doc": "beta_x: KL_x's weight."})
    beta_y: float = field(default=0.25, validator=ge(0), metadata={"doc": "beta_y: KL_y's weight."})
    beta_z: float = field(default=0.25, validator=ge(0), metadata={"doc": "beta_z: KL_z's weight."})
    free_nats_on_prior: bool = field(
        default=True,
        validator=instance_of(bool),
        metadata={
            "doc": "Whether the free nats also stop the prior's learning (the paper's; true). "
            "false: they spare only the posterior, and the prior always learns to predict it "
            "(for low-dimensional states, whose KL sits under the free nats)."
        },
    )
    kl_balance: float | None = field(
        default=None,
        validator=optional([ge(0), le(1)]),
        metadata={
            "doc": "KL balancing (DreamerV2): the prior learns with this share of each KL's "
            "gradient and the posterior with the rest (0.8 in DreamerV2); null: off, the "
            "plain KL."
        },
    )
    learning_rate: float = field(
        default=6e-4, validator=gt(0), metadata={"doc": "Adam step size of the world model."}
    )
    adam_eps: float = field(
        default=1e-7, validator=gt(0), metadata={"doc": "Adam epsilon of every optimizer."}
    )
    max_grad_norm: float = field(
        default=100.0, validator=gt(0), metadata={"doc": "Gradient-norm clip of every optimizer."}
    )

    @property
    def has_y(self) -> bool:
        return self.y_belief_size + self.y_state_size > 0

    @property
    def has_z(self) -> bool:
        return self.z_belief_size + self.z_state_size > 0

    def __attrs_post_init__(self) -> None:
        for group in ("y", "z"):
            belief, state = (
                getattr(self, f"{group}_belief_size"),
                getattr(self, f"{group}_state_size"),
            )
            if (belief == 0) != (state == 0):
                raise ValueError(
                    f"{group}_belief_size and {group}_state_size must both be 0 (no {group} "
                    f"group) or both be positive, got {belief} and {state}"
                )


@attrs.define(kw_only=True, on_setattr=CHECKED_SETATTR)
class ActorCriticConfig:
    """Dreamer's policy learning: backpropagation of λ-returns through imagined x dynamics."""

    horizon: int = field(default=15, validator=ge(1), metadata={"doc": "Imagined steps."})
    gamma: float = field(default=0.99, validator=[ge(0), le(1)], metadata={"doc": "Discount."})
    lambda_: float = field(
        default=0.95, validator=[ge(0), le(1)], metadata={"doc": "λ of the λ-returns."}
    )
    num_start_states: int | None = field(
        default=None,
        validator=optional(ge(1)),
        metadata={
            "doc": "Posterior states of the minibatch that imagination starts from, drawn "
            "at random (null: all mini_batch_size x mini_batch_length of them, the paper)."
        },
    )
    paper_horizon: bool = field(
        default=False,
        validator=instance_of(bool),
        metadata={
            "doc": "The original's returns: imagine horizon steps and learn horizon - 1 "
            "λ-returns, of imagined states 1 .. horizon - 1, each counting its own state's "
            "reward and bootstrapped with V of the last state (Dreamer v1's indexing); "
            "false: horizon λ-returns of states 0 .. horizon - 1, each counting the rewards "
            "after its state."
        },
    )
    hidden_size: int = field(
        default=400, validator=ge(1), metadata={"doc": "Width of the actor and the value MLPs."}
    )
    num_layers: int = field(
        default=4,
        validator=ge(1),
        metadata={"doc": "Hidden layers of the actor (the original's and Dreamer's: 4; value: 3)."},
    )
    actor_learning_rate: float = field(
        default=8e-5, validator=gt(0), metadata={"doc": "Adam step size of the actor."}
    )
    value_learning_rate: float = field(
        default=8e-5, validator=gt(0), metadata={"doc": "Adam step size of the value."}
    )
    actor_entropy: float = field(
        default=0.0,
        validator=ge(0),
        metadata={
            "doc": "DreamerV2's entropy regulariser: the actor maximises the λ-returns plus "
            "this times the entropy of its imagined actions (the one-sample -log π(a|x), "
            "which for the tanh-squashed Gaussian also penalises saturated actions); 0: the "
            "paper (Dreamer and Denoised MDP have none)."
        },
    )


@attrs.define(kw_only=True, on_setattr=CHECKED_SETATTR)
class LatentSACConfig:
    """SAC on the (detached) x features, its reward the denoised f_x of the next state."""

    gamma: float = field(default=0.99, validator=[ge(0), le(1)], metadata={"doc": "Discount."})
    tau: float = field(default=0.005, validator=[gt(0), le(1)], metadata={"doc": "Polyak rate."})
    hidden_size: int = field(
        default=400, validator=ge(1), metadata={"doc": "Width of the actor and critic MLPs."}
    )
    num_layers: int = field(
        default=3, validator=ge(1), metadata={"doc": "Hidden layers of each critic."}
    )
    actor_layers: int | None = field(
        default=4,
        validator=optional(ge(1)),
        metadata={"doc": "Hidden layers of the actor; null: num_layers (cadence's earlier SAC)."},
    )
    actor_learning_rate: float = field(default=3e-4, validator=gt(0), metadata={"doc": "Actor lr."})
    critic_learning_rate: float = field(
        default=3e-4, validator=gt(0), metadata={"doc": "Critic lr."}
    )
    alpha_learning_rate: float = field(
        default=3e-4, validator=gt(0), metadata={"doc": "log(alpha) lr."}
    )
    initial_alpha: float = field(
        default=1.0, validator=gt(0), metadata={"doc": "Initial alpha (the original's: 1)."}
    )


def _model_based_off_policy() -> OffPolicyConfig:
    """Denoised MDP's ModelTrainer in cadence's keys: prefill 5000 random steps, 100 updates
    per 1000 env steps, minibatches of 50 sequences of 50 steps."""
    return OffPolicyConfig(
        replay_buffer_length=1_000_000,
        initial_collect_steps=5000,
        mini_batch_size=50,
        mini_batch_length=50,
        num_updates_per_train_iter=100,
    )


def _check_windows(instance: object, attribute: attrs.Attribute, value: OffPolicyConfig) -> None:
    if not isinstance(value, OffPolicyConfig):
        raise TypeError(f"'{attribute.name}' must be an OffPolicyConfig, got {value!r}")
    if value.mini_batch_length < 2:
        raise ValueError(
            f"'{attribute.name}.mini_batch_length' must be >= 2 (the model learns dynamics "
            f"from sequences), got {value.mini_batch_length}"
        )


def _exploration_noise_field() -> attrs.Attribute:
    return field(
        default=0.3,
        validator=ge(0),
        metadata={
            "doc": "Std of the Gaussian noise added to the policy's action (in [-1, 1] "
            "units, then clipped) while collecting; evaluation acts deterministically."
        },
    )


def _eval_mode_field() -> attrs.Attribute:
    return field(
        default="original",
        validator=in_(["original", "mean"]),
        metadata={
            "doc": "How evaluation acts. 'original' (the Denoised MDP code's): the latent "
            "fed back is a posterior sample, the action the most likely of 100 samples of the "
            "policy. 'mean' (cadence's earlier protocol): the posterior mean is fed back, the "
            "action is tanh of the policy's mean."
        },
    )


def _off_policy_field() -> attrs.Attribute:
    return field(
        factory=_model_based_off_policy,
        validator=_check_windows,
        metadata={"doc": "Replay, prefill, updates per iteration and minibatch windows."},
    )


def _world_model_field(**overrides: object) -> attrs.Attribute:
    return field(
        factory=lambda: WorldModelConfig(**overrides),
        validator=instance_of(WorldModelConfig),
        metadata={"doc": "The world model and its loss."},
    )


def _policy_field(kind: type) -> attrs.Attribute:
    return field(factory=kind, validator=instance_of(kind), metadata={"doc": "Policy learning."})


@attrs.define(kw_only=True, on_setattr=CHECKED_SETATTR)
class DreamerConfig:
    """Dreamer (Hafner et al. 2020): one latent group x, policy learned in imagination."""

    name: str = field(
        default="dreamer", validator=in_(["dreamer"]), metadata={"doc": "Algorithm name."}
    )
    world_model: WorldModelConfig = _world_model_field(
        x_belief_size=200, x_state_size=30, y_belief_size=0, y_state_size=0
    )
    actor_critic: ActorCriticConfig = _policy_field(ActorCriticConfig)
    exploration_noise: float = _exploration_noise_field()
    eval_mode: Literal["original", "mean"] = _eval_mode_field()
    off_policy: OffPolicyConfig = _off_policy_field()
    compile: CompileMode = compile_field()


@attrs.define(kw_only=True, on_setattr=CHECKED_SETATTR)
class DenoisedMDPConfig:
    """Denoised MDP (Wang et al. 2022): latents x, y (and z), policy learned in imagination on x."""

    name: str = field(
        default="denoised_mdp", validator=in_(["denoised_mdp"]), metadata={"doc": "Algorithm name."}
    )
    world_model: WorldModelConfig = _world_model_field()
    actor_critic: ActorCriticConfig = _policy_field(ActorCriticConfig)
    exploration_noise: float = _exploration_noise_field()
    eval_mode: Literal["original", "mean"] = _eval_mode_field()
    off_policy: OffPolicyConfig = _off_policy_field()
    compile: CompileMode = compile_field()


@attrs.define(kw_only=True, on_setattr=CHECKED_SETATTR)
class SACLatentConfig:
    """A Denoised MDP world model with SAC on its x features and the denoised reward f_x."""

    name: str = field(
        default="sac_latent", validator=in_(["sac_latent"]), metadata={"doc": "Algorithm name."}
    )
    world_model: WorldModelConfig = _world_model_field()
    sac: LatentSACConfig = _policy_field(LatentSACConfig)
    exploration_noise: float = _exploration_noise_field()
    eval_mode: Literal["original", "mean"] = _eval_mode_field()
    off_policy: OffPolicyConfig = _off_policy_field()
    compile: CompileMode = compile_field()


ModelBasedConfig = DreamerConfig | DenoisedMDPConfig | SACLatentConfig
