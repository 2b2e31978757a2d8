"""Grouping runs by config up to the seed, and naming the groups by what tells them apart."""

from pathlib import Path

from cadence.plot.groups import (
    distinguishing_keys,
    group_labels,
    group_runs,
    shared_seeds,
    shared_title,
)
from cadence.plot.runs import Run

PPO = {
    "name": "ppo_cartpole",
    "seed": 0,
    "root_dir": "runs/a",
    "env.name": "CartPole-v1",
    "algorithm.name": "ppo",
    "algorithm.learning_rate": 0.0005,
    "algorithm.clip_coef": 0.2,
    "network.hidden_sizes": [64, 64],
    "trainer.num_env_steps": 100000,
    "trainer.progress_bar": "auto",
}
A2C = {
    **{k: v for k, v in PPO.items() if k != "algorithm.clip_coef"},
    "name": "a2c_cartpole",
    "algorithm.name": "a2c",
    "algorithm.learning_rate": 0.0007,
}


def _run(config: dict, **changes) -> Run:
    return Run(Path(f"runs/{len(changes)}"), {**config, **changes}, [])


def test_seeds_run_directories_and_progress_settings_do_not_split_a_group():
    runs = [
        _run(PPO, seed=1, root_dir="runs/b"),
        _run(PPO, **{"algorithm.learning_rate": 0.001}),
        _run(PPO, seed=0, root_dir="runs/c", **{"trainer.progress_bar": "off"}),
        _run(PPO, seed=2, root_dir="runs/d", **{"trainer.checkpoint_interval": 5}),
    ]
    groups = group_runs(runs)
    assert [[run.seed for run in group] for group in groups] == [[0, 1, 2], [0]]
    assert groups[1][0] is runs[1]


def test_a_different_budget_or_network_is_another_group():
    runs = [_run(PPO), _run(PPO, **{"trainer.num_env_steps": 5}), _run(PPO, seed=3)]
    runs.append(_run(PPO, **{"network.hidden_sizes": [32]}))
    assert [len(group) for group in group_runs(runs)] == [2, 1, 1]


def test_labels_name_the_differing_override_and_count_the_seeds():
    groups = group_runs(
        [_run(PPO), _run(PPO, seed=1), _run(PPO, **{"algorithm.learning_rate": 0.001})]
    )
    assert group_labels(groups) == [
        "algorithm.learning_rate=0.0005 (2 seeds)",
        "algorithm.learning_rate=0.001 (1 seed)",
    ]


def test_runs_sharing_a_seed_are_counted_as_runs_not_seeds():
    runs = [_run(PPO), _run(PPO, root_dir="runs/b"), _run(PPO, seed=1)]
    runs.append(_run(PPO, **{"algorithm.learning_rate": 0.001}))
    groups = group_runs(runs)
    assert group_labels(groups) == [
        "algorithm.learning_rate=0.0005 (3 runs, 2 seeds)",
        "algorithm.learning_rate=0.001 (1 seed)",
    ]
    assert shared_seeds(groups[0]) == {"0": runs[:2]} and shared_seeds(groups[1]) == {}


def test_two_named_configs_are_labelled_by_their_names_alone():
    groups = group_runs([_run(PPO), _run(A2C), _run(A2C, seed=1)])
    assert group_labels(groups) == ["ppo_cartpole (1 seed)", "a2c_cartpole (2 seeds)"]


def test_keys_that_differ_within_one_name_are_kept_and_those_it_implies_dropped():
    configs = [
        {**PPO},
        {**PPO, "algorithm.learning_rate": 0.001, "network.hidden_sizes": [32]},
        {**A2C},
    ]
    assert distinguishing_keys(configs) == [
        "name",
        "algorithm.learning_rate",
        "network.hidden_sizes",
    ]
    labels = group_labels(group_runs([Run(Path("x"), config, []) for config in configs]))
    # Long labels wrap at the legend's width.
    assert labels[1] == (
        "ppo_cartpole, algorithm.learning_rate=0.001,\nnetwork.hidden_sizes=[32] (1 seed)"
    )


def test_an_algorithm_name_is_used_where_the_config_names_are_equal():
    other = {**A2C, "name": "ppo_cartpole", "algorithm.learning_rate": 0.0005}
    assert distinguishing_keys([PPO, other]) == ["algorithm.name"]
    assert group_labels(group_runs([_run(PPO), _run(other)])) == [
        "algorithm.name=ppo (1 seed)",
        "algorithm.name=a2c (1 seed)",
    ]


def test_one_group_is_labelled_by_its_name():
    assert group_labels(group_runs([_run(PPO), _run(PPO, seed=4)])) == ["ppo_cartpole (2 seeds)"]


def test_the_title_is_what_every_group_shares():
    assert shared_title(group_runs([_run(PPO), _run(PPO, seed=1)])) == "ppo_cartpole on CartPole-v1"
    lr = _run(PPO, name="ppo_fast", **{"algorithm.learning_rate": 0.001})
    assert shared_title(group_runs([_run(PPO), lr])) == "ppo on CartPole-v1"
    assert shared_title(group_runs([_run(PPO), _run(A2C)])) == "CartPole-v1"
    pendulum = _run(A2C, **{"env.name": "Pendulum-v1"})
    assert shared_title(group_runs([_run(PPO), pendulum])) == "learning curves"


def test_sampled_floats_are_shortened_unless_two_labels_would_read_the_same():
    a = _run(PPO, **{"algorithm.learning_rate": 0.000234567891})
    b = _run(PPO, **{"algorithm.learning_rate": 0.00131})
    assert group_labels(group_runs([a, b])) == [
        "algorithm.learning_rate=0.0002346 (1 seed)",
        "algorithm.learning_rate=0.00131 (1 seed)",
    ]
    c = _run(PPO, **{"algorithm.learning_rate": 0.000234567999})
    assert group_labels(group_runs([a, c]))[0] == "algorithm.learning_rate=0.000234567891 (1 seed)"
