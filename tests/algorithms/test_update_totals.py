"""`UpdateTotals`: the sums of an iteration's update results, one update's or several
updates' stacked (`Algorithm.update_rows_many`) alike."""

from __future__ import annotations

import pytest
import torch

from cadence.algorithms.algorithm import UpdateResult, stack_results
from cadence.algorithms.scheme import UpdateTotals


def _result(loss: float) -> UpdateResult:
    value = torch.tensor(loss)
    return UpdateResult({"loss/total": value}, ~torch.isfinite(value))


def test_stacked_results_count_as_their_updates():
    totals = UpdateTotals()
    totals.add(_result(1.0))
    totals.add(stack_results([_result(2.0), _result(3.0), _result(4.0)]))
    assert totals.count == 4
    assert totals.means()["loss/total"] == pytest.approx(2.5)
    assert not bool(totals.nonfinite)
    totals.add(stack_results([_result(5.0), _result(float("nan"))]))
    assert bool(totals.nonfinite) and totals.count == 6


def test_skipping_counts_each_non_finite_update_of_a_stack():
    totals = UpdateTotals(skip_nonfinite=True)
    totals.add(_result(float("inf")))
    totals.add(stack_results([_result(2.0), _result(float("nan")), _result(4.0)]))
    totals.add(stack_results([_result(float("nan")), _result(float("nan"))]))
    assert (totals.count, totals.skipped) == (2, 4)
    assert totals.means()["loss/total"] == pytest.approx(3.0)
    assert not bool(totals.nonfinite)
