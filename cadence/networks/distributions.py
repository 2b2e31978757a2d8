"""`TanhNormal`: a diagonal Gaussian squashed by tanh into box bounds (as SAC's policy),
`LeanNormal`: torch's `Normal` drawing through ``randn``, `LeanCategorical`: torch's
`Categorical` over logits without its per-call overhead, and `MultiCategorical`:
independent categoricals, one per dimension of a multi-discrete action, and
`JointDistribution`: independent distributions, one per entry of a Dict or Tuple action."""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.distributions import Categorical, Distribution, Normal, constraints


class LeanCategorical(Categorical):
    """torch's `Categorical` from ``logits`` ``[*B, K]`` (unvalidated), minus the generic
    work its constructor, ``sample`` and ``log_prob`` do on every call: shape broadcasting,
    argument checks, reshapes. For a small policy over a few envs that work is most of the
    action head's cost (on CartPole's 8 x 2 logits, one thread: about 41 us per step for
    construct, sample and log-prob against 12 us here).

    A sample is the category of the first arrival among independent exponential clocks
    of rates ``probs``, i.e. ``argmax(probs / E)`` with ``E ~ Exp(1)`` per category (the
    Gumbel-max trick, exact in distribution). It costs less than half of a
    ``torch.multinomial`` draw (5 against 11 us on 8 x 2 probabilities, most of which
    goes to checking its input), and a compiled unroll fuses it into its step (the
    multinomial was half of a compiled CartPole unroll). Everything else (entropy, mode,
    KL) is `Categorical`'s.

    >>> d = LeanCategorical(torch.tensor([[0.0, 0.0], [0.0, 50.0]]))
    >>> d.log_prob(torch.tensor([0, 1])).exp()
    tensor([0.5000, 1.0000])
    """

    def __init__(self, logits: torch.Tensor):
        self.logits = torch.log_softmax(logits, -1)
        self._param = self.logits
        self._num_events = logits.shape[-1]
        self._batch_shape = logits.shape[:-1]
        self._event_shape = torch.Size()
        self._validate_args = False

    def sample(self, sample_shape: Sequence[int] = torch.Size()) -> torch.Tensor:
        if len(sample_shape):
            return super().sample(torch.Size(sample_shape))
        with torch.no_grad():
            clocks = torch.empty_like(self.logits).exponential_()
            return (self.probs / clocks).argmax(-1)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if value.shape != self._batch_shape:  # broadcasting: torch's general path
            return super().log_prob(value)
        return self.logits.gather(-1, value.long().unsqueeze(-1)).squeeze(-1)


class MultiCategorical(Distribution):
    """Independent categoricals over the ``K`` dimensions of a multi-discrete action
    (Gymnasium's ``MultiDiscrete`` and ``MultiBinary``): a sample is ``[*B, K]``, and
    ``log_prob`` and ``entropy`` sum over the dimensions, so a policy-gradient loss treats
    the whole action as one.

    Args:
        logits: ``[*B, K, N]``, ``N`` the most values of any dimension; a dimension with
            fewer values masks the rest with the dtype's lowest number (probability 0).

    >>> d = MultiCategorical(torch.zeros(4, 3, 2))
    >>> d.sample().shape, d.log_prob(torch.zeros(4, 3, dtype=torch.long)).shape
    (torch.Size([4, 3]), torch.Size([4]))
    """

    arg_constraints = {"logits": constraints.real}

    def __init__(self, logits: torch.Tensor):
        self.parts = LeanCategorical(logits)
        super().__init__(logits.shape[:-2], logits.shape[-2:-1], validate_args=False)

    def sample(self, sample_shape: Sequence[int] = torch.Size()) -> torch.Tensor:
        return self.parts.sample(sample_shape)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        return self.parts.log_prob(value).sum(-1)

    def entropy(self) -> torch.Tensor:
        return self.parts.entropy().sum(-1)

    @property
    def mode(self) -> torch.Tensor:
        return self.parts.mode


class JointDistribution(Distribution):
    """Independent distributions, one per entry of a Dict or Tuple action (a
    `CompositeSpec`): a sample and the mode are dicts of the parts' (nested as the spec
    is), and ``log_prob`` and ``entropy`` sum the parts' ``[*B]``, as `MultiCategorical`
    sums its dimensions': a policy-gradient loss treats the whole action as one.

    >>> from torch.distributions import Independent
    >>> d = JointDistribution({"move": LeanCategorical(torch.zeros(4, 3)),
    ...                        "force": Independent(LeanNormal(torch.zeros(4, 2), torch.ones(4, 2)), 1)})
    >>> {k: v.shape for k, v in d.sample().items()}
    {'move': torch.Size([4]), 'force': torch.Size([4, 2])}
    >>> d.log_prob(d.mode).shape
    torch.Size([4])
    """

    arg_constraints: dict[str, constraints.Constraint] = {}

    def __init__(self, parts: dict[str, Distribution]):
        self.parts = parts
        super().__init__(next(iter(parts.values())).batch_shape, validate_args=False)

    def sample(self, sample_shape: Sequence[int] = torch.Size()) -> dict[str, Any]:
        return {key: part.sample(sample_shape) for key, part in self.parts.items()}

    def log_prob(self, value: dict[str, Any]) -> torch.Tensor:
        return _sum(part.log_prob(value[key]) for key, part in self.parts.items())

    def entropy(self) -> torch.Tensor:
        return _sum(part.entropy() for part in self.parts.values())

    @property
    def mode(self) -> dict[str, Any]:
        return {key: part.mode for key, part in self.parts.items()}


def _sum(terms: Iterable[torch.Tensor]) -> torch.Tensor:
    return functools.reduce(operator.add, terms)


class LeanNormal(Normal):
    """torch's `Normal` whose ``sample`` draws ``loc + scale * randn``: the numbers
    ``torch.normal(loc, scale)`` draws (it fills standard normals, then scales and shifts
    them), through ops a compiled step calls directly. ``torch.normal`` has no C entry for
    inductor's C++ wrapper, which calls it through a slower fallback: on 8 x 6 actions,
    one thread, the compiled draw took 50 us against 17 us so, most of a compiled PPO
    acting step on HalfCheetah.

    >>> loc, scale = torch.zeros(8, 6), torch.full((8, 6), 0.5)
    >>> _ = torch.manual_seed(0)
    >>> lean = LeanNormal(loc, scale).sample()
    >>> _ = torch.manual_seed(0)
    >>> bool(torch.equal(lean, Normal(loc, scale).sample()))
    True
    """

    def __init__(self, loc: torch.Tensor, scale: torch.Tensor):
        super().__init__(loc, scale, validate_args=False)

    def sample(self, sample_shape: Sequence[int] = torch.Size()) -> torch.Tensor:
        shape = self._extended_shape(torch.Size(sample_shape))
        with torch.no_grad():
            noise = torch.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
            return self.loc.expand(shape) + self.scale.expand(shape) * noise


class TanhNormal(Distribution):
    """``low + (tanh(u) + 1) * (high - low) / 2`` with ``u ~ Normal(loc, scale)`` per dimension.

    The density follows by change of variables (Haarnoja et al. 2018,
    https://arxiv.org/abs/1801.01290, App. C):
    ``log p(a) = sum_i [log N(u_i) - log(1 - tanh(u_i)^2) - log((high_i - low_i) / 2)]``,
    with ``log(1 - tanh(u)^2)`` computed as ``2 * (log 2 - u - softplus(-2u))``,
    which stays finite where ``tanh(u)`` rounds to ±1.

    ``log_prob`` of an arbitrary action inverts the squashing with the action
    clamped just inside the bounds; that loses precision for actions within
    ~1e-7 of a bound, so SAC-style code should use `rsample_with_log_prob`, or
    call ``log_prob`` on the very tensor the last ``rsample``/``sample`` returned
    (it is cached, as torch's ``TanhTransform(cache_size=1)`` does).

    Event shape ``[A]``; batch shape ``loc.shape[:-1]``.

    Args:
        loc: ``[*B, A]`` mean of ``u``.
        scale: ``[*B, A]`` standard deviation of ``u``.
        low: ``[A]`` (or broadcastable) finite lower action bounds.
        high: ``[A]`` (or broadcastable) finite upper action bounds.

    >>> d = TanhNormal(torch.zeros(5, 2), torch.ones(5, 2), -torch.ones(2), torch.ones(2))
    >>> action, log_prob = d.rsample_with_log_prob()
    >>> action.shape, log_prob.shape, d.mode.abs().max().item()
    (torch.Size([5, 2]), torch.Size([5]), 0.0)
    """

    arg_constraints: dict[str, constraints.Constraint] = {}
    has_rsample = True

    def __init__(
        self, loc: torch.Tensor, scale: torch.Tensor, low: torch.Tensor, high: torch.Tensor
    ):
        self.normal = Normal(loc, scale, validate_args=False)
        self.low, self.high = low, high
        self._center = (high + low) / 2
        self._half_range = (high - low) / 2
        self._cache: tuple[torch.Tensor, torch.Tensor] | None = None
        super().__init__(loc.shape[:-1], loc.shape[-1:], validate_args=False)

    @property
    def support(self) -> constraints.Constraint:
        return constraints.independent(constraints.interval(self.low, self.high), 1)

    @property
    def mode(self) -> torch.Tensor:
        """The squashed mean, ``[*B, A]``: the action to take when acting deterministically."""
        return self._squash(self.normal.loc)

    def rsample(self, sample_shape: Sequence[int] = ()) -> torch.Tensor:
        return self.rsample_with_log_prob(sample_shape)[0]

    def sample(self, sample_shape: Sequence[int] = ()) -> torch.Tensor:
        with torch.no_grad():
            return self.rsample(sample_shape)

    def rsample_with_log_prob(
        self, sample_shape: Sequence[int] = ()
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised action ``[*S, *B, A]`` and its exact log-density ``[*S, *B]``."""
        pre_tanh = self.normal.rsample(sample_shape)
        action = self._squash(pre_tanh)
        self._cache = (action, pre_tanh)
        return action, self._log_prob_of_pre_tanh(pre_tanh)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """The log-density ``[*B]`` of actions ``[*B, A]``."""
        if self._cache is not None and value is self._cache[0]:
            return self._log_prob_of_pre_tanh(self._cache[1])
        eps = torch.finfo(value.dtype).eps
        squashed = ((value - self._center) / self._half_range).clamp(-1 + eps, 1 - eps)
        return self._log_prob_of_pre_tanh(torch.atanh(squashed))

    def entropy(self) -> torch.Tensor:
        """A one-sample estimate ``[*B]`` of the entropy (there is no closed form)."""
        return -self.rsample_with_log_prob()[1]

    def _squash(self, pre_tanh: torch.Tensor) -> torch.Tensor:
        return self._center + self._half_range * torch.tanh(pre_tanh)

    def _log_prob_of_pre_tanh(self, pre_tanh: torch.Tensor) -> torch.Tensor:
        log_det_tanh = 2 * (math.log(2) - pre_tanh - F.softplus(-2 * pre_tanh))
        log_det = log_det_tanh + torch.log(self._half_range)
        return (self.normal.log_prob(pre_tanh) - log_det).sum(-1)
