"""One agent, several policies side by side in one batch, through per-slot agent_info.

rlstructures' ``agent_info`` gives every slot of a batch its own parameters: here
an exploration level ``epsilon`` (a uniform action with that probability) and
``stochastic`` (sample from the policy, or take its likeliest action). One agent,
one set of weights and one `Batcher` thus run a greedy policy, a sampling one and
epsilon-greedy ones at once, and each segment of the trajectories carries its
slot's parameters as ``agent_info/*`` in its ``info``, so the statistics of each
policy can be read apart. The policy is a fixed controller for CartPole (push
toward where the pole falls, a softmax over two logits), so there is nothing to
train; what differs between slots is only what ``agent_info`` tells them.

Run it as a plain script (no ``if __name__ == "__main__":`` guard is needed):

    python examples/two_policies_batcher.py
    python examples/two_policies_batcher.py --quick    # a few seconds, for a smoke test
"""

import argparse

import torch

from cadence.collect import Agent, Batcher, SlotRandom, make_gym_env
from cadence.data import DictTensor

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--rounds", type=int, default=3, help="acquisitions of whole episodes")
parser.add_argument("--seed", type=int, default=0, help="seeds the envs and the agent")
parser.add_argument("--quick", action="store_true", help="short episodes (a smoke test)")
args = parser.parse_args()
n_timesteps = 500 if not args.quick else 30
if args.quick:
    args.rounds = 1

# Two slots of each policy: 2 processes x 4 envs, the policies spread over both.
POLICIES = [
    ("greedy", 0.0, False),
    ("sampling", 0.0, True),
    ("epsilon 0.2", 0.2, False),
    ("uniform", 1.0, False),
]
n_processes, n_envs = 2, 4
names = [name for name, _, _ in POLICIES] * 2
agent_info = DictTensor(
    {
        "epsilon": torch.tensor([epsilon for _, epsilon, _ in POLICIES] * 2),
        "stochastic": torch.tensor([stochastic for _, _, stochastic in POLICIES] * 2),
    }
)


class ControllerAgent(Agent):
    """A softmax controller over CartPole's state; ``agent_info`` picks how each slot acts."""

    def __init__(self, gain: float = 5.0, seed: int = 0):
        self.gain = gain
        self.random = SlotRandom(seed)

    def __call__(self, state, observation, agent_info, history=None):
        frame, env_id = observation["frame"], observation["env_id"]
        push_right = frame[:, 2] + 0.5 * frame[:, 3]  # the pole's angle and angular velocity
        logits = torch.stack([-push_right, push_right], dim=-1) * self.gain
        action = torch.where(
            agent_info["stochastic"],
            self.random.categorical(env_id, logits),
            logits.argmax(-1),
        )
        explored = self.random.bernoulli(env_id, agent_info["epsilon"])
        uniform = self.random.categorical(env_id, torch.zeros_like(logits))
        action = torch.where(explored, uniform, action)
        return DictTensor({"action": action, "explored": explored}), state


batcher = Batcher(
    n_timesteps=n_timesteps,
    n_processes=n_processes,
    n_envs=n_envs,
    create_env=make_gym_env,
    env_args={"name": "CartPole-v1"},
    create_agent=ControllerAgent,
    agent_args={"seed": args.seed},
    seed=args.seed,
    agent_info=agent_info[:1],
    mode="episodic",  # each round: one whole episode per slot
)
returns = {name: [] for name, _, _ in POLICIES}
explored = {name: [] for name, _, _ in POLICIES}
for _ in range(args.rounds):
    batcher.reset(agent_info)
    batcher.execute()
    trajectories, _ = batcher.get()
    steps = trajectories.trajectories
    mask = steps.mask()
    episode_returns = (steps["_observation/reward"] * mask).sum(1)
    explored_fraction = (steps["action/explored"] * mask).sum(1) / steps.lengths
    for slot, name in enumerate(names):
        returns[name].append(episode_returns[slot].item())
        explored[name].append(explored_fraction[slot].item())
batcher.close()

columns = {"epsilon": 7, "stochastic": 10, "episodes": 8, "return": 8, "explored": 8}
print(f"{'policy':<12} " + " ".join(f"{name:>{width}}" for name, width in columns.items()))
for name, epsilon, stochastic in POLICIES:
    mean_return = sum(returns[name]) / len(returns[name])
    mean_explored = sum(explored[name]) / len(explored[name])
    print(
        f"{name:<12} {epsilon:>7.1f} {stochastic!s:>10} {len(returns[name]):>8d} "
        f"{mean_return:>8.1f} {mean_explored:>8.2f}"
    )
