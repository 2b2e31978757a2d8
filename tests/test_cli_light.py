"""The quick commands stay quick: ``cadence list``, ``cadence --version``, ``--help`` and
``cadence train NAME --help`` import neither torch, TensorBoard, Gymnasium nor matplotlib
(nor, for ``list``, ``--version`` and ``--help``, Hydra or any algorithm module), whether
run as the console script, as ``python -m cadence`` or through `cadence.cli.main`; and
``python -m cadence`` is the ``cadence`` command.

Each check runs in a fresh interpreter, as ``sys.modules`` of this one holds torch already.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

# Never imported by the quick commands; torch alone costs seconds. matplotlib is imported
# by `cadence plot` alone.
HEAVY = ("torch", "tensorboard", "gymnasium", "matplotlib")
# Not even needed to list the configs or print the version.
NOT_FOR_LIST = (*HEAVY, "hydra", "omegaconf", "cadence.algorithms")

QUICK_COMMANDS = [
    pytest.param(["list"], NOT_FOR_LIST, id="list"),
    pytest.param(["--version"], NOT_FOR_LIST, id="version"),
    pytest.param(["--help"], NOT_FOR_LIST, id="help"),
    pytest.param(["plot", "--help"], NOT_FOR_LIST, id="plot-help"),
    pytest.param(["train", "ppo_cartpole", "--help"], HEAVY, id="train-help"),
]

# Reports the top-level modules of `forbidden` that the command imported (as a package
# prefix: "cadence.algorithms" covers its submodules).
_REPORT = """
import sys
forbidden = {forbidden!r}
loaded = sorted(
    name for name in sys.modules
    if any(name == f or name.startswith(f + ".") for f in forbidden)
)
print("LOADED", loaded, file=sys.stderr)
sys.exit(code if not loaded else 99)
"""

_VIA_MAIN = """
from cadence.cli import main
code = main({argv!r})
"""

_VIA_DASH_M = """
import runpy, sys
sys.argv = ["cadence", *{argv!r}]
try:
    runpy.run_module("cadence", run_name="__main__", alter_sys=True)
except SystemExit as stop:
    code = stop.code
else:
    raise AssertionError("python -m cadence returned without sys.exit")
"""


def _python(code: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *(["-c", code] if code else []), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def _console_script() -> Path:
    """The installed ``cadence`` script beside this interpreter (not a shim that picks one)."""
    script = Path(sysconfig.get_path("scripts")) / "cadence"
    if not script.is_file():
        pytest.skip(f"no installed cadence script at {script}")
    return script


@pytest.mark.parametrize("runner", [_VIA_MAIN, _VIA_DASH_M], ids=["main", "python-m"])
@pytest.mark.parametrize(("argv", "forbidden"), QUICK_COMMANDS)
def test_quick_commands_import_no_heavy_module(argv, forbidden, runner):
    result = _python(runner.format(argv=argv) + _REPORT.format(forbidden=forbidden))
    loaded = result.stderr.rpartition("LOADED ")[2].strip()
    assert result.returncode == 0, f"imported {loaded}\n{result.stderr}"
    assert result.stdout.strip(), "the command printed nothing"


def test_importing_the_packages_imports_no_heavy_module():
    # Every package __init__ on a quick command's path names its exports lazily.
    packages = [
        "cadence",
        "cadence.collect",
        "cadence.config",
        "cadence.data",
        "cadence.envs",
        "cadence.networks",
        "cadence.replay",
        "cadence.testing",
        "cadence.trainer",
        "cadence.transforms",
        "cadence.transforms.config",  # checks transformer names and order without classes
    ]
    code = f"import {', '.join(packages)}\ncode = 0\n" + _REPORT.format(forbidden=HEAVY)
    result = _python(code)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "argv", [["list"], ["--version"], ["train", "ppo_cartpole", "--help"], ["train"], []]
)
def test_python_dash_m_cadence_is_the_console_script(argv, tmp_path):
    script = _result([str(_console_script()), *argv], tmp_path)
    module = _result([sys.executable, "-m", "cadence", *argv], tmp_path)
    assert (module.returncode, module.stdout, module.stderr) == (
        script.returncode,
        script.stdout,
        script.stderr,
    )
    assert module.stdout or module.stderr


def _result(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=cwd)


def test_python_dash_m_cadence_lists_every_named_config():
    from cadence.config import list_configs

    result = _python("", "-m", "cadence", "list")
    assert result.returncode == 0, result.stderr
    assert [line.split()[0] for line in result.stdout.splitlines()] == list(list_configs())


def test_top_level_train_is_the_trainers():
    import cadence
    import cadence.trainer.run

    assert cadence.train is cadence.trainer.run.train
