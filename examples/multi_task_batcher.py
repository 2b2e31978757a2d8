"""One env class, several tasks side by side in one batch, through per-slot env_info.

rlstructures' ``env_info`` does for environments what ``agent_info`` does for
agents: one row of parameters per slot. The `Batcher` gives each slot's row to its
Gymnasium env at every reset, as ``reset(options={"env_info": {key: value}})``, so a
multi-task env picks its task there. Here the env is a corridor whose goal is
``env_info["goal"]``; the agent steps toward the goal it sees in its observation.
The second acquisition swaps the goals by resetting with other ``env_info``; the
segments record each slot's goal as ``env_info/goal`` in their ``info``.

Run it as a plain script (no ``if __name__ == "__main__":`` guard is needed):

    python examples/multi_task_batcher.py
    python examples/multi_task_batcher.py --quick    # the same, a smoke test
"""

import argparse

import gymnasium as gym
import numpy as np
import torch

from cadence.collect import Agent, Batcher, make_gym_env
from cadence.data import DictTensor

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--seed", type=int, default=0, help="seeds the envs")
parser.add_argument("--quick", action="store_true", help="accepted for the smoke tests")
args = parser.parse_args()


class Corridor(gym.Env):
    """Positions -10..10 from 0; the episode ends at the goal (reward 1) or after 30 steps.

    The observation is ``[position, goal]``; the goal is the task, from ``env_info``."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)  # 0: a step left, 1: a step right

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.goal = float(options["env_info"]["goal"]) if options else 5.0
        self.position, self.t = 0.0, 0
        return self._observation(), {}

    def step(self, action):
        self.position = float(np.clip(self.position + (1 if action == 1 else -1), -10, 10))
        self.t += 1
        reached = self.position == self.goal
        return self._observation(), float(reached), reached, self.t >= 30, {}

    def _observation(self):
        return np.array([self.position, self.goal], np.float32)


class TowardGoal(Agent):
    """Steps toward the goal it sees (stateless: no state, as rlstructures writes it)."""

    def initial_state(self, agent_info, n_elems):
        return DictTensor({})

    def __call__(self, state, observation, agent_info, history=None):
        position, goal = observation["frame"].unbind(-1)
        return DictTensor({"action": (goal > position).long()}), DictTensor({})


def corridor(seed):
    return make_gym_env(seed=seed, name=Corridor)


batcher = Batcher(
    n_timesteps=30,
    n_processes=2,
    n_envs=2,
    create_env=corridor,
    create_agent=TowardGoal,
    env_info=DictTensor({"goal": torch.tensor([5.0])}),
    mode="episodic",  # rlstructures' GymEnv: an episode ends the slot's segment
    seed=args.seed,
)
for goals in ([3.0, -2.0, 7.0, -6.0], [-6.0, 7.0, -2.0, 3.0]):
    batcher.reset(env_info=DictTensor({"goal": torch.tensor(goals)}))
    batcher.execute()
    trajectories, n_running = batcher.get()
    steps = trajectories.trajectories
    final = steps["_observation/frame"][torch.arange(steps.n_elems()), steps.lengths - 1, 0]
    for slot in range(steps.n_elems()):
        goal = float(trajectories.info["env_info/goal"][slot])
        print(
            f"slot {slot}: goal {goal:+.0f}, reached {float(final[slot]):+.0f} "
            f"in {int(steps.lengths[slot])} steps"
        )
batcher.close()
