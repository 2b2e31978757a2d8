"""`ModelBasedAlgorithm`: a world model and a policy learner on its x latent, as one `Algorithm`.

It trains with the off-policy scheme (DESIGN §9): the collector carries the RSSM posterior
as the algorithm's recurrent state and resets it to zeros at FIRST steps; each update is
one world-model step on ``mini_batch_size`` sequences of ``mini_batch_length`` steps, then
one policy step on the posterior latent the world model just filtered. Replayed windows
start from the zero latent and may cross an episode boundary: the model resets its
latent (and the previous action) at the FIRST step inside the window, so no step is
masked out but the reward of FIRST steps, which belongs to no action.
"""

from __future__ import annotations

from typing import Any

import torch

from cadence.algorithms.algorithm import Algorithm, AlgStep, Batch, UpdateResult
from cadence.algorithms.optimizers import make_adam
from cadence.data.nest import Nest
from cadence.data.time_step import StepType, TimeStep
from cadence.mbrl.policies import ImaginedActorCritic, LatentSAC
from cadence.mbrl.world_model import WorldModel, postprocess_image
from cadence.networks.rssm import RSSM, Latent

SUMMARY_SEQUENCES = 2  # sequences shown in each summary video
SUMMARY_CONTEXT = 5  # filtered steps before the open-loop imagination starts


class ModelBasedAlgorithm(Algorithm):
    """Dreamer, Denoised MDP or SAC on latents (see `cadence.mbrl.config`).

    Args:
        world_model: the grouped RSSM and its heads.
        policy: `ImaginedActorCritic` or `LatentSAC`, acting from x features.
        exploration_noise: std of the Gaussian added to the collected actions ([-1, 1] units).
        eval_mode: how `predict_step` acts: ``"original"``, the Denoised MDP code's (a
            posterior sample fed back, the most likely of 100 policy samples), or
            ``"mean"`` (the posterior mean fed back, tanh of the policy's mean).
    """

    own_update = True  # several losses and optimizers
    replays_state = False  # replayed windows start from the zero latent
    replay_fields = (
        "time_step/observation",
        "time_step/prev_action",
        "time_step/reward",
        "time_step/step_type",
        "time_step/discount",
        "action",
    )

    def __init__(
        self,
        world_model: WorldModel,
        policy: ImaginedActorCritic | LatentSAC,
        exploration_noise: float,
        eval_mode: str = "mean",
    ):
        super().__init__()
        if eval_mode not in ("original", "mean"):
            raise ValueError(f"eval_mode must be 'original' or 'mean', got {eval_mode!r}")
        self.eval_mode = eval_mode
        self.world_model = world_model
        self.policy = policy
        self.exploration_noise = exploration_noise
        self.max_grad_norm = world_model.config.max_grad_norm
        config = world_model.config
        self.model_optimizer = make_adam(
            world_model.parameters(), config.learning_rate, eps=config.adam_eps, fused=False
        )
        self._summary_batch: Batch | None = None

    # ------------------------------------------------------------------ acting
    def initial_state(self, batch_size: int) -> Latent:
        return self.world_model.rssm.initial_latent(
            batch_size, self.model_optimizer.param_groups[0]["params"][0].device
        )

    def filter(self, time_step: TimeStep, state: Latent, sample: bool) -> Latent:
        """The posterior latent after ``time_step``'s observation (the collector has reset
        ``state`` at FIRST steps; the previous action is zeroed there too)."""
        model = self.world_model
        keep = (time_step.step_type != int(StepType.FIRST)).float().unsqueeze(-1)
        action = model.normalize_action(time_step.prev_action).flatten(1) * keep
        return model.rssm.observe_step(state, action, model.embed(time_step.observation), sample)

    def predict_step(self, time_step: TimeStep, state: Nest, agent_info: Nest = ()) -> AlgStep:
        """Evaluation's action (`eval_mode`): with ``"mean"`` tanh of the policy's mean from
        the posterior mean of x (deterministic); with ``"original"`` the most likely of 100
        policy samples from a posterior sample."""
        if self.eval_mode == "original":
            latent = self.filter(time_step, state, sample=True)
            action = self.policy.most_likely_action(RSSM.features(latent))
        else:
            latent = self.filter(time_step, state, sample=False)
            action = self.policy.act(RSSM.features(latent), deterministic=True)
        return AlgStep(self._env_action(action), latent)

    def rollout_step(self, time_step: TimeStep, state: Nest, agent_info: Nest = ()) -> AlgStep:
        """A policy sample plus Gaussian exploration noise, clipped to the bounds."""
        latent = self.filter(time_step, state, sample=True)
        action = self.policy.act(RSSM.features(latent), deterministic=False)
        if self.exploration_noise > 0:
            action = (action + self.exploration_noise * torch.randn_like(action)).clamp(-1, 1)
        return AlgStep(self._env_action(action), latent)

    def _env_action(self, action: torch.Tensor) -> torch.Tensor:
        shape = self.world_model.action_center.shape
        return self.world_model.env_action(action.reshape(*action.shape[:1], *shape))

    # ---------------------------------------------------------------- learning
    def preprocess_experience(self, experience: Any) -> Batch:
        """Replayed windows ``[B, L]`` as the fields the world model and the policy read."""
        time_step = experience.steps["time_step"]
        return {
            "observation": time_step["observation"],
            "prev_action": time_step["prev_action"],
            "reward": time_step["reward"],
            "step_type": time_step["step_type"],
            "discount": time_step["discount"],
            "action": experience.action,
        }

    def update(self, batch: Batch) -> UpdateResult:
        """One world-model step, then one policy step on the latent it filtered; with a
        compiled update (`cadence.accel.compile_update`), each step is one graph."""
        if self.world_model.image:
            self._summary_batch = {k: v[:SUMMARY_SEQUENCES].detach() for k, v in batch.items()}
        metrics, latent, nonfinite = self.in_graph(self.model_step, batch)
        policy_metrics, policy_nonfinite = self.in_graph(self.policy_step, latent, batch)
        return UpdateResult({**metrics, **policy_metrics}, nonfinite | policy_nonfinite)

    def model_step(self, batch: Batch) -> tuple[dict[str, torch.Tensor], Latent, torch.Tensor]:
        """The world model's loss and optimizer step: its logged terms, the posterior latent
        it filtered (detached: the policy learns on it, not through it), and whether the
        step was non-finite."""
        first = batch["step_type"] == int(StepType.FIRST)
        output = self.world_model.loss(
            batch["observation"], batch["prev_action"], batch["reward"], first
        )
        model_norm = self.minimize(output.loss, [self.model_optimizer])
        metrics = {key: value.detach() for key, value in output.terms.items()}
        metrics["loss/world_model"] = output.loss.detach()
        nonfinite = ~torch.isfinite(metrics["loss/world_model"])
        if model_norm is not None:
            metrics["train/model_grad_norm"] = model_norm.detach()
            nonfinite = nonfinite | ~torch.isfinite(model_norm)
        latent = {key: value.detach() for key, value in output.observed.latent.items()}
        return metrics, latent, nonfinite

    def policy_step(
        self, latent: Latent, batch: Batch
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The policy learner's step on the filtered ``latent``: its logged terms and
        whether it was non-finite."""
        return self.policy.update(self.world_model, latent, batch, self.minimize)

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"world_model": self.model_optimizer, **self.policy.optimizers()}

    # --------------------------------------------------------------- summaries
    @torch.no_grad()
    def summaries(self) -> dict[str, torch.Tensor]:
        """For image observations, after a training iteration: ``{"video/model": [T, H, W', 3]}``
        uint8, each frame the replayed observation, its reconstruction, the open-loop
        imagination from the first `SUMMARY_CONTEXT` steps (the prior of every group, the
        replayed actions), and, with a y or z group, the reconstruction from x alone (y and
        z zeroed), side by side; one row per sequence."""
        batch = self._summary_batch
        if batch is None:
            return {}
        model = self.world_model
        first = batch["step_type"] == int(StepType.FIRST)
        observed = model.observe(batch["observation"], batch["prev_action"], first)
        columns = [batch["observation"], postprocess_image(model.decode(observed.latent))]
        columns.append(postprocess_image(self._open_loop(batch, observed)))
        if len(model.rssm.groups) > 1:
            x_only = {
                k: v if k.startswith("x_") else torch.zeros_like(v)
                for k, v in observed.latent.items()
            }
            columns.append(postprocess_image(model.decode(x_only)))
        frames = torch.cat(columns, -1)  # [B, L, C, H, W * k]
        frames = torch.cat(list(frames), -2)  # [L, C, H * B, W * k]
        if frames.shape[1] == 1:
            frames = frames.expand(-1, 3, -1, -1)
        return {"video/model": frames[:, :3].permute(0, 2, 3, 1).contiguous()}

    def _open_loop(self, batch: Batch, observed: Any) -> torch.Tensor:
        """Decoded frames: the posterior for the context steps, then the prior alone."""
        model = self.world_model
        context = min(SUMMARY_CONTEXT, batch["observation"].shape[1])
        latent = {k: v[:, context - 1] for k, v in observed.latent.items()}
        actions = model.normalize_action(batch["prev_action"]).flatten(2)
        decoded = [model.decode({k: v[:, :context] for k, v in observed.latent.items()})]
        for t in range(context, batch["observation"].shape[1]):
            latent = model.rssm.imagine_step(latent, actions[:, t], tuple(model.rssm.groups))
            decoded.append(model.decode(latent).unsqueeze(1))
        return torch.cat(decoded, 1)
