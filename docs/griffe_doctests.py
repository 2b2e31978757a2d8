"""A griffe extension for this site: docstring examples and literal blocks read as code.

cadence's docstrings put their ``>>>`` examples after ``Args:``/``Returns:`` without an
``Examples:`` header (STYLE.md), where Markdown would read ``>>>`` as nested quotes and
``x["h"][:, 0]`` as a link. This fences each run of example lines (a ``>>>`` line, its
``...`` continuations and its output, up to a blank line) as ``pycon`` before
mkdocstrings renders the docstring. A few docstrings introduce an indented block with
reStructuredText's ``::``; Markdown shows the indented block as code already, so the
``::`` becomes ``:``. Docstrings in the source are left as they are.
"""

from __future__ import annotations

from typing import Any

import griffe


def fence_examples(text: str) -> str:
    """``text`` with every unindented run of doctest lines wrapped in a ``pycon`` fence,
    and each line that ends in ``::`` ending in ``:`` instead."""
    out: list[str] = []
    in_example = in_fence = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        if not in_fence and not in_example and line.startswith(">>>"):
            out.append("```pycon")
            in_example = True
        elif in_example and not line.strip():
            out.append("```")
            in_example = False
        if not (in_fence or in_example) and line.endswith("::"):
            line = line[:-1]
        out.append(line)
    if in_example:
        out.append("```")
    return "\n".join(out)


class DoctestBlocks(griffe.Extension):
    """Applies `fence_examples` to every loaded object's docstring."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.docstring is not None and (
            ">>>" in obj.docstring.value or "::" in obj.docstring.value
        ):
            obj.docstring.value = fence_examples(obj.docstring.value)
