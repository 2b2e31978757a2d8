"""Every ```python block of README.md and docs/*.md runs as the script a reader would paste.

The blocks of one page run in order, each as ``python snippet.py`` in a fresh process,
in one temporary working directory per page (so that a page's files, such as its
``runs/``, are where its later blocks look). A block that cannot run as it stands says
why on the line right before its fence, in an HTML comment that the rendered page hides:

- ``<!-- snippet: skip (why) -->``: not run (pseudo-code, an excerpt, a cluster it needs);
- ``<!-- snippet: continues -->``: run together with the page's previous block, as one
  script (a page that builds an example over several blocks);
- ``<!-- snippet: file NAME.py -->``: written to ``NAME.py`` for the page's later blocks
  to import; a ``test_*.py`` is run with pytest, any other is run as a script;
- ``<!-- snippet: slow (why) -->``: run only with ``-m slow`` (CI's budgeted subset).

The blocks are found when the tests are collected, so a block added to any page is run
without a change here.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(\s*)```python\s*$")
MARKER = re.compile(r"^\s*<!--\s*snippet:\s*(\w+)\s*(.*?)\s*-->\s*$")
KINDS = ("skip", "continues", "file", "slow")


@dataclasses.dataclass
class Snippet:
    """One runnable unit of a page: a block, or blocks joined by ``continues``."""

    page: Path
    line: int  # of the first block's fence, 1-based
    source: str
    kind: str = "run"  # "run", "skip", "file" or "slow"
    argument: str = ""  # the reason of a skip or slow, the name of a file

    @property
    def label(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"


def page_snippets(page: Path) -> list[Snippet]:
    """The page's blocks, joined and marked as their markers say.

    Raises:
        ValueError: a marker of an unknown kind, a skip or slow without a reason, a file
            without a name, or a ``continues`` with no block before it.
    """
    lines = page.read_text().splitlines()
    snippets: list[Snippet] = []
    index = 0
    while index < len(lines):
        fence = FENCE.match(lines[index])
        if fence is None:
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].strip().startswith("```"))
        indent = len(fence.group(1))
        source = "\n".join(line[indent:] for line in lines[index + 1 : end]) + "\n"
        kind, argument = _marker(page, index, lines[index - 1] if index else "")
        if kind == "continues":
            if not snippets:
                raise ValueError(f"{page}:{index + 1}: 'continues' with no block before it")
            snippets[-1].source += "\n" + source
        else:
            snippets.append(Snippet(page, index + 1, source, kind, argument))
        index = end + 1
    return snippets


def _marker(page: Path, index: int, previous: str) -> tuple[str, str]:
    marker = MARKER.match(previous)
    if marker is None:
        return "run", ""
    kind, argument = marker.groups()
    where = f"{page}:{index + 1}"
    if kind not in KINDS:
        raise ValueError(f"{where}: unknown snippet marker {kind!r}; one of {KINDS}")
    if kind in ("skip", "slow") and not re.fullmatch(r"\(.+\)", argument):
        raise ValueError(f"{where}: 'snippet: {kind}' needs its reason in parentheses")
    if kind == "file" and not re.fullmatch(r"[\w/]+\.py", argument):
        raise ValueError(f"{where}: 'snippet: file' needs a file name such as my_env.py")
    return kind, argument


def run_page(snippets: list[Snippet], directory: Path, include_slow: bool) -> list[str]:
    """Runs a page's snippets in order in ``directory``; returns the failures, described."""
    failures = []
    for number, snippet in enumerate(snippets):
        if snippet.kind == "skip" or (snippet.kind == "slow" and not include_slow):
            continue
        if snippet.kind == "file":
            script = directory / snippet.argument
        else:
            script = directory / f"snippet_{number}.py"
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(snippet.source)
        command = [sys.executable, str(script)]
        if script.name.startswith("test_"):
            command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", script.name]
        done = subprocess.run(
            command, cwd=directory, env=_environment(directory), capture_output=True,
            text=True, timeout=600,
        )  # fmt: skip
        if done.returncode != 0:
            output = (done.stdout + done.stderr)[-3000:]
            failures.append(f"{snippet.label} exited {done.returncode}:\n{output}")
    return failures


def _environment(directory: Path) -> dict[str, str]:
    # The page's own files first (a module a block wrote), then this checkout.
    path = os.pathsep.join(
        p for p in (str(directory), str(ROOT), os.environ.get("PYTHONPATH")) if p
    )
    return {**os.environ, "PYTHONPATH": path, "MPLBACKEND": "Agg"}


def _pages_with_blocks() -> list[Path]:
    return [
        page for page in PAGES if any(FENCE.match(line) for line in page.read_text().splitlines())
    ]


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", _pages_with_blocks(), ids=_page_id)
def test_every_python_block_runs_as_a_script(page: Path, tmp_path: Path) -> None:
    failures = run_page(page_snippets(page), tmp_path, include_slow=False)
    assert not failures, "\n\n".join(failures)


def _pages_with_slow_blocks() -> list[Path]:
    return [p for p in _pages_with_blocks() if any(s.kind == "slow" for s in page_snippets(p))]


@pytest.mark.slow
@pytest.mark.ci_budget
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("page", _pages_with_slow_blocks(), ids=_page_id)
def test_the_slow_python_blocks_run_too(page: Path, tmp_path: Path) -> None:
    failures = run_page(page_snippets(page), tmp_path, include_slow=True)
    assert not failures, "\n\n".join(failures)


def test_every_block_that_is_not_run_says_why() -> None:
    for page in _pages_with_blocks():
        for snippet in page_snippets(page):  # raises on a malformed marker
            assert snippet.kind != "skip" or snippet.argument.strip("()").strip(), snippet.label


def test_a_failing_block_fails_and_markers_join_skip_and_write_files(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nimport helper\nassert helper.VALUE == 3\n```\n"  # before the file: fails
        "<!-- snippet: file helper.py -->\n```python\nVALUE = 3\n```\n"
        "```python\nx = 1\n```\n"
        "<!-- snippet: continues -->\n```python\nassert x == 1\n```\n"
        "<!-- snippet: skip (pseudo-code) -->\n```python\nwhile not done: ...\n```\n"
        "<!-- snippet: slow (minutes) -->\n```python\nraise SystemExit(3)\n```\n"
        "  ```python\n  import helper\n  assert helper.VALUE == 4\n  ```\n"  # indented: fails
    )
    snippets = page_snippets(page)
    assert [s.kind for s in snippets] == ["run", "file", "run", "skip", "slow", "run"]
    assert snippets[2].source == "x = 1\n\nassert x == 1\n"
    work = tmp_path / "work"
    work.mkdir()
    failures = run_page(snippets, work, include_slow=False)
    assert [f.split(" exited")[0] for f in failures] == [f"{page}:1", f"{page}:24"]
    assert "ModuleNotFoundError: No module named 'helper'" in failures[0]
    assert "exited 3" in run_page(snippets[4:5], work, include_slow=True)[0]


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("<!-- snippet: skip -->", "reason in parentheses"),
        ("<!-- snippet: later (x) -->", "unknown snippet marker"),
        ("<!-- snippet: file -->", "needs a file name"),
        ("<!-- snippet: continues -->", "no block before it"),
    ],
)
def test_a_malformed_marker_is_refused(tmp_path: Path, marker: str, message: str) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"{marker}\n```python\npass\n```\n")
    with pytest.raises(ValueError, match=message):
        page_snippets(page)
