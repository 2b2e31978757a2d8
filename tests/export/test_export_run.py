"""`cadence export` on short real runs: the ONNX file run by onnxruntime and the TorchScript
file by ``torch.jit.load``, in a process where cadence cannot be imported, act as cadence's
own ``predict_step`` does (through the run's normaliser and action rescaling) on the
observations of a few steps of real episodes, the state carried from step to step."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from cadence.cli import main
from cadence.config import load_config
from cadence.data.time_step import StepType
from cadence.envs.make import make_env
from cadence.envs.wrapper_config import gym_wrappers
from cadence.trainer.evaluation import TransformedPolicy
from cadence.trainer.play import load_policy
from cadence.trainer.run import train

BATCH, STEPS = 5, 6  # not 3, the batch the files were traced with

CASES = {
    # discrete actions, a vector observation through the observation normaliser
    "discrete": ("ppo_cartpole_normalized", []),
    # continuous actions squashed into the bounds
    "continuous": ("sac_pendulum", []),
    # a GRU, ObservationMask in the env: the state is an input and an output
    "recurrent": ("ppo_cartpole_masked_gru", ["env.max_episode_steps=4"]),
    # an LSTM each for actor and critic: state/actor/{h,c} and state/critic/{h,c}
    "recurrent_lstm": (
        "a2c_cartpole",
        ["network.recurrent=lstm", "network.share_encoder=false", "env.max_episode_steps=4"],
    ),
    # a Dict observation (three named inputs)
    "dict": ("dqn_her_bitflip", ["env.env_kwargs.n_bits=4", "env.max_episode_steps=4"]),
    # uint8 images
    "image": ("ppo_cartpole_pixels", ["env.env_kwargs.size=16"]),
    # a world model's filtered latent and the previous action
    "model_based": ("dreamer_pendulum", ["env.max_episode_steps=4"]),
    # replay_frame_stack's history of earlier observations: the data transformer's state
    "frame_history": (
        "sac_pendulum",
        [
            "data_transformers.names=[replay_frame_stack]",
            "data_transformers.replay_frame_stack.num_frames=3",
            "env.max_episode_steps=4",
        ],
    ),
}
TRAINED = ("discrete", "continuous")
"""Cases trained for two iterations; the others stop after one (acting is what they test:
an off-policy one collects without an update, an on-policy one makes one)."""


def _tiny(name: str, iterations: int) -> list[str]:
    """``iterations`` iterations of 2 envs x 4 steps, training from the second (off-policy)."""
    config = load_config(name)
    steps_per_iteration = 8 * config.env.action_repeat
    overrides = [
        "env.num_envs=2",
        "env.backend=serial",
        "trainer.unroll_length=4",
        f"trainer.num_env_steps={steps_per_iteration * iterations}",
        "trainer.eval_interval=0",
        "trainer.progress_bar=off",
    ]
    algorithm = config.algorithm
    if hasattr(algorithm, "mini_batch_size"):
        overrides += ["algorithm.mini_batch_size=4", "algorithm.num_updates_per_train_iter=1"]
    if getattr(algorithm, "compile", "off") != "off":
        overrides.append("algorithm.compile=off")
    if getattr(algorithm, "off_policy", None) is not None:
        overrides += [
            f"algorithm.off_policy.initial_collect_steps={steps_per_iteration}",
            "algorithm.off_policy.mini_batch_size=2",
            "algorithm.off_policy.mini_batch_length=2",
            "algorithm.off_policy.num_updates_per_train_iter=1",
            "algorithm.off_policy.replay_buffer_length=64",
        ]
    return overrides


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every case's short run exported to ONNX and TorchScript, cadence's actions on a few
    steps of episodes, and those of both files run in one process without cadence.

    Returns:
        ``{case: (config, run directory, cadence's actions, the files' actions by format)}``.
    """
    work = tmp_path_factory.mktemp("export")
    cases = {}
    for case, (name, overrides) in CASES.items():
        root = work / case
        iterations = 2 if case in TRAINED else 1
        config = load_config(name, [*_tiny(name, iterations), *overrides, "seed=5"], root_dir=root)
        train(config)
        assert main(["export", str(root), "--format", "onnx"]) == 0
        out = root / "deploy" / "actor.pt"  # --out: the sidecar goes beside it
        assert main(["export", str(root), "--format", "torchscript", "--out", str(out)]) == 0
        sidecar = json.loads((root / "export" / "policy.onnx.json").read_text())
        assert sidecar["file"] == "policy.onnx"
        script_sidecar = json.loads((root / "deploy" / "actor.pt.json").read_text())
        assert (script_sidecar["file"], script_sidecar["format"]) == ("actor.pt", "torchscript")
        assert script_sidecar["inputs"] == sidecar["inputs"]
        assert script_sidecar["outputs"] == sidecar["outputs"]
        inputs, expected = _episodes_with_cadence(config, root, sidecar)
        np.savez(root / "inputs.npz", **inputs)
        cases[case] = (config, root, expected)
    result = subprocess.run(
        [sys.executable, "-I", "-c", _RUNNER, *(str(root) for _, root, _ in cases.values())],
        cwd=work,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "cadence hidden" in result.stdout
    return {
        case: (config, root, expected, dict(np.load(root / "actions.npz")))
        for case, (config, root, expected) in cases.items()
    }


@pytest.mark.parametrize("case", sorted(CASES))
def test_exported_files_act_as_cadence_without_cadence(exported, case):
    _, _, expected, actions = exported[case]
    for file_format in ("onnx", "torchscript"):
        got = actions[file_format]
        assert got.shape == expected.shape and got.dtype == expected.dtype, file_format
        if np.issubdtype(expected.dtype, np.floating):
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5, err_msg=file_format)
        else:
            np.testing.assert_array_equal(got, expected, err_msg=file_format)


@pytest.mark.parametrize("case", sorted(CASES))
def test_sidecar_names_the_inputs_outputs_and_bounds(exported, case):
    config, root, _, _ = exported[case]
    sidecar = json.loads((root / "export" / "policy.onnx.json").read_text())
    names = [entry["name"] for entry in sidecar["inputs"]]
    assert all(entry["shape"][0] == "batch" for entry in sidecar["inputs"] + sidecar["outputs"])
    assert sidecar["outputs"][0]["name"] == "action"
    assert sidecar["run"]["algorithm"] == config.algorithm.name
    assert (root / "checkpoints" / sidecar["run"]["checkpoint_loaded"]).is_dir()
    state = [name for name in names if name.startswith("state/")]
    own = [name for name in state if not name.startswith("state/transformer/")]
    assert own == list(sidecar["initial_state"])  # a transformer's state starts from zeros
    assert (case == "frame_history") == (own != state)
    assert [o["name"] for o in sidecar["outputs"][1:]] == [f"next_{name}" for name in state]
    assert ("is_first" in names) == bool(state)
    if case == "recurrent_lstm":
        assert state == [f"state/{p}/{k}" for p in ("actor", "critic") for k in ("h", "c")]
    assert ("prev_action" in names) == (case == "model_based")
    action_space = sidecar["action_space"]
    if "num_values" in action_space:
        assert sidecar["outputs"][0]["dtype"] == "int64"
    else:
        assert action_space["minimum"] == [-2.0] and action_space["maximum"] == [2.0]


def _episodes_with_cadence(config, root, sidecar):
    """``STEPS`` steps of ``BATCH`` envs acted by cadence's own policy (as `cadence eval`
    does): the file's inputs at each step, and the actions ``[STEPS, BATCH, ...]``."""
    env = make_env(
        config.env.name,
        BATCH,
        "serial",
        11,
        max_episode_steps=config.env.max_episode_steps,
        gym_wrappers=gym_wrappers(config.env.all_wrappers),
        env_kwargs=dict(config.env.env_kwargs or {}),
    )
    try:
        algorithm, transformer = load_policy(config, root, env)
        policy = TransformedPolicy(algorithm, transformer, BATCH)
        state = algorithm.initial_state(BATCH)
        time_step = env.reset()
        inputs, actions, firsts = {}, [], 0
        with torch.no_grad():
            for t in range(STEPS):
                for entry in sidecar["inputs"]:
                    if not entry["name"].startswith("state/"):  # carried by the runner
                        inputs[f"{t}/{entry['name']}"] = _input(time_step, entry["name"]).numpy()
                firsts += int((time_step.step_type == StepType.FIRST).sum())
                step = policy.predict_step(time_step, state)
                state = step.state
                actions.append(step.output.numpy())
                time_step = env.step(step.output)
    finally:
        env.close()
    stateful = any(entry["name"] == "is_first" for entry in sidecar["inputs"])
    assert firsts > BATCH or not stateful, "no episode restarted: lower STEPS"
    return inputs, np.stack(actions)


def _input(time_step, name):
    if name == "prev_action":
        return time_step.prev_action
    if name == "is_first":
        return time_step.step_type == StepType.FIRST
    observation = time_step.observation
    for key in name.split("/")[1:]:
        observation = observation[key]
    return observation


# Runs in `python -I` with cadence hidden; for each run directory, loads its files, steps
# them through the saved inputs with the state each step returns, and saves the actions.
_RUNNER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path


    class HideCadence:
        def find_spec(self, name, path=None, target=None):
            if name == "cadence" or name.startswith("cadence."):
                raise ModuleNotFoundError("cadence hidden", name=name)


    sys.meta_path.insert(0, HideCadence())
    try:
        import cadence
    except ModuleNotFoundError:
        print("cadence hidden")
    else:
        raise SystemExit(f"cadence is importable from {cadence.__file__}")

    import numpy as np
    import onnxruntime
    import torch

    def act(root):
        export = root / "export"
        sidecar = json.loads((export / "policy.onnx.json").read_text())
        names = [entry["name"] for entry in sidecar["inputs"]]
        saved = np.load(root / "inputs.npz")
        steps = len({key.split("/")[0] for key in saved.files})
        session = onnxruntime.InferenceSession(str(export / "policy.onnx"))
        module = torch.jit.load(str(root / "deploy" / "actor.pt"))
        assert [i.name for i in session.get_inputs()] == names
        assert all(i.shape[0] == "batch" for i in session.get_inputs() + session.get_outputs())
        run = {
            "onnx": lambda feed: session.run(None, feed),
            "torchscript": lambda feed: [
                out.numpy() for out in module(*(torch.from_numpy(feed[n]) for n in names))
            ],
        }
        actions = {}
        for file_format, step in run.items():
            state, taken = {}, []
            for t in range(steps):
                feed = {n: saved[f"{t}/{n}"] for n in names if not n.startswith("state/")}
                batch = len(next(iter(feed.values())))
                for entry in sidecar["inputs"]:
                    key, shape = entry["name"], (batch, *entry["shape"][1:])
                    if key.startswith("state/") and key not in state:
                        initial = sidecar["initial_state"].get(key, 0)  # else: zeros
                        initial = np.asarray(initial, entry["dtype"])
                        state[key] = np.broadcast_to(initial, shape).copy()
                feed.update(state)
                outputs = step(feed)
                taken.append(outputs[0])
                for entry, value in zip(sidecar["outputs"][1:], outputs[1:]):
                    state[entry["name"][len("next_"):]] = value
            actions[file_format] = np.stack(taken)
        np.savez(root / "actions.npz", **actions)


    for root in sys.argv[1:]:
        act(Path(root))
    """
)


def test_the_export_feeds_back_the_previous_action_where_the_registration_declares_it(
    exported, monkeypatch
):
    from cadence.algorithms import registry
    from cadence.export.run import load_policy_graph

    config, root, _, _ = exported["discrete"]
    assert not load_policy_graph(config, root).graph.uses_prev_action
    ppo = registry.BUILTIN_ALGORITHMS["ppo"]
    declared = dataclasses.replace(ppo.capabilities, previous_action=True)
    monkeypatch.setitem(registry.BUILTIN_ALGORITHMS, "ppo", ppo._replace(capabilities=declared))
    assert load_policy_graph(config, root).graph.uses_prev_action
