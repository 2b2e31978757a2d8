"""Shared by all tests.

``CADENCE_TEST_NUM_THREADS=N python -m pytest ...`` gives torch ``N`` threads for the
session: this process's (``torch.set_num_threads``, before any test; each test starts from
it, see `restore_process_settings`) and the processes the tests start (``OMP_NUM_THREADS``,
which a fresh torch takes as its count), as a machine with ``N`` cores would. A run a test
trains without setting ``trainer.num_threads`` chooses its threads per role within those
``N``, in this process or in a ``cadence train`` of its own: with ``N=1`` every role runs
on one thread, as ``trainer.num_threads=1`` would. With ``MKL_ENABLE_INSTRUCTIONS=AVX2``
beside it, MKL takes the code path of a processor without AVX-512. The header of pytest's
report names both.

Markers (registered in pyproject.toml):

- ``slow``: learning tests and other long ones, left out of the default suite (``-m slow``);
  ``ci_budget`` marks the slow ones CI runs too (``.ci/run``).
- ``compile``: a test that compiles (``torch.compile``, an update or unroll compiled with
  ``algorithm.compile`` other than ``off``): seconds to a minute each on an empty compile
  cache. The marker only names these tests: as before, the default suite runs those that
  are not ``slow`` and CI's budgeted run the slow ones marked ``ci_budget``. ``-m compile``
  selects exactly the compile tests and ``-m "not compile"`` the rest (a ``-m`` on the
  command line replaces the default ``not slow and not gpu``: combine them, e.g.
  ``-m "compile and not slow and not gpu"``). A test that calls ``torch.compile`` in this
  process, or loads a graph saved whole (which a cold compile cache compiles), without the
  marker gets a warning in the report (`compile_marker_kept`); one that compiles only in a
  process it starts is marked by hand.
"""

from __future__ import annotations

import functools
import os

import pytest
import torch

from cadence.accel import compiled_function, update_compiler
from cadence.config import loading
from cadence.trainer.run import torch_settings_restored

TEST_THREADS_VAR = "CADENCE_TEST_NUM_THREADS"


def pytest_configure(config):
    threads = os.environ.get(TEST_THREADS_VAR)
    if not threads:
        return
    if not threads.isdigit() or int(threads) < 1:
        raise pytest.UsageError(f"{TEST_THREADS_VAR} must be a whole number >= 1, got {threads!r}")
    os.environ["OMP_NUM_THREADS"] = threads  # for the processes the tests start
    torch.set_num_threads(int(threads))


def pytest_report_header(config):
    forced = os.environ.get(TEST_THREADS_VAR)
    mkl = os.environ.get("MKL_ENABLE_INSTRUCTIONS")
    return (
        f"torch threads: {torch.get_num_threads()}"
        + (f" ({TEST_THREADS_VAR}={forced})" if forced else " (torch's default)")
        + f", CPU capability: {torch.backends.cpu.get_cpu_capability()}"
        + (f", MKL_ENABLE_INSTRUCTIONS={mkl}" if mkl else "")
    )


@pytest.fixture(autouse=True)
def restore_process_settings():
    """Each test leaves torch's thread count and its deterministic switch as it found them.
    A run's numbers depend on the thread count: a learning test once ran at the thread count
    an earlier test's config set (``trainer.num_threads: 1``) and missed its bar."""
    with torch_settings_restored():  # what `train` restores after a run, too
        yield


@pytest.fixture(autouse=True)
def eager_named_configs(monkeypatch):
    """Named configs that compile by default (``algorithm.compile: auto``, e.g.
    ``sac_pendulum``) train eager in tests that do not name a mode themselves: from each
    test's empty ``compile: auto`` record the first updates would compile, seconds to a
    minute a test, and only the tests of compilation (which name their mode) need it."""
    compose_tree = loading.compose_tree

    def eager(name, overrides=()):
        tree = compose_tree(name, overrides)
        named = any(o.split("=")[0].lstrip("+~") in ("algorithm", "algorithm.compile") for o in overrides)  # fmt: skip
        algorithm = tree.get("algorithm")
        if not named and isinstance(algorithm, dict) and algorithm.get("compile") == "auto":
            algorithm["compile"] = "off"
        return tree

    monkeypatch.setattr(loading, "compose_tree", eager)


@pytest.fixture(autouse=True)
def own_compile_auto_record(monkeypatch, tmp_path):
    """Each test starts with no ``compile: auto`` choice recorded for the machine: a test
    that times both ways must time them whatever an earlier test (or session) chose, and
    one test's choice must not decide how another's first calls run."""
    monkeypatch.setattr(update_compiler, "AUTO_RECORD", tmp_path / "compile_auto.json")


@pytest.fixture(autouse=True)
def compile_marker_kept(request, monkeypatch):
    """Fails a test that compiles without the ``compile`` marker, so that ``-m compile``
    and ``-m "not compile"`` keep splitting the suite where it costs (see the module
    docstring): where it calls ``torch.compile`` (directly or through cadence) or loads a
    graph saved whole, which a cold compile cache would have compiled."""
    calls = []

    def counted(real):
        @functools.wraps(real)
        def call(*args, **kwargs):
            calls.append(True)
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(torch, "compile", counted(torch.compile))
    load = compiled_function.load_or_compile
    monkeypatch.setattr(compiled_function, "load_or_compile", counted(load))
    yield
    if calls and request.node.get_closest_marker("compile") is None:
        pytest.fail(
            f"{request.node.nodeid} compiles (or loads a compiled graph) but is not marked "
            "compile: add @pytest.mark.compile (or pytestmark = pytest.mark.compile for its module)"
        )


@pytest.fixture
def unmeasured_machine(monkeypatch, tmp_path):
    """A process on a machine where `auto` has measured nothing yet: a fresh compile cache,
    which holds the machine's records (`cadence.machine_record`)."""
    monkeypatch.setenv("CADENCE_COMPILE_CACHE", str(tmp_path / "fresh-cache"))


@pytest.fixture(
    params=[
        "cpu",
        pytest.param(
            "cuda",
            marks=[
                pytest.mark.gpu,
                pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
            ],
        ),
    ]
)
def cpu_or_gpu(request) -> str:
    """The CPU, then a CUDA GPU: a `gpu` test, run with ``-m gpu`` and skipped without one."""
    return request.param
