"""The local rank group (`cadence.trainer.launch`) and the run it trains import one way only.

`cadence.trainer.run.train` starts the group; each rank process (`cadence.cli.rank`) trains
with `train`. The keeper must therefore not import the run, and no trainer module may
import the layers above it (DESIGN §1), not even inside a function.
"""

import ast
from pathlib import Path

import cadence

TRAINER = Path(cadence.__file__).parent / "trainer"
ABOVE_THE_TRAINER = ("cadence.cli", "cadence.launch", "cadence.sweep", "cadence.plot")


def _imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function."""
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    return modules


def _starts_with(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_no_trainer_module_imports_a_layer_above_it():
    upward = {
        f"{path.name} imports {module}"
        for path in sorted(TRAINER.glob("*.py"))
        for module in _imported_modules(path)
        if any(_starts_with(module, above) for above in ABOVE_THE_TRAINER)
    }
    assert upward == set()


def test_the_rank_group_keeper_does_not_import_the_run_it_trains():
    imported = _imported_modules(TRAINER / "launch.py")
    assert not any(_starts_with(module, "cadence.trainer.run") for module in imported)
    assert not any(_starts_with(module, "cadence.config") for module in imported)
