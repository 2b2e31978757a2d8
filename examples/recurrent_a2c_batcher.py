"""A2C with a GRU on CartPole-v1 without velocities, with the Batcher's agent_state.

CartPole shows the cart's position and velocity and the pole's angle and angular
velocity; an `ObservationMask` keeps the position and the angle only, so a policy
must infer the velocities from the last few steps: it needs memory. The agent's
memory is its ``state`` (two GRUs' hidden vectors, the actor's and the critic's),
which the Batcher threads from step to step and across acquisitions (continuing
mode: an episode goes on in the next one), storing each segment's starting state
as ``agent_state/*`` in the trajectories' ``info``. The agent resets it where an
episode starts (``observation["initial_state"]``, with `reset_where`).

The learner replays the agent over each segment from that stored state
(`replay_agent`): truncated backpropagation through time over the segment, with
GAE advantages as in ``a2c_batcher.py``. The value of what follows each step
(``_observation``) comes from one more GRU step from the state after it, so a
time-limit cut bootstraps as it should.

Run it as a plain script (no ``if __name__ == "__main__":`` guard is needed):

    python examples/recurrent_a2c_batcher.py            # an evaluation return of 400
    python examples/recurrent_a2c_batcher.py --quick    # a few seconds, for a smoke test

Measured with the defaults, stopping at the first evaluation of at least 400: seeds 0,
1 and 2 stopped at 487, 419 and 451 after 84k, 80k and 64k env steps (53-82 s on a
shared 2-core machine).
"""

import argparse
import time

import gymnasium as gym
import torch
from torch import nn

from cadence.collect import Agent, Batcher, SlotRandom, make_gym_env, replay_agent, reset_where
from cadence.data import DictTensor
from cadence.envs.wrappers import ObservationMask

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--iterations", type=int, default=2000, help="the most updates")
parser.add_argument("--n-processes", type=int, default=2, help="worker processes")
parser.add_argument("--n-envs", type=int, default=8, help="environments per process")
parser.add_argument("--n-timesteps", type=int, default=16, help="steps per segment (BPTT)")
parser.add_argument("--hidden", type=int, default=64, help="the GRU's size")
parser.add_argument("--learning-rate", type=float, default=1e-3, help="Adam's step size")
parser.add_argument("--gamma", type=float, default=0.99, help="the discount")
parser.add_argument("--gae-lambda", type=float, default=0.95, help="GAE's lambda")
parser.add_argument("--ent-coef", type=float, default=0.01, help="the entropy bonus's weight")
parser.add_argument("--vf-coef", type=float, default=0.5, help="the value loss's weight")
parser.add_argument("--max-grad-norm", type=float, default=0.5, help="gradient norm clipping")
parser.add_argument("--target", type=float, default=400.0, help="stop at this evaluation return")
parser.add_argument("--seed", type=int, default=0, help="seeds the envs, the agents and torch")
parser.add_argument("--quick", action="store_true", help="a few short iterations (a smoke test)")
args = parser.parse_args()
eval_envs, eval_timesteps = 8, 500
if args.quick:
    args.iterations, args.n_envs, args.n_timesteps, eval_envs, eval_timesteps = 4, 2, 8, 2, 20


def masked_cartpole() -> gym.Env:
    """CartPole-v1 showing the cart's position and the pole's angle only."""
    return ObservationMask(gym.make("CartPole-v1"), keep=[0, 2])


class RecurrentActorCritic(nn.Module):
    """An actor (logits ``[B, 2]``) and a critic (a value ``[B]``), each on its own GRU cell.

    Apart, so that the critic's larger gradients do not shape what the actor's memory keeps.
    """

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.actor_core = nn.GRUCell(2, hidden)
        self.critic_core = nn.GRUCell(2, hidden)
        self.actor = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, 2))
        self.critic = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, frame: torch.Tensor, actor_h: torch.Tensor, critic_h: torch.Tensor):
        """Logits, value and the two next states, from ``frame`` ``[B, 2]`` after the states."""
        actor_h = self.actor_core(frame, actor_h)
        critic_h = self.critic_core(frame, critic_h)
        return self.actor(actor_h), self.critic(critic_h).squeeze(-1), actor_h, critic_h


class RecurrentA2CAgent(Agent):
    """Samples where ``agent_info["stochastic"]`` is True, else takes the likeliest action."""

    def __init__(self, model: RecurrentActorCritic, seed: int = 0):
        self.model = model
        self.random = SlotRandom(seed)

    def update(self, info):
        self.model.load_state_dict(info)

    def initial_state(self, agent_info, n_elems):
        zeros = torch.zeros(n_elems, self.model.hidden)
        return DictTensor({"actor_h": zeros, "critic_h": zeros.clone()})

    def __call__(self, state, observation, agent_info, history=None):
        initial = self.initial_state(agent_info, observation.n_elems())
        state = reset_where(state, initial, observation["initial_state"])
        logits, value, actor_h, critic_h = self.model(
            observation["frame"], state["actor_h"], state["critic_h"]
        )
        sampled = self.random.categorical(observation["env_id"], logits)
        action = torch.where(agent_info["stochastic"], sampled, logits.argmax(-1))
        # "critic_h" (the critic's state after this step) values what follows the step.
        outputs = {"action": action, "logits": logits, "value": value, "critic_h": critic_h}
        return DictTensor(outputs), DictTensor({"actor_h": actor_h, "critic_h": critic_h})


def gae(reward, discount, done, value, next_value, mask, gamma, gae_lambda):
    """``[B, T]`` advantages; as in ``a2c_batcher.py``."""
    delta = reward + gamma * discount * next_value - value
    advantages = torch.zeros_like(reward)
    following = torch.zeros(reward.shape[0])
    for t in reversed(range(reward.shape[1])):
        carry = gamma * gae_lambda * (~done[:, t]).float() * mask[:, t]
        following = delta[:, t] + carry * following
        advantages[:, t] = following
    return advantages * mask


def a2c_loss(agent: RecurrentA2CAgent, trajectories) -> tuple[torch.Tensor, torch.Tensor]:
    steps = trajectories.trajectories
    mask = steps.mask()
    replayed = replay_agent(agent, trajectories)  # from info's agent_state, with gradients
    logits, value = replayed["logits"], replayed["value"]
    with torch.no_grad():
        b, t = mask.shape
        frames = steps["_observation/frame"].reshape(b * t, -1)
        critic_h = agent.model.critic_core(frames, replayed["critic_h"].reshape(b * t, -1))
        next_value = agent.model.critic(critic_h)
        advantages = gae(
            steps["_observation/reward"],
            steps["_observation/discount"],
            steps["_observation/done"],
            value,
            next_value.reshape(b, t),
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
model = RecurrentActorCritic(args.hidden)
learner = RecurrentA2CAgent(model)
optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
n_slots = args.n_processes * args.n_envs
env_args = {"name": masked_cartpole}

batcher = Batcher(
    n_timesteps=args.n_timesteps,
    n_processes=args.n_processes,
    n_envs=args.n_envs,
    create_env=make_gym_env,
    env_args=env_args,
    create_agent=RecurrentA2CAgent,
    agent_args={"model": model, "seed": args.seed},
    seed=args.seed,
    agent_info=DictTensor({"stochastic": torch.tensor([True])}),
    mode="continuing",
)
evaluation = Batcher(
    n_timesteps=eval_timesteps,
    n_processes=1,
    n_envs=eval_envs,
    create_env=make_gym_env,
    env_args=env_args,
    create_agent=RecurrentA2CAgent,
    agent_args={"model": model, "seed": args.seed + 1000},
    seed=args.seed + 1000,
    agent_info=DictTensor({"stochastic": torch.tensor([False])}),
    mode="episodic",
)
deterministic = DictTensor({"stochastic": torch.zeros(eval_envs, dtype=torch.bool)})
evaluation.reset(deterministic)
evaluation.execute()
evaluated_iteration = 0
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
    batcher.update(model.state_dict())

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
    evaluated, _ = evaluation.get()
    eval_return = evaluated.trajectories["_observation/reward"].sum(1).mean().item()
    best_eval = max(best_eval, eval_return)
    print(f"final evaluation return {eval_return:6.1f}")

batcher.close()
evaluation.close()
print(f"best evaluation return {best_eval:.1f}, done in {time.time() - start:.1f} s")
