"""A griffe extension for this site: cadence's docstrings and config fields, as Markdown.

mkdocstrings reads the code through griffe; this extension adjusts what griffe loaded
before it is rendered (the source is left as it is):

- cadence's docstrings put their ``>>>`` examples after ``Args:``/``Returns:`` without an
  ``Examples:`` header (STYLE.md), where Markdown would read ``>>>`` as nested quotes and
  ``x["h"][:, 0]`` as a link: each run of example lines (a ``>>>`` line, its ``...``
  continuations and its output, up to a blank line) is fenced as ``pycon``;
- a few docstrings introduce an indented block with reStructuredText's ``::``; Markdown
  shows the indented block as code already, so the ``::`` becomes ``:``;
- Google's singular ``Example:`` header becomes ``Examples:``, which griffe parses;
- the fields of cadence's attrs configs keep their documentation in
  ``field(..., metadata={"doc": ...})`` (it drives ``cadence train NAME --help``): that
  text becomes the attribute's docstring, and the field's default its shown value.
"""

from __future__ import annotations

import ast
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


def attrs_field(source: str) -> tuple[str | None, str | None]:
    """The ``metadata["doc"]`` and the default (as source) of an attrs ``field(...)`` call.

    Returns:
        ``(doc, default)``, each None where ``source`` is not such a call or lacks it.
    """
    try:
        call = ast.parse(source, mode="eval").body
    except SyntaxError:
        return None, None
    if not isinstance(call, ast.Call) or ast.unparse(call.func) not in ("field", "attrs.field"):
        return None, None
    keywords = {keyword.arg: keyword.value for keyword in call.keywords}
    doc = None
    if "metadata" in keywords:
        try:
            metadata = ast.literal_eval(keywords["metadata"])
        except ValueError:
            metadata = {}
        doc = metadata.get("doc") if isinstance(metadata, dict) else None
    default = None
    if "default" in keywords:
        default = ast.unparse(keywords["default"])
    elif "factory" in keywords:
        default = f"{ast.unparse(keywords['factory'])}()"
    return doc, default


class CadenceDocstrings(griffe.Extension):
    """Applies `fence_examples` to every docstring and `attrs_field` to every attribute."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        adjust(obj)

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        adjust(pkg)  # on_object is not called for the top-level package itself


def adjust(obj: griffe.Object) -> None:
    """Rewrites ``obj``'s docstring (and, for an attrs field, its value) for Markdown."""
    if isinstance(obj, griffe.Attribute) and obj.value is not None:
        doc, default = attrs_field(str(obj.value))
        if doc and obj.docstring is None:
            obj.docstring = griffe.Docstring(doc, parent=obj)
        if default is not None:
            obj.value = default
    docstring = obj.docstring  # idempotent: on_package may see the root package twice
    if docstring is None:
        return
    # Google's singular "Example:" is an admonition to griffe; "Examples:" parses the
    # indented >>> lines beneath it as code.
    text = "\n".join(
        "Examples:" if line == "Example:" else line for line in docstring.value.splitlines()
    )
    docstring.value = fence_examples(text)
