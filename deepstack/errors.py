"""Typed errors. A ``UserInputError`` is something the user can fix; the CLI prints its message as one line
and exits with status 2. Everything else is a bug and keeps its traceback."""

from __future__ import annotations


class DeepStackError(Exception):
    """Base class of every error DeepStack raises on purpose."""


class UserInputError(DeepStackError):
    """Bad input: unknown preset, out-of-range value, malformed file, infeasible request.

    The message names the field and what is allowed, on one line.
    """

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class InfeasibleError(UserInputError):
    """A well-formed request that no design can satisfy (memory does not fit, no valid schedule, ...)."""


class RunInterruptedError(DeepStackError):
    """A run ended by SIGINT or SIGTERM after keeping what it had finished. The message says what was kept, where,
    and how to go on, on one line; the CLI prints it on stderr and exits with status 130."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))
