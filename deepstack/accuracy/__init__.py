"""Accuracy checks: the models compared with measured or simulated reference data shipped in ``validation/``.

:mod:`.network` compares the collective model with packet-level simulation (``deepstack accuracy network``).
"""

from deepstack.accuracy.network import NetworkAccuracy, network_accuracy, plot

__all__ = ["NetworkAccuracy", "network_accuracy", "plot"]
