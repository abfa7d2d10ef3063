"""Whether a trace holds the whole recording, and if not, why: the one answer every report shows first.

A trace is partial when the recording was interrupted (SIGINT/SIGTERM/SIGHUP), events were lost (a
ring buffer was full), the recorder stopped writing (``partial`` with ``partial_reasons``: a full disk),
processes of the traced tree still ran when the recording ended (``survivors``: a daemonised grandchild),
or the analysis had to merge calls to stay within memory (``calls_per_row`` > 1: per-call figures are
approximate).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Completeness:
    """``complete`` False with one line per reason (most serious first)."""

    complete: bool
    reasons: list[str] = field(default_factory=list)

    def headline(self) -> str:
        """The line that goes on top of every report."""
        if self.complete:
            return "complete trace"
        return "PARTIAL TRACE: " + "; ".join(self.reasons)

    def as_dict(self) -> dict:
        return {"complete": self.complete, "reasons": list(self.reasons)}


def lost_events(meta: dict) -> int:
    """Events the recorder counted as lost (an int, or a dict per source)."""
    lost = meta.get("lost_events", 0) or 0
    if isinstance(lost, dict):
        return int(sum(v for v in lost.values() if isinstance(v, int | float)))
    return int(lost) if isinstance(lost, int | float) else 0


def _partial_reasons(meta: dict) -> list[str]:
    """``partial`` (the recorder's ``partial_reasons``, e.g. a full disk, and ``dropped_records``)."""
    why = [r for r in meta.get("partial_reasons") or [] if isinstance(r, str)] or ["the recorder stopped early"]
    dropped = meta.get("dropped_records")
    tail = f" ({dropped:,} records dropped)" if isinstance(dropped, int) and dropped > 0 else ""
    return [f"{r}{tail}: figures are lower bounds" for r in why]


def completeness(meta: dict, calls_per_row: int = 1) -> Completeness:
    """The trace's completeness from its ``meta.json`` (and the analysis' call merging)."""
    reasons = []
    if meta.get("partial"):
        reasons += _partial_reasons(meta)
    if meta.get("interrupted"):
        reasons.append("the recording was interrupted before the command finished")
    lost = lost_events(meta)
    if lost > 0:
        reasons.append(f"{lost:,} events lost while recording (ring buffer full; record --ring-mib): "
                       "figures are lower bounds")
    survivors = meta.get("survivors") or []
    if isinstance(survivors, list) and survivors:
        shown = ", ".join(str(p) for p in survivors[:5]) + (" ..." if len(survivors) > 5 else "")
        reasons.append(f"{len(survivors)} process(es) of the traced tree still ran when the recording "
                       f"ended (pid {shown}): what they read later is not in the trace")
    if calls_per_row > 1:
        reasons.append(f"merged read runs were analysed as rows of ~{calls_per_row:,} calls "
                       "(too many calls to expand): per-call figures are approximate")
    return Completeness(not reasons, reasons)
