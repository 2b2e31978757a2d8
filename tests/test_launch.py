"""`cadence train --nproc N` and torchrun's world size: how many ranks a run gets."""

import pytest

from cadence.cli.train import resolve_num_ranks
from cadence.config import ConfigError


def test_outside_torchrun_nproc_or_the_config_gives_the_ranks(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert resolve_num_ranks(1, None) == 1
    assert resolve_num_ranks(1, 3) == 3
    assert resolve_num_ranks(2, None) == 2
    assert resolve_num_ranks(2, 2) == 2
    with pytest.raises(ConfigError, match="--nproc 2 but trainer.num_ranks=3"):
        resolve_num_ranks(3, 2)


def test_under_torchrun_the_config_takes_the_world_size_or_is_refused(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert resolve_num_ranks(1, None) == 2
    assert resolve_num_ranks(2, None) == 2
    with pytest.raises(ConfigError, match="trainer.num_ranks=4 but torchrun started 2"):
        resolve_num_ranks(4, None)
    with pytest.raises(ConfigError, match="under torchrun leave it out"):
        resolve_num_ranks(1, 2)
