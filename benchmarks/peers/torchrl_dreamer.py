"""TorchRL's Dreamer (v1) at given sizes: world-model and actor-critic updates per second.

Measures, with TorchRL's own classes wired as its ``sota-implementations/dreamer`` example
wires them (``make_dreamer`` in ``dreamer_utils.py`` and the loop in ``dreamer.py``):

* a world-model update: ``DreamerModelLoss`` (free nats 3, clamped per sample before the
  mean) on a fake replay minibatch of ``batch x length`` steps -- encoder, ``RSSMRollout``
  of ``RSSMPrior``/``RSSMPosterior``, decoder and reward MLP in a ``WorldModelWrapper`` --
  the sum of its three terms, backward, ``clip_grad_norm_(100)``, Adam(6e-4);
* an actor-critic update: ``DreamerActorLoss`` (imagination of ``horizon`` steps in a
  ``DreamerEnv`` of the prior and the reward model, λ-returns with γ=0.99, λ=0.95) from
  ``start-states`` detached latents of the filtered minibatch, actor backward, clip 100,
  Adam(8e-5); then ``DreamerValueLoss`` backward, clip 100, Adam(8e-5).

Each rate is 1 / the median over ``--iters`` timed updates after ``--warmup`` untimed
ones. ``--flops`` adds the FLOPs of one update of each kind (forward and backward, by
``torch.utils.flop_counter.FlopCounterMode``). Observations are 64x64x3 pixels with
TorchRL's 32/64/128/256 conv encoder and its transposed-conv decoder (``--obs image``) or
``--obs-dim`` vectors with MLP encoder/decoder (``--obs vector``). Run it in the TorchRL
virtual environment (``benchmarks/world_model_speed.py`` says how to make it)::

    .venvs/torchrl/bin/python benchmarks/peers/torchrl_dreamer.py --obs vector \\
        --obs-dim 3 --action-dim 1 --belief 64 --state 16 --hidden 64 --mlp-hidden 128 \\
        --start-states 500 --threads 1

It prints one JSON line on stdout. TorchRL's ``RSSMPrior`` applies its hidden layer to the
belief, so it needs ``--hidden`` equal to ``--belief``: another ``--hidden`` is replaced by
``--belief`` (with a warning on stderr) and the JSON's ``rssm_hidden`` says which was used.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import tensordict
import torch
import torchrl
from tensordict import TensorDict
from tensordict.nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictSequential,
)
from tensordict.utils import NestedKey
from torch import nn
from torchrl.data import Bounded, Composite, Unbounded
from torchrl.envs.model_based.dreamer import DreamerEnv
from torchrl.modules import (
    MLP,
    DreamerActor,
    IndependentNormal,
    ObsDecoder,
    ObsEncoder,
    RSSMPosterior,
    RSSMPrior,
    RSSMRollout,
    SafeModule,
    SafeProbabilisticModule,
    SafeProbabilisticTensorDictSequential,
    TanhNormal,
    WorldModelWrapper,
)
from torchrl.objectives.dreamer import DreamerActorLoss, DreamerModelLoss, DreamerValueLoss

# TorchRL's example: Adam with torch defaults (eps 1e-8), these rates, clip 100, γ and λ.
WORLD_MODEL_LR, ACTOR_LR, VALUE_LR, GRAD_CLIP, GAMMA, LMBDA = 6e-4, 8e-5, 8e-5, 100.0, 0.99, 0.95
IMAGE_EMBEDDING = 1024  # ObsEncoder's output on 64x64 pixels: 256 channels x 2 x 2

NOTES = (
    "Wired as TorchRL's sota-implementations/dreamer example (decoder, reward and value "
    "heads as IndependentNormal(scale 1) wrappers; actor DreamerActor+TanhNormal). "
    f"Adam(lr={WORLD_MODEL_LR}) model, Adam(lr={ACTOR_LR}) actor, Adam(lr={VALUE_LR}) value, "
    f"eps 1e-8 (torch default), clip_grad_norm_ {GRAD_CLIP:g}, gamma {GAMMA}, lambda {LMBDA}. "
    "KL: analytic KL(posterior||prior) summed over state dims, clamped at free_nats=3 per "
    "(batch, time) sample and then averaged (delayed_clamp=False); no KL balancing; gradient "
    "reaches prior and posterior. Reconstruction/reward: squared error (l2), summed over the "
    "last 3 dims then averaged (for [B,T,D] vectors that sum covers all of B,T,D). Start "
    "states: the root (state, belief) of the world model's output, i.e. the posterior of "
    "step t-1 (the zero primer at t=0), detached; the example feeds all batch*length of them. "
    "The actor's loss backpropagates through the imagined prior dynamics and reward model "
    "(hold_out_net only freezes their parameters). In imagination the reward and value heads "
    "are sampled (ExplorationType.RANDOM), not their means."
)


@dataclass
class Parts:
    """Everything one update of each kind touches."""

    batch: TensorDict
    world_model: nn.Module
    actor: nn.Module
    value: nn.Module
    model_loss: DreamerModelLoss
    actor_loss: DreamerActorLoss
    value_loss: DreamerValueLoss
    model_optimizer: torch.optim.Optimizer
    actor_optimizer: torch.optim.Optimizer
    value_optimizer: torch.optim.Optimizer


def _normal_head(
    module: nn.Module, in_keys: list[NestedKey], loc_key: NestedKey, out_key: NestedKey,
    event_dim: int,
) -> ProbabilisticTensorDictSequential:  # fmt: skip
    """``module`` -> loc -> IndependentNormal(loc, 1), as the example's decoder/reward/value."""
    return ProbabilisticTensorDictSequential(
        TensorDictModule(module, in_keys=in_keys, out_keys=[loc_key]),
        ProbabilisticTensorDictModule(
            in_keys=[loc_key],
            out_keys=[out_key],
            distribution_class=IndependentNormal,
            distribution_kwargs={"scale": 1.0, "event_dim": event_dim},
        ),
    )


def _mlp(in_features: int, out_features: int, depth: int, width: int) -> MLP:
    return MLP(
        in_features=in_features, out_features=out_features, depth=depth, num_cells=width,
        activation_class=nn.ELU,
    )  # fmt: skip


def _codec(args: argparse.Namespace) -> tuple[nn.Module, nn.Module, int]:
    """Encoder, decoder and embedding size."""
    latent = args.state + args.belief
    if args.obs == "image":
        decoder = ObsDecoder(latent_dim=latent)
        return ObsEncoder(in_channels=3), decoder, IMAGE_EMBEDDING
    encoder = _mlp(args.obs_dim, args.embedding, 2, args.mlp_hidden)
    return encoder, _mlp(latent, args.obs_dim, 2, args.mlp_hidden), args.embedding


def _world_model(
    args: argparse.Namespace, prior: RSSMPrior, reward: nn.Module, key: str
) -> WorldModelWrapper:
    encoder, decoder, embedding = _codec(args)
    posterior = RSSMPosterior(
        hidden_dim=args.hidden, state_dim=args.state, rnn_hidden_dim=args.belief,
        obs_embed_dim=embedding,
    )  # fmt: skip
    rollout = RSSMRollout(
        TensorDictModule(
            prior,
            in_keys=["state", "belief", "action"],
            out_keys=[("next", "prior_mean"), ("next", "prior_std"), "_", ("next", "belief")],
        ),
        TensorDictModule(
            posterior,
            in_keys=[("next", "belief"), ("next", "encoded_latents")],
            out_keys=[("next", "posterior_mean"), ("next", "posterior_std"), ("next", "state")],
        ),
    )
    latent_keys: list[NestedKey] = [("next", "state"), ("next", "belief")]
    transition = TensorDictSequential(
        TensorDictModule(encoder, in_keys=[("next", key)], out_keys=[("next", "encoded_latents")]),
        rollout,
        _normal_head(decoder, latent_keys, "loc", ("next", f"reco_{key}"), 3 if key == "pixels" else 1),
    )  # fmt: skip
    reward_head = _normal_head(reward, latent_keys, ("next", "loc"), ("next", "reward"), 1)
    return WorldModelWrapper(transition, reward_head)


def _imagination_env(
    args: argparse.Namespace, prior: RSSMPrior, reward: nn.Module, action_spec: Bounded
) -> DreamerEnv:
    """The example's ``_dreamer_make_mbenv``, with the specs its test env would give."""
    env = DreamerEnv(
        world_model=WorldModelWrapper(
            TensorDictModule(
                prior, in_keys=["state", "belief", "action"], out_keys=["_", "_", "state", "belief"]
            ),
            _normal_head(reward, ["state", "belief"], "loc", "reward", 1),
        ),
        prior_shape=torch.Size([args.state]),
        belief_shape=torch.Size([args.belief]),
    )
    latent = Composite(state=Unbounded((args.state,)), belief=Unbounded((args.belief,)))
    env.action_spec = action_spec
    env.observation_spec = latent.clone()
    env.state_spec = latent.clone()
    env.reward_spec = Unbounded((1,))
    return env


def _actor(args: argparse.Namespace, action_spec: Bounded) -> nn.Module:
    """The example's ``_dreamer_make_actor_sim``: DreamerActor -> TanhNormal(tanh_loc);
    its first layer is lazy, so a dummy forward materialises it (as the example does)."""
    net = DreamerActor(
        out_features=args.action_dim, depth=args.actor_depth, num_cells=args.mlp_hidden
    )
    with torch.no_grad():
        net(torch.zeros(1, args.state), torch.zeros(1, args.belief))
    return SafeProbabilisticTensorDictSequential(
        SafeModule(net, in_keys=["state", "belief"], out_keys=["loc", "scale"]),
        SafeProbabilisticModule(
            in_keys=["loc", "scale"],
            out_keys=["action"],
            distribution_class=TanhNormal,
            distribution_kwargs={"tanh_loc": True},
            spec=Composite(action=action_spec),
        ),
    )


def fake_batch(args: argparse.Namespace, key: str) -> TensorDict:
    """A replay minibatch as the example's buffer returns it (root and next observations)."""
    b, t = args.batch, args.length

    def observation() -> torch.Tensor:
        if args.obs == "image":
            return torch.rand(b, t, 3, 64, 64)
        return torch.randn(b, t, args.obs_dim)

    flags = {name: torch.zeros(b, t, 1, dtype=torch.bool) for name in ("done", "terminated")}
    is_init = torch.zeros(b, t, 1, dtype=torch.bool)
    is_init[:, 0] = True
    return TensorDict(
        {
            key: observation(),
            "state": torch.zeros(b, t, args.state),
            "belief": torch.zeros(b, t, args.belief),
            "action": torch.rand(b, t, args.action_dim) * 2 - 1,
            "is_init": is_init,
            **flags,
            "next": {key: observation(), "reward": torch.randn(b, t, 1), **flags},
        },
        [b, t],
    )


def build(args: argparse.Namespace) -> Parts:
    key = "pixels" if args.obs == "image" else "observation"
    action_spec = Bounded(-1.0, 1.0, (args.action_dim,))
    prior = RSSMPrior(
        action_spec, hidden_dim=args.hidden, rnn_hidden_dim=args.belief, state_dim=args.state,
        action_dim=args.action_dim,
    )  # fmt: skip
    latent = args.state + args.belief
    reward = _mlp(latent, 1, 2, args.mlp_hidden)
    world_model = _world_model(args, prior, reward, key)
    model_loss = DreamerModelLoss(world_model, free_nats=3)
    if key != "pixels":
        model_loss.set_keys(pixels=key, reco_pixels=f"reco_{key}")
    actor = _actor(args, action_spec)
    value = _normal_head(
        _mlp(latent, 1, 3, args.mlp_hidden), ["state", "belief"], "loc", "state_value", 1
    )
    env = _imagination_env(args, prior, reward, action_spec)
    actor_loss = DreamerActorLoss(
        actor, value, env, imagination_horizon=args.horizon, discount_loss=True
    )
    actor_loss.make_value_estimator(gamma=GAMMA, lmbda=LMBDA)
    value_loss = DreamerValueLoss(value, discount_loss=True)
    return Parts(
        batch=fake_batch(args, key),
        world_model=world_model,
        actor=actor,
        value=value,
        model_loss=model_loss,
        actor_loss=actor_loss,
        value_loss=value_loss,
        model_optimizer=torch.optim.Adam(world_model.parameters(), lr=WORLD_MODEL_LR),
        actor_optimizer=torch.optim.Adam(actor.parameters(), lr=ACTOR_LR),
        value_optimizer=torch.optim.Adam(value.parameters(), lr=VALUE_LR),
    )


def _step(loss: torch.Tensor, module: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(module.parameters(), GRAD_CLIP)
    optimizer.step()


def world_model_update(parts: Parts) -> Callable[[], TensorDict]:
    """One model step; returns the loss's output (the filtered minibatch), as the loop does."""

    def update() -> TensorDict:
        losses, sampled = parts.model_loss(parts.batch)
        total = losses["loss_model_kl"] + losses["loss_model_reco"] + losses["loss_model_reward"]
        _step(total, parts.world_model, parts.model_optimizer)
        return sampled

    return update


def actor_critic_update(parts: Parts, start: TensorDict) -> Callable[[], None]:
    def update() -> None:
        actor_losses, imagined = parts.actor_loss(start)
        _step(actor_losses["loss_actor"], parts.actor, parts.actor_optimizer)
        value_losses, _ = parts.value_loss(imagined)
        _step(value_losses["loss_value"], parts.value, parts.value_optimizer)

    return update


def start_states(sampled: TensorDict, count: int) -> TensorDict:
    """``count`` rows of the flattened filtered minibatch (all of them if ``count`` >= B*T);
    ``DreamerActorLoss`` keeps only their detached root ``state`` and ``belief``."""
    flat = sampled.select("state", "belief").reshape(-1)
    if count >= flat.shape[0]:
        return flat
    return flat[torch.randperm(flat.shape[0])[:count]]


def _rate(update: Callable[[], object], iters: int, warmup: int) -> float:
    for _ in range(warmup):
        update()
    times = []
    for _ in range(iters):
        begin = time.perf_counter()
        update()
        times.append(time.perf_counter() - begin)
    return 1.0 / statistics.median(times)


def _flops(update: Callable[[], object]) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        update()
    return int(counter.get_total_flops())


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--obs", choices=["vector", "image"], default="vector")
    for name, default in [
        ("obs-dim", 3), ("action-dim", 1), ("batch", 50), ("length", 50), ("horizon", 15),
        ("belief", 200), ("state", 30), ("hidden", 200), ("mlp-hidden", 400),
        ("start-states", 2500), ("iters", 10), ("warmup", 2), ("threads", 1),
    ]:  # fmt: skip
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument(
        "--embedding",
        type=int,
        default=None,
        help="vector encoder output; default 64 if --mlp-hidden < 400 else 1024",
    )
    parser.add_argument(
        "--actor-depth",
        type=int,
        default=None,
        help="actor hidden layers; default 2 if --mlp-hidden < 400 else 3",
    )
    parser.add_argument("--flops", action="store_true")  # fmt: skip
    args = parser.parse_args()
    paper = args.mlp_hidden >= 400
    args.embedding = args.embedding or (1024 if paper else 64)
    args.actor_depth = args.actor_depth or (3 if paper else 2)
    if args.hidden != args.belief:
        print(f"warning: TorchRL's RSSMPrior needs --hidden == --belief; using hidden "
              f"{args.belief}, not {args.hidden}", file=sys.stderr)  # fmt: skip
        args.hidden = args.belief
    return args


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    parts = build(args)
    model_update = world_model_update(parts)
    start = start_states(model_update(), args.start_states)
    policy_update = actor_critic_update(parts, start)
    result: dict[str, object] = {
        "library": "torchrl",
        "torchrl": torchrl.__version__,
        "tensordict": tensordict.__version__,
        "torch": torch.__version__,
        "obs": args.obs,
        "world_model_updates_per_s": _rate(model_update, args.iters, args.warmup),
        "actor_critic_updates_per_s": _rate(policy_update, args.iters, args.warmup),
        "start_states": int(start.shape[0]),
        "embedding": IMAGE_EMBEDDING if args.obs == "image" else args.embedding,
        "rssm_hidden": args.hidden,
        "actor_depth": args.actor_depth,
        "notes": NOTES,
    }
    if args.flops:
        result["world_model_flops"] = _flops(model_update)
        result["actor_critic_flops"] = _flops(policy_update)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
