"""`ConfigError`: the one exception of config loading, listing every problem found."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

# Marks a problem that has no value to show (an unknown or missing key).
_NO_VALUE = object()


@attrs.frozen
class Problem:
    """One thing wrong with a config: the dotted key, its value if any, and what is wrong.

    Example:
        >>> str(Problem("env.num_envs", "must be >= 1", value=-3))
        'env.num_envs=-3: must be >= 1'
    """

    key: str
    message: str
    value: Any = _NO_VALUE

    def __str__(self) -> str:
        if self.value is _NO_VALUE:
            return f"{self.key}: {self.message}"
        return f"{self.key}={self.value!r}: {self.message}"


class ConfigError(ValueError):
    """A config that cannot be loaded: unknown keys, wrong types or out-of-range values.

    Attributes:
        summary: the first line of the message (which config failed).
        problems: every problem found, one per line of the message after the summary.
    """

    def __init__(self, summary: str, problems: Sequence[Problem] = ()):
        self.summary = summary
        self.problems = tuple(problems)
        lines = [summary, *(f"  {problem}" for problem in self.problems)]
        super().__init__("\n".join(lines))


def close_matches(word: str, candidates: Iterable[str], limit: int = 3) -> list[str]:
    """The candidates most similar to ``word``, best first (for "did you mean" hints).

    A dotted key is compared with its siblings by last part (a shared
    ``algorithm.`` prefix says nothing; see `similar_names`), with keys elsewhere that
    have the same last part (``algorithm.num_envs`` suggests ``env.num_envs``), and, for
    a misspelt section, with every key in full.

    Example:
        >>> close_matches("algorithm.lr", ["algorithm.learning_rate", "algorithm.tau"])
        ['algorithm.learning_rate']
    """
    candidates = list(candidates)
    parent, _, leaf = word.rpartition(".")
    siblings = {c.rpartition(".")[2]: c for c in candidates if c.rpartition(".")[0] == parent}
    same_leaf = [c for c in candidates if c.rpartition(".")[2] == leaf and c != word]
    similar = [siblings[m] for m in similar_names(leaf, list(siblings), limit)]
    typo = difflib.get_close_matches(word, candidates, n=limit, cutoff=0.8)
    return list(dict.fromkeys(same_leaf + similar + typo))[:limit]


def similar_names(word: str, names: Iterable[str], limit: int = 3) -> list[str]:
    """The ``names`` most similar to ``word``, best first, compared in `normalized` form.

    A name equal to ``word`` once both are normalized (``UntransformedTimeStep`` and
    ``untransformed_time_step``, ``lr`` and ``learning_rate``) alone; else names holding
    all of it as whole words (``lr``: ``actor_learning_rate``), then `difflib`'s close
    matches.
    """
    forms: dict[str, str] = {}
    for name in names:
        forms.setdefault(normalized(name), name)
    key = normalized(word)
    if key in forms:
        return [forms[key]]
    holding = [n for form, n in forms.items() if len(key) > 2 and f"_{key}_" in f"_{form}_"]
    close = [forms[form] for form in difflib.get_close_matches(key, list(forms), n=limit)]
    return list(dict.fromkeys(holding + close))[:limit]


# Abbreviations users type for cadence's spelled-out names (STYLE: one vocabulary).
_ABBREVIATIONS = {"lr": "learning_rate", "obs": "observation", "bs": "batch_size"}


def normalized(name: str) -> str:
    """``name`` in snake_case, American spelling and abbreviations spelled out:
    ``ObservationNormaliser`` and ``obs_normalizer`` both give ``observation_normalizer``."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower().replace("-", "_")
    parts = [_ABBREVIATIONS.get(part, part) for part in snake.split("_")]
    return "_".join(_american(part) for part in parts)


def _american(word: str) -> str:
    """``normaliser`` -> ``normalizer``, ``colour`` -> ``color`` (both sides of a
    comparison go through it, so an odd result such as ``noize`` does no harm)."""
    return re.sub(r"is(e|ed|er|ers|ing|ation)$", r"iz\1", word.replace("our", "or"))


def unknown_key_problem(key: str, valid_keys: Iterable[str]) -> Problem:
    """A `Problem` for ``key``, which is not in the config, with close valid keys."""
    matches = close_matches(key, valid_keys)
    hint = f"; did you mean {' or '.join(matches)}?" if matches else ""
    return Problem(key, f"unknown key{hint}")
