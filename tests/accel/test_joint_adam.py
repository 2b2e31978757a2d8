"""`JointAdamStep` steps several fused Adams exactly as their own steps would, and falls back
to them when it cannot."""

from __future__ import annotations

import io

import torch
from torch import nn

from cadence.accel.joint_adam import JointAdamStep


def _model_and_optimizers(seed: int, fused: bool = True):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    alpha = nn.Parameter(torch.zeros(()))
    optimizers = [
        torch.optim.Adam(model[0].parameters(), lr=1e-2, fused=fused),
        torch.optim.Adam(model[2].parameters(), lr=1e-2, fused=fused),
        torch.optim.Adam([alpha], lr=3e-3, fused=fused, weight_decay=0.1),
    ]
    return model, alpha, optimizers


def _loss(model, alpha, step: int):
    x = torch.linspace(-1, 1, 12).view(3, 4) + step
    return (model(x) ** 2).sum() + (alpha - 1) ** 2


def _train(joint: bool, steps: int, fused: bool = True, reload_at: int | None = None):
    model, alpha, optimizers = _model_and_optimizers(0, fused)
    stepper = JointAdamStep(optimizers)
    for step in range(steps):
        if step == reload_at:  # a resume: the optimizers get new state tensors
            states = [o.state_dict() for o in optimizers]
            for optimizer, state in zip(optimizers, states, strict=True):
                optimizer.load_state_dict(state)
        stepper.zero_grad() if joint else [o.zero_grad(set_to_none=True) for o in optimizers]
        _loss(model, alpha, step).backward()
        stepper.step() if joint else [o.step() for o in optimizers]
    return [p.detach().clone() for p in [*model.parameters(), alpha]], optimizers


def test_joint_step_is_bit_for_bit_each_optimizers_own_step():
    reference, reference_optimizers = _train(joint=False, steps=5)
    joint, joint_optimizers = _train(joint=True, steps=5, reload_at=3)
    for a, b in zip(reference, joint, strict=True):
        assert torch.equal(a, b)
    for a, b in zip(reference_optimizers, joint_optimizers, strict=True):
        for sa, sb in zip(a.state.values(), b.state.values(), strict=True):
            assert all(torch.equal(sa[key], sb[key]) for key in ("step", "exp_avg", "exp_avg_sq"))
    assert float(joint_optimizers[0].state[next(iter(joint_optimizers[0].state))]["step"]) == 5


def test_optimizers_it_cannot_join_step_themselves():
    # foreach (not fused) Adam: the joint step falls back to each optimizer's own step.
    reference, _ = _train(joint=False, steps=3, fused=False)
    joint, _ = _train(joint=True, steps=3, fused=False)
    for a, b in zip(reference, joint, strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(reference[-1], torch.zeros(()))


def test_zero_grad_drops_every_gradient():
    model, alpha, optimizers = _model_and_optimizers(0)
    stepper = JointAdamStep(optimizers)
    _loss(model, alpha, 0).backward()
    stepper.zero_grad()
    assert all(p.grad is None for p in [*model.parameters(), alpha])


def test_a_parameter_without_gradient_is_stepped_again_once_it_has_one():
    def run(joint: bool):
        model, alpha, optimizers = _model_and_optimizers(0)
        stepper = JointAdamStep(optimizers)
        for step in range(5):
            stepper.zero_grad() if joint else [o.zero_grad(set_to_none=True) for o in optimizers]
            loss = _loss(model, alpha, step)
            if step == 2:  # alpha gets no gradient this step only
                loss = (model(torch.ones(1, 4)) ** 2).sum()
            loss.backward()
            stepper.step() if joint else [o.step() for o in optimizers]
        return [p.detach().clone() for p in [*model.parameters(), alpha]]

    for a, b in zip(run(joint=False), run(joint=True), strict=True):
        assert torch.equal(a, b)


def test_a_changed_learning_rate_is_used_by_the_next_joint_step():
    def run(joint: bool):
        model, alpha, optimizers = _model_and_optimizers(0)
        stepper = JointAdamStep(optimizers)
        for step in range(4):
            if step == 2:
                optimizers[1].param_groups[0]["lr"] = 0.5
            stepper.zero_grad() if joint else [o.zero_grad(set_to_none=True) for o in optimizers]
            _loss(model, alpha, step).backward()
            stepper.step() if joint else [o.step() for o in optimizers]
        return [p.detach().clone() for p in [*model.parameters(), alpha]]

    for a, b in zip(run(joint=False), run(joint=True), strict=True):
        assert torch.equal(a, b)


def test_shared_step_counters_round_trip_through_a_checkpoint():
    model, alpha, optimizers = _model_and_optimizers(0)
    stepper = JointAdamStep(optimizers)
    for step in range(3):
        stepper.zero_grad()
        _loss(model, alpha, step).backward()
        stepper.step()
    states = [o.state_dict() for o in optimizers]
    assert all(float(s["step"]) == 3 for state in states for s in state["state"].values())
    buffer = io.BytesIO()
    torch.save(states, buffer)
    buffer.seek(0)
    for optimizer, state in zip(optimizers, torch.load(buffer), strict=True):
        optimizer.load_state_dict(state)
    stepper.zero_grad()
    _loss(model, alpha, 3).backward()
    stepper.step()
    assert all(float(s["step"]) == 4 for o in optimizers for s in o.state.values())
