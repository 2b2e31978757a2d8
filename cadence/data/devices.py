"""Comparing devices as torch means them: ``torch.device("cuda")`` names the current GPU,
while a tensor's device always carries its index (``cuda:0``), so the two compare unequal
with ``==`` though they are one device."""

from __future__ import annotations

import torch


def same_device(a: torch.device | str, b: torch.device | str) -> bool:
    """Whether ``a`` and ``b`` are one device, an accelerator without an index being the
    current one of its type.

    >>> same_device("cpu", torch.device("cpu")), same_device("cpu", "cuda:0")
    (True, False)
    """
    a, b = torch.device(a), torch.device(b)
    if a.type != b.type:
        return False
    if a.index == b.index or a.type == "cpu":
        return True
    return _indexed(a) == _indexed(b)


def _indexed(device: torch.device) -> int:
    if device.index is not None:
        return device.index
    return torch.get_device_module(device.type).current_device()
