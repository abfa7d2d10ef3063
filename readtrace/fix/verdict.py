"""What `fix --compare` may say about its runs: one word of a fixed vocabulary, a sentence, an exit code.

The words (docs/fix.md "The verdict"):

- ``fixed``: a change was made and the fixed runs beat the baseline runs beyond their spread (below).
- ``not-slow``: left alone; the floor (a cold sequential read of the same bytes + the load warm) was
  measured and the baseline is within ``SLOW_MARGIN`` x it + ``SLOW_ABS_S``; no candidate gained.
- ``slow-no-fix``: left alone; the baseline is over its floor, or the floor is unknown, and nothing
  readtrace can change here was faster beyond noise. Comes with the change the user can make.
- ``no-gain``: a change was made but its runs did not beat the baseline's beyond their spread.
- ``slower``: a change was made and every baseline run was faster than every fixed run by the margin.
- ``unproven``: the runs cannot back any claim (not cold, nothing loaded, no tensors seen): exit 6.
- ``differs``: the fixed side loaded different tensors: exit 1.

The spread rule (``candidates.confirmed``): one side beats the other only when its slowest run is at
least 3 % faster than the other's fastest run, so the two ranges do not overlap; with one run a side
that is one run against one, and the sentence says "one run each".

The confirmation rule (``confirmation_needed``): the fastest candidate's one cold run is run again, with
the baseline again, unless it was at least ``CLEAR_GAIN`` x faster than every baseline run (and than the
spread of the baseline runs); a gain that needed that run and did not get it (``--budget``) is no claim.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from readtrace.errors import ExitStatus
from readtrace.fix.candidates import NO_HARM, OWN, SLOW_ABS_S, SLOW_MARGIN, Floor, confirmed
from readtrace.fix.levers import LEVERS, seen_in
from readtrace.rerun.records import FORKED_SHARED

if TYPE_CHECKING:
    from readtrace.fix.compare import Comparison
    from readtrace.inject.manifest import ManifestDiff

FIXED, NOT_SLOW, SLOW_NO_FIX, NO_GAIN, SLOWER, UNPROVEN, DIFFERS = (
    "fixed", "not-slow", "slow-no-fix", "no-gain", "slower", "unproven", "differs")
VERDICTS = (FIXED, NOT_SLOW, SLOW_NO_FIX, NO_GAIN, SLOWER, UNPROVEN, DIFFERS)
EXIT_CODES = {FIXED: ExitStatus.OK, NOT_SLOW: ExitStatus.OK, SLOW_NO_FIX: ExitStatus.OK, NO_GAIN: ExitStatus.OK,
              SLOWER: ExitStatus.OK, UNPROVEN: ExitStatus.NO_EVIDENCE, DIFFERS: ExitStatus.ERROR}
MARGIN_PCT = round(100 * (1 - NO_HARM))
SPREAD_RULE = (f"a gain is claimed only when the slowest fixed run is at least {MARGIN_PCT} % faster than the "
               "fastest baseline run (the two sides' ranges do not overlap)")
ONE_SEQUENTIAL_READ = "16 MiB reads on one fd, front to back"
# A candidate's one cold run stands without a confirmation run only this many times faster than every
# baseline run (or the baseline runs' own spread, where larger): cold runs of one unchanged command on a
# busy 2-vCPU machine were up to 1.46x apart (12.7-18.5 s, issue 23), so a 2x gain is not their noise.
CLEAR_GAIN = 2.0
CONFIRM_RULE = (f"the fastest candidate's cold run is run again, with the baseline again, unless it was at least "
                f"{CLEAR_GAIN:.0f}x faster than every baseline run (and than the spread of the baseline runs): "
                "a smaller gain can be noise")


def confirmation_needed(trial_s: float, baseline_s: Sequence[float]) -> tuple[bool, str]:
    """(whether the candidate timed ``trial_s`` needs a confirmation run against ``baseline_s``, the sentence)."""
    spread = max(baseline_s) / min(baseline_s) if min(baseline_s) > 0 else float("inf")
    needed = max(CLEAR_GAIN, spread)
    gain = min(baseline_s) / trial_s if trial_s > 0 else float("inf")
    if gain >= needed:
        return False, (f"no confirmation run: {gain:.1f}x faster than every baseline run, at least {needed:.1f}x "
                       "is beyond noise")
    return True, f"a confirmation run: {gain:.2f}x faster than the baseline is under {needed:.1f}x, within noise"


@dataclass(frozen=True)
class Verdict:
    word: str  # one of VERDICTS
    why: str  # one sentence, the same in the table and the JSON
    change: str | None = None  # fixed: the fix's one-line change; slow-no-fix: the one the user can make
    speedup: float | None = None  # baseline median / fixed median; only with ``fixed``
    speedup_at_least: float | None = None  # fastest baseline run / slowest fixed run; only with ``fixed``

    @property
    def exit_code(self) -> int:
        return int(EXIT_CODES[self.word])


def _tried(n: int, untried: int = 0) -> str:
    return f"{n} candidate{'s' * (n != 1)} measured" + (f", {untried} not tried" if untried else "")


def runs_text(n_baseline: int, n_fixed: int) -> str:
    return "one run each" if n_baseline == n_fixed == 1 else f"{n_baseline} baseline and {n_fixed} fixed runs"


def _ranges(baseline_s: Sequence[float], fixed_s: Sequence[float]) -> str:
    def side(runs):
        return f"{runs[0]:.2f} s" if len(runs) == 1 else f"{min(runs):.2f}-{max(runs):.2f} s"
    return f"{runs_text(len(baseline_s), len(fixed_s))}: baseline {side(baseline_s)}, fixed {side(fixed_s)}"


def decide(baseline_s: Sequence[float], fixed_s: Sequence[float], *, left_alone: bool, label: str = "the fix",
           change: str | None = None, floor: Floor | None = None, floor_unknown: str = "not measured",
           own_change: str | None = None, unproven: Sequence[str] = (), differing: Sequence[str] = (),
           tried: int | None = None, unconfirmed: str = "", untried: int = 0) -> Verdict:
    """The verdict on runs timed ``baseline_s`` and ``fixed_s`` (wall seconds per run).

    ``left_alone``: the fixed side is the unchanged command (auto found nothing); ``floor``: measured, or
    None (``floor_unknown`` says why); ``own_change``: what the user could change where readtrace could
    not; ``unproven``/``differing``: reasons that no claim stands / tensors that differ; ``tried``: how
    many candidates auto measured before it left the load alone (None: not said); ``unconfirmed``: why a
    gain that needed a confirmation run (``confirmation_needed``) has none (no gain is claimed then);
    ``untried``: candidates left out (a candidate reached the floor, or ``--budget`` was spent).
    """
    if differing:
        more = f" and {len(differing) - 10} more" if len(differing) > 10 else ""
        return Verdict(DIFFERS, f"the fixed run loaded different tensors: {', '.join(differing[:10])}{more}")
    if unproven:
        return Verdict(UNPROVEN, f"nothing proven: {unproven[0]}")
    if not baseline_s or not (fixed_s or left_alone):  # left alone: nothing changed, nothing to run again
        return Verdict(UNPROVEN, "nothing proven: a side has no run")
    base = statistics.median(baseline_s)
    if left_alone:
        unmeasured = f"no candidate was measured ({untried} not tried: see the candidates)" if untried and not tried \
            else ""
        if floor is not None and floor.not_slow(base):
            near = (f"not slow: the baseline ({base:.2f} s) is within {round(100 * (SLOW_MARGIN - 1))} % + "
                    f"{SLOW_ABS_S:.0f} s of its floor ({floor.total_s:.2f} s: {floor.read_how} "
                    f"{floor.read_s:.2f} s + {floor.warm_how} {floor.warm_s:.2f} s)")
            if unmeasured:
                return Verdict(NOT_SLOW, f"{near}; {unmeasured}")
            if tried == 0:
                return Verdict(NOT_SLOW, near + _none_measured(floor, base))
            return Verdict(NOT_SLOW, near + ", and nothing readtrace can change was faster beyond noise"
                           + ("" if tried is None else f" ({_tried(tried, untried)})"))
        where = f"floor {floor.total_s:.2f} s" if floor is not None else f"floor unknown: {floor_unknown}"
        if unmeasured:
            return Verdict(SLOW_NO_FIX, f"slow ({base:.2f} s, {where}); {unmeasured}", own_change)
        nothing = {None: "", 0: ": no candidate can act on this load (see the notes)"}.get(
            tried, f" ({_tried(tried, untried)})")
        return Verdict(SLOW_NO_FIX, f"slow ({base:.2f} s, {where}) but nothing readtrace can change here was "
                       f"faster{nothing}", own_change)
    runs = _ranges(baseline_s, fixed_s)
    if unconfirmed and confirmed(fixed_s, baseline_s):
        return Verdict(NO_GAIN, f"{label}: no gain claimed: {unconfirmed} ({runs})")
    if confirmed(fixed_s, baseline_s):
        speedup = base / statistics.median(fixed_s)
        at_least = min(baseline_s) / max(fixed_s)
        if len(baseline_s) == len(fixed_s) == 1:
            return Verdict(FIXED, f"{label}: {speedup:.2f}x faster ({runs}, at least {MARGIN_PCT} % apart; "
                           "--repeat N measures the noise)", change, speedup, at_least)
        return Verdict(FIXED, f"{label}: {speedup:.2f}x faster (medians; at least {at_least:.2f}x: every fixed "
                       f"run at least {MARGIN_PCT} % faster than every baseline run; {runs})", change, speedup, at_least)
    if confirmed(baseline_s, fixed_s):
        return Verdict(SLOWER, f"{label}: {statistics.median(fixed_s) / base:.2f}x slower (every baseline run at least "
                       f"{MARGIN_PCT} % faster than every fixed run; {runs})")
    return Verdict(NO_GAIN, f"{label}: no gain beyond the runs' spread ({runs}): no speedup claimed")


def _none_measured(floor: Floor, baseline_s: float) -> str:
    """Why a load left alone near its floor had no candidate measured."""
    if floor.nothing_to_gain(baseline_s):
        return "; no candidate was measured: at most 3 % over the floor, there is nothing to gain beyond noise"
    if floor.warm_recorded:  # the recorded run stood for the warm load: no change worth its proof (fix/auto.py)
        return ("; no candidate was measured: none is predicted to be as much faster as a fix must be here, or to be "
                "proved so within what a comparison spends on a load this close to its floor (auto's choice says "
                "which, and the --budget that should buy its proof)")
    return "; no candidate can act on this load (see the notes)"


def own_change(facts: Sequence[dict], seen: set[str]) -> str:
    """The one-line change a user can make in their own code where nothing readtrace could change was
    faster: a lever of the loader that the installed version lacks (so it was not tried), else from what
    the baseline's trace found (``finding_facts``) and the calls its load made."""
    missing = [lv for lv in LEVERS if lv.applies(seen) and not lv.installed()]
    if missing:
        return f"{missing[0].change} (not in the installed version: upgrade the library first)"
    codes = {f.get("code") for f in facts}
    shared = [f for f in facts if f.get("code") == "SHARED_FD_INTERLEAVE"]
    storm = [f for f in facts if f.get("code") == "MMAP_FAULT_STORM"]
    mapped = [f for f in shared if f.get("mapping") or f.get("view") == "residency"] + \
        [f for f in storm if (f.get("tasks") or 0) > 1]
    if mapped:
        n = max((f.get("tasks") or 0) for f in mapped)
        return (f"read it with one sequential reader ({ONE_SEQUENTIAL_READ}) instead of "
                f"{n if n > 1 else 'several'} threads faulting one mapping")
    if shared or FORKED_SHARED in seen:
        return ("open the checkpoint in each worker (after the fork) instead of sharing one open file, or read it "
                f"with one sequential reader ({ONE_SEQUENTIAL_READ})")
    if storm:
        return f"read it with large sequential reads ({ONE_SEQUENTIAL_READ}) instead of faulting a mapping"
    if codes & {"RANDOM_ON_FUSE_HANDLE", "SMALL_REQUESTS"}:
        return f"read it in file order with large reads ({ONE_SEQUENTIAL_READ}) instead of small or out-of-order ones"
    if "SMALL_FUSE_READAHEAD" in codes:
        return "raise the mount's read-ahead (/sys/class/bdi/<dev>/read_ahead_kb) and mount with max_read >= 1 MiB"
    return f"read the checkpoint with one sequential reader ({ONE_SEQUENTIAL_READ}) and load from those bytes"


def differing_names(diff: ManifestDiff) -> list[str]:
    """Every tensor that differs or is missing on one side, named."""
    return diff.differing + [f"{n} (baseline only)" for n in diff.only_baseline] + \
        [f"{n} (fixed only)" for n in diff.only_fixed]


def verdict_of(c: Comparison) -> Verdict:
    """The verdict on a finished comparison: its runs' wall times, auto's choice and floor, its evidence."""
    baselines = c.side("baseline")
    choice = c.choice
    first = baselines[0] if baselines else None
    facts = ((first.summary or {}).get("finding_facts") or []) if first else []
    seen = seen_in(first.manifest.calls) if first else set()
    tried, unconfirmed, untried = None, "", 0
    if choice is not None:
        label, change, floor, unknown = choice.chosen.label, choice.chosen.change, choice.floor, choice.floor_unknown
        tried = len({t.label for t in choice.trials if not t.label.endswith(" (again)")})
        unconfirmed, untried = choice.unconfirmed, len(choice.not_tried)
    else:
        label, floor = f"readtrace {c.strategy}", None
        change = OWN.get(c.strategy, f"readtrace fix --strategy {c.strategy} -- CMD")
        unknown = f"not measured (--strategy {c.strategy})" if c.cold else "not measured (warm runs)"
    return decide([r.wall_s for r in baselines], [r.wall_s for r in c.side("fixed")], left_alone=c.left_alone,
                  label=label, change=change, floor=floor, floor_unknown=unknown or "not measured",
                  own_change=own_change(facts, seen), unproven=c.unproven, differing=differing_names(c.diff),
                  tried=tried, unconfirmed=unconfirmed, untried=untried)
