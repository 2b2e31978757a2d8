"""ObservationNormalizer: running statistics by hand, clipping, frozen in eval mode and on
replay, Dict keys, the transformed spec, and an exact state_dict round trip."""

import pytest
import torch

from cadence.data.specs import BoundedTensorSpec, CompositeSpec, TensorSpec
from cadence.transforms import ObservationNormalizer, RunningMeanStd


def test_running_stats_equal_those_of_all_samples_at_once():
    samples = torch.randn(100, 3, dtype=torch.float64) * 4 + 2
    stats = RunningMeanStd((3,))
    for chunk in samples.split([1, 7, 30, 62]):
        stats.update(chunk)
    assert int(stats.count) == 100
    torch.testing.assert_close(stats.mean, samples.mean(0))
    torch.testing.assert_close(stats.var, samples.var(0, unbiased=False))


def test_rollout_updates_then_normalizes_with_hand_computed_values(make_time_step):
    normalizer = ObservationNormalizer(TensorSpec((2,)), clip=10.0, epsilon=0.0)
    observation = torch.tensor([[1.0, 10.0], [3.0, 10.0], [5.0, 16.0]])
    step, _ = normalizer.transform_time_step(make_time_step([0, 0, 0], observation=observation), ())
    # mean (3, 12); population variance (8/3, 8): std (1.633, 2.828).
    expected = torch.tensor(
        [[-2 / (8 / 3) ** 0.5, -2 / 8**0.5], [0.0, -2 / 8**0.5], [2 / (8 / 3) ** 0.5, 4 / 8**0.5]]
    )
    torch.testing.assert_close(step.observation, expected)
    assert step.observation.dtype == torch.float32


def test_values_are_clipped(make_time_step):
    normalizer = ObservationNormalizer(TensorSpec((1,)), clip=1.5)
    normalizer.update("", torch.tensor([[-1.0], [1.0]]))  # mean 0, std 1
    normalizer.eval()
    step, _ = normalizer.transform_time_step(
        make_time_step([1, 1, 1], observation=torch.tensor([[-9.0], [0.5], [9.0]])), ()
    )
    torch.testing.assert_close(step.observation, torch.tensor([[-1.5], [0.5], [1.5]]))


def test_eval_mode_and_replay_leave_the_statistics_frozen(
    make_time_step, make_steps, make_buffer, window
):
    normalizer = ObservationNormalizer(TensorSpec((1,)))
    normalizer.update("", torch.tensor([[0.0], [2.0]]))
    frozen = {k: v.clone() for k, v in normalizer.state_dict().items()}
    normalizer.eval()
    normalizer.transform_time_step(make_time_step([1], observation=torch.tensor([[100.0]])), ())
    normalizer.train()
    steps = torch.stack([torch.tensor([[7.0]]), torch.tensor([[9.0]])])  # [T=2, B=1, 1]
    buffer = make_buffer(make_steps([[0], [1]], observation=steps))
    sample = normalizer.transform_sample(window(buffer, [0], [[0, 1]]))
    for key, value in normalizer.state_dict().items():
        assert torch.equal(value, frozen[key]), f"{key} changed"
    torch.testing.assert_close(
        sample.time_step.observation, torch.tensor([[[6.0], [8.0]]]), atol=1e-6, rtol=0
    )
    assert torch.equal(buffer.gather_all()["time_step"]["observation"], steps.transpose(0, 1)), (
        "the buffer keeps the raw observations"
    )


def test_only_float_leaves_or_the_given_keys_of_a_dict_are_normalized(make_time_step):
    spec = CompositeSpec(
        {
            "position": TensorSpec((2,)),
            "cell": BoundedTensorSpec((), torch.int64, 0, 4),
            "goal": TensorSpec((2,)),
        }
    )
    assert ObservationNormalizer(spec).paths == ("position", "goal")
    normalizer = ObservationNormalizer(spec, keys=["goal"])
    observation = {
        "position": torch.tensor([[5.0, 5.0]]),
        "cell": torch.tensor([3]),
        "goal": torch.tensor([[5.0, 5.0]]),
    }
    normalizer.eval()
    step, _ = normalizer.transform_time_step(make_time_step([1], observation=observation), ())
    assert torch.equal(step.observation["position"], observation["position"])
    assert torch.equal(step.observation["cell"], observation["cell"])
    torch.testing.assert_close(
        step.observation["goal"], torch.tensor([[5.0, 5.0]])
    )  # mean 0, var 1
    out_spec = normalizer.transformed_observation_spec(spec)
    assert isinstance(out_spec, CompositeSpec)
    assert out_spec["cell"] is spec["cell"] and type(out_spec["goal"]) is TensorSpec


def test_a_missing_or_non_float_key_is_refused_naming_the_keys():
    spec = CompositeSpec(
        {"position": TensorSpec((2,)), "cell": BoundedTensorSpec((), torch.int64, 0, 4)}
    )
    with pytest.raises(ValueError, match="no key 'velocity'; its keys are 'position', 'cell'"):
        ObservationNormalizer(spec, keys=["velocity"])
    with pytest.raises(ValueError, match="'cell' is .* not a float tensor"):
        ObservationNormalizer(spec, keys=["cell"])


def test_state_dict_round_trip_restores_the_statistics_exactly(make_time_step, tmp_path):
    spec = CompositeSpec({"a": TensorSpec((3,)), "b": TensorSpec(())})
    normalizer = ObservationNormalizer(spec)
    for _ in range(5):
        observation = {"a": torch.randn(4, 3) * 3 + 1, "b": torch.randn(4) - 2}
        normalizer.transform_time_step(make_time_step([1] * 4, observation=observation), ())
    torch.save(normalizer.state_dict(), tmp_path / "normalizer.pt")
    restored = ObservationNormalizer(spec)
    restored.load_state_dict(torch.load(tmp_path / "normalizer.pt", weights_only=True))
    for key, value in normalizer.state_dict().items():
        assert torch.equal(restored.state_dict()[key], value), key
    assert int(restored.stats["a"].count) == 20
