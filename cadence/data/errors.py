"""`UnsupportedSpaceError`. Torch- and Gymnasium-free, so the command line can catch it
without importing either."""

from __future__ import annotations


class UnsupportedSpaceError(TypeError, ValueError):
    """An env's observation or action space that an algorithm or network does not take
    (DQN and continuous actions, an image too small for the CNN, ...); the message says
    what would. ``cadence train`` reports it in one line and exits with 2.

    A `TypeError` and a `ValueError` both, as the checks that raise it were one or the
    other before it existed.
    """
