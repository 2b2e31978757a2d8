"""cadence's own Gymnasium environments, registered under the ``cadence/`` namespace."""
