"""`WorldModel`: the grouped RSSM with its observation encoder and decoder, the additive reward
head, and the Denoised MDP loss.

Loss per sequence step, averaged over the minibatch (Wang et al. 2022, eq. 7):

    -log p(o_t | x, y, z) - w_r log p(r_t | x, y) + alpha * sum_g beta_g * max(KL_g, free_nats_g)

with unit-variance Gaussian likelihoods (so each NLL is half the squared error summed over
the observation's elements, up to a constant), the reward ``r_hat = f_x(x) + f_y(y)`` (z
never reaches it), analytic KLs between diagonal Gaussians summed over each group's state
and clamped to the group's free nats per sample; ``w_r`` is ``reward_weight`` (1). The
reward of an episode's FIRST step belongs to no action and is not predicted.

Observations: a vector ``[*B, D]`` (MLP encoder and decoder) or a channel-first image
``[*B, C, 64, 64]`` stored as uint8 and scaled to [-0.5, 0.5] only here (four 4x4 stride-2
convolutions of 32/64/128/256 channels, and the mirrored transposed convolutions; with
``conv_stack="original"``, ReLU, a linear layer to the embedding, and a ReLU after the
decoder's projection, as in the Denoised MDP original).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from cadence.data.errors import UnsupportedSpaceError
from cadence.data.specs import BoundedTensorSpec, TensorSpec
from cadence.mbrl.config import WorldModelConfig
from cadence.networks.linear import Linear
from cadence.networks.mlp import MLP
from cadence.networks.rssm import RSSM, Gaussian, GroupSizes, Latent, Observed, gaussian_kl

IMAGE_SIZE = 64

CHANNELS_LAST = torch.channels_last
"""The memory layout of the conv stacks' weights and activations: torch's CPU convolutions
(forward and backward) run faster on it than on PyTorch's default layout (the 64x64
encoder and decoder of a 50 x 50 minibatch, one CPU thread: 7.6 against 10.2 s per
update). Only the layout differs: the results are the default layout's to float rounding."""


def is_image(spec: TensorSpec) -> bool:
    return len(spec.shape) == 3


def preprocess_observation(observation: torch.Tensor) -> torch.Tensor:
    """uint8 pixels to floats in [-0.5, 0.5]; vectors as floats."""
    if observation.dtype == torch.uint8:
        return observation.float() / 255.0 - 0.5
    return observation.float()


def postprocess_image(image: torch.Tensor) -> torch.Tensor:
    """A decoded image (floats around [-0.5, 0.5]) as uint8 pixels."""
    return ((image + 0.5).clamp(0, 1) * 255).round().to(torch.uint8)


class ConvEncoder(nn.Module):
    """``[*B, C, 64, 64] -> [*B, output_dim]``: 4x4 stride-2 convolutions of 32/64/128/256
    channels (1024 features), then, with ``output_size``, a linear layer to it (the Denoised
    MDP original's encoder)."""

    conv_dim = 1024

    def __init__(self, channels: int, activation: type[nn.Module], output_size: int | None = None):
        super().__init__()
        layers: list[nn.Module] = []
        for c_in, c_out in zip((channels, 32, 64, 128), (32, 64, 128, 256), strict=True):
            layers += [nn.Conv2d(c_in, c_out, 4, 2), activation()]
        layers.append(nn.Flatten())
        if output_size is not None:
            layers.append(Linear(self.conv_dim, output_size))
        self.output_dim = self.conv_dim if output_size is None else output_size
        self.net = nn.Sequential(*layers)
        self.to(memory_format=CHANNELS_LAST)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        batch = image.shape[:-3]
        flat = image.reshape(-1, *image.shape[-3:]).contiguous(memory_format=CHANNELS_LAST)
        return self.net(flat).reshape(*batch, self.output_dim)


class ConvDecoder(nn.Module):
    """``[*B, F] -> [*B, C, 64, 64]``: the encoder mirrored (transposed convolutions 5/5/6/6),
    after a linear projection to 1024 (followed by the activation with
    ``activate_projection``, as in the Denoised MDP original)."""

    def __init__(
        self,
        feature_size: int,
        channels: int,
        activation: type[nn.Module],
        activate_projection: bool = False,
    ):
        super().__init__()
        self.channels = channels
        self.project = Linear(feature_size, 1024)
        first = [activation()] if activate_projection else []
        self.net = nn.Sequential(
            *first,
            nn.ConvTranspose2d(1024, 128, 5, 2),
            activation(),
            nn.ConvTranspose2d(128, 64, 5, 2),
            activation(),
            nn.ConvTranspose2d(64, 32, 6, 2),
            activation(),
            nn.ConvTranspose2d(32, channels, 6, 2),
        )
        self.net.to(memory_format=CHANNELS_LAST)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        batch = features.shape[:-1]
        hidden = self.project(features).reshape(-1, 1024, 1, 1)
        hidden = hidden.contiguous(memory_format=CHANNELS_LAST)
        return self.net(hidden).reshape(*batch, self.channels, IMAGE_SIZE, IMAGE_SIZE)


class WorldModelOutput(NamedTuple):
    """What `WorldModel.loss` computed: the loss, its named terms, and the filtered latent."""

    loss: torch.Tensor
    terms: dict[str, torch.Tensor]
    observed: Observed


class WorldModel(nn.Module):
    """The RSSM, encoder, decoder and reward heads of ``config`` for the env's specs.

    Args:
        observation_spec: a vector ``(D,)`` or an image ``(C, 64, 64)`` spec.
        action_spec: a bounded continuous action spec; the model sees actions scaled to
            [-1, 1] (`normalize_action`).
        config: sizes and loss weights.
    """

    def __init__(
        self, observation_spec: TensorSpec, action_spec: TensorSpec, config: WorldModelConfig
    ):
        super().__init__()
        _check_specs(observation_spec, action_spec)
        self.config = config
        act = {"elu": nn.ELU, "relu": nn.ReLU}[config.activation]
        self.image = is_image(observation_spec)
        self.observation_shape = tuple(observation_spec.shape)
        hidden = [config.mlp_hidden_size] * config.mlp_layers
        original_conv = config.conv_stack == "original"
        conv_act = nn.ReLU if original_conv else act
        if self.image:
            self.encoder: nn.Module = ConvEncoder(
                observation_spec.shape[0],
                conv_act,
                config.embedding_size if original_conv else None,
            )
            embedding_size = self.encoder.output_dim
        else:
            self.encoder = MLP(
                observation_spec.shape[0], hidden, config.embedding_size, act, orthogonal_init=False
            )
            embedding_size = config.embedding_size
        groups = {"x": GroupSizes(config.x_belief_size, config.x_state_size)}
        if config.has_y:
            groups["y"] = GroupSizes(config.y_belief_size, config.y_state_size)
        if config.has_z:
            groups["z"] = GroupSizes(config.z_belief_size, config.z_state_size)
        action_size = int(torch.Size(action_spec.shape).numel())
        self.rssm = RSSM(
            action_size,
            embedding_size,
            groups,
            config.hidden_size,
            config.min_std,
            config.activation,
            config.z_prior_uses_y,
            config.joint_posterior,
            config.z_inputs,
            config.layer_widths,
        )
        all_features = self.rssm.feature_size(("x", "y", "z"))
        if self.image:
            self.decoder: nn.Module = ConvDecoder(
                all_features, observation_spec.shape[0], conv_act, original_conv
            )
        else:
            self.decoder = MLP(
                all_features, hidden, observation_spec.shape[0], act, orthogonal_init=False
            )
        self.reward_heads = nn.ModuleDict(
            {
                g: MLP(self.rssm.feature_size((g,)), hidden, 1, act, orthogonal_init=False)
                for g in ("x", "y")
                if g in groups
            }
        )
        low = torch.as_tensor(action_spec.minimum, dtype=torch.float32)
        high = torch.as_tensor(action_spec.maximum, dtype=torch.float32)
        self.register_buffer("action_center", (high + low) / 2, persistent=False)
        self.register_buffer("action_half_range", (high - low) / 2, persistent=False)

    # ------------------------------------------------------------------ actions
    def normalize_action(self, action: torch.Tensor) -> torch.Tensor:
        """Env actions to [-1, 1] (the model's and the policy's units)."""
        return (action.float() - self.action_center) / self.action_half_range

    def env_action(self, action: torch.Tensor) -> torch.Tensor:
        """[-1, 1] actions to the env's bounds."""
        return self.action_center + self.action_half_range * action

    # --------------------------------------------------------------------- heads
    def embed(self, observation: torch.Tensor) -> torch.Tensor:
        return self.encoder(preprocess_observation(observation))

    def decode(self, latent: Latent) -> torch.Tensor:
        """The mean observation (images in [-0.5, 0.5] units) from every group present."""
        return self.decoder(self.rssm.features(latent, ("x", "y", "z")))

    def reward(self, latent: Latent, groups: tuple[str, ...] = ("x", "y")) -> torch.Tensor:
        """``f_x(x) + f_y(y)`` (only the heads of ``groups``): ``[*B]``."""
        return sum(
            self.reward_heads[g](self.rssm.features(latent, (g,))).squeeze(-1)
            for g in groups
            if g in self.reward_heads
        )

    # ---------------------------------------------------------------------- loss
    def observe(
        self, observation: torch.Tensor, prev_action: torch.Tensor, first: torch.Tensor
    ) -> Observed:
        """The posterior latent of sequences ``[B, L, ...]`` (env actions, FIRST flags)."""
        prev_action = self.normalize_action(prev_action).flatten(2)
        return self.rssm.observe(self.embed(observation), prev_action, first)

    def loss(
        self,
        observation: torch.Tensor,
        prev_action: torch.Tensor,
        reward: torch.Tensor,
        first: torch.Tensor,
    ) -> WorldModelOutput:
        """The loss of sequences: observations ``[B, L, ...]``, previous actions ``[B, L, A]``,
        rewards ``[B, L]`` (r_t for a_{t-1}) and FIRST flags ``[B, L]``."""
        config = self.config
        observed = self.observe(observation, prev_action, first)
        target = preprocess_observation(observation)
        event_dims = tuple(range(2, target.dim()))
        observation_nll = (
            0.5 * (self.decode(observed.latent) - target).square().sum(event_dims).mean()
        )
        reward_error = 0.5 * (self.reward(observed.latent) - reward.float()).square()
        valid = (~first).float()
        reward_nll = (reward_error * valid).sum() / valid.sum().clamp(min=1)
        terms = {"loss/observation_nll": observation_nll, "loss/reward_nll": reward_nll}
        loss = observation_nll + config.reward_weight * reward_nll
        for g in self.rssm.groups:
            kl, kl_loss = kl_term(
                observed.posteriors[g],
                observed.priors[g],
                getattr(config, f"free_nats_{g}"),
                config.kl_balance,
                config.free_nats_on_prior,
            )
            weighted = config.kl_alpha * getattr(config, f"beta_{g}") * kl_loss
            terms[f"loss/kl_{g}"] = weighted
            terms[f"train/kl_{g}"] = kl
            loss = loss + weighted
        return WorldModelOutput(loss, terms, observed)


def kl_term(
    posterior: Gaussian,
    prior: Gaussian,
    free_nats: float,
    balance: float | None = None,
    free_prior: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean KL ``[*B] -> ()`` and its loss: ``mean(max(KL, free_nats))`` per sample.

    With ``balance`` b (DreamerV2's KL balancing) the loss is
    ``b * max(KL(sg(q) || p), free) + (1 - b) * max(KL(q || sg(p)), free)``: the prior is
    pulled towards the posterior faster than the posterior towards the prior. With
    ``free_prior`` False the prior's term has no free nats: the free nats then only spare
    the posterior, and the prior learns the dynamics however little the posterior says.
    """
    kl = gaussian_kl(posterior, prior)
    if balance is None and free_prior:
        return kl.mean().detach(), kl.clamp(min=free_nats).mean()
    b = 0.5 if balance is None else balance
    detached_posterior = Gaussian(posterior.mean.detach(), posterior.std.detach())
    detached_prior = Gaussian(prior.mean.detach(), prior.std.detach())
    to_prior = gaussian_kl(detached_posterior, prior)
    to_prior = to_prior.clamp(min=free_nats).mean() if free_prior else to_prior.mean()
    to_posterior = gaussian_kl(posterior, detached_prior).clamp(min=free_nats).mean()
    if balance is None:  # the plain KL's gradients: both sides, each with weight 1
        return kl.mean().detach(), to_prior + to_posterior - to_prior.detach()
    return kl.mean().detach(), b * to_prior + (1 - b) * to_posterior


def _check_specs(observation_spec: TensorSpec, action_spec: TensorSpec) -> None:
    if not isinstance(observation_spec, TensorSpec) or len(observation_spec.shape) not in (1, 3):
        raise UnsupportedSpaceError(
            "the world model takes a vector (D,) or a channel-first image (C, 64, 64) "
            f"observation, got {observation_spec!r}"
        )
    if is_image(observation_spec) and tuple(observation_spec.shape[1:]) != (IMAGE_SIZE, IMAGE_SIZE):
        raise UnsupportedSpaceError(
            f"image observations must be 64x64 for the world model's conv stack, got "
            f"{tuple(observation_spec.shape)}; render or resize to 64x64"
        )
    if not isinstance(action_spec, BoundedTensorSpec) or not action_spec.dtype.is_floating_point:
        raise UnsupportedSpaceError(
            f"model-based algorithms take bounded continuous (Box) actions, got {action_spec!r}"
        )
