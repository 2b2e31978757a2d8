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
- ``state/<path>`` ``[B, ...]``: the state the previous step returned: the algorithm's
  (float32), then the data transformers' under ``state/transformer/...`` (a
  ``replay_frame_stack``'s history of earlier frames, in the observation's dtype).

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
        ExportError: the policy cannot be one graph: a data transformer's state on the
            acting path outlives an episode start, or the algorithm's initial state
            differs between episodes (it must be one value, repeated over the batch).
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
        self._transformer_state_structure = self._transformer_state_template()
        self._transformer_state_paths = [
            path for path, _ in flatten_with_paths(self._transformer_state_structure)
        ]

    @property
    def stateful(self) -> bool:
        """Whether the policy carries state from step to step (its own or a transformer's)."""
        return bool(self._state_paths or self._transformer_state_paths)

    def initial_state(self) -> dict[str, torch.Tensor]:
        """``{"state/<path>": [1, ...]}``: the state of a new episode, one row.

        The algorithm's initial state, then zeros for the transformers': their state
        restarts on an episode's first step whatever it is given (checked).
        """
        state = self.policy_initial_state()
        for path, value in flatten_with_paths(self._transformer_state_structure):
            state[_joined("state/transformer", path)] = torch.zeros_like(value[:1])
        return state

    def policy_initial_state(self) -> dict[str, torch.Tensor]:
        """`initial_state` without the transformers' state: the algorithm's own."""
        return {
            f"state/{path}": getattr(self, f"_initial_{i}")
            for i, path in enumerate(self._state_paths)
        }

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The action's leaves and the next state's, from flat inputs (see module)."""
        time_step, state, transformer_state = self._time_step_and_state(inputs)
        if self.transformer is not None:
            # A stateless sequence is given its initial state of one row: passing none would
            # make it size one from the batch, a constant in the graph.
            if not self._transformer_state_paths:
                transformer_state = self.transformer.initial_state(1)
            time_step, transformer_state = self.transformer.transform_time_step(
                time_step, transformer_state
            )
        if self._state_paths:
            initial = self._expanded_initial_state(time_step.step_type.shape[0])
            state = reset_state(time_step.step_type, state, initial)
        step = self.algorithm.predict_step(time_step, state)
        action = step.output if self.action_map is None else self.action_map(step.output)
        next_transformer_state = flatten(transformer_state) if self._transformer_state_paths else []
        return (*flatten(action), *flatten(step.state), *next_transformer_state)

    def _time_step_and_state(self, inputs: tuple[torch.Tensor, ...]) -> tuple[TimeStep, Nest, Nest]:
        """The `TimeStep` an environment would have returned, the policy's state and the
        data transformers'."""
        count = len(self._observation_paths)
        observation = pack_sequence_as(self.observation_spec, list(inputs[:count]))
        rest = list(inputs[count:])
        prev_action = rest.pop(0) if self.uses_prev_action else None
        state: Nest = ()
        transformer_state: Nest = ()
        if self.stateful:
            step_type = torch.where(rest.pop(0), int(StepType.FIRST), int(StepType.MID))
            own = len(self._state_paths)
            if own:
                state = pack_sequence_as(self._state_structure, rest[:own])
            if self._transformer_state_paths:
                transformer_state = pack_sequence_as(self._transformer_state_structure, rest[own:])
        else:
            step_type = None
        return self._time_step(observation, step_type, prev_action), state, transformer_state

    def _time_step(
        self, observation: Nest, step_type: torch.Tensor | None, prev_action: Nest | None
    ) -> TimeStep:
        """The `TimeStep` of ``observation`` (``step_type`` None: MID for every row)."""
        first_leaf = flatten(observation)[0]
        anchor = first_leaf.reshape(first_leaf.shape[0], -1)[:, 0]  # [B], for batch-sized fields
        if step_type is None:
            step_type = torch.full_like(anchor, int(StepType.MID), dtype=torch.int64)
        if prev_action is None:  # read by no model-free policy; a TimeStep has one
            zeros = self.action_spec.zeros((1,), anchor.device)  # a nest for a Dict or Tuple
            prev_action = map_structure(lambda z: z.expand(anchor.shape[0], *z.shape[1:]), zeros)
        return TimeStep(
            step_type=step_type,
            reward=torch.zeros_like(anchor, dtype=torch.float32),
            discount=torch.ones_like(anchor, dtype=torch.float32),
            observation=observation,
            prev_action=prev_action,
            env_id=torch.zeros_like(anchor, dtype=torch.int64),
        )

    def _transformer_state_template(self) -> Nest:
        """The data transformers' acting state after a first step (``()``: they keep none).

        The graph carries that state between calls. It must restart on an episode's first
        step, whatever it was (a frame history restarts from the first frame), since the
        file's user starts an episode with any state and ``is_first``; a transformer whose
        state outlives the start is refused.
        """
        if self.transformer is None:
            return ()
        observation = pack_sequence_as(
            self.observation_spec, [spec.zeros((2,)) for spec in flatten(self.observation_spec)]
        )
        first = self._time_step(observation, torch.full((2,), int(StepType.FIRST)), None)
        step, state = self.transformer.transform_time_step(first, self.transformer.initial_state(2))
        if not flatten(state):
            return ()
        results = [(step.observation, state)]
        for given in (state, map_structure(_another_value, state)):
            again, again_state = self.transformer.transform_time_step(first, given)
            results.append((again.observation, again_state))
        same = all(
            torch.equal(a, b)
            for result in results[1:]
            for a, b in zip(flatten(results[0]), flatten(result), strict=True)
        )
        if not same:
            sequence = isinstance(self.transformer, DataTransformerSequence)
            parts = list(self.transformer) if sequence else [self.transformer]
            states = state if sequence else [state]
            names = [type(p).__name__ for p, s in zip(parts, states, strict=True) if flatten(s)]
            raise ExportError(
                f"the run's data transformers ({', '.join(names)}) keep a state while acting "
                "that an episode's first step does not restart, so an exported policy could "
                "not start an episode from any state; stack frames in the env instead "
                "(env.wrappers: EnvFrameStack) or export a run without that transformer"
            )
        return map_structure(lambda x: x[:1], state)

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

    def state_names(self) -> list[str]:
        """``state/<path>`` of every state input, in order (the algorithm's, then the
        transformers')."""
        return list(self.initial_state())

    def input_infos(self) -> list[TensorInfo]:
        """The inputs' names, shapes and dtypes, in order."""
        names = [
            "observation" if path == "" else f"observation/{path}"
            for path in self._observation_paths
        ]
        if self.uses_prev_action:
            names.append("prev_action")
        if self.stateful:
            names += ["is_first", *self.state_names()]
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
        names = [*actions, *(f"next_{name}" for name in self.state_names())]
        return [_info(name, value) for name, value in zip(names, outputs, strict=True)]

    def _expanded_initial_state(self, batch_size: Any) -> Nest:
        leaves = [
            getattr(self, f"_initial_{i}").expand(batch_size, *value.shape[1:])
            for i, value in enumerate(flatten(self._state_structure))
        ]
        return pack_sequence_as(self._state_structure, leaves)


def _joined(prefix: str, path: str) -> str:
    return f"{prefix}/{path}" if path else prefix


def _another_value(x: torch.Tensor) -> torch.Tensor:
    """``x`` with every element changed (for bool: negated)."""
    return ~x if x.dtype == torch.bool else torch.where(x == 0, torch.ones_like(x), 0 * x)


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
