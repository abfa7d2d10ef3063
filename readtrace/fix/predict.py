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
and runs after those that have one. A candidate that keeps the script's own loader (a prefetch, a
populate, an own fd per forked worker) is never predicted faster than the floor's warm run: that is
the same load with every byte already cached. The predictions order the trials, and in the not-slow
band of a measured floor decide which are worth a slow load (fix/auto.py); every claim rests on
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
LOADER_KEPT = ("prefetch", POPULATE, OWN_FD_PER_FORK)  # strategies that run the script's own loader
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


def fastest_change(baseline_s: float, model: dict, keeps_cache: bool) -> tuple[float, str]:
    """(predicted cold wall seconds, how) of the fastest read pattern any of readtrace's own changes
    gives here, whatever the load calls: one in-order reader per file (own-fd, a populate, an own fd
    per forked worker) and, where the mount keeps the page cache, the start-up prefetch. What a run of
    the load without a shim cannot tell (which of them apply) only makes a candidate slower than this."""
    from readtrace.analyze.storage.levers import load_with

    return load_with(baseline_s, model, ("own-fd", "sequential") + (("prefetch",) if keeps_cache else ()))


def ranked(found: Sequence[Candidate], baseline_s: float, model: dict | None,
           warm_s: float | None = None) -> list[Ranked]:
    """``found`` fastest predicted first; those without a prediction after them, in their own order.
    ``warm_s``: the floor's warm run, the least a candidate that keeps the loader can take."""
    rows = [_at_least_warm(Ranked(c, *predicted_s(c, baseline_s, model)), warm_s) for c in found]
    return sorted(rows, key=lambda r: (r.predicted_s is None, r.predicted_s or 0.0))


def _at_least_warm(row: Ranked, warm_s: float | None) -> Ranked:
    if warm_s is None or row.predicted_s is None or row.candidate.strategy not in LOADER_KEPT \
            or row.predicted_s >= warm_s:
        return row
    return Ranked(row.candidate, warm_s, f"{row.basis}; at least the floor's warm run ({warm_s:.2f} s: the same "
                  f"load with every byte cached), not {row.predicted_s:.2f} s")
