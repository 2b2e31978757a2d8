"""Shared by all tests."""

from __future__ import annotations

import os

import pytest

from cadence.networks import matmul


@pytest.fixture(autouse=True)
def restore_backend():
    """Each test leaves the process's matmul backend (and what children inherit) as it
    found it: a training run sets the backend for its whole process, and a later test must
    not multiply on whatever an earlier run's `auto` picked."""
    backend, inherited = matmul._backend, os.environ.get(matmul.ENV_VAR)
    yield
    matmul._backend = backend
    if inherited is None:
        os.environ.pop(matmul.ENV_VAR, None)
    else:
        os.environ[matmul.ENV_VAR] = inherited
