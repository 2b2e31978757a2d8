"""`ConfigError`: the one exception of config loading, listing every problem found."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from cadence.data.config_history import REMOVED_KEYS
from cadence.data.names import similar_names

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


def unknown_key_problem(key: str, valid_keys: Iterable[str]) -> Problem:
    """A `Problem` for ``key``, which is not in the config, with close valid keys; for a
    key earlier versions had (`REMOVED_KEYS`), why it went and what to do instead."""
    if key in REMOVED_KEYS:
        return Problem(key, f"{REMOVED_KEYS[key]}; drop the key")
    matches = close_matches(key, valid_keys)
    hint = f"; did you mean {' or '.join(matches)}?" if matches else ""
    return Problem(key, f"unknown key{hint}")
