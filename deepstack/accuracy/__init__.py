"""Accuracy checks: the models compared with measured or simulated reference data shipped in ``validation/``.

:mod:`.network` compares the collective model with packet-level simulation (``deepstack accuracy network``);
:mod:`.serving` compares the GPU serving model with measured vLLM decode on 8×B200 and :mod:`.prefill` with the
same runs' prefill rates (``deepstack accuracy serving``).

``CROSS_VALIDATIONS`` lists the generalisation checks ``deepstack accuracy cross-validate`` prints: each entry is
(name, a function returning rows of plain data, each with ``check``, ``calibrated_on``, ``predicted``,
``mape_pct``). A new family adds its own entry here (e.g. leave-one-kind-out for the distributed kernels).
"""

from deepstack.accuracy.network import NetworkAccuracy, network_accuracy, plot


def _serving_cross_validation() -> list[dict]:
    from deepstack.accuracy import serving

    return serving.cross_validate(serving.modelled_rows())


def _kernels_cross_validation() -> list[dict]:
    from deepstack.accuracy import kernels

    return kernels.cross_validation_rows()


CROSS_VALIDATIONS: list[tuple[str, object]] = [("serving: leave one model out", _serving_cross_validation),
                                               ("kernels: leave one kind out", _kernels_cross_validation)]

__all__ = ["CROSS_VALIDATIONS", "NetworkAccuracy", "network_accuracy", "plot"]
