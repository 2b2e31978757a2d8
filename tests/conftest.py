"""Shared by all tests."""

from __future__ import annotations

import os

import pytest
import torch

from cadence.algorithms import compiled
from cadence.networks import matmul
from cadence.trainer.run import torch_settings_restored


@pytest.fixture(autouse=True)
def restore_process_settings():
    """Each test leaves the process's matmul backend (and what children inherit), torch's
    thread count and its deterministic switch as it found them. The whole session
    multiplies on what `auto` picks for this machine; a test that trains with another
    backend (which sets it for the process) or mocks `auto`'s measurement must not hand
    that to the tests after it. A run's numbers depend on the backend and the thread
    count: a learning test once ran at the thread count an earlier test's config set
    (``trainer.num_threads: 1``) and missed its bar."""
    backend = matmul.cpu_matmul()  # the first test decides, as a user's first network does
    inherited = os.environ.get(matmul.ENV_VAR)
    with torch_settings_restored():  # what `train` restores after a run, too
        yield
    matmul._backend = backend
    if inherited is None:
        os.environ.pop(matmul.ENV_VAR, None)
    else:
        os.environ[matmul.ENV_VAR] = inherited


@pytest.fixture(autouse=True)
def own_compile_auto_record(monkeypatch, tmp_path):
    """Each test starts with no ``compile: auto`` choice recorded for the machine: a test
    that times both ways must time them whatever an earlier test (or session) chose, and
    one test's choice must not decide how another's first calls run."""
    monkeypatch.setattr(compiled, "AUTO_RECORD", tmp_path / "compile_auto.json")


@pytest.fixture
def unmeasured_machine(monkeypatch, tmp_path):
    """A process on a machine where `auto` has not yet chosen a matmul backend: no choice
    in the process, none inherited, none in the machine's record (a fresh compile cache)."""
    monkeypatch.setattr(matmul, "_backend", None)
    monkeypatch.delenv(matmul.ENV_VAR, raising=False)
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
