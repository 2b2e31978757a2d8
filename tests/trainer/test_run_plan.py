"""`cadence.trainer.run_plan`: what a run reads from its config, once."""

import sys
from pathlib import Path

import attrs

from cadence.algorithms import registry
from cadence.algorithms.on_policy import OnPolicySchedule
from cadence.config import load_config
from cadence.trainer.run_plan import RunPlan, unroll_graph_steps

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_algorithm"


def test_an_off_policy_plan_carries_the_section_and_its_minibatch_rows():
    config = load_config("sac_pendulum", ["algorithm.compile=auto"])
    plan = RunPlan.from_config(config)
    assert plan.off_policy is config.algorithm.off_policy and plan.on_policy is None
    assert plan.compile == "auto"
    section = config.algorithm.off_policy
    assert plan.update_rows == section.mini_batch_size * section.mini_batch_length
    assert unroll_graph_steps(plan) == 1


def test_an_on_policy_plan_updates_on_a_minibatch_or_the_whole_unroll():
    ppo = load_config("ppo_cartpole", ["algorithm.mini_batch_size=6", "trainer.unroll_length=4"])
    plan = RunPlan.from_config(ppo)
    assert plan.off_policy is None and plan.compile == "off"
    assert plan.on_policy == OnPolicySchedule(ppo.algorithm.num_updates_per_train_iter, 6)
    assert plan.update_rows == min(6, 4 * ppo.env.num_envs)
    a2c = load_config("a2c_cartpole", ["trainer.unroll_length=3"])
    a2c_plan = RunPlan.from_config(a2c)
    assert a2c_plan.on_policy == OnPolicySchedule()  # one pass over the whole unroll
    assert a2c_plan.update_rows == 3 * a2c.env.num_envs
    chosen = load_config("ppo_cartpole", ["trainer.unroll_graph_steps=3"])
    assert unroll_graph_steps(RunPlan.from_config(chosen)) == 3


def test_a_registered_config_without_compile_or_schedule_gets_the_defaults(monkeypatch):
    # docs/adding-an-algorithm.md: a config of one's own need not declare `compile`, nor
    # the on-policy schedule's fields.
    monkeypatch.syspath_prepend(str(EXAMPLE))
    registry.register_algorithm(
        "reinforce", "reinforce:ReinforceConfig", "reinforce:make_reinforce"
    )
    try:
        config = load_config("ppo_cartpole", ["algorithm=reinforce"])
        assert "compile" not in attrs.fields_dict(type(config.algorithm))
        plan = RunPlan.from_config(config)
        assert plan.compile == "off"
        assert plan.on_policy == OnPolicySchedule(
            num_updates_per_train_iter=1, mini_batch_size=None
        )
    finally:
        registry.unregister_algorithm("reinforce")
        sys.modules.pop("reinforce", None)
