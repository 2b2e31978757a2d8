"""`GraphOptimizer`: Adam's or RMSprop's step as a compiled graph takes it, and gradient clipping.

Inside a graph the optimizer's bookkeeping would be guarded on (every learning rate, every
state tensor), so `GraphOptimizer` holds what the step reads, fixed, and does PyTorch's
arithmetic in place on the optimizer's own state tensors: checkpoints of compiled and eager
runs load into each other. `clip_grads` and `total_norm` are ``clip_grad_norm_``'s
arithmetic on a list of gradients, as a graph takes them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from cadence.accel import torch_private as tp
from cadence.algorithms.compile_config import MAX_UPDATES_PER_GRAPH


class GraphOptimizer:
    """One optimizer's step as the graph takes it: everything read outside the graph.

    Inside a graph, reading ``optimizer.param_groups`` would guard on every value in it,
    the learning rate included, and so recompile at every change of a schedule. This
    holds instead what the step reads, fixed: the parameters, their state tensors
    (created here as the optimizer's first step would, then gathered into one flat tensor
    per group and name, `flat`, of which the optimizer's own become views), each group's
    constants, and a 0-d tensor per group that `refresh` sets to its current learning
    rate.

    `step` is the arithmetic of PyTorch's Adam (L2 weight decay, bias corrections,
    ``eps`` outside the square root) or RMSprop (no momentum, no centring), in place.

    Adam's bias corrections depend on each parameter's step count only. Where the counts
    live on the CPU (torch's default, and a fused optimizer's on CPU parameters),
    `refresh` computes them before the call, in double precision as torch's Adam does,
    into two small tensors per group that the graph reads, a row per step the call takes
    (a call of several updates, `Algorithm.update_rows_many`, steps row ``update_index``).
    Computed inside the graph instead, they are scalar ``pow``s that inductor folds into
    every vector iteration of every parameter's loop: a compiled step of a 64x64 PPO's 9k
    parameters took 70 us that way, and of SAC's 200k parameters 460 us, against 15 and
    50 us for the arithmetic itself. Counts on an accelerator stay in the graph (reading
    them would wait for the device). The rows of a call of several steps assume that each
    one applies (`Algorithm.fuses_updates` leaves out skipping non-finite updates).

    Args:
        optimizer: a ``torch.optim.Adam`` or ``RMSprop``.
        host_corrections: compute Adam's bias corrections before each call (None: where
            the step counts are on the CPU).
        counts_on_device: keep the step counts on the parameters' device (moved there if
            on the CPU), as a CUDA graph, which runs no host work, must.

    Raises:
        NotImplementedError: another optimizer, or an option `step` does not have.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        host_corrections: bool | None = None,
        counts_on_device: bool = False,
    ):
        _check_optimizer(optimizer)
        self.optimizer = optimizer
        self.rmsprop = isinstance(optimizer, torch.optim.RMSprop)
        self.names = ("square_avg",) if self.rmsprop else ("exp_avg", "exp_avg_sq")
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        sizes = [len(group["params"]) for group in optimizer.param_groups]
        starts = [sum(sizes[:index]) for index in range(len(sizes))]
        self.members = [
            list(range(start, start + size)) for start, size in zip(starts, sizes, strict=True)
        ]
        """Each group's indices into `params`."""
        self.learning_rates = [
            torch.zeros((), device=group["params"][0].device) for group in optimizer.param_groups
        ]
        for group in optimizer.param_groups:
            on_device = counts_on_device or group.get("fused") or group.get("capturable")
            for param in group["params"]:
                state = optimizer.state[param]
                if not state:  # as the first step would make it
                    device = param.device if on_device else None
                    state["step"] = torch.zeros((), dtype=torch.float32, device=device)
                    for name in self.names:
                        state[name] = torch.zeros_like(param, memory_format=torch.preserve_format)
                elif on_device:
                    state["step"] = state["step"].to(param.device)
        self.states = [optimizer.state[p] for p in self.params]
        self.shapes = [{name: tuple(t.shape) for name, t in state.items()} for state in self.states]
        """Each parameter's state shapes, by name (read in the graph as plain numbers)."""
        self.flat = [_flatten_states([self.states[i] for i in members]) for members in self.members]
        """Per group, its states as one flat tensor per name (``step`` and the moments), of
        which the optimizer's own tensors are views; None for a group whose tensors of a
        name differ in dtype or device. The graph reads and writes these: each input a
        compiled call takes costs its Python wrapper about 0.35 us, and a 64x64 PPO's
        update read 36 state tensors (now 3)."""
        self.constants = [
            _group_constants(group, optimizer.state[group["params"][0]]["step"].device)
            for group in optimizer.param_groups
        ]
        if host_corrections is None:
            host_corrections = all(state["step"].device.type == "cpu" for state in self.states)
        use_corrections = host_corrections and not self.rmsprop
        self.corrections: list[tuple[torch.Tensor, torch.Tensor] | None] = [
            _zeros_pair(len(members), rate.device) if use_corrections else None
            for members, rate in zip(self.members, self.learning_rates, strict=True)
        ]
        """Per Adam group computed before each call: each parameter's step size (the
        learning rate over its first bias correction) and its second bias correction's
        square root, ``[MAX_UPDATES_PER_GRAPH, num_params]``, row ``k`` for the call's
        ``k``-th step (None: the graph computes them)."""

    def refresh(self, steps: int = 1) -> None:
        """Before each call: each group's learning rate into the tensor the graph reads,
        or, for a group with `corrections`, its parameters' step sizes (which hold the
        rate) and bias corrections for the ``steps`` steps the call takes."""
        if not 1 <= steps <= MAX_UPDATES_PER_GRAPH:
            raise ValueError(
                f"a compiled call takes 1 to {MAX_UPDATES_PER_GRAPH} optimizer steps; got {steps}"
            )
        for group, rate, members, corrections, flat in zip(
            self.optimizer.param_groups,
            self.learning_rates,
            self.members,
            self.corrections,
            self.flat,
            strict=True,
        ):
            lr = float(group["lr"])
            if corrections is None:
                rate.fill_(lr)
            else:  # the graph reads the step sizes, not the rate
                counts = (
                    torch.stack([self.states[i]["step"] for i in members])
                    if flat is None
                    else flat["step"]
                )
                _fill_corrections(corrections, counts.tolist(), lr, *group["betas"], steps)

    def reattach(self) -> None:
        """After ``optimizer.load_state_dict``, which makes new state tensors: their values
        copied into the ones the graph reads, and those put back in the optimizer."""
        for param, kept in zip(self.params, self.states, strict=True):
            loaded = self.optimizer.state[param]
            if loaded is not kept:
                for name, tensor in kept.items():
                    tensor.copy_(loaded[name])
                self.optimizer.state[param] = kept

    def step(
        self,
        grads: Sequence[torch.Tensor | None],
        apply: torch.Tensor | None,
        update_index: int = 0,
    ) -> None:
        """``optimizer.step()`` with ``grads`` (one per parameter; None leaves one alone, as
        an eager optimizer leaves a parameter without ``.grad``); where the 0-d bool
        ``apply`` is False nothing changes (a skipped non-finite update). ``update_index``:
        which of the call's steps this is (the row of `corrections` it reads).

        Each group's parameters step together in foreach ops (`cadence.accel.torch_private`): a dozen traced
        calls per group instead of a dozen per parameter, which is most of what a warm
        start spends tracing an optimizer (compiled, the arithmetic fuses alike)."""
        if len(grads) != len(self.params):
            raise ValueError(f"{len(grads)} gradients for {len(self.params)} parameters")
        for members, constants, lr, corrections, flat in zip(
            self.members,
            self.constants,
            self.learning_rates,
            self.corrections,
            self.flat,
            strict=True,
        ):
            stepped = [k for k, i in enumerate(members) if grads[i] is not None]
            if not stepped:
                continue
            params = [self.params[members[k]] for k in stepped]
            if flat is not None and len(stepped) < len(members):
                # A parameter without a gradient keeps its state: each stepped one's as a
                # view of the flat tensors, taken here, so that the graph reads those.
                views = _views(flat, [self.shapes[i] for i in members])
                flat, states = None, [views[k] for k in stepped]
            else:
                states = [self.states[members[k]] for k in stepped]
            self._step_group(
                params,
                [grads[members[k]] for k in stepped],
                states,
                constants,
                lr,
                apply,
                None if corrections is None else _pick(corrections, update_index, stepped),
                flat,
            )

    def _step_group(
        self,
        params: list[torch.Tensor],
        grads: list[torch.Tensor],
        states: list[dict[str, torch.Tensor]],
        constants: dict[str, torch.Tensor],
        lr: torch.Tensor,
        apply: torch.Tensor | None,
        corrections: list[list[torch.Tensor]] | None,
        flat: dict[str, torch.Tensor] | None = None,
    ) -> None:
        """One group's step. With ``flat`` (every parameter of the group stepped), the
        states' arithmetic runs on the flat tensors, one list entry each, and the moments
        are split into per-parameter views for the parameters' changes."""
        if "weight_decay" in constants:
            grads = tp.foreach_add(grads, tp.foreach_mul(params, constants["weight_decay"]))
        if flat is None:
            state_grads = grads
            old_steps = [state["step"] for state in states]
            olds = {name: [state[name] for state in states] for name in self.names}
        else:
            state_grads = [torch.cat([grad.reshape(-1) for grad in grads])]
            old_steps = [flat["step"]]
            olds = {name: [flat[name]] for name in self.names}

        def per_parameter(values: list[torch.Tensor]) -> list[torch.Tensor]:
            if flat is None:
                return values
            pieces = values[0].split([param.numel() for param in params])
            return [piece.view(param.shape) for piece, param in zip(pieces, params, strict=True)]

        steps = tp.foreach_add(old_steps, 1)
        squares = tp.foreach_mul(state_grads, state_grads)
        if self.rmsprop:
            alpha = constants["alpha"]
            old_square = olds["square_avg"]
            square_avg = tp.foreach_mul(old_square, alpha)
            tp.foreach_add_(square_avg, tp.foreach_mul(squares, 1 - alpha))
            denom = tp.foreach_sqrt(per_parameter(square_avg))
            tp.foreach_add_(denom, [constants["eps"]] * len(denom))
            change = tp.foreach_div(tp.foreach_mul(grads, lr), denom)
            updates = [(old_square, square_avg)]
        else:
            beta1, beta2 = constants["beta1"], constants["beta2"]
            old_avg, old_square = olds["exp_avg"], olds["exp_avg_sq"]
            # lerp's arithmetic: exp_avg + (1 - beta1) * (grad - exp_avg)
            exp_avg = tp.foreach_sub(state_grads, old_avg)
            tp.foreach_mul_(exp_avg, 1 - beta1)
            tp.foreach_add_(exp_avg, old_avg)
            exp_avg_sq = tp.foreach_mul(old_square, beta2)
            tp.foreach_add_(exp_avg_sq, tp.foreach_mul(squares, 1 - beta2))
            if corrections is not None:
                step_sizes, roots = corrections
            else:
                counts = steps if flat is None else list(steps[0].unbind())
                step_sizes, roots = _bias_corrections(counts, constants, lr)
            denom = tp.foreach_div(tp.foreach_sqrt(per_parameter(exp_avg_sq)), roots)
            tp.foreach_add_(denom, [constants["eps"]] * len(denom))
            change = tp.foreach_div(tp.foreach_mul(per_parameter(exp_avg), step_sizes), denom)
            updates = [(old_avg, exp_avg), (old_square, exp_avg_sq)]
        updates += [(old_steps, steps)]

        def write(targets: list[torch.Tensor], values: list[torch.Tensor], each: bool) -> None:
            if apply is not None:
                values = [torch.where(apply, v, t) for v, t in zip(values, targets, strict=True)]
            if not each:
                tp.foreach_copy_(targets, values)
                return
            for target, value in zip(targets, values, strict=True):
                target.copy_(value)

        for targets, values in updates:
            write(targets, values, each=False)
        # One copy per parameter on a GPU: with one foreach copy, inductor (2.11, on an H200)
        # scheduled a fused kernel computing the update's loss terms after it, so the losses
        # an A2C update reported were those of the stepped parameters (its steps themselves
        # were right); copied one by one, they were eager's, though in a graph then broken
        # elsewhere (docs/compile.md).
        write(params, tp.foreach_sub(params, change), each=params[0].is_cuda)


def _bias_corrections(
    counts: list[torch.Tensor], constants: dict[str, torch.Tensor], lr: torch.Tensor
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Adam's step sizes (``lr`` over ``1 - beta1 ** step``) and second bias corrections'
    roots (of ``1 - beta2 ** step``), per parameter's own step count (on its device), as
    the graph computes them where no `GraphOptimizer.corrections` are given."""
    powers1 = tp.foreach_pow([constants["step_beta1"]] * len(counts), counts)
    powers2 = tp.foreach_pow([constants["step_beta2"]] * len(counts), counts)
    bias_correction1 = tp.foreach_neg(powers1)
    bias_correction2 = tp.foreach_neg(powers2)
    tp.foreach_add_(bias_correction1, 1)
    tp.foreach_add_(bias_correction2, 1)
    roots = tp.foreach_sqrt(bias_correction2)
    step_sizes = tp.foreach_div([lr] * len(counts), bias_correction1)
    return step_sizes, roots


def _flatten_states(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor] | None:
    """One flat tensor per state name holding every ``state[name]``, each replaced by its
    view into it; None (nothing replaced) where a name's tensors differ in dtype or
    device (or the states differ in names)."""
    if not states or any(state.keys() != states[0].keys() for state in states):
        return None
    names = list(states[0])
    for name in names:
        if len({(state[name].dtype, state[name].device) for state in states}) != 1:
            return None
    flat = {}
    for name in names:
        tensors = [state[name] for state in states]
        flat[name] = torch.cat([tensor.detach().reshape(-1) for tensor in tensors])
        pieces = flat[name].split([tensor.numel() for tensor in tensors])
        for state, piece, tensor in zip(states, pieces, tensors, strict=True):
            state[name] = piece.view(tensor.shape)
    return flat


def _views(
    flat: dict[str, torch.Tensor], shapes: list[dict[str, tuple[int, ...]]]
) -> list[dict[str, torch.Tensor]]:
    """A group's per-parameter states (of these shapes) as views of its flat tensors."""
    states: list[dict[str, torch.Tensor]] = [{} for _ in shapes]
    for name, tensor in flat.items():
        sizes = [math.prod(shape[name]) for shape in shapes]
        for state, piece, shape in zip(states, tensor.split(sizes), shapes, strict=True):
            state[name] = piece.view(shape[name])
    return states


def _pick(
    corrections: tuple[torch.Tensor, ...], row: int, stepped: list[int]
) -> list[list[torch.Tensor]]:
    """Each of ``corrections``' row ``row`` at the positions ``stepped``: one traced op per
    tensor (an index per position cost the trace 0.1 s for 12 parameters)."""
    return [[parts[k] for k in stepped] for parts in (c[row].unbind() for c in corrections)]


def _zeros_pair(size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    shape = (MAX_UPDATES_PER_GRAPH, size)
    return torch.zeros(shape, device=device), torch.zeros(shape, device=device)


def _fill_corrections(
    corrections: tuple[torch.Tensor, torch.Tensor],
    steps: list[float],
    lr: float,
    beta1: float,
    beta2: float,
    ahead: int = 1,
) -> None:
    """Adam's step sizes and second bias-correction roots for parameters at ``steps``
    about to take ``ahead`` more (row ``k`` for the ``k``-th), in double precision as
    ``torch.optim.Adam`` computes them."""

    def scalars(step: float) -> tuple[float, float]:
        step += 1
        return lr / (1 - beta1**step), math.sqrt(1 - beta2**step)

    step_sizes, roots = corrections
    if all(step == steps[0] for step in steps):  # the usual case: one fill per row
        if ahead == 1:  # every row: one op each, where a row's view would cost another
            size, root = scalars(steps[0])
            step_sizes.fill_(size)
            roots.fill_(root)
            return
        values = torch.tensor([scalars(steps[0] + k) for k in range(ahead)], dtype=torch.float64)
        step_sizes[:ahead].copy_(values[:, :1].expand(ahead, step_sizes.shape[1]))
        roots[:ahead].copy_(values[:, 1:].expand(ahead, roots.shape[1]))
        return
    values = torch.tensor(
        [[scalars(step + k) for step in steps] for k in range(ahead)], dtype=torch.float64
    )
    step_sizes[:ahead].copy_(values[..., 0])
    roots[:ahead].copy_(values[..., 1])


def _group_constants(group: dict[str, Any], step_device: torch.device) -> dict[str, torch.Tensor]:
    """A param group's hyperparameters as 0-d tensors on its device (no weight decay
    entry for none; Adam's betas also on ``step_device``, for the bias corrections). A
    graph reads Python floats as symbolic inputs, which the foreach ops cannot take
    (tracing restarts, specialising them, and the graph then misses the compile cache);
    tensors they take as they are."""
    device = group["params"][0].device
    values = {"eps": group["eps"], "weight_decay": group["weight_decay"]}
    if "betas" in group:
        values["beta1"], values["beta2"] = group["betas"]
    if "alpha" in group:
        values["alpha"] = group["alpha"]
    if not values["weight_decay"]:
        del values["weight_decay"]
    constants = {key: torch.tensor(float(v), device=device) for key, v in values.items()}
    if "betas" in group:
        for key in ("beta1", "beta2"):
            constants[f"step_{key}"] = torch.tensor(float(values[key]), device=step_device)
    return constants


def total_norm(grads: Sequence[torch.Tensor | None]) -> torch.Tensor:
    """The global 2-norm of ``grads`` (None entries left out), as ``clip_grad_norm_`` takes it."""
    norms = [torch.linalg.vector_norm(g) for g in grads if g is not None]
    return torch.linalg.vector_norm(torch.stack(norms))


def clip_grads(
    grads: list[torch.Tensor | None], max_norm: float | None
) -> tuple[list[torch.Tensor | None], torch.Tensor | None]:
    """``clip_grad_norm_``'s arithmetic on a list of gradients (None for a parameter the
    loss does not reach, kept): the clipped gradients and the norm before clipping (None,
    and the gradients unchanged, for ``max_norm`` None)."""
    if max_norm is None:
        return grads, None
    norm = total_norm(grads)
    scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    return [None if g is None else g * scale for g in grads], norm


def _check_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """Raises unless `GraphOptimizer.step` reproduces ``optimizer.step()``."""
    for group in optimizer.param_groups:
        if isinstance(optimizer, torch.optim.Adam):
            unsupported = group["amsgrad"] or group["maximize"] or group["decoupled_weight_decay"]
        elif isinstance(optimizer, torch.optim.RMSprop):
            unsupported = group["momentum"] or group["centered"] or group["maximize"]
        else:
            unsupported = True
        if unsupported:
            raise NotImplementedError(
                "the compiled update steps Adam (without amsgrad, maximize or AdamW's decay) "
                f"and RMSprop (without momentum, centring or maximize), not this {optimizer!r}"
            )
