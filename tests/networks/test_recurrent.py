"""RecurrentCore: stepping and unrolling agree, resets zero the state, and gradients flow
back through time within an episode but never across its first step."""

from __future__ import annotations

import pytest
import torch

from cadence.networks import RecurrentCore


def _stepped(core, x, reset, state):
    """The reference: one `step` per time step, the state zeroed by hand where reset."""
    outputs = []
    for t in range(x.shape[1]):
        state = {
            k: torch.where(reset[:, t, None], torch.zeros_like(v), v) for k, v in state.items()
        }
        out, state = core.step(x[:, t], state)
        outputs.append(out)
    return torch.stack(outputs, 1), state


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_unroll_matches_stepping_with_resets(kind):
    torch.manual_seed(0)
    core = RecurrentCore(3, 5, kind)
    x = torch.randn(3, 7, 3)
    reset = torch.zeros(3, 7, dtype=torch.bool)
    reset[0, 0] = reset[1, 2] = reset[1, 5] = reset[2, 6] = True
    state = {k: torch.randn_like(v) for k, v in core.initial_state(3).items()}
    out, final = core.unroll(x, reset, state)
    expected, expected_final = _stepped(core, x, reset, state)
    torch.testing.assert_close(out, expected)
    assert sorted(final) == (["h"] if kind == "gru" else ["c", "h"])
    for key in final:
        torch.testing.assert_close(final[key], expected_final[key])


def test_a_reset_makes_what_follows_independent_of_the_past():
    torch.manual_seed(1)
    core = RecurrentCore(2, 4, "gru")
    x = torch.randn(1, 6, 2)
    reset = torch.tensor([[False, False, False, True, False, False]])
    out, _ = core.unroll(x, reset, core.initial_state(1))
    # From the reset on, the outputs are those of a fresh episode started there.
    fresh, _ = core.unroll(x[:, 3:], torch.zeros(1, 3, dtype=torch.bool), core.initial_state(1))
    torch.testing.assert_close(out[:, 3:], fresh)
    # Before it, the initial state matters (so the check above is not vacuous).
    other = {"h": torch.ones(1, 4)}
    changed, _ = core.unroll(x, reset, other)
    assert not torch.allclose(changed[:, :3], out[:, :3])
    torch.testing.assert_close(changed[:, 3:], fresh)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_gradients_flow_within_an_episode_but_not_across_its_first_step(kind):
    torch.manual_seed(2)
    core = RecurrentCore(2, 4, kind)
    x = torch.randn(1, 6, 2, requires_grad=True)
    state = {k: v.requires_grad_() for k, v in core.initial_state(1).items()}
    reset = torch.tensor([[False, False, False, True, False, False]])
    out, _ = core.unroll(x, reset, state)
    inputs = [x, *state.values()]
    # A step of the second episode (steps 3-5): BPTT reaches its earlier steps only.
    x_grad, *state_grads = torch.autograd.grad(out[0, 5].sum(), inputs, retain_graph=True)
    per_step = x_grad[0].abs().sum(-1)
    assert (per_step[3:] > 0).all(), "BPTT reaches every earlier step of the episode"
    assert (per_step[:3] == 0).all(), "no gradient crosses the FIRST step"
    assert all((g == 0).all() for g in state_grads)
    # A step of the first episode: back to every step before it and to the initial state.
    x_grad, *state_grads = torch.autograd.grad(out[0, 2].sum(), inputs)
    assert (x_grad[0, :3].abs().sum(-1) > 0).all()
    assert (x_grad[0, 3:] == 0).all()
    assert (state_grads[0] != 0).any()


def test_initial_state_is_zeros_on_the_core_device_and_kind_is_checked():
    core = RecurrentCore(2, 4, "lstm")
    state = core.initial_state(3)
    assert state["h"].shape == state["c"].shape == (3, 4)
    assert not state["h"].any() and not state["c"].any()
    with pytest.raises(ValueError, match="'gru' or 'lstm'"):
        RecurrentCore(2, 4, "rnn")
