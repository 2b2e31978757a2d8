"""The Batcher on Ray: its workers as Ray actors, on this machine or across a Ray cluster.

The same `Batcher` as in ``reinforce_batcher.py``, built with ``backend="ray"``:
each worker is a Ray actor that may sit on any node of the cluster. An actor
returns its rows of each acquisition with its answer (nodes share no memory), and
new weights go through Ray's object store, put once per `update`. Same seeds,
same trajectories as local processes split alike (docs/agents.md says what another
split changes).

Where Ray runs:

- nothing to do on one machine: the Batcher calls ``ray.init()`` when Ray is not
  initialized, which starts a local Ray instance;
- on a cluster (``ray start --head`` on one node, ``ray start --address=HEAD:6379``
  on the others, each with cadence and its dependencies installed), connect before
  building the Batcher: ``ray.init(address="HEAD:6379")``, or ``--address`` here;
- ``ray_actor_options`` sets each actor's resources (``{"num_cpus": 2}``, a custom
  resource, a scheduling strategy), which is how actors are placed on nodes.

What the script defines (the agent's class) travels to the actors by value, as it
does to local worker processes; there is no ``if __name__ == "__main__":`` guard.

    pip install 'cadence[ray]'
    python examples/ray_batcher.py                            # a local Ray instance
    python examples/ray_batcher.py --address HEAD:6379        # an existing cluster
    python examples/ray_batcher.py --quick                    # a smoke test
"""

import argparse
import time

try:
    import ray
except ModuleNotFoundError as error:  # before anything else: this example is about Ray
    raise SystemExit(
        f"examples/ray_batcher.py needs Ray ({error}): pip install 'cadence[ray]'"
    ) from error
import torch
from torch import nn

from cadence.collect import Agent, Batcher, SlotRandom, make_gym_env, replay_agent
from cadence.data import DictTensor

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--address", default=None, help="a Ray cluster's address (default: local)")
parser.add_argument("--iterations", type=int, default=30, help="training iterations")
parser.add_argument("--n-actors", type=int, default=2, help="Ray actors (workers)")
parser.add_argument("--n-envs", type=int, default=8, help="environments per actor")
parser.add_argument("--learning-rate", type=float, default=0.01, help="Adam's step size")
parser.add_argument("--seed", type=int, default=0, help="seeds the envs, the agents and torch")
parser.add_argument("--quick", action="store_true", help="3 short iterations (a smoke test)")
args = parser.parse_args()
n_timesteps = 500
if args.quick:
    args.iterations, args.n_envs, n_timesteps = 3, 2, 30

if args.address is not None:
    ray.init(address=args.address)  # before the Batcher, which then uses this cluster


class PolicyAgent(Agent):
    """Samples from a small policy network where ``agent_info["stochastic"]`` is True."""

    def __init__(self, model: nn.Module, seed: int = 0):
        self.model = model
        self.random = SlotRandom(seed)

    def update(self, info):
        self.model.load_state_dict(info)

    def __call__(self, state, observation, agent_info, history=None):
        logits = self.model(observation["frame"])
        sampled = self.random.categorical(observation["env_id"], logits)
        action = torch.where(agent_info["stochastic"], sampled, logits.argmax(-1))
        return DictTensor({"action": action, "logits": logits}), state


torch.manual_seed(args.seed)
model = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 2))
learner = PolicyAgent(model)
optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
n_slots = args.n_actors * args.n_envs

batcher = Batcher(
    n_timesteps=n_timesteps,
    n_processes=args.n_actors,
    n_envs=args.n_envs,
    create_env=make_gym_env,
    env_args={"name": "CartPole-v1"},
    create_agent=PolicyAgent,
    agent_args={"model": model, "seed": args.seed},
    seed=args.seed,
    agent_info=DictTensor({"stochastic": torch.tensor([True])}),
    mode="episodic",
    backend="ray",
    ray_actor_options={"num_cpus": 1},
)
for worker, actor in enumerate(batcher.processes):
    print(f"actor {worker}: pid {actor.pid} on {actor.host}")

start, env_steps = time.time(), 0
for iteration in range(args.iterations):
    batcher.reset(DictTensor({"stochastic": torch.ones(n_slots, dtype=torch.bool)}))
    batcher.execute()
    trajectories, _ = batcher.get()
    steps = trajectories.trajectories
    env_steps += int(steps.lengths.sum())

    # REINFORCE with the mean return-to-go as a baseline, as in reinforce_batcher.py.
    mask = steps.mask()
    reward = steps["_observation/reward"] * mask
    returns = reward.flip(1).cumsum(1).flip(1)  # undiscounted return-to-go
    advantage = (returns - (returns * mask).sum() / mask.sum()) * mask
    logits = replay_agent(learner, trajectories)["logits"]
    log_prob = torch.log_softmax(logits, -1).gather(-1, steps["action/action"][..., None])[..., 0]
    loss = -(log_prob * advantage).sum() / mask.sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    version = batcher.update(model.state_dict())  # one ray.put, fetched by each actor

    print(
        f"iteration {iteration:3d}  train return {reward.sum(1).mean():6.1f}  "
        f"weights version {version}"
    )

batcher.close()
elapsed = time.time() - start
print(f"done in {elapsed:.1f} s, {env_steps / elapsed:.0f} env steps/s with learning")
