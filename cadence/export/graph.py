"""`PolicyGraph`: a run's deterministic policy as a module of flat, named tensors.

The exporters need a module whose inputs and outputs are plain tensors in a fixed order.
`PolicyGraph` is that module around cadence's own acting path, so the exported file
computes exactly what `cadence eval` and `cadence play` do: it builds the `TimeStep` the
environment would have returned, runs the run's data transformers in eval mode (the
observation normaliser's frozen statistics, the image scaling), resets the recurrent state
where a step starts an episode, as the collector does, and calls the algorithm's
``predict_step``, whose action is already rescaled to the env's bounds.

Inputs, in this order (``B`` is the batch, dynamic):

- ``observation`` ``[B, *shape]``, or one ``observation/<key>`` per leaf of a Dict
  observation, in the order of the env's observation space (nested keys joined by ``/``),
  each in the env's own dtype (uint8 images stay uint8);
- ``prev_action`` ``[B, *action_shape]``: the action taken before this observation (a
  model-based policy filters its latent with it; any value on a FIRST step);
- ``is_first`` ``[B]`` bool, for a policy with state: True on an episode's first step,
  where the state is reset to its initial value;
- ``state/<path>`` ``[B, ...]`` float32: the state the previous step returned.

Outputs: ``action`` ``[B, *action_shape]``, or one ``action/<key>`` per leaf of a Dict or
Tuple action (a Tuple's entries keyed ``0``, ``1``...), then ``next_state/<path>`` (the
state to feed back), in the order of the inputs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from cadence.algorithms.algorithm import Algorithm, reset_state
from cadence.data.nest import Nest, flatten, flatten_with_paths, map_structure, pack_sequence_as
from cadence.data.specs import Spec
from cadence.data.time_step import StepType, TimeStep
from cadence.export.errors import ExportError
from cadence.transforms.sequence import DataTransformerSequence
from cadence.transforms.transformer import DataTransformer


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """One input or output of an exported policy.

    Attributes:
        name: its name in the file (ONNX) and in the sidecar (both formats).
        shape: its shape, ``"batch"`` for the dynamic first dim.
        dtype: a numpy dtype name (``"float32"``, ``"uint8"``, ``"bool"``, ...).
    """

    name: str
    shape: tuple[int | str, ...]
    dtype: str

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}


class PolicyGraph(nn.Module):
    """``(observation leaves, [prev_action], [is_first, state leaves]) -> (action, [state])``.

    The algorithm's parameters stop requiring gradients: the graph only acts, and a
    traced file would otherwise return actions that require them.

    Args:
        algorithm: the run's algorithm, in eval mode.
        transformer: the run's data transformers (eval mode), or None.
        observation_spec: the env's observation spec (before the transformers).
        action_spec: the env's action spec.
        uses_prev_action: whether the policy reads the previous action (a model-based
            policy filtering its latent), which is then an input.
        action_map: applied to the policy's action: the env's action wrappers, folded
            (`cadence.export.action_wrappers`); None: the action as the policy gives it.

    Raises:
        ExportError: the policy cannot be one graph: a data transformer keeps state on the
            acting path (``replay_frame_stack``), or the initial state differs between
            episodes (it must be one value, repeated over the batch).
    """

    def __init__(
        self,
        algorithm: Algorithm,
        transformer: DataTransformer | None,
        observation_spec: Spec,
        action_spec: Spec,
        uses_prev_action: bool,
        action_map: nn.Module | None = None,
    ):
        super().__init__()
        self.action_map = action_map
        self.algorithm = algorithm.requires_grad_(False)
        self.transformer = transformer
        self.observation_spec = observation_spec
        self.action_spec = action_spec
        self.uses_prev_action = uses_prev_action
        self._observation_paths = [path for path, _ in flatten_with_paths(observation_spec)]
        initial = algorithm.initial_state(1)
        self._state_structure = initial
        self._state_paths = [path for path, _ in flatten_with_paths(initial)]
        for index, value in enumerate(flatten(initial)):
            self.register_buffer(f"_initial_{index}", value.detach().clone(), persistent=False)
        _check_initial_state(algorithm)
        self._check_stateless_transformers()

    @property
    def stateful(self) -> bool:
        """Whether the policy carries state from step to step."""
        return bool(self._state_paths)

    def initial_state(self) -> dict[str, torch.Tensor]:
        """``{"state/<path>": [1, ...]}``: the state of a new episode, one row."""
        return {
            f"state/{path}": getattr(self, f"_initial_{i}")
            for i, path in enumerate(self._state_paths)
        }

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The action's leaves and the next state's, from flat inputs (see module)."""
        time_step, state = self._time_step_and_state(inputs)
        if self.transformer is not None:
            # Stateless (checked), so any batch's initial state will do; passing none
            # would make the sequence size one from the batch, a constant in the graph.
            initial = self.transformer.initial_state(1)
            time_step, _ = self.transformer.transform_time_step(time_step, initial)
        if self.stateful:
            initial = self._expanded_initial_state(time_step.step_type.shape[0])
            state = reset_state(time_step.step_type, state, initial)
        step = self.algorithm.predict_step(time_step, state)
        action = step.output if self.action_map is None else self.action_map(step.output)
        return (*flatten(action), *flatten(step.state))

    def _time_step_and_state(self, inputs: tuple[torch.Tensor, ...]) -> tuple[TimeStep, Nest]:
        """The `TimeStep` an environment would have returned, and the policy's state."""
        count = len(self._observation_paths)
        observation = pack_sequence_as(self.observation_spec, list(inputs[:count]))
        rest = list(inputs[count:])
        prev_action = rest.pop(0) if self.uses_prev_action else None
        anchor = inputs[0].reshape(inputs[0].shape[0], -1)[:, 0]  # [B], for batch-sized fields
        if self.stateful:
            step_type = torch.where(rest[0], int(StepType.FIRST), int(StepType.MID))
            state = pack_sequence_as(self._state_structure, rest[1:])
        else:
            step_type = torch.full_like(anchor, int(StepType.MID), dtype=torch.int64)
            state = ()
        if prev_action is None:  # read by no model-free policy; a TimeStep has one
            zeros = self.action_spec.zeros((1,), anchor.device)  # a nest for a Dict or Tuple
            prev_action = map_structure(lambda z: z.expand(anchor.shape[0], *z.shape[1:]), zeros)
        time_step = TimeStep(
            step_type=step_type,
            reward=torch.zeros_like(anchor, dtype=torch.float32),
            discount=torch.ones_like(anchor, dtype=torch.float32),
            observation=observation,
            prev_action=prev_action,
            env_id=torch.zeros_like(anchor, dtype=torch.int64),
        )
        return time_step, state

    def _check_stateless_transformers(self) -> None:
        """Refuses data transformers that carry state on the acting path (a frame history):
        the graph takes one observation and keeps nothing of it."""
        if self.transformer is None:
            return
        time_step, _ = self._time_step_and_state(self.example_inputs(2))
        sequence = isinstance(self.transformer, DataTransformerSequence)
        for part in self.transformer if sequence else [self.transformer]:
            time_step, state = part.transform_time_step(time_step, part.initial_state(2))
            if flatten(state):
                raise ExportError(
                    f"the run's data transformer {type(part).__name__} keeps state while "
                    "acting (e.g. a frame history), which an exported policy does not carry; "
                    "stack frames in the env instead (env.wrappers: EnvFrameStack)"
                )

    def example_inputs(self, batch_size: int) -> tuple[torch.Tensor, ...]:
        """Inputs of ``batch_size`` rows (zeros; the state's initial value) to trace with."""
        inputs = [spec.zeros((batch_size,)) for spec in flatten(self.observation_spec)]
        if self.uses_prev_action:
            inputs.append(self.action_spec.zeros((batch_size,)))
        if self.stateful:
            inputs.append(torch.ones(batch_size, dtype=torch.bool))
            inputs += [
                value.expand(batch_size, *value.shape[1:]).clone()
                for value in self.initial_state().values()
            ]
        return tuple(inputs)

    def input_infos(self) -> list[TensorInfo]:
        """The inputs' names, shapes and dtypes, in order."""
        names = [
            "observation" if path == "" else f"observation/{path}"
            for path in self._observation_paths
        ]
        if self.uses_prev_action:
            names.append("prev_action")
        if self.stateful:
            names += ["is_first", *(f"state/{path}" for path in self._state_paths)]
        example = self.example_inputs(1)
        return [_info(name, value) for name, value in zip(names, example, strict=True)]

    def output_infos(self) -> list[TensorInfo]:
        """The outputs' names, shapes and dtypes, in order."""
        with torch.no_grad():
            outputs = self(*self.example_inputs(2))
        actions = [
            "action" if path == "" else f"action/{path}"
            for path, _ in flatten_with_paths(self.action_spec)
        ]
        names = [*actions, *(f"next_state/{path}" for path in self._state_paths)]
        return [_info(name, value) for name, value in zip(names, outputs, strict=True)]

    def _expanded_initial_state(self, batch_size: Any) -> Nest:
        leaves = [
            getattr(self, f"_initial_{i}").expand(batch_size, *value.shape[1:])
            for i, value in enumerate(flatten(self._state_structure))
        ]
        return pack_sequence_as(self._state_structure, leaves)


def _info(name: str, value: torch.Tensor) -> TensorInfo:
    dtype = str(value.dtype).removeprefix("torch.")  # float32, int64, uint8, bool: numpy's names
    return TensorInfo(name, ("batch", *value.shape[1:]), dtype)


def _check_initial_state(algorithm: Algorithm) -> None:
    """The initial state must be one row repeated: the graph expands it to any batch."""
    three = flatten(algorithm.initial_state(3))
    for (path, one), many in zip(
        flatten_with_paths(algorithm.initial_state(1)), three, strict=True
    ):
        if not torch.equal(many, one.expand_as(many)):
            raise ExportError(
                f"{type(algorithm).__name__}'s initial state {path!r} differs between "
                "episodes, so it cannot be exported as one value"
            )
