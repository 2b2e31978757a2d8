"""`JointAdamStep`: several fused Adam optimizers stepped as one.

SAC keeps three optimizers (actor, critics, temperature) so that each has its own step
size and checkpoint entry. On a CPU each ``Optimizer.step`` spends 0.1-0.3 ms on Python
bookkeeping (profiler scope, hooks, grouping tensors by device) around a ~60 us kernel,
and ``zero_grad`` as much again: together ~0.6 ms of a ~10 ms SAC update. Stepped
jointly, all parameters that share hyperparameters go through one fused Adam kernel
call (`cadence.accel.torch_private.fused_adam_`): the kernel ``torch.optim.Adam(fused=True)`` itself calls, on the same per-parameter
state tensors, which stay in each optimizer's ``state``; so the result is bit for bit the
optimizers' own step, and checkpoints and ``load_state_dict`` are untouched.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import torch

from cadence.accel.torch_private import (
    foreach_add_,
    fused_adam_,
    fused_adam_available,
    optimizer_hooks_registered,
)

_STATE_KEYS = ("exp_avg", "exp_avg_sq", "step")


class JointAdamStep:
    """Steps ``torch.optim.Adam(fused=True)`` optimizers with one kernel call per setting.

    Falls back to each optimizer's own ``step`` whenever the joint step would not be
    exactly that: before a parameter has state (the first step creates it), for options the
    joint step does not cover (not fused, capturable, differentiable, a tensor step size,
    AdamW), where torch has no such kernel, and while step hooks are registered or ``step`` is patched (an LR scheduler).

    Args:
        optimizers: the optimizers, stepped in this order by the fallback.

    >>> params = [torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))]
    >>> joint = JointAdamStep([torch.optim.Adam([p], lr=0.1, fused=True) for p in params])
    >>> for _ in range(2):
    ...     joint.zero_grad()
    ...     sum(p.sum() for p in params).backward()
    ...     joint.step()
    >>> [round(float(p[0]), 4) for p in params]
    [0.8, 0.8]
    """

    def __init__(self, optimizers: Sequence[torch.optim.Optimizer]):
        self.optimizers = list(optimizers)
        self._params = [p for opt in self.optimizers for g in opt.param_groups for p in g["params"]]
        # The groups of the last step and what they were built from (see `_fingerprint`).
        self._cached: tuple[Hashable, dict[tuple[Any, ...], list[list[torch.Tensor]]]] | None = None
        self._step_bases: dict[tuple[Any, ...], torch.Tensor] = {}

    def zero_grad(self) -> None:
        """Drops every gradient (``set_to_none``), in one loop over the parameters."""
        for param in self._params:
            param.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One Adam step of every optimizer (joint when possible, else each its own)."""
        groups = self._joint_groups()
        if groups is None:
            for optimizer in self.optimizers:
                optimizer.step()
            return
        for key, tensors in groups.items():
            lr, beta1, beta2, weight_decay, eps, amsgrad, maximize = key[:7]  # then device, dtype
            params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps = tensors
            base = steps[0]._base
            if base is not None and base is self._step_bases.get(key):
                base.add_(1)  # every step of the group at once, see `_share_steps`
            else:
                foreach_add_(steps, 1)
            fused_adam_(
                params,
                grads,
                exp_avgs,
                exp_avg_sqs,
                max_exp_avg_sqs,
                steps,
                lr=lr,
                beta1=beta1,
                beta2=beta2,
                weight_decay=weight_decay,
                eps=eps,
                amsgrad=amsgrad,
                maximize=maximize,
                grad_scale=None,
                found_inf=None,
            )

    def _joint_groups(self) -> dict[tuple[Any, ...], list[list[torch.Tensor]]] | None:
        """The tensors of each (settings, device, dtype) group, or None to fall back.

        Rebuilding the groups walks every parameter's state in Python (~0.15 ms for SAC), so
        the groups of the last step are reused while `_fingerprint` is unchanged; only the
        gradients, new tensors after every backward, are read again.
        """
        if optimizer_hooks_registered() or not fused_adam_available():
            return None
        fingerprint = self._fingerprint()
        if fingerprint is None:
            return None
        if self._cached is not None and self._cached[0] == fingerprint:
            groups = self._cached[1]
            for params, grads, *_ in groups.values():
                grads[:] = [param.grad for param in params]
                if any(grad is None or grad.is_sparse for grad in grads):
                    break
            else:
                return groups
        self._step_bases = {}  # a group rebuilt may leave out a view of a shared base
        groups = self._build_groups()
        # Groups that left out a parameter without a gradient must not serve a later step.
        joined = sum(len(tensors[0]) for tensors in groups.values()) if groups else 0
        total = sum(len(g["params"]) for opt in self.optimizers for g in opt.param_groups)
        self._cached = (fingerprint, groups) if groups is not None and joined == total else None
        if self._cached is not None:
            self._share_steps(groups)
        return groups

    def _share_steps(self, groups: dict[tuple[Any, ...], list[list[torch.Tensor]]]) -> None:
        """Makes each group's per-parameter step counters views of one tensor.

        Why: ``_foreach_add_`` over SAC's 15 scalar CPU step tensors takes ~90 us (one
        dispatched add and scalar copy each); one ``add_`` on their common base takes ~5.
        Each optimizer's ``state[param]["step"]`` becomes a 0-dim view holding the same
        value, so the optimizers' own steps, ``state_dict`` and ``load_state_dict`` work
        unchanged (a loaded state gets new tensors, a new fingerprint and new views).
        """
        self._step_bases = {}
        for key, tensors in groups.items():
            steps = tensors[5]
            if any(step.dim() != 0 or step.device.type != "cpu" for step in steps):
                continue
            base = torch.stack(steps)
            views = list(base.unbind())
            for optimizer in self.optimizers:
                for param_state in optimizer.state.values():
                    step = param_state.get("step")
                    for index, old in enumerate(steps):
                        if step is old:
                            param_state["step"] = views[index]
            tensors[5] = views
            self._step_bases[key] = base

    def _fingerprint(self) -> Hashable | None:
        """What the groups depend on besides the gradients, or None if one cannot join.

        ``load_state_dict`` gives an optimizer new ``state`` and ``param_groups`` objects
        (so new ids); a first step fills ``state`` (its length); a changed step size or
        beta shows in the settings. The state tensors themselves are assumed to change only
        that way, as ``torch.optim`` does.
        """
        parts: list[Any] = []
        for optimizer in self.optimizers:
            if not _joinable(optimizer):
                return None
            parts += (id(optimizer.state), len(optimizer.state), id(optimizer.param_groups))
            for group in optimizer.param_groups:
                settings = _settings(group)
                if settings is None:
                    return None
                parts += (settings, len(group["params"]))
        return tuple(parts)

    def _build_groups(self) -> dict[tuple[Any, ...], list[list[torch.Tensor]]] | None:
        """`_joint_groups` built from scratch."""
        groups: dict[tuple[Any, ...], list[list[torch.Tensor]]] = {}
        for optimizer in self.optimizers:
            if not _joinable(optimizer):
                return None
            for group in optimizer.param_groups:
                settings = _settings(group)
                if settings is None:
                    return None
                for param in group["params"]:
                    if param.grad is None:
                        continue
                    state = optimizer.state.get(param)
                    needed = _STATE_KEYS + (("max_exp_avg_sq",) if settings[5] else ())
                    if not state or any(key not in state for key in needed):
                        return None
                    if param.grad.is_sparse or param.is_complex():
                        return None
                    key = (*settings, param.device, param.dtype)
                    tensors = groups.setdefault(key, [[], [], [], [], [], []])
                    for values, tensor in zip(tensors, _tensors(param, state, group), strict=True):
                        if tensor is not None:
                            values.append(tensor)
        return groups


def _joinable(optimizer: torch.optim.Optimizer) -> bool:
    return (
        type(optimizer) is torch.optim.Adam
        and "step" not in vars(optimizer)  # patched, e.g. by an LR scheduler's step counter
        and not optimizer._optimizer_step_pre_hooks
        and not optimizer._optimizer_step_post_hooks
        # Set by torch.amp.GradScaler for a scaled step.
        and getattr(optimizer, "grad_scale", None) is None
        and getattr(optimizer, "found_inf", None) is None
    )


def _settings(group: dict[str, Any]) -> tuple[Any, ...] | None:
    """The hyperparameters a fused Adam kernel call takes, or None if it cannot take them."""
    if not group.get("fused") or group.get("capturable") or group.get("differentiable"):
        return None
    if group.get("decoupled_weight_decay") or isinstance(group["lr"], torch.Tensor):
        return None
    beta1, beta2 = (float(beta) for beta in group["betas"])
    return (
        group["lr"],
        beta1,
        beta2,
        group["weight_decay"],
        group["eps"],
        group["amsgrad"],
        group["maximize"],
    )


def _tensors(
    param: torch.Tensor, state: dict[str, Any], group: dict[str, Any]
) -> tuple[torch.Tensor | None, ...]:
    max_exp_avg_sq = state["max_exp_avg_sq"] if group["amsgrad"] else None
    return (param, param.grad, state["exp_avg"], state["exp_avg_sq"], max_exp_avg_sq, state["step"])
