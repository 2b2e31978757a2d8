"""REINFORCE on CartPole-v1 with the Batcher, in the style of rlstructures' tutorials.

An agent samples actions from a small policy network; a `Batcher` runs it over
16 environments in 2 worker processes and returns whole episodes (episodic
mode); the learner replays the agent over them to get log-probabilities with
gradients, and ascends the discounted returns (Williams, 1992,
https://doi.org/10.1007/BF00992696). A second Batcher evaluates the greedy
policy in the background: `get(blocking=False)` answers only once it is done.

Run it as a plain script (there is no ``if __name__ == "__main__":`` guard, and
none is needed: the workers never run this file):

    python examples/reinforce_batcher.py            # a return of 500 in about 30 iterations
    python examples/reinforce_batcher.py --quick    # a few seconds, for a smoke test
"""

import argparse
import time

import torch
from torch import nn

from cadence.collect import Agent, Batcher, SlotRandom, make_gym_env, replay_agent
from cadence.data import DictTensor

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--iterations", type=int, default=40, help="training iterations")
parser.add_argument("--n-processes", type=int, default=2, help="worker processes")
parser.add_argument("--n-envs", type=int, default=8, help="environments per process")
parser.add_argument("--learning-rate", type=float, default=0.01, help="Adam's step size")
parser.add_argument("--gamma", type=float, default=0.99, help="the discount of the returns")
parser.add_argument("--seed", type=int, default=0, help="seeds the envs, the agents and torch")
parser.add_argument("--quick", action="store_true", help="3 short iterations (a smoke test)")
args = parser.parse_args()
n_timesteps = 500  # CartPole-v1's episodes end by then, so every segment is a whole episode
if args.quick:
    args.iterations, args.n_processes, args.n_envs, n_timesteps = 3, 2, 2, 30


class PolicyNetwork(nn.Module):
    """Action logits ``[B, 2]`` from CartPole's observation ``[B, 4]``."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 2))

    def forward(self, frame: torch.Tensor) -> torch.Tensor:
        return self.layers(frame)


class ReinforceAgent(Agent):
    """Samples from the policy where ``agent_info["stochastic"]`` is True, else acts greedily."""

    def __init__(self, model: PolicyNetwork, seed: int = 0):
        self.model = model
        self.random = SlotRandom(seed)  # one stream per env: the same runs whatever the processes

    def update(self, info):
        self.model.load_state_dict(info)

    def __call__(self, state, observation, agent_info, history=None):
        logits = self.model(observation["frame"])
        sampled = self.random.categorical(observation["env_id"], logits)
        action = torch.where(agent_info["stochastic"], sampled, logits.argmax(-1))
        return DictTensor({"action": action, "logits": logits}), state


def discounted_returns(reward: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """``[B, T]`` reward-to-go of each valid step; ``reward[:, t]`` follows action ``t``."""
    returns = torch.zeros_like(reward)
    following = torch.zeros(reward.shape[0])
    for t in reversed(range(reward.shape[1])):
        following = reward[:, t] + gamma * following * mask[:, t]
        returns[:, t] = following
    return returns * mask


def reinforce_loss(agent: ReinforceAgent, trajectories, gamma: float) -> torch.Tensor:
    steps = trajectories.trajectories
    mask = steps.mask()
    logits = replay_agent(agent, trajectories)["logits"]  # with gradients, unlike acquisition
    log_prob = torch.log_softmax(logits, -1).gather(-1, steps["action/action"][..., None])[..., 0]
    returns = discounted_returns(steps["_observation/reward"], mask, gamma)
    advantage = returns - (returns * mask).sum() / mask.sum()  # the mean as a baseline
    return -(log_prob * advantage * mask).sum() / mask.sum()


torch.manual_seed(args.seed)
model = PolicyNetwork()
learner = ReinforceAgent(model)
optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
n_slots = args.n_processes * args.n_envs

batcher = Batcher(
    n_timesteps=n_timesteps,
    n_processes=args.n_processes,
    n_envs=args.n_envs,
    create_env=make_gym_env,
    env_args={"name": "CartPole-v1"},
    create_agent=ReinforceAgent,
    agent_args={"model": model, "seed": args.seed},
    seed=args.seed,
    agent_info=DictTensor({"stochastic": torch.tensor([True])}),
    mode="episodic",
)
evaluation = Batcher(
    n_timesteps=n_timesteps,
    n_processes=1,
    n_envs=4,
    create_env=make_gym_env,
    env_args={"name": "CartPole-v1"},
    create_agent=ReinforceAgent,
    agent_args={"model": model, "seed": args.seed + 1000},
    seed=args.seed + 1000,  # other episodes than training's
    agent_info=DictTensor({"stochastic": torch.tensor([False])}),
    mode="episodic",
)
greedy = DictTensor({"stochastic": torch.zeros(4, dtype=torch.bool)})
evaluation.reset(greedy)
evaluation.execute()
evaluated_iteration = 0  # the iteration whose weights the evaluation runs

start = time.time()
for iteration in range(args.iterations):
    batcher.update(model.state_dict())
    batcher.reset(DictTensor({"stochastic": torch.ones(n_slots, dtype=torch.bool)}))
    batcher.execute()
    trajectories, _ = batcher.get()

    loss = reinforce_loss(learner, trajectories, args.gamma)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()

    episode_return = trajectories.trajectories["_observation/reward"].sum(1).mean()
    print(f"iteration {iteration:3d}  train return {episode_return:6.1f}  loss {loss:7.3f}")

    evaluated, _ = evaluation.get(blocking=False)
    if evaluated is not None:
        eval_return = evaluated.trajectories["_observation/reward"].sum(1).mean()
        print(
            f"  greedy return {eval_return:6.1f} of the policy of iteration {evaluated_iteration}"
        )
        evaluation.update(model.state_dict())
        evaluated_iteration = iteration + 1
        evaluation.reset(greedy)
        evaluation.execute()

evaluation.get()  # the last one still running
batcher.close()
evaluation.close()
print(f"done in {time.time() - start:.1f} s")
