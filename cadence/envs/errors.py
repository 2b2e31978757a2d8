"""Why an environment could not be built or restored: errors the ``cadence`` command
reports in one message, without a traceback.

Torch- and Gymnasium-free, so the command can catch them without importing either.
"""

from __future__ import annotations


class EnvBuildError(ValueError):
    """The environment of a config cannot be built: an unknown id, a missing optional
    dependency, a ``module:Id`` whose module does not import, or an env that raised while
    it was built or reset. The message names the id and what to do."""


class UnknownEnvironmentError(EnvBuildError):
    """An environment id that neither Gymnasium nor cadence knows."""


class EnvStateMismatchError(ValueError):
    """A saved environment state that this environment cannot restore: it was saved by
    another kind of back end (tensor-native versus Gymnasium), or by a stack of other
    layers (with or without a `TimeLimit`)."""
