"""Algorithms: the `Algorithm` contract, training schemes, PPO/A2C/SAC/..., and pure return functions."""
