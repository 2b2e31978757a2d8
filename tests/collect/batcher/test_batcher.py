"""The Batcher: acquisition, lengths and masks, continuation, per-slot policies, seeding
whatever the split into processes, and weight updates."""

from __future__ import annotations

import math
import subprocess
import sys
import time

import batcher_helpers as helpers
import pytest
import torch

from cadence.collect import Batcher
from cadence.data import DictTensor, StepType

pytestmark = pytest.mark.timeout(120)


def _batcher(n_timesteps=20, n_processes=2, n_envs=2, mode="continuing", agent_args=None, **kw):
    return Batcher(
        n_timesteps,
        n_processes,
        n_envs,
        helpers.cartpole,
        helpers.PolicyAgent,
        agent_args=agent_args,
        seed=kw.pop("seed", 0),
        agent_info=DictTensor({"epsilon": torch.zeros(1), "stochastic": torch.ones(1, dtype=bool)}),
        mode=mode,
        **kw,
    )


def _info(n, epsilon=0.0, stochastic=True):
    return DictTensor(
        {
            "epsilon": torch.as_tensor(epsilon, dtype=torch.float32).expand(n).clone(),
            "stochastic": torch.as_tensor(stochastic).expand(n).clone(),
        }
    )


def test_a_non_blocking_get_answers_none_until_the_acquisition_is_done():
    with _batcher(n_timesteps=40, agent_args={"sleep_s": 0.005}) as batcher:
        batcher.reset(_info(4))
        batcher.execute()
        assert batcher.get(blocking=False) == (None, None)
        polls = 1
        while (result := batcher.get(blocking=False)) == (None, None):
            polls += 1
            time.sleep(0.01)
        trajectories, n_running = result
        assert polls > 1 and n_running == 4
        assert trajectories.n_elems() == 4 and trajectories.trajectories.n_steps() == 40
        with pytest.raises(RuntimeError, match="no acquisition in flight"):
            batcher.get()


def test_episodic_lengths_and_mask_end_at_the_done_step():
    with _batcher(n_timesteps=60, n_envs=3, mode="episodic") as batcher:
        batcher.reset(_info(6, epsilon=1.0))  # uniform actions: CartPole ends in ~20 steps
        batcher.execute()
        trajectories, n_running = batcher.get()
    steps = trajectories.trajectories
    done = steps["_observation/done"]
    lengths = steps.lengths
    assert (lengths < 60).sum() >= 4, "most random episodes end within 60 steps"
    for row in range(6):
        length = int(lengths[row])
        valid = done[row, :length]
        if length < 60:
            assert valid[-1] and not valid[:-1].any()  # the episode ends exactly there
            assert steps["_observation/step_type"][row, length - 1] == StepType.LAST
            assert steps["_observation/discount"][row, length - 1] == 0.0  # terminated
        else:
            assert not valid.any()
    assert torch.equal(steps.mask(), (torch.arange(steps.n_steps()) < lengths[:, None]).float())
    assert n_running == int((lengths == 60).sum())
    assert not steps["observation/done"][steps.mask().bool()].any()  # an agent never sees a LAST


def test_continuing_slots_start_the_next_episode_within_the_acquisition():
    with _batcher(n_timesteps=60, mode="continuing") as batcher:
        batcher.reset(_info(4, epsilon=1.0))
        batcher.execute()
        trajectories, n_running = batcher.get()
    steps = trajectories.trajectories
    assert steps.full() and n_running == 4
    done = steps["_observation/done"][:, :-1]
    assert done.any()
    # After a done the next observation is a reset: initial_state, reward 0, count again 0.
    assert torch.equal(
        steps["observation/initial_state"][:, 1:][done], torch.ones(done.sum(), dtype=bool)
    )
    assert (steps["action/count"][:, 1:][done] == 0).all()
    following = steps["observation/frame"][:, 1:]
    assert not torch.equal(following[done], steps["_observation/frame"][:, :-1][done])


@pytest.mark.parametrize("mode", ["continuing", "episodic"])
def test_episodes_continue_on_the_next_execute(mode):
    with _batcher(n_timesteps=5, mode=mode) as batcher:
        batcher.reset(_info(4))  # a fresh linear policy keeps CartPole up for > 5 steps
        batcher.execute()
        first, running = batcher.get()
        batcher.execute()
        second, _ = batcher.get()
    assert running == 4 and second.n_elems() == 4
    a, b = first.trajectories, second.trajectories
    assert torch.equal(b["observation/frame"][:, 0], a["_observation/frame"][:, -1])
    assert not b["observation/initial_state"][:, 0].any()
    # The state carried over: agent_state at the second start is the first's count plus 5.
    assert torch.equal(second.info["agent_state/count"], first.info["agent_state/count"] + 5)
    assert torch.equal(b["action/count"][:, 0], a["action/count"][:, -1] + 1)


def test_two_policies_in_one_batch_through_agent_info():
    model = helpers.biased_model(0)  # greedy: always 0; uniform exploration: half 1
    with _batcher(n_timesteps=50, n_envs=2, agent_args={"model": model}) as batcher:
        info = DictTensor(
            {
                "epsilon": torch.tensor([0.0, 1.0, 0.0, 1.0]),
                "stochastic": torch.zeros(4, dtype=bool),
            }
        )
        batcher.reset(info)
        batcher.execute()
        trajectories, _ = batcher.get()
    actions = trajectories.trajectories["action/action"].float()
    greedy, exploring = actions[[0, 2]], actions[[1, 3]]
    assert greedy.mean() == 0.0
    assert 0.3 < exploring.mean() < 0.7
    assert torch.equal(trajectories.info["agent_info/epsilon"], info["epsilon"])


def _acquire(n_processes, n_envs, mode, n_acquisitions=3):
    agent_args = {"seed": 7}  # the SlotRandom's: one seed in every worker
    with _batcher(25, n_processes, n_envs, mode, agent_args, seed=7) as b:
        b.reset(_info(n_processes * n_envs, epsilon=0.3))
        results = []
        for _ in range(n_acquisitions):
            b.execute()
            trajectories, running = b.get()
            results.append(trajectories)
            if not running:
                break
    return results


@pytest.mark.parametrize("mode", ["continuing", "episodic"])
def test_the_same_seed_gives_the_same_trajectories_with_one_or_two_processes(mode):
    # The same env seeds and random streams, so the same actions and steps; the logits
    # only within rounding: a worker's model runs on its batch of running slots (4 rows in
    # one process, 2 and 1 in two), and the BLAS may round a row differently in each.
    one, two = _acquire(1, 4, mode), _acquire(2, 2, mode)
    helpers.assert_same_acquisitions(two, one)
    # The same split again repeats them bit for bit, logits included.
    helpers.assert_same_acquisitions(_acquire(1, 4, mode), one, exact=True)
    # and a different seed acts differently
    other = Batcher(25, 1, 4, helpers.cartpole, helpers.PolicyAgent, seed=8)
    with other:
        other.reset()
        other.execute()
        c, _ = other.get()
    assert not torch.equal(
        c.trajectories["observation/frame"][:, 0], one[0].trajectories["observation/frame"][:, 0]
    )


def test_a_weight_update_reaches_the_next_acquisition_and_not_the_one_in_flight():
    greedy = _info(4, stochastic=False)
    agent_args = {"model": helpers.biased_model(0), "sleep_s": 0.002}
    with _batcher(n_timesteps=30, agent_args=agent_args) as batcher:
        batcher.reset(greedy)
        batcher.execute()
        first, _ = batcher.get()
        assert (first.trajectories["action/action"] == 0).all()
        assert (first.info["weights_version"] == 0).all()

        batcher.execute()
        version = batcher.update(helpers.biased_model(1).state_dict())  # while in flight
        during, _ = batcher.get()
        assert version == 1
        assert (during.info["weights_version"] == 0).all()
        assert (during.trajectories["action/action"] == 0).all()

        batcher.execute()
        batcher.update(helpers.biased_model(0).state_dict())  # version 2, in flight again
        after, _ = batcher.get()
        assert (after.info["weights_version"] == 1).all()
        assert (after.trajectories["action/action"] == 1).all()

        batcher.execute()
        last, _ = batcher.get()
        assert (last.info["weights_version"] == 2).all()
        assert (last.trajectories["action/action"] == 0).all()
        with pytest.raises(ValueError, match="same names, shapes and dtypes"):
            batcher.update({"weight": torch.zeros(3)})


def test_an_agent_that_requires_history_sees_the_steps_so_far():
    with Batcher(6, 1, 2, helpers.cartpole, helpers.HistoryAgent) as batcher:
        batcher.reset()
        for _ in range(2):
            batcher.execute()
            trajectories, _ = batcher.get()
            assert torch.equal(
                trajectories.trajectories["action/seen"], torch.arange(6).expand(2, 6)
            )


def test_agent_info_and_env_info_have_a_row_per_slot_or_the_examples_first():
    with _batcher(n_timesteps=2) as batcher:
        with pytest.raises(RuntimeError, match="reset"):
            batcher.execute()
        with pytest.raises(ValueError, match="one row per slot"):
            batcher.reset(_info(3))
        batcher.reset(_info(4), DictTensor({"level": torch.arange(4.0)}))
        batcher.execute()
        with pytest.raises(RuntimeError, match="in flight"):
            batcher.execute()
        trajectories, _ = batcher.get()
        assert torch.equal(trajectories.info["env_info/level"], torch.arange(4.0))
        batcher.reset()  # the constructor's example, in every slot
        batcher.execute()
        defaults, _ = batcher.get()
        assert defaults.info["agent_info/stochastic"].tolist() == [True] * 4
        assert defaults.info["agent_info/epsilon"].tolist() == [0.0] * 4
    assert math.isfinite(trajectories.trajectories["action/log_prob"].sum())


def test_importing_cadence_and_the_batcher_leaves_ray_unimported():
    code = "import sys, cadence, cadence.collect.batcher.batcher; print('ray' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
