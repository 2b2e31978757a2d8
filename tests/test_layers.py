"""The layer order of DESIGN §1, enforced: no module of cadence imports a layer above its own.

Every module under ``cadence/`` is parsed (never imported) and each of its imports of
another part of cadence is checked against the table `LAYERS`:

    data (+ typed config fields)  ->  envs, networks, replay, transforms  ->  algorithms, mbrl
        ->  collect (unroll, Batcher)  ->  trainer  ->  config  ->  sweep, plot, export, cli

A module may import its own layer and the layers to its left, never one to its right.
The acceleration layer (``cadence.accel``) sits between collect and the trainer: it may
import anything below the trainer, and nothing below the trainer may import it (the
trainer injects it; an eager run never loads it).

What counts as an import: ``import`` and ``from ... import`` statements anywhere in a
module (at the top, inside functions and in ``try`` blocks alike: a function-local import
is a dependency all the same, only a later one), relative imports resolved, and
``importlib.import_module("cadence....")`` with a literal name. What does not: imports
under ``if TYPE_CHECKING:``, which name a type for annotations and are never executed
(they create no load order and no cycle), and the names of a package's lazy exports
(`cadence._lazy`), which always point inside the package itself.

Where the modules outside DESIGN §1's table sit:

- ``cadence/_lazy.py`` (the lazy-export helper every ``__init__`` uses, torch-free and
  importing nothing of cadence) is ground, beside data;
- ``cadence.machine_record`` (a per-machine JSON record of measured choices, and where the
  compile cache folder is; standard library only) is ground: the env back end's ``auto``
  reads it as much as the acceleration layer does;
- ``cadence.testing`` (the environment contract suite, fakes, the learning and resume
  harnesses, which load named configs and train), ``cadence.latent_probe`` (probes a run
  directory's checkpoint) and ``cadence/__main__.py`` are top, with the command line;
- ``cadence/__init__.py`` (``import cadence``: lazy names from every layer) is top too, so
  ``from cadence import X`` in the library is an upward import: import from the
  subpackage.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple

import cadence

PACKAGE_DIR = Path(cadence.__file__).parent
REPO_ROOT = PACKAGE_DIR.parent

GROUND, MODELS, LEARNERS, COLLECT, ACCEL, TRAINER, CONFIG, TOP = 0, 10, 20, 30, 35, 40, 50, 60
LAYER_NAMES = {
    GROUND: "ground (data, typed config fields)",
    MODELS: "envs/networks/replay/transforms",
    LEARNERS: "algorithms/mbrl",
    COLLECT: "collect",
    ACCEL: "accel",
    TRAINER: "trainer",
    CONFIG: "config",
    TOP: "top (sweep/plot/export/cli)",
}

LAYERS = {
    "cadence._lazy": GROUND,
    "cadence.data": GROUND,
    "cadence.envs": MODELS,
    "cadence.networks": MODELS,
    "cadence.replay": MODELS,
    "cadence.transforms": MODELS,
    "cadence.algorithms": LEARNERS,
    "cadence.mbrl": LEARNERS,
    "cadence.collect": COLLECT,
    "cadence.accel": ACCEL,
    "cadence.machine_record": GROUND,
    "cadence.trainer": TRAINER,
    "cadence.config": CONFIG,
    "cadence.sweep": TOP,
    "cadence.plot": TOP,
    "cadence.export": TOP,
    "cadence.cli": TOP,
    "cadence.latent_probe": TOP,
    "cadence.testing": TOP,
    "cadence.__main__": TOP,
    "cadence": TOP,
}
"""The layer of every part of cadence, by module prefix (the longest prefix wins)."""


class Import(NamedTuple):
    """One import of a cadence module by another, where it is written."""

    importer: str
    imported: str
    path: Path
    line: int


def module_name(path: Path) -> str:
    """``cadence/trainer/run.py`` -> ``cadence.trainer.run``; a package's ``__init__.py``
    is the package."""
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> tuple[str, int]:
    """The prefix of `LAYERS` that ``module`` falls under, and its layer."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in LAYERS:
            return prefix, LAYERS[prefix]
    raise KeyError(module)


def _is_type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The absolute module an ``ImportFrom`` names (relative levels resolved)."""
    if not node.level:
        return node.module or ""
    package = importer.split(".")
    base = package if is_package else package[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _is_module(name: str) -> bool:
    relative = Path(*name.split("."))
    return (REPO_ROOT / relative).with_suffix(".py").is_file() or (
        REPO_ROOT / relative / "__init__.py"
    ).is_file()


def _targets(node: ast.AST, importer: str, is_package: bool) -> list[str]:
    """The cadence modules an import node imports (empty for other nodes)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        module = _resolve(node, importer, is_package)
        # `from cadence.trainer import run` imports the module cadence.trainer.run
        submodules = [f"{module}.{a.name}" for a in node.names if _is_module(f"{module}.{a.name}")]
        return submodules or [module]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "import_module"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return [node.args[0].value]
    return []


def _walk(node: ast.AST):
    """Every node under ``node``, skipping the bodies of ``if TYPE_CHECKING:`` blocks."""
    for child in ast.iter_child_nodes(node):
        if _is_type_checking(child):
            for other in child.orelse:
                yield other
                yield from _walk(other)
            continue
        yield child
        yield from _walk(child)


def cadence_imports(path: Path) -> list[Import]:
    """Every import of a cadence module that the module at ``path`` executes."""
    return imports_in(path.read_text(), module_name(path), path)


def imports_in(source: str, importer: str, path: Path) -> list[Import]:
    """Every import of a cadence module that ``source``, the module ``importer`` at
    ``path``, executes."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(source, filename=str(path))
    found = []
    for node in _walk(tree):
        for target in _targets(node, importer, is_package):
            if target == "cadence" or target.startswith("cadence."):
                found.append(Import(importer, target, path, node.lineno))
    return found


def all_imports() -> list[Import]:
    return [found for path in sorted(PACKAGE_DIR.rglob("*.py")) for found in cadence_imports(path)]


def upward(found: Import) -> str | None:
    """The rule ``found`` breaks, or None when it points down or sideways."""
    importer_part, importer_layer = layer_of(found.importer)
    imported_part, imported_layer = layer_of(found.imported)
    if importer_part == imported_part or imported_layer <= importer_layer:
        return None
    if imported_layer == ACCEL:
        rule = "nothing below the trainer may import the acceleration layer"
    else:
        rule = "imports point one way (DESIGN §1): a layer may not import a layer above it"
    return (
        f"{importer_part} ({LAYER_NAMES[importer_layer]}) imports {imported_part} "
        f"({LAYER_NAMES[imported_layer]}): {rule}"
    )


def violations(found_imports: list[Import] | None = None) -> list[tuple[Import, str]]:
    found_imports = all_imports() if found_imports is None else found_imports
    return [(found, rule) for found in found_imports if (rule := upward(found)) is not None]


def _report(items: list[tuple[Import, str]]) -> str:
    return "\n".join(
        f"{found.path.relative_to(REPO_ROOT)}:{found.line}: {found.importer} imports "
        f"{found.imported}; {rule}"
        for found, rule in items
    )


def test_every_module_of_cadence_has_a_layer():
    unplaced = [
        module_name(path)
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        if not _has_layer(module_name(path))
    ]
    assert not unplaced, f"add these to LAYERS (DESIGN §1): {unplaced}"


def _has_layer(module: str) -> bool:
    # Every module falls under the root `cadence`; a new top-level module or package of
    # cadence must be placed explicitly, not by that fallback.
    top_level = ".".join(module.split(".")[:2])
    return top_level in LAYERS


def test_no_module_imports_a_layer_above_its_own():
    found = violations()
    assert not found, "upward imports:\n" + _report(found)


def test_the_check_sees_local_relative_and_by_name_imports_and_skips_type_checking():
    source = """
from typing import TYPE_CHECKING
from cadence.data.nest import flatten
from . import environment
if TYPE_CHECKING:
    from cadence.trainer.trainer import Trainer
def build():
    from cadence.trainer import run
    import cadence.algorithms.compiled
    importlib.import_module("cadence.config")
from cadence import Trainer
"""
    found = imports_in(source, "cadence.envs.make", PACKAGE_DIR / "envs" / "make.py")
    assert [(f.imported, f.line) for f in found] == [
        ("cadence.data.nest", 3),
        ("cadence.envs.environment", 4),
        ("cadence.trainer.run", 8),
        ("cadence.algorithms.compiled", 9),
        ("cadence.config", 10),
        ("cadence", 11),
    ]
    report = _report(violations(found))
    assert "envs/make.py:8: cadence.envs.make imports cadence.trainer.run;" in report
    assert "a layer may not import a layer above it" in report
    assert [f.line for f, _ in violations(found)] == [8, 9, 10, 11]


def test_nothing_below_the_trainer_may_import_the_acceleration_layer():
    accel = Import("cadence.collect.unroll", "cadence.accel.compiled", PACKAGE_DIR, 1)
    assert "nothing below the trainer may import the acceleration layer" in str(upward(accel))
    assert (
        upward(Import("cadence.accel.compiled", "cadence.collect.unroll", PACKAGE_DIR, 1)) is None
    )
    assert upward(Import("cadence.trainer.run", "cadence.accel.compiled", PACKAGE_DIR, 1)) is None
    assert upward(Import("cadence.accel.compiled", "cadence.trainer.run", PACKAGE_DIR, 1))
