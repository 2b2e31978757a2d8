"""TorchRL's Dreamer (v1) at given sizes: world-model and actor-critic updates per second.

Run in the TorchRL virtual environment (see ``benchmarks/world_model_speed.py``); it prints
one JSON line. The model is wired as TorchRL's own Dreamer example wires it: an encoder,
``RSSMRollout`` of ``RSSMPrior`` and ``RSSMPosterior``, a decoder and a reward MLP in a
``WorldModelWrapper`` trained by ``DreamerModelLoss`` (free nats 3, clamped per sample);
the actor (``DreamerActor``, a tanh-Normal) and the value MLP trained by
``DreamerActorLoss`` (imagination in a ``DreamerEnv`` of the prior and the reward model,
``horizon`` steps, λ-returns) and ``DreamerValueLoss``. Adam: 6e-4 for the model, 8e-5 for
the actor and the value, gradients clipped to 100.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import tensordict
import torch
import torchrl
from tensordict import TensorDict
from torch import nn
from torchrl.data import Bounded, Composite, Unbounded
from torchrl.envs.model_based.dreamer import DreamerEnv
from torchrl.modules import (
    MLP,
    SafeModule,
    SafeProbabilisticModule,
    SafeProbabilisticTensorDictSequential,
    SafeSequential,
    TanhNormal,
    WorldModelWrapper,
)
from torchrl.modules.models.model_based import (
    DreamerActor,
    ObsDecoder,
    ObsEncoder,
    RSSMPosterior,
    RSSMPrior,
    RSSMRollout,
)
from torchrl.objectives.dreamer import DreamerActorLoss, DreamerModelLoss, DreamerValueLoss

EMBEDDING = 64  # vector observations: the encoder's output, as cadence's Pendulum configs


def build(args: argparse.Namespace) -> dict:
    image = args.obs == "image"
    key = "pixels" if image else "observation"
    action_spec = Bounded(-1.0, 1.0, (args.action_dim,))
    if image:
        encoder, decoder = ObsEncoder(), ObsDecoder()
        embedding = 1024
    else:
        embedding = EMBEDDING if args.mlp_hidden < 400 else 1024
        encoder = MLP(
            out_features=embedding, depth=2, num_cells=args.mlp_hidden, activation_class=nn.ELU
        )
        decoder = _StateDecoder(args.obs_dim, args.mlp_hidden)
    prior = RSSMPrior(
        action_spec, hidden_dim=args.hidden, rnn_hidden_dim=args.belief, state_dim=args.state,
        action_dim=args.action_dim,
    )  # fmt: skip
    posterior = RSSMPosterior(
        hidden_dim=args.hidden,
        state_dim=args.state,
        rnn_hidden_dim=args.belief,
        obs_embed_dim=embedding,
    )
    reward = MLP(out_features=1, depth=2, num_cells=args.mlp_hidden, activation_class=nn.ELU)
    world_model = WorldModelWrapper(
        SafeSequential(
            SafeModule(encoder, in_keys=[("next", key)], out_keys=[("next", "encoded_latents")]),
            RSSMRollout(
                SafeModule(
                    prior,
                    in_keys=["state", "belief", "action"],
                    out_keys=[("next", "prior_mean"), ("next", "prior_std"), "_", ("next", "belief")],
                ),
                SafeModule(
                    posterior,
                    in_keys=[("next", "belief"), ("next", "encoded_latents")],
                    out_keys=[("next", "posterior_mean"), ("next", "posterior_std"), ("next", "state")],
                ),
            ),
            SafeModule(decoder, in_keys=[("next", "state"), ("next", "belief")], out_keys=[("next", f"reco_{key}")]),
        ),
        SafeModule(reward, in_keys=[("next", "state"), ("next", "belief")], out_keys=[("next", "reward")]),
    )  # fmt: skip
    model_loss = DreamerModelLoss(world_model, free_nats=3)
    if not image:
        model_loss.set_keys(pixels="observation", reco_pixels="reco_observation")
    env = DreamerEnv(
        WorldModelWrapper(
            SafeModule(prior, in_keys=["state", "belief", "action"], out_keys=["_", "_", "state", "belief"]),
            SafeModule(reward, in_keys=["state", "belief"], out_keys=["reward"]),
        ),
        prior_shape=torch.Size([args.state]),
        belief_shape=torch.Size([args.belief]),
    )  # fmt: skip
    env.action_spec = action_spec
    env.observation_spec = Composite(
        state=Unbounded((args.state,)), belief=Unbounded((args.belief,))
    )
    env.state_spec = Composite(state=Unbounded((args.state,)), belief=Unbounded((args.belief,)))
    env.reward_spec = Unbounded((1,))
    depth = 2 if args.mlp_hidden < 400 else 3
    actor = SafeProbabilisticTensorDictSequential(
        SafeModule(
            DreamerActor(out_features=args.action_dim, depth=depth, num_cells=args.mlp_hidden),
            in_keys=["state", "belief"],
            out_keys=["loc", "scale"],
        ),
        SafeProbabilisticModule(
            in_keys=["loc", "scale"],
            out_keys=["action"],
            distribution_class=TanhNormal,
            distribution_kwargs={"tanh_loc": True},
            spec=action_spec,
        ),
    )
    value = SafeModule(
        MLP(out_features=1, depth=3, num_cells=args.mlp_hidden, activation_class=nn.ELU),
        in_keys=["state", "belief"],
        out_keys=["state_value"],
    )
    actor_loss = DreamerActorLoss(actor, value, env, imagination_horizon=args.horizon)
    value_loss = DreamerValueLoss(value)
    batch = _batch(args, key, embedding)
    with torch.no_grad():  # materialise lazy layers before the optimizers see them
        model_loss(batch.clone())
        value(
            actor(
                TensorDict(
                    {"state": torch.zeros(1, args.state), "belief": torch.zeros(1, args.belief)},
                    [1],
                )
            )
        )
    return {
        "batch": batch,
        "model_loss": model_loss,
        "actor_loss": actor_loss,
        "value_loss": value_loss,
        "model_optimizer": torch.optim.Adam(world_model.parameters(), lr=6e-4),
        "actor_optimizer": torch.optim.Adam(actor.parameters(), lr=8e-5),
        "value_optimizer": torch.optim.Adam(value.parameters(), lr=8e-5),
        "world_model": world_model,
        "actor": actor,
        "value": value,
    }


class _StateDecoder(nn.Module):
    """``(state, belief) -> observation`` for vector observations (the MLP counterpart of
    TorchRL's ``ObsDecoder``)."""

    def __init__(self, obs_dim: int, hidden: int):
        super().__init__()
        self.net = MLP(out_features=obs_dim, depth=2, num_cells=hidden, activation_class=nn.ELU)

    def forward(self, state: torch.Tensor, belief: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([state, belief], -1))


def _batch(args: argparse.Namespace, key: str, embedding: int) -> TensorDict:
    b, t = args.batch, args.length
    if args.obs == "image":
        observation = torch.rand(b, t, 3, 64, 64) - 0.5
    else:
        observation = torch.randn(b, t, args.obs_dim)
    return TensorDict(
        {
            "state": torch.zeros(b, t, args.state),
            "belief": torch.zeros(b, t, args.belief),
            "action": torch.rand(b, t, args.action_dim) * 2 - 1,
            "next": {key: observation, "reward": torch.randn(b, t, 1)},
        },
        [b, t],
    )


def world_model_update(parts: dict) -> Callable[[], TensorDict]:
    def update() -> TensorDict:
        losses, sampled = parts["model_loss"](parts["batch"].clone())
        loss = losses["loss_model_kl"] + losses["loss_model_reco"] + losses["loss_model_reward"]
        parts["model_optimizer"].zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(parts["world_model"].parameters(), 100)
        parts["model_optimizer"].step()
        return sampled

    return update


def actor_critic_update(parts: dict, start: TensorDict) -> Callable[[], None]:
    def update() -> None:
        actor_losses, imagined = parts["actor_loss"](start.clone())
        parts["actor_optimizer"].zero_grad()
        actor_losses["loss_actor"].backward()
        nn.utils.clip_grad_norm_(parts["actor"].parameters(), 100)
        parts["actor_optimizer"].step()
        value_losses, _ = parts["value_loss"](imagined)
        parts["value_optimizer"].zero_grad()
        value_losses["loss_value"].backward()
        nn.utils.clip_grad_norm_(parts["value"].parameters(), 100)
        parts["value_optimizer"].step()

    return update


def start_states(sampled: TensorDict, count: int) -> TensorDict:
    """``count`` posterior (state, belief) pairs drawn from the filtered minibatch."""
    flat = TensorDict(
        {"state": sampled["next", "state"], "belief": sampled["next", "belief"]},
        sampled.batch_size,
    ).reshape(-1)
    index = torch.randperm(flat.shape[0])[:count]
    return flat[index].detach()


def _rate(update: Callable[[], object], iters: int, warmup: int) -> float:
    for _ in range(warmup):
        update()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        update()
        times.append(time.perf_counter() - start)
    return 1.0 / statistics.median(times)


def _flops(update: Callable[[], object]) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        update()
    return float(counter.get_total_flops())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--obs", choices=["vector", "image"], default="vector")
    for name, default in [
        ("obs-dim", 3), ("action-dim", 1), ("batch", 50), ("length", 50), ("horizon", 15),
        ("belief", 200), ("state", 30), ("hidden", 200), ("mlp-hidden", 400),
        ("start-states", 2500), ("iters", 10), ("warmup", 2), ("threads", 1),
    ]:  # fmt: skip
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--flops", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    parts = build(args)
    model_update = world_model_update(parts)
    sampled = model_update()
    start = start_states(sampled, args.start_states)
    policy_update = actor_critic_update(parts, start)
    result = {
        "library": "torchrl",
        "torchrl": torchrl.__version__,
        "tensordict": tensordict.__version__,
        "torch": torch.__version__,
        "obs": args.obs,
        "world_model_updates_per_s": _rate(model_update, args.iters, args.warmup),
        "actor_critic_updates_per_s": _rate(policy_update, args.iters, args.warmup),
        "start_states": int(start.shape[0]),
    }
    if args.flops:
        result["world_model_flops"] = _flops(model_update)
        result["actor_critic_flops"] = _flops(policy_update)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
