"""A2C on CartPole-v1 with the Batcher, in the style of rlstructures' tutorials.

An agent holds an actor and a critic; a `Batcher` runs it over 16 environments in
2 worker processes in continuing mode, so every acquisition is ``n_timesteps``
steps of each env and an episode longer than that goes on in the next one. The
learner replays the agent over each acquisition for its logits and values with
gradients and takes one step of advantage actor-critic (Mnih et al., 2016,
https://arxiv.org/abs/1602.01783) with GAE advantages (Schulman et al., 2016,
https://arxiv.org/abs/1506.02438). A second Batcher, in episodic mode, evaluates
the deterministic policy (``agent_info["stochastic"]`` False: the most likely
action) on whole episodes in the background.

Timeouts are not terminations: at a step that ends an episode, the Batcher's
``_observation/discount`` is 0 where the pole fell and 1 where CartPole's 500-step
limit cut it, and the value of what follows bootstraps only through a 1.

Run it as a plain script (no ``if __name__ == "__main__":`` guard is needed):

    python examples/a2c_batcher.py            # an evaluation return of 475 within a minute or two
    python examples/a2c_batcher.py --quick    # a few seconds, for a smoke test

Measured with the defaults (a slow test checks it): seeds 0, 1 and 2 stopped at an
evaluation return of 490, 495 and 500 after 123k, 57k and 71k env steps (21-72 s on a
shared 2-core machine). Where it stops varies a little from run to run: the evaluation
runs beside training, so which weights it catches depends on timing.
"""

import argparse
import time

import torch
from torch import nn

from cadence.collect import Agent, Batcher, SlotRandom, make_gym_env, replay_agent
from cadence.data import DictTensor

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--iterations", type=int, default=3000, help="the most updates")
parser.add_argument("--n-processes", type=int, default=2, help="worker processes")
parser.add_argument("--n-envs", type=int, default=8, help="environments per process")
parser.add_argument("--n-timesteps", type=int, default=16, help="steps per env per update")
parser.add_argument("--learning-rate", type=float, default=1e-3, help="Adam's step size")
parser.add_argument("--gamma", type=float, default=0.99, help="the discount")
parser.add_argument("--gae-lambda", type=float, default=0.95, help="GAE's lambda")
parser.add_argument("--ent-coef", type=float, default=0.01, help="the entropy bonus's weight")
parser.add_argument("--vf-coef", type=float, default=0.5, help="the value loss's weight")
parser.add_argument("--max-grad-norm", type=float, default=0.5, help="gradient norm clipping")
parser.add_argument("--eval-envs", type=int, default=8, help="episodes per evaluation")
parser.add_argument("--target", type=float, default=475.0, help="stop at this evaluation return")
parser.add_argument("--seed", type=int, default=0, help="seeds the envs, the agents and torch")
parser.add_argument("--quick", action="store_true", help="a few short iterations (a smoke test)")
args = parser.parse_args()
eval_timesteps = 500  # CartPole-v1's episodes end by then: an evaluation is whole episodes
if args.quick:
    args.iterations, args.n_envs, args.eval_envs, eval_timesteps = 5, 2, 2, 20


class ActorCritic(nn.Module):
    """Action logits ``[B, 2]`` and a value ``[B]`` from CartPole's observation ``[B, 4]``."""

    def __init__(self) -> None:
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 2))
        self.critic = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 1))

    def forward(self, frame: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.actor(frame), self.critic(frame).squeeze(-1)


class A2CAgent(Agent):
    """Samples where ``agent_info["stochastic"]`` is True, else takes the likeliest action."""

    def __init__(self, model: ActorCritic, seed: int = 0):
        self.model = model
        self.random = SlotRandom(seed)  # one stream per env: the same runs whatever the processes

    def update(self, info):
        self.model.load_state_dict(info)

    def __call__(self, state, observation, agent_info, history=None):
        logits, value = self.model(observation["frame"])
        sampled = self.random.categorical(observation["env_id"], logits)
        action = torch.where(agent_info["stochastic"], sampled, logits.argmax(-1))
        return DictTensor({"action": action, "logits": logits, "value": value}), state


def gae(reward, discount, done, value, next_value, mask, gamma, gae_lambda):
    """``[B, T]`` advantages of each step's action; ``reward[:, t]`` follows action ``t``.

    ``next_value[:, t]`` is the value of ``_observation`` at ``t`` (the final observation
    where an episode ended), counted through ``discount`` (0 at a termination).
    """
    delta = reward + gamma * discount * next_value - value
    advantages = torch.zeros_like(reward)
    following = torch.zeros(reward.shape[0])
    for t in reversed(range(reward.shape[1])):
        carry = gamma * gae_lambda * (~done[:, t]).float() * mask[:, t]
        following = delta[:, t] + carry * following
        advantages[:, t] = following
    return advantages * mask


def a2c_loss(agent: A2CAgent, trajectories) -> tuple[torch.Tensor, torch.Tensor]:
    steps = trajectories.trajectories
    mask = steps.mask()
    replayed = replay_agent(agent, trajectories)  # with gradients, unlike acquisition
    logits, value = replayed["logits"], replayed["value"]
    with torch.no_grad():
        _, next_value = agent.model(steps["_observation/frame"])
        advantages = gae(
            steps["_observation/reward"],
            steps["_observation/discount"],
            steps["_observation/done"],
            value,
            next_value,
            mask,
            args.gamma,
            args.gae_lambda,
        )
        returns = advantages + value
    log_probs = torch.log_softmax(logits, -1)
    log_prob = log_probs.gather(-1, steps["action/action"][..., None])[..., 0]
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    n = mask.sum()
    policy_loss = -(log_prob * advantages * mask).sum() / n
    value_loss = ((value - returns) ** 2 * mask).sum() / n
    entropy_mean = (entropy * mask).sum() / n
    return policy_loss + args.vf_coef * value_loss - args.ent_coef * entropy_mean, entropy_mean


torch.set_num_threads(1)  # small networks: more threads only wait on each other
torch.manual_seed(args.seed)
model = ActorCritic()
learner = A2CAgent(model)
optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
n_slots = args.n_processes * args.n_envs

batcher = Batcher(
    n_timesteps=args.n_timesteps,
    n_processes=args.n_processes,
    n_envs=args.n_envs,
    create_env=make_gym_env,
    env_args={"name": "CartPole-v1"},
    create_agent=A2CAgent,
    agent_args={"model": model, "seed": args.seed},
    seed=args.seed,
    agent_info=DictTensor({"stochastic": torch.tensor([True])}),
    mode="continuing",
)
evaluation = Batcher(
    n_timesteps=eval_timesteps,
    n_processes=1,
    n_envs=args.eval_envs,
    create_env=make_gym_env,
    env_args={"name": "CartPole-v1"},
    create_agent=A2CAgent,
    agent_args={"model": model, "seed": args.seed + 1000},
    seed=args.seed + 1000,  # other episodes than training's
    agent_info=DictTensor({"stochastic": torch.tensor([False])}),
    mode="episodic",
)
deterministic = DictTensor({"stochastic": torch.zeros(args.eval_envs, dtype=torch.bool)})
evaluation.reset(deterministic)
evaluation.execute()
evaluated_iteration = 0  # the iteration whose weights the evaluation runs
best_eval = float("-inf")

start = time.time()
batcher.reset(DictTensor({"stochastic": torch.ones(n_slots, dtype=torch.bool)}))
for iteration in range(args.iterations):
    batcher.execute()
    trajectories, _ = batcher.get()

    loss, entropy = a2c_loss(learner, trajectories)
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
    optimizer.step()
    batcher.update(model.state_dict())  # the next acquisition acts with these weights

    evaluated, _ = evaluation.get(blocking=False)
    if evaluated is None:
        continue
    eval_return = evaluated.trajectories["_observation/reward"].sum(1).mean().item()
    best_eval = max(best_eval, eval_return)
    steps = (iteration + 1) * n_slots * args.n_timesteps
    print(
        f"iteration {iteration:5d}  env steps {steps:7d}  loss {loss:7.3f}  entropy {entropy:.3f}"
        f"  evaluation return {eval_return:6.1f} (weights of iteration {evaluated_iteration})"
    )
    if eval_return >= args.target:
        break
    evaluation.update(model.state_dict())
    evaluated_iteration = iteration + 1
    evaluation.reset(deterministic)
    evaluation.execute()
else:
    evaluated, _ = evaluation.get()  # the last one still running
    eval_return = evaluated.trajectories["_observation/reward"].sum(1).mean().item()
    best_eval = max(best_eval, eval_return)
    print(f"final evaluation return {eval_return:6.1f}")

batcher.close()
evaluation.close()
print(f"best evaluation return {best_eval:.1f}, done in {time.time() - start:.1f} s")
