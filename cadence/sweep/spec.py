"""The sweep spec: the swept parameters (``--param KEY=KIND(ARGS)``) and what every trial shares."""

from __future__ import annotations

import contextlib
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs

from cadence.config import ConfigError, load_config
from cadence.config.loading import check_overrides

if TYPE_CHECKING:
    import optuna

Kind = Literal["loguniform", "uniform", "int", "choice"]
Direction = Literal["maximize", "minimize"]

CALL = re.compile(r"(?P<name>\w+)\((?P<args>.*)\)", re.DOTALL)
"""``NAME(ARGS)``: a distribution, or a pruner with its keyword arguments."""
_KEY = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_WORD = re.compile(r"[\w.:/-]+")
_RESERVED = ("seed", "root_dir", "name", "trainer.progress_bar")


@attrs.frozen
class SweepParam:
    """One swept key and its distribution, as ``--param KEY=KIND(ARGS)`` writes it.

    Example:
        >>> parse_param("algorithm.learning_rate=loguniform(1e-4, 1e-2)")
        SweepParam(key='algorithm.learning_rate', kind='loguniform', args=(0.0001, 0.01))
    """

    key: str
    kind: Kind
    args: tuple[Any, ...]

    def __str__(self) -> str:
        return f"{self.key}={self.kind}({','.join(map(str, self.args))})"

    def suggest(self, trial: optuna.Trial) -> Any:
        """Samples this parameter in ``trial`` (a retried trial gets its original's value)."""
        if self.kind == "choice":
            return trial.suggest_categorical(self.key, list(self.args))
        if self.kind == "int":
            return trial.suggest_int(self.key, *self.args)
        return trial.suggest_float(self.key, *self.args, log=self.kind == "loguniform")

    def override(self, value: Any) -> str:
        """``KEY=VALUE`` in Hydra's grammar, exact (floats as ``repr``)."""
        return f"{self.key}={_hydra_value(value)}"


def parse_param(text: str) -> SweepParam:
    """Parses ``KEY=loguniform(a,b)``, ``uniform(a,b)``, ``int(a,b)`` or ``choice(v1,v2,...)``.

    Raises:
        ConfigError: the text is not one of these forms, or its bounds are invalid.
    """
    key, sep, spec = (part.strip() for part in text.partition("="))
    call = CALL.fullmatch(spec)
    if not sep or not _KEY.fullmatch(key) or call is None:
        raise _param_error(text, "expected KEY=KIND(ARGS), e.g. algorithm.ent_coef=uniform(0,0.02)")
    if key in _RESERVED:
        raise _param_error(text, f"{key} is set by the sweep itself and cannot be swept")
    kind, raw = call["name"], [arg.strip() for arg in call["args"].split(",")]
    if kind == "choice":
        return SweepParam(key, kind, _choices(text, raw))
    if kind not in ("loguniform", "uniform", "int"):
        raise _param_error(text, f"unknown kind {kind!r}: use loguniform, uniform, int or choice")
    if len(raw) != 2:
        raise _param_error(text, f"{kind} takes two bounds (low,high), got {len(raw)}")
    low, high = (_number(text, arg, integer=kind == "int") for arg in raw)
    if not low < high:
        raise _param_error(text, f"the low bound {low} must be below the high bound {high}")
    if kind == "loguniform" and low <= 0:
        raise _param_error(text, f"loguniform needs a positive low bound, got {low}")
    return SweepParam(key, kind, (low, high))


def _number(text: str, arg: str, integer: bool) -> float | int:
    try:
        value = int(arg) if integer else float(arg)
    except ValueError:
        expected = "an integer" if integer else "a number"
        raise _param_error(text, f"{arg!r} is not {expected}") from None
    if not math.isfinite(value):
        raise _param_error(text, f"{arg!r} is not finite")
    return value


def _choices(text: str, raw: list[str]) -> tuple[Any, ...]:
    if len(raw) < 2 or "" in raw:
        raise _param_error(text, "choice takes two or more comma-separated values")
    values = tuple(_literal(text, arg) for arg in raw)
    if len(set(map(repr, values))) != len(values):
        raise _param_error(text, "choice lists a value twice")
    return values


def _literal(text: str, arg: str) -> Any:
    if arg.lower() in ("true", "false"):
        return arg.lower() == "true"
    for convert in (int, float):
        with contextlib.suppress(ValueError):
            return convert(arg)
    if not _WORD.fullmatch(arg):
        raise _param_error(text, f"choice value {arg!r}: use numbers, true/false or plain words")
    return arg


def _param_error(text: str, message: str) -> ConfigError:
    return ConfigError(f"--param {text!r}: {message}")


def _hydra_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


@attrs.frozen
class SweepSpec:
    """What a study sweeps; stored in the study, so every process of a sweep agrees on it.

    Args:
        config_name: the named config every trial trains.
        overrides: fixed ``KEY=VALUE`` overrides of every trial.
        params: the swept parameters.
        objective: the metric of ``metrics.jsonl`` to optimize (e.g. ``eval/episode_return``).
        direction: ``maximize`` or ``minimize``.
        num_seeds: runs per trial, with seeds ``seed``, ``seed + 1``, ... of the config.
    """

    config_name: str
    overrides: tuple[str, ...]
    params: tuple[SweepParam, ...]
    objective: str = "eval/episode_return"
    direction: Direction = "maximize"
    num_seeds: int = 1

    def __attrs_post_init__(self) -> None:
        check_overrides(self.overrides)  # a bare string would be one override per character
        keys = [param.key for param in self.params]
        fixed = {override.partition("=")[0].lstrip("+~") for override in self.overrides}
        clashes = sorted({k for k in keys if keys.count(k) > 1} | (set(keys) & fixed))
        if clashes:
            raise ConfigError(f"cadence sweep: {', '.join(clashes)} is both swept and set twice")
        if not self.params:
            raise ConfigError("cadence sweep: give at least one --param KEY=KIND(ARGS)")
        if self.num_seeds < 1:
            raise ConfigError(f"cadence sweep: --seeds must be >= 1, got {self.num_seeds}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form (stored as the study's user attribute ``cadence_sweep``)."""
        data = attrs.asdict(self, recurse=False)
        return {**data, "overrides": list(self.overrides), "params": list(map(str, self.params))}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SweepSpec:
        params = tuple(parse_param(text) for text in data["params"])
        return cls(**{**data, "overrides": tuple(data["overrides"]), "params": params})

    def check(self) -> None:
        """Loads the config with each parameter's first value, so that an unknown key or an
        invalid value is refused before a study or a run directory is created."""
        for param in self.params:
            self.load(param.override(param.args[0]))

    def load(self, *overrides: str, root_dir: Path | None = None) -> Any:
        """The config of one run: the fixed overrides, then ``overrides``."""
        return load_config(self.config_name, [*self.overrides, *overrides], root_dir=root_dir)
