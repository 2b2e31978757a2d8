"""Spec reprs stay one readable line, as error messages print them: a uniform bound as one
number (an image's 0 and 255, not 7,056 of each), other bounds summarised."""

import numpy as np
import torch

from cadence.data.specs import BoundedTensorSpec, DiscreteTensorSpec


def test_an_image_spec_prints_its_bounds_as_one_number_each():
    spec = BoundedTensorSpec((84, 84), torch.uint8, 0, 255)
    assert repr(spec) == (
        "BoundedTensorSpec(shape=(84, 84), dtype=torch.uint8, minimum=0, maximum=255)"
    )


def test_bounds_that_differ_print_on_one_line_summarised_past_a_few():
    box = BoundedTensorSpec((3,), torch.float32, [-1.0, -2.0, -np.inf], [1.0, 2.0, np.inf])
    assert repr(box).endswith("minimum=[ -1., -2., -inf], maximum=[ 1., 2., inf])")
    long = repr(BoundedTensorSpec((40, 2), torch.float32, np.arange(80).reshape(40, 2), 100))
    assert "\n" not in long and "..." in long and len(long) < 200
    assert repr(DiscreteTensorSpec((3,), nvec=[2, 3, 4])).endswith("nvec=[2, 3, 4])")
    assert repr(DiscreteTensorSpec((), nvec=6)).endswith("nvec=6)")
