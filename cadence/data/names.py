"""Name similarity: which known names a mistyped one most likely meant ("did you mean" hints).

Torch-free and at the ground layer, so that config field checks (`cadence.data.typed_fields`)
and config loading (`cadence.config.errors`) share one notion of "close".
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable


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
