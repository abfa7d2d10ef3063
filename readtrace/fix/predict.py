"""Predict each candidate's cold time before it runs, from the baseline's recorded trace.

The what-if storage model (analyze/storage/whatif.py, through analyze/storage/levers.py: the report's
advice reads the same numbers) replays the mount's costs (first byte and bandwidth,
measured from the recorded FUSE requests, or the mount's cached profile from ``readtrace probe``):
``fixed_io_s`` says how long the load would still wait on its data files with the start-up prefetch
(``prefetch``), with one in-order reader per file (``sequential``: an own fd per worker, a populate) and
with readtrace's own-fd loader (``own-fd``: those reads, at start-up where the mount drops the cache).
A candidate's prediction is the baseline's measured wall minus its recorded wait plus that wait:
start-up and compute carry over. A lever that changes no read (OMP_NUM_THREADS=1) is predicted at
the baseline's time; one the model cannot replay (a pread backend, disable_mmap) has no prediction
and runs after those that have one. The predictions only order the trials: every claim rests on
measured runs (fix/verdict.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from readtrace.fix.candidates import Candidate
from readtrace.rerun.protocol import OWN_FD_PER_FORK, POPULATE

# candidate strategy -> the model's fixed read pattern(s); the faster of several
MODELLED = {"prefetch": ("prefetch",), "own-fd": ("own-fd",), "both": ("prefetch", "own-fd"),
            OWN_FD_PER_FORK: ("sequential",), POPULATE: ("sequential",)}
NO_READ_CHANGE = ("lever omp-1",)  # changes threads, not reads: the model predicts the baseline's I/O
POPULATE_AFTER_OPEN = "readtrace populate after open"  # strategy prefetch, but one in-order reader


@dataclass(frozen=True)
class Ranked:
    """A candidate in the order it runs, with its predicted cold wall time (None: not modelled)."""

    candidate: Candidate
    predicted_s: float | None
    basis: str  # how the prediction was made, or why there is none


def predicted_s(candidate: Candidate, baseline_s: float, model: dict | None) -> tuple[float | None, str]:
    """(predicted cold wall seconds, how) of one candidate against a baseline that took ``baseline_s``."""
    if model is None:
        return None, "no prediction: the baseline was not recorded, or no storage model fits its mount"
    patterns = ("sequential",) if candidate.label == POPULATE_AFTER_OPEN else MODELLED.get(candidate.strategy)
    if candidate.label in NO_READ_CHANGE:
        patterns = ("recorded",)
    if not patterns:
        return None, "no prediction: the storage model does not replay this lever's reads"
    from readtrace.analyze.storage.levers import load_with  # pandas and numpy: only where a model is

    return load_with(baseline_s, model, patterns)


def ranked(found: Sequence[Candidate], baseline_s: float, model: dict | None) -> list[Ranked]:
    """``found`` fastest predicted first; those without a prediction after them, in their own order."""
    rows = [Ranked(c, *predicted_s(c, baseline_s, model)) for c in found]
    return sorted(rows, key=lambda r: (r.predicted_s is None, r.predicted_s or 0.0))
