"""`RecurrentCore`: a GRU or LSTM whose state is explicit and resets where episodes start.

The state is a dict of ``[B, H]`` tensors, ``{"h"}`` for a GRU and ``{"h", "c"}`` for an
LSTM, zeros for a new episode. Acting steps it one time step at a time (`step`); training
runs it over whole sequences (`unroll`), replacing the state by zeros at each step marked
as an episode's first, so that no gradient crosses from one episode into the next.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

RecurrentState = dict[str, torch.Tensor]
"""``{"h": [B, H]}`` (GRU) or ``{"h": [B, H], "c": [B, H]}`` (LSTM)."""


class RecurrentCore(nn.Module):
    """One GRU or LSTM layer over features ``[B, D]`` (a step) or ``[B, T, D]`` (a sequence).

    Args:
        in_dim: input features ``D``.
        hidden_size: state width ``H`` (also the output width).
        kind: ``"gru"`` or ``"lstm"``.
        orthogonal_init: orthogonal weights with gain 1, zero biases (as CleanRL's LSTM
            PPO); otherwise torch's default.

    Attributes:
        output_dim: ``hidden_size``.

    >>> core = RecurrentCore(3, 8, "lstm")
    >>> state = core.initial_state(4)
    >>> out, state = core.unroll(torch.zeros(4, 5, 3), torch.zeros(4, 5, dtype=torch.bool), state)
    >>> out.shape, sorted(state)
    (torch.Size([4, 5, 8]), ['c', 'h'])
    """

    def __init__(
        self,
        in_dim: int,
        hidden_size: int,
        kind: Literal["gru", "lstm"] = "gru",
        orthogonal_init: bool = True,
    ):
        super().__init__()
        if kind not in ("gru", "lstm"):
            raise ValueError(f"RecurrentCore kind must be 'gru' or 'lstm', got {kind!r}")
        self.kind = kind
        self.output_dim = hidden_size
        self.rnn = (nn.GRU if kind == "gru" else nn.LSTM)(in_dim, hidden_size, batch_first=True)
        if orthogonal_init:
            for name, parameter in self.rnn.named_parameters():
                if name.startswith("weight"):
                    nn.init.orthogonal_(parameter, 1.0)
                else:
                    nn.init.zeros_(parameter)

    def initial_state(self, batch_size: int) -> RecurrentState:
        """Zeros: the state of ``batch_size`` new episodes."""
        weight = self.rnn.weight_hh_l0
        zeros = weight.new_zeros(batch_size, self.output_dim)
        return {"h": zeros} if self.kind == "gru" else {"h": zeros, "c": zeros.clone()}

    def step(self, x: torch.Tensor, state: RecurrentState) -> tuple[torch.Tensor, RecurrentState]:
        """One time step: ``[B, D]`` features from ``state`` to ``([B, H], next state)``."""
        out, state = self._run(x.unsqueeze(1), state)
        return out.squeeze(1), state

    def unroll(
        self, x: torch.Tensor, reset: torch.Tensor, state: RecurrentState
    ) -> tuple[torch.Tensor, RecurrentState]:
        """A sequence from ``state``, reset to zeros before each step where ``reset`` holds.

        The layer runs over the stretches between resets in one call each (the steps where
        any sequence resets cut all of them), rather than one call per step.

        Args:
            x: features ``[B, T, D]``.
            reset: ``[B, T]`` bool, True where a step starts an episode.
            state: the state before step 0 (``[B, H]`` tensors).

        Returns:
            The outputs ``[B, T, H]`` and the state after the last step.
        """
        length = x.shape[1]
        cuts = reset[:, 1:].any(0).nonzero().flatten().add(1).tolist()
        outputs = []
        for start, end in zip([0, *cuts], [*cuts, length], strict=True):
            state = _reset(state, reset[:, start])
            out, state = self._run(x[:, start:end], state)
            outputs.append(out)
        return torch.cat(outputs, 1) if len(outputs) > 1 else outputs[0], state

    def _run(self, x: torch.Tensor, state: RecurrentState) -> tuple[torch.Tensor, RecurrentState]:
        if self.kind == "gru":
            out, h = self.rnn(x, state["h"].unsqueeze(0))
            return out, {"h": h.squeeze(0)}
        out, (h, c) = self.rnn(x, (state["h"].unsqueeze(0), state["c"].unsqueeze(0)))
        return out, {"h": h.squeeze(0), "c": c.squeeze(0)}


def _reset(state: RecurrentState, reset: torch.Tensor) -> RecurrentState:
    """``state`` with the rows ``reset`` ``[B]`` zeroed (a constant: no gradient flows back)."""
    keep = ~reset.unsqueeze(-1)
    return {key: torch.where(keep, value, 0.0) for key, value in state.items()}
