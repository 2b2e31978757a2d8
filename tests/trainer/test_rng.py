import random

import numpy as np
import torch

from cadence.trainer.checkpoint import CheckpointManager
from cadence.trainer.rng import rng_state, seed_everything, set_rng_state


def _draw():
    return random.random(), float(np.random.rand()), float(torch.rand(()))


def test_rng_state_survives_a_weights_only_checkpoint(tmp_path):
    seed_everything(3)
    _draw()
    CheckpointManager(tmp_path).save(1, {"rng": rng_state()})
    expected = _draw()
    seed_everything(99)
    set_rng_state(CheckpointManager(tmp_path).load()["rng"])
    assert _draw() == expected
