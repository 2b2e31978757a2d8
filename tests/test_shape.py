"""Sizes a reader can take in: no module of cadence over `MAX_MODULE_LINES` lines, no
function over `MAX_FUNCTION_LINES` lines of code, and no native source in the package.

A function's lines of code are the lines its body spans, its docstring, blank lines and
comment lines excluded; a nested function's lines count in the function that holds it
too (the reader reads them there). Split what grows past either bound by concept (one
module per concept, named in its first docstring line; a function as named steps).
"""

from __future__ import annotations

import ast
from pathlib import Path

import cadence

PACKAGE_DIR = Path(cadence.__file__).parent
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60
NATIVE_SUFFIXES = (".c", ".cc", ".cpp", ".cu", ".h", ".hpp")


def code_lines(function: ast.FunctionDef | ast.AsyncFunctionDef, source: list[str]) -> int:
    """The lines of code of ``function``'s body (see the module docstring)."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            body = body[1:]
    if not body:
        return 0
    first, last = body[0].lineno, max(node.end_lineno or node.lineno for node in body)
    docstrings = {
        line
        for node in ast.walk(function)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and node is not function
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
        and isinstance(node.body[0].value.value, str)
        for line in range(node.body[0].lineno, (node.body[0].end_lineno or 0) + 1)
    }
    return sum(
        1
        for line in range(first, last + 1)
        if line not in docstrings
        and source[line - 1].strip()
        and not source[line - 1].strip().startswith("#")
    )


def long_functions(path: Path) -> list[str]:
    """``file:line name (N lines)`` of each function in ``path`` over the bound."""
    text = path.read_text()
    source = text.splitlines()
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = code_lines(node, source)
            if lines > MAX_FUNCTION_LINES:
                where = path.relative_to(PACKAGE_DIR.parent)
                found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_module_is_over_the_bound():
    long = {
        str(path.relative_to(PACKAGE_DIR.parent)): n
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split by concept): {long}"


def test_no_function_is_over_the_bound():
    long = [found for path in sorted(PACKAGE_DIR.rglob("*.py")) for found in long_functions(path)]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines of code: {long}"


def test_the_package_holds_no_native_source():
    # cadence is Python on PyTorch: its one C++ kernel was removed (docs/compile.md), and a
    # source here would need a compiler on the user's machine.
    native = [
        str(path.relative_to(PACKAGE_DIR.parent))
        for path in PACKAGE_DIR.rglob("*")
        if path.suffix in NATIVE_SUFFIXES
    ]
    assert not native, f"native sources in cadence/: {native}"


def test_the_function_count_skips_docstrings_blanks_and_comments():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    source = f'def f():\n    """A docstring\n    of two lines."""\n\n    # a comment\n{body}\n'
    tree = ast.parse(source)
    assert code_lines(tree.body[0], source.splitlines()) == MAX_FUNCTION_LINES
    longer = ast.parse(source + "    return x0\n")
    assert code_lines(longer.body[0], (source + "    return x0\n").splitlines()) == 61
