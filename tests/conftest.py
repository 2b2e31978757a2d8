"""Shared by all tests."""

from __future__ import annotations

import os

import pytest
import torch

from cadence.networks import matmul


@pytest.fixture(autouse=True)
def restore_backend():
    """Each test leaves the process's matmul backend (and what children inherit) as it
    found it. The whole session multiplies on what `auto` picks for this machine; a test
    that trains with another backend (which sets it for the process) or mocks `auto`'s
    measurement must not hand that to the tests after it."""
    backend = matmul.cpu_matmul()  # the first test decides, as a user's first network does
    inherited = os.environ.get(matmul.ENV_VAR)
    yield
    matmul._backend = backend
    if inherited is None:
        os.environ.pop(matmul.ENV_VAR, None)
    else:
        os.environ[matmul.ENV_VAR] = inherited


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
