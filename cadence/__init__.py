"""cadence: a reinforcement-learning framework for PyTorch."""

from cadence.data import StepType, TimeStep
from cadence.envs import Environment, make_env

__version__ = "0.1.0"

__all__ = ["Environment", "StepType", "TimeStep", "make_env", "__version__"]
