"""The options of an ``optimize`` run: their defaults (shared by ``deepstack.optimize`` and the command) and the
checks that refuse a bad value, each as one line naming its flag, before any storage is touched."""

from __future__ import annotations

import re

from deepstack.errors import UserInputError

SAMPLERS = ("nsga2", "tpe")
DEFAULT_SEED = 0  # every run of the same command proposes the same points (--seed to vary)
DEFAULT_TRIALS = 1000  # a run's trials (the main job's): enough for the local search to reach the front's corner
DEFAULT_BATCH = 4  # trials asked, solved (on the worker pool) and told together
INNER = ("screen", "exact")  # how a sampled point's schedules are solved (search/bilevel.py)
# the front files and the default storage are named after the study: no folder separator, hidden or empty name
BAD_STUDY_NAME = re.compile(r"^$|^[.-]|[/\\\x00]")
SEED_MAX = 2**32 - 1  # the samplers seed numpy's RandomState, which takes 0..2**32 - 1
# the share of a run's trials that go to local search around the front, by default (--refine sets a number). Set
# by hand on the default space (optimize(), seed 0, 2 workers): 1,000 trials at 60 % and at 90 % refining both reach
# hypervolume 7.434, the former 100 + 1,000 trials' front; at 100 trials the front depends on the seed (6.09–7.27
# over seeds 0–3), hence DEFAULT_TRIALS
REFINE_SHARE = 0.6


def check_options(*, trials: int, workers: int, batch: int, until_stall: int | None, refine: int | None,
                  inner: str, seed: int | None, study: str) -> int:
    """Refuse an option out of its range (the sampler's name is checked by building the sampler); returns the
    run's local-search budget: ``refine``, or ``REFINE_SHARE`` of the trials when it is None."""
    if BAD_STUDY_NAME.search(study):
        # a folder in the name put the storage and the front files in different places (or none: a crash after
        # every trial had run); an empty one, hidden files
        raise UserInputError(f"--study: a name without '/' or '\\', not empty and not starting with '.' or '-', "
                             f"since the front files are named after it (got {study!r})")
    if trials < 0 or trials > 1_000_000:
        raise UserInputError(f"--trials: must be in 0..1000000 (got {trials})")
    if not 1 <= workers <= 64:
        raise UserInputError(f"--workers: must be in 1..64 (got {workers})")
    if not 1 <= batch <= 1024:
        raise UserInputError(f"--trials-per-batch: must be in 1..1024 (got {batch})")
    if until_stall is not None and until_stall < 1:
        raise UserInputError(f"--until-stall: must be a number of trials ≥ 1 (got {until_stall})")
    if refine is None:
        refine = round(REFINE_SHARE * trials)
    if not 0 <= refine <= 1_000_000:
        raise UserInputError(f"--refine: must be a number of trials in 0..1000000 (got {refine})")
    if refine > trials:
        raise UserInputError(f"--refine: the local search's share of the run's --trials, so at most {trials} (got "
                             f"{refine})")
    if inner not in INNER:
        raise UserInputError(f"--inner: must be one of {', '.join(INNER)} (got {inner!r})")
    if seed is not None and not 0 <= seed <= SEED_MAX:
        raise UserInputError(f"--seed: must be an integer in 0..{SEED_MAX} (the sampler's seed range; got {seed})")
    return refine
