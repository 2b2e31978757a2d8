"""The compile cache: where PyTorch's compiled artifacts persist, and inductor's settings.

Compiled artifacts persist per machine in `cadence.machine_record.compile_cache_dir`
(PyTorch's FX-graph and AOTAutograd caches, written atomically, so the runs of a sweep can
share them): a second run of a config loads its graphs instead of compiling them.
`configure_inductor` points the caches there and sets the inductor options every cadence
graph compiles with; `graph_options` gives the per-device ones.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from cadence.accel import torch_private as tp
from cadence.machine_record import compile_cache_dir, machine

INDUCTOR = tp.INDUCTOR_CONFIG


def configure_inductor() -> Path:
    """Points PyTorch's compile caches at `compile_cache_dir` (unless the user set
    ``TORCHINDUCTOR_CACHE_DIR``) and turns them on, makes compiled random ops draw
    eager's numbers (``fallback_random``: a compiled SAC samples the actions an eager one
    would) and CPU kernels compute tanh from one exp; returns the cache folder in use."""
    # PyTorch writes its default into the variable once it has looked for one.
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR") in (None, tp.default_inductor_cache_dir()):
        directory = compile_cache_dir()
        directory.mkdir(parents=True, exist_ok=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(directory)
    # cpp__use_decompose_tanh: CPU kernels take tanh as 2 / (1 + exp(-2x)) - 1: within 2e-7
    # of torch.tanh (eager is within 6e-8), and a 64x64 tanh network's compiled PPO loop
    # runs 13% faster. size_asserts: a compiled call checks every input's sizes and strides
    # against the graph's (`assert_size_stride`, about 0.3 us each: 20 us of a 64-input
    # update). Dynamo's guards check the same, and `CompiledWithFallback` skips those only
    # for inputs of a signature already seen (contiguity included), so the checks would
    # repeat them.
    tp.configure(
        INDUCTOR,
        fx_graph_cache=True,
        fallback_random=True,
        cpp__use_decompose_tanh=True,
        size_asserts=False,
    )
    tp.configure(tp.FUNCTORCH_CONFIG, enable_autograd_cache=True)
    directory = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    with contextlib.suppress(Exception):  # only a shortcut: inductor checks by itself
        if check_vec_isa(directory):
            tp.configure(INDUCTOR, cpp__vec_isa_ok=True)
    return directory


def check_vec_isa(directory: Path) -> bool:
    """Whether this machine's SIMD instruction sets pass inductor's check, remembered.

    Inductor otherwise checks them in every process (a test program built and loaded in
    a child process per instruction set: about a second of every warm start). The first
    check on a machine runs it and records a pass in ``directory``, keyed by the CPU's
    flags, the torch version and the compiler (a folder shared by different machines
    keeps one record per machine). Telling inductor so (``cpp.vec_isa_ok``) also enters
    its cache keys, so every run, the first included, must tell it alike.
    """
    marker = _vec_isa_marker(directory)
    if marker.exists():
        return True
    if tp.config_value(INDUCTOR, "cpp__vec_isa_ok") is not None:
        return False
    isa_list = tp.valid_vec_isa_list()
    if not (isa_list and all(isa_list)):
        return False
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    return True


def _vec_isa_marker(directory: Path) -> Path:
    key = "|".join((torch.__version__, machine(), str(tp.config_value(INDUCTOR, "cpp__cxx"))))
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return directory / "cadence" / f"vec-isa-ok-{digest}"


def cpp_compiler_available() -> bool:
    """Whether inductor's CPU back end finds a C++ compiler."""
    candidates = tp.config_value(INDUCTOR, "cpp__cxx")
    names = [c for c in (candidates if isinstance(candidates, tuple) else (candidates,)) if c]
    return any(shutil.which(name) for name in [*names, "g++", "clang++"])


def graph_options(device: torch.device) -> dict[str, Any] | None:
    """Inductor's options for cadence's graphs (updates, unrolls, acting steps) on
    ``device``: on the CPU their kernels are called from C++ (``cpp_wrapper``) rather than
    from a Python wrapper. Measured on one thread: a CartPole unroll of 32 steps x 8 envs
    took 1.2 ms from Python, 0.84 ms from C++; a PPO acting step 36 us, 31 us; the compiled
    PPO CartPole loop ran 2.73 s instead of 2.90 and warmed up in 1.0 s instead of 1.15 (the
    saved graphs load faster), and the model-based graphs compile faster.

    On a GPU with torch before 2.13, inductor's loop reordering after fusion is off: there
    it asserts on a fused node of SAC's and TD3's updates (``reorder_loops_by_dep_pair``),
    which then ran eagerly; torch 2.13 returns at that point instead."""
    if device.type == "cpu":
        return {"cpp_wrapper": True}
    if torch.__version__ < (2, 13):
        return {"loop_ordering_after_fusion": False}
    return None
