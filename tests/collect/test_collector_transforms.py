"""The collector with data transformers: the algorithm sees transformed steps, each keeps its
raw step, episode returns are raw, the replay buffer stores raw steps and the off-policy
scheme hands the algorithm transformed minibatches."""

import torch
from torch import nn

from cadence.algorithms.algorithm import Algorithm, AlgStep, UpdateResult
from cadence.algorithms.off_policy import OffPolicyScheme, make_replay_buffer
from cadence.algorithms.off_policy_config import OffPolicyConfig
from cadence.collect.unroll import Collector
from cadence.envs.make import make_env
from cadence.transforms import DataTransformerSequence, ObservationNormalizer, RewardScaling


class RecordingAlgorithm(Algorithm):
    """Pushes left; records the time steps and minibatches it is given."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(()))
        self._optimizer = torch.optim.SGD([self.weight], lr=0.1)
        self.seen, self.batches = [], []

    def optimizers(self):
        return {"main": self._optimizer}

    def predict_step(self, time_step, state, agent_info=()):
        return self.rollout_step(time_step, state)

    def rollout_step(self, time_step, state, agent_info=()):
        self.seen.append(time_step)
        return AlgStep(output=torch.zeros(time_step.step_type.shape[0], dtype=torch.int64))

    def preprocess_experience(self, sample):
        self.batches.append(sample)
        return sample

    def update(self, inputs):
        return UpdateResult({"loss/fake": torch.zeros(())}, torch.tensor(False))


def _transformer(env):
    return DataTransformerSequence(
        [ObservationNormalizer(env.observation_spec), RewardScaling(10.0)]
    )


def test_the_algorithm_sees_transformed_steps_and_returns_stay_raw():
    env = make_env("CartPole-v1", 2, backend="serial", seed=0)
    algorithm = RecordingAlgorithm()
    transformer = _transformer(env)
    collector = Collector(env, algorithm, unroll_length=40, transformer=transformer)
    experience, episodes = collector.unroll()
    time_step, raw = experience.time_step, experience.time_step.untransformed
    assert raw is not None and torch.equal(time_step.reward, 10 * raw.reward)
    assert not torch.allclose(time_step.observation, raw.observation)
    assert algorithm.seen[3].reward.max() == 10.0, "the algorithm acts on transformed steps"
    assert episodes["return"].numel() > 0, "pushing left ends CartPole episodes within 40 steps"
    assert torch.equal(episodes["return"], episodes["length"].double()), "raw rewards are 1 a step"
    normalizer = transformer.transformers[0]
    assert int(normalizer.stats["observation"].count) == 2 * 41


def test_the_buffer_stores_raw_steps_and_minibatches_are_transformed():
    env = make_env("CartPole-v1", 2, backend="serial", seed=0)
    algorithm = RecordingAlgorithm()
    transformer = _transformer(env)
    collector = Collector(env, algorithm, unroll_length=16, transformer=transformer)
    config = OffPolicyConfig(initial_collect_steps=0, mini_batch_size=8, mini_batch_length=2)
    buffer = make_replay_buffer(config, 2, num_env_steps=1000)
    scheme = OffPolicyScheme(
        algorithm,
        collector,
        buffer,
        config,
        env.action_spec,
        transform=transformer.transform_sample,
    )
    scheme.train_iter()
    stored = buffer.gather_all()["time_step"]
    assert set(stored["reward"].unique().tolist()) <= {0.0, 1.0}, "raw rewards in the buffer"
    batch = algorithm.batches[0]
    rows = buffer.storage.gather(batch.env_ids, batch.positions)["time_step"]
    normalizer = transformer.transformers[0]
    expected = normalizer.normalize("", rows["observation"])
    torch.testing.assert_close(batch.time_step.observation, expected)
    torch.testing.assert_close(batch.time_step.reward, 10 * rows["reward"])


def test_a_collector_state_round_trip_keeps_the_raw_current_step():
    env = make_env("CartPole-v1", 2, backend="serial", seed=0)
    collector = Collector(env, RecordingAlgorithm(), unroll_length=4, transformer=_transformer(env))
    collector.unroll()
    state = collector.state_dict()
    other = Collector(env, RecordingAlgorithm(), unroll_length=4, transformer=_transformer(env))
    other.load_state_dict(state)
    current, restored = collector._time_step, other._time_step
    assert torch.equal(restored.untransformed.observation, current.untransformed.observation)
    assert torch.equal(restored.observation, current.observation)
