"""The algorithm contract as the loop uses it, checked on every built-in algorithm:
the gradient-sync hook sits between backward and the optimizer steps, the update
returns a non-finite flag that the trainer turns into an error, and agent_info reaches
the acting step functions."""

import math

import pytest
import torch

from cadence.algorithms.algorithm import Algorithm, AlgStep, LossInfo
from cadence.config import load_config
from cadence.data.time_step import StepType, TimeStep
from cadence.trainer.errors import NonFiniteUpdateError
from cadence.trainer.metrics import read_metrics
from cadence.trainer.run import build_trainer

# One short, cheap config per built-in algorithm (off-policy ones train from their
# second iteration on).
OFF_POLICY = [
    "algorithm.off_policy.initial_collect_steps=50",
    "algorithm.off_policy.num_updates_per_train_iter=4",
]
CONFIGS = {
    "ppo": ("ppo_cartpole", ["trainer.unroll_length=16"]),
    "a2c": ("a2c_cartpole", []),
    "dqn": ("dqn_cartpole", OFF_POLICY),
    "sac": ("sac_pendulum", OFF_POLICY),
    "td3": ("td3_pendulum", OFF_POLICY),
    "ddpg": ("ddpg_pendulum", OFF_POLICY),
}


def _trainer(name, tmp_path, overrides=()):
    config_name, config_overrides = CONFIGS[name]
    overrides = [
        f"root_dir={tmp_path / name}",
        "trainer.progress_bar=off",
        *config_overrides,
        *overrides,
    ]
    return build_trainer(load_config(config_name, overrides), tmp_path / name)


def _parameters(algorithm: Algorithm) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in algorithm.named_parameters()}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_gradient_sync_hook_runs_between_backward_and_every_optimizer_step(name, tmp_path):
    trainer = _trainer(name, tmp_path)
    algorithm = trainer.algorithm
    optimized = {
        id(p) for o in algorithm.optimizers().values() for g in o.param_groups for p in g["params"]
    }
    calls = []

    def zero_gradients(parameters):
        # Called after backward: the gradients exist. Zeroing them must leave every
        # parameter where it is (Adam and RMSprop take no step on zero gradients),
        # which only holds if the optimizers step after the hook.
        assert parameters and all(id(p) in optimized for p in parameters)
        assert any(p.grad is not None for p in parameters)
        calls.append(len(parameters))
        for p in parameters:
            if p.grad is not None:
                p.grad.zero_()

    algorithm.set_gradient_sync(zero_gradients)
    before = _parameters(algorithm)
    try:
        for _ in range(3):
            result = trainer.scheme.train_iter()
    finally:
        trainer.collector.env.close()
    assert result.metrics["train/num_updates"] > 0
    assert len(calls) >= result.metrics["train/num_updates"]
    after = _parameters(algorithm)
    for key, value in before.items():
        assert torch.equal(after[key], value), key


@pytest.mark.parametrize("name", list(CONFIGS))
def test_without_the_hook_the_same_training_moves_the_parameters(name, tmp_path):
    trainer = _trainer(name, tmp_path)
    before = _parameters(trainer.algorithm)
    try:
        for _ in range(3):
            result = trainer.scheme.train_iter()
    finally:
        trainer.collector.env.close()
    assert not bool(result.nonfinite)
    assert any(not torch.equal(p, before[k]) for k, p in _parameters(trainer.algorithm).items())


@pytest.mark.parametrize("name", ["ppo", "dqn", "sac", "td3"])
def test_a_non_finite_loss_stops_the_run_before_it_is_checkpointed(name, tmp_path):
    trainer = _trainer(name, tmp_path, ["trainer.checkpoint_interval=1"])
    _poison(trainer, poisoned_iterations=range(3, 10**6))  # from the fourth iteration on
    with pytest.raises(NonFiniteUpdateError, match=r"iteration 4: a non-finite .*loss/") as error:
        trainer.run()
    assert "latest checkpoint" in str(error.value)
    assert int(trainer.checkpoints.latest().name) == 3  # nothing of iteration 4 was published
    assert not (trainer.run_dir / "COMPLETE").exists()


def _poison(trainer, poisoned_iterations):
    """The loss is NaN during ``poisoned_iterations`` (0-based)."""
    algorithm, train_step, scheme_train_iter = (
        trainer.algorithm,
        trainer.algorithm.train_step,
        trainer.scheme.train_iter,
    )
    iterations = {"n": 0}

    def poisoned_train_step(inputs, state=()):
        step = train_step(inputs, state)
        if iterations["n"] in poisoned_iterations:
            info = dict(step.info)
            key = "q" if "q" in info else ("q_value" if "q_value" in info else "value")
            info[key] = info[key] * math.nan
            step = step._replace(info=info)
        return step

    def counting_train_iter():
        result = scheme_train_iter()
        iterations["n"] += 1
        return result

    algorithm.train_step = poisoned_train_step
    trainer.scheme.train_iter = counting_train_iter


@pytest.mark.parametrize("name", ["ppo", "dqn", "sac", "td3"])
def test_opted_in_non_finite_updates_are_skipped_and_counted(name, tmp_path):
    trainer = _trainer(
        name, tmp_path, ["trainer.skip_nonfinite_updates=true", "trainer.summary_interval=1"]
    )
    trainer.config.num_env_steps = 8 * trainer.collector.num_env_steps_per_unroll
    _poison(trainer, poisoned_iterations={3, 4})
    assert trainer.run() == "complete"
    records = read_metrics(trainer.run_dir)
    skipped = [r.get("train/skipped_updates", 0) for r in records]
    assert all(n > 0 for n in skipped[3:5]) and not any(skipped[:3] + skipped[5:])
    assert all(math.isfinite(r.get("loss/total", 0.0)) for r in records)
    state = trainer.checkpoints.load()["algorithm"]
    assert all(torch.isfinite(v).all() for v in state.values() if isinstance(v, torch.Tensor))


def test_a_checkpoint_holding_a_non_finite_parameter_is_never_published(tmp_path):
    trainer = _trainer("ppo", tmp_path, ["trainer.checkpoint_interval=1"])
    scheme_train_iter, iterations = trainer.scheme.train_iter, {"n": 0}

    def overflowing_train_iter():
        result = scheme_train_iter()
        iterations["n"] += 1
        if iterations["n"] == 3:  # a finite loss, yet a weight overflowed
            with torch.no_grad():
                next(trainer.algorithm.parameters()).view(-1)[0] = math.inf
        return result

    trainer.scheme.train_iter = overflowing_train_iter
    trainer.config.num_env_steps = 8 * trainer.collector.num_env_steps_per_unroll
    with pytest.raises(NonFiniteUpdateError, match="iteration 3: parameter"):
        trainer.run()
    assert int(trainer.checkpoints.latest().name) == 2


def _time_step(batch_size: int, observation: torch.Tensor) -> TimeStep:
    return TimeStep(
        step_type=torch.full((batch_size,), StepType.MID),
        reward=torch.zeros(batch_size),
        discount=torch.ones(batch_size),
        observation=observation,
        prev_action=torch.zeros(batch_size, dtype=torch.int64),
        env_id=torch.arange(batch_size),
    )


def test_agent_info_gives_each_dqn_slot_its_own_epsilon(tmp_path):
    trainer = _trainer("dqn", tmp_path)
    trainer.collector.env.close()
    dqn = trainer.algorithm
    dqn.epsilon = 0.0
    observation = torch.randn(1, 4).repeat(400, 1)
    epsilon = torch.tensor([0.0, 1.0]).repeat_interleave(200)
    actions = dqn.rollout_step(_time_step(400, observation), (), {"epsilon": epsilon}).output
    greedy = dqn.predict_step(_time_step(400, observation), ()).output
    assert torch.equal(actions[:200], greedy[:200])  # epsilon 0: always greedy
    assert 0.3 < (actions[200:] != greedy[200:]).float().mean() < 0.7  # epsilon 1: uniform


def test_agent_info_runs_deterministic_and_stochastic_slots_side_by_side(tmp_path):
    trainer = _trainer("ppo", tmp_path)
    trainer.collector.env.close()
    ppo = trainer.algorithm
    observation = torch.randn(1, 4).repeat(400, 1)
    deterministic = torch.arange(400) < 200
    step = ppo.rollout_step(_time_step(400, observation), (), {"deterministic": deterministic})
    mode = ppo.predict_step(_time_step(400, observation), ()).output
    assert torch.equal(step.output[:200], mode[:200])
    assert (step.output[200:] != mode[200:]).any()
    assert torch.equal(step.info["action"], step.output)


@pytest.mark.parametrize("name", ["sac", "td3", "ddpg"])
def test_max_grad_norm_clips_the_off_policy_actor_critics_too(name, tmp_path):
    def largest_step(*overrides):
        trainer = _trainer(name, tmp_path / str(len(overrides)), list(overrides))
        before = _parameters(trainer.algorithm)
        try:
            for _ in range(2):
                result = trainer.scheme.train_iter()
        finally:
            trainer.collector.env.close()
        after = _parameters(trainer.algorithm)
        return max(float((after[k] - v).abs().max()) for k, v in before.items()), result

    free, unclipped = largest_step()
    # Gradients clipped to a norm far below Adam's epsilon barely move the parameters.
    clipped, result = largest_step("algorithm.max_grad_norm=1e-12")
    assert "train/grad_norm" not in unclipped.metrics
    assert result.metrics["train/grad_norm"] > 1e-12
    assert clipped < free / 100


class _OwnUpdate(Algorithm):
    """One weight through the default pipeline, behind an `update` of its own that counts
    the rows of each minibatch it is handed."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(()))
        self._optimizer = torch.optim.SGD([self.weight], lr=0.1)
        self.rows_seen = []

    def optimizers(self):
        return {"sgd": self._optimizer}

    def predict_step(self, time_step, state, agent_info=()):
        return AlgStep(())

    rollout_step = predict_step

    def preprocess_experience(self, experience):
        return experience

    def train_step(self, inputs, state):
        return AlgStep((), state, {"x": inputs["x"]})

    def calc_loss(self, info):
        loss = (self.weight * info["x"]).sum()
        return LossInfo(loss, {"loss/x": loss})

    def update(self, batch):
        self.rows_seen.append(batch["x"].shape[0])
        return super().update(batch)


class _DeclaredDefault(_OwnUpdate):
    own_update = False


def test_the_update_an_algorithm_declares_is_the_one_its_minibatches_go_through():
    from cadence.algorithms.dqn.algorithm import DQNAlgorithm
    from cadence.algorithms.sac.algorithm import SACAlgorithm
    from cadence.mbrl.algorithm import ModelBasedAlgorithm

    assert not Algorithm.own_update
    assert DQNAlgorithm.own_update and SACAlgorithm.own_update and ModelBasedAlgorithm.own_update
    assert _OwnUpdate.own_update  # writing `update` declares it
    batch, rows = {"x": torch.arange(6.0)}, torch.tensor([0, 2, 4])
    own, declared = _OwnUpdate(), _DeclaredDefault()
    own.update_rows(batch, rows)
    declared.update_rows(batch, rows)
    assert own.rows_seen == [3]
    assert declared.rows_seen == []  # the default pipeline, on the rows
    assert own.weight.item() == declared.weight.item() == pytest.approx(1.0 - 0.1 * 6.0)


class _OwnPriorities(_DeclaredDefault):
    """The default `update`, with replay priorities of its own."""

    def priorities(self, info):
        return info["x"].abs()


class _OwnMinimize(_DeclaredDefault):
    def minimize(self, loss, optimizers=None, update_index=0):
        return super().minimize(loss, optimizers)


class _OwnUpdateStep(_DeclaredDefault):
    def update_step(self, batch, update_index=0):
        return super().update_step(batch)


@pytest.mark.parametrize("kind", [_OwnPriorities, _OwnMinimize, _OwnUpdateStep])
def test_writing_a_part_of_the_pipeline_declares_an_own_update_that_never_fuses(kind):
    algorithm = kind()
    algorithm.set_accelerator(object())  # only whether one is installed matters here
    assert kind.own_update and not algorithm.fuses_updates
    declared = _DeclaredDefault()
    declared.set_accelerator(object())
    assert declared.fuses_updates  # the default pipeline, declared: fused when accelerated


def test_which_built_in_algorithms_fuse_their_updates_is_declared():
    from cadence.algorithms.actor_critic import ActorCriticAlgorithm
    from cadence.algorithms.deterministic_actor_critic import DeterministicActorCritic
    from cadence.algorithms.dqn.algorithm import DQNAlgorithm
    from cadence.algorithms.sac.algorithm import SACAlgorithm
    from cadence.mbrl.algorithm import ModelBasedAlgorithm

    assert not ActorCriticAlgorithm.own_update  # PPO and A2C: the default pipeline, fused
    for kind in (DQNAlgorithm, SACAlgorithm, DeterministicActorCritic, ModelBasedAlgorithm):
        assert kind.own_update


def test_an_on_policy_schedule_set_on_the_class_fails_and_says_where_it_belongs():
    # Once read from Algorithm's class attributes; the scheme now takes the config's.
    with pytest.raises(TypeError, match="mini_batch_size.*the on-policy schedule is the config's"):

        class Epochs(Algorithm):  # noqa: F841 - defining it is the point
            mini_batch_size = 64
