"""The collector carries an algorithm's recurrent state: each step's state goes to the next,
it is reset to the initial state where a step is FIRST, and it is stored with the
experience (and so in the replay buffer, where a replayed window starts from it)."""

import torch

from cadence.algorithms.algorithm import Algorithm, AlgStep, LossInfo
from cadence.algorithms.off_policy import OffPolicyScheme, make_replay_buffer
from cadence.algorithms.off_policy_config import OffPolicyConfig
from cadence.algorithms.on_policy import OnPolicySchedule, OnPolicyScheme
from cadence.collect.unroll import Collector
from cadence.data.time_step import StepType
from cadence.envs.make import make_env
from cadence.trainer.evaluation import evaluate_episodes

INITIAL = -1.0


class CountingAlgorithm(Algorithm):
    """A recurrent toy: its state counts the steps it has acted since the initial state.

    ``{"count": [B], "h": [B, 2]}``; it starts at ``INITIAL`` and each step adds 1, so the
    state a step sees is ``INITIAL + steps since the episode's FIRST`` only if the
    collector resets it at every FIRST.
    """

    def __init__(self):
        super().__init__()
        self.seen = []

    def optimizers(self):
        return {}

    def initial_state(self, batch_size):
        return {"count": torch.full((batch_size,), INITIAL), "h": torch.zeros(batch_size, 2)}

    def _act(self, time_step, state):
        self.seen.append((time_step.step_type.clone(), state["count"].clone()))
        action = torch.zeros(time_step.step_type.shape[0], dtype=torch.int64)
        next_state = {"count": state["count"] + 1, "h": state["h"] + 1}
        return AlgStep(output=action, state=next_state, info={"count": state["count"]})

    def predict_step(self, time_step, state, agent_info=()):
        return self._act(time_step, state)

    def rollout_step(self, time_step, state, agent_info=()):
        return self._act(time_step, state)

    def preprocess_experience(self, experience):
        return {}

    def update(self, batch):
        raise AssertionError("not trained here")


def _steps_since_first(step_type: torch.Tensor) -> torch.Tensor:
    """``[T, B]``: how many steps each step is after its episode's FIRST."""
    since = torch.zeros_like(step_type, dtype=torch.float32)
    for t in range(1, step_type.shape[0]):
        since[t] = torch.where(step_type[t] == StepType.FIRST, 0.0, since[t - 1] + 1)
    return since


def test_the_state_resets_at_first_and_is_stored_with_the_experience():
    # CartPole always pushed left ends within ~10 steps: several episodes per env per unroll.
    env = make_env("CartPole-v1", 3, backend="serial", seed=0)
    collector = Collector(env, CountingAlgorithm(), unroll_length=40)
    try:
        first, _ = collector.unroll()
        second, _ = collector.unroll()
    finally:
        env.close()
    for experience in (first, second):
        step_type = experience.time_step.step_type[:-1]
        assert (step_type[1:] == StepType.FIRST).any(), "episodes must restart inside the unroll"
        assert experience.state["count"].shape == (40, 3)
        assert experience.state["h"].shape == (40, 3, 2)
        torch.testing.assert_close(experience.state["h"][..., 0], experience.state["count"] + 1)
        # The stored state is what the step started from, and the info agrees with it.
        torch.testing.assert_close(experience.state["count"], experience.info["count"])
    # Across the two unrolls the count runs on from where the first left off.
    step_type = torch.cat([first.time_step.step_type[:-1], second.time_step.step_type[:-1]])
    count = torch.cat([first.state["count"], second.state["count"]])
    torch.testing.assert_close(count, INITIAL + _steps_since_first(step_type))
    # Without the reset the count at a later FIRST would be the previous episode's length.
    later_first = step_type[1:] == StepType.FIRST
    assert (count[1:][later_first] == INITIAL).all()
    assert (count[:-1][later_first] > INITIAL).all()


def test_replayed_windows_carry_the_state_they_start_from():
    env = make_env("CartPole-v1", 2, backend="serial", seed=1)
    algorithm = CountingAlgorithm()
    collector = Collector(env, algorithm, unroll_length=30)
    config = OffPolicyConfig(initial_collect_steps=10_000, mini_batch_length=4)
    buffer = make_replay_buffer(config, num_envs=2, num_env_steps=1000)
    scheme = OffPolicyScheme(algorithm, collector, buffer, config, env.action_spec)
    try:
        scheme.train_iter()  # random actions, but the algorithm's state is carried all the same
    finally:
        env.close()
    sample = buffer.sample(batch_size=64, length=4)
    step_type = sample.time_step.step_type  # [N, L]
    count = sample.steps["state"]["count"]
    assert sample.steps["state"]["h"].shape == (64, 4, 2)
    for row in range(64):
        expected = count[row, 0] + torch.arange(4.0)
        for t in range(1, 4):
            if step_type[row, t] == StepType.FIRST:
                expected[t:] = INITIAL + torch.arange(4.0 - t)
        torch.testing.assert_close(count[row], expected)


def test_evaluation_resets_the_state_at_each_new_episode():
    env = make_env("CartPole-v1", 2, backend="serial", seed=2)
    algorithm = CountingAlgorithm()
    try:
        evaluate_episodes(algorithm, env)
    finally:
        env.close()
    counts = torch.stack([count for _, count in algorithm.seen])
    step_types = torch.stack([step_type for step_type, _ in algorithm.seen])
    torch.testing.assert_close(counts, INITIAL + _steps_since_first(step_types))


class SequenceAlgorithm(CountingAlgorithm):
    """On-policy over whole env sequences ``[B, T]`` carrying each one's initial state."""

    update = Algorithm.update  # the contract's default pipeline
    own_update = False  # declared: the default pipeline, rows gathered in its graph

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(()))
        self._optimizer = torch.optim.SGD([self.weight], lr=0.1)
        self.minibatches = []

    def optimizers(self):
        return {"sgd": self._optimizer}

    def preprocess_experience(self, experience):
        batch_major = lambda x: x.transpose(0, 1)  # noqa: E731 - [T, B, ...] -> [B, T, ...]
        return {
            "env_id": experience.time_step.env_id[0],
            "count": batch_major(experience.state["count"]),
            "initial_state": experience.initial_state,
        }

    def train_step(self, inputs, state):
        self.minibatches.append((inputs, state))
        return AlgStep(output=(), state=state, info={"loss": (self.weight - 1.0) ** 2})

    def calc_loss(self, info):
        return LossInfo(info["loss"], {"loss/toy": info["loss"]})


def test_on_policy_minibatches_of_sequences_start_from_their_stored_state():
    env = make_env("CartPole-v1", 4, backend="serial", seed=3)
    algorithm = SequenceAlgorithm()
    collector = Collector(env, algorithm, unroll_length=12)
    schedule = OnPolicySchedule(num_updates_per_train_iter=2, mini_batch_size=2)  # sequences
    scheme = OnPolicyScheme(algorithm, collector, schedule)
    try:
        collector.unroll()  # the next unroll starts mid-episode, from a carried state
        result = scheme.train_iter()
    finally:
        env.close()
    assert result.metrics["train/num_updates"] == 4  # 2 passes x 2 minibatches of 2 sequences
    assert len(algorithm.minibatches) == 4
    for inputs, state in algorithm.minibatches:
        assert inputs["count"].shape == (2, 12)
        torch.testing.assert_close(state["count"], inputs["count"][:, 0])
        assert state["h"].shape == (2, 2)
    seen = torch.cat([inputs["env_id"] for inputs, _ in algorithm.minibatches[:2]])
    assert sorted(seen.tolist()) == [0, 1, 2, 3]
    assert (torch.cat([s["count"] for _, s in algorithm.minibatches]) > INITIAL).any()
