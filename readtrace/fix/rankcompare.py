"""A torchrun job's comparison rank by rank: what each rank loaded, baseline vs fixed.

Every manifest record of a rank carries its RANK (protocol.append_manifest). Per rank and side: the
time inside its loader calls (median over the side's runs), its tensors and one digest over them
(sha256 of the sorted (file, name, dtype, shape, sha256) lines: equal digests, equal tensors), the
bytes its start-up prefetch read, and, when the runs were recorded, the trace's per-rank figures
(analyze/job/ranks.py: bytes read, span bytes, wait). ``identical``: the rank's fixed runs loaded exactly
the tensors its baseline runs did.
"""

from __future__ import annotations

import hashlib
import statistics

from readtrace.inject.manifest import Manifest, compare_manifests
from readtrace.rerun.records import PREFETCH

TRACE_FIELDS = ("bytes_read", "span_bytes", "wait_s")


def of_rank(manifest: Manifest, rank: int) -> Manifest:
    return Manifest([t for t in manifest.tensors if t.rank == rank], [c for c in manifest.calls if c.rank == rank])


def ranks_in(runs) -> list[int]:
    return sorted({t.rank for r in runs for t in (*r.manifest.tensors, *r.manifest.calls) if isinstance(t.rank, int)})


def digest(manifest: Manifest) -> str:
    lines = sorted(f"{t.file}\0{t.name}\0{t.dtype}\0{list(t.shape)}\0{t.sha256}" for t in manifest.tensors)  # shape as read
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _side(runs, rank: int) -> dict:
    mine = [of_rank(r.manifest, rank) for r in runs]
    digests = sorted({digest(m) for m in mine})
    timed = [m for m, r in zip(mine, runs, strict=True) if not r.recorded]  # the recorded run: no loader times
    out = {"loader_s": _median([m.loader_s for m in timed]),
           "tensors": len(mine[0].tensors) if mine else 0,
           "digest": digests[0] if len(digests) == 1 else digests,
           "prefetched_bytes": _median([sum(c.bytes or 0 for c in m.calls if c.call == PREFETCH)
                                        for m in mine])}
    rows = [next((row for row in (r.summary or {}).get("ranks", []) if row.get("rank") == rank), None) for r in runs]
    for key in TRACE_FIELDS:
        values = [row[key] for row in rows if row and row.get(key) is not None]
        if values:
            out[key] = _median(values)
    return out


def rank_comparison(comparison) -> dict | None:
    """{"ranks": [per rank], "job": {...}} for a job whose tensors carry ranks; None otherwise."""
    base, fixed = comparison.side("baseline"), comparison.side("fixed")
    ranks = ranks_in(base + fixed)
    if not ranks or not base or not fixed:
        return None
    rows = []
    for rank in ranks:
        diffs = [compare_manifests(of_rank(base[0].manifest, rank), of_rank(r.manifest, rank)) for r in fixed + base[1:]]
        rows.append({"rank": rank, "baseline": _side(base, rank), "fixed": _side(fixed, rank),
                     "tensors": diffs[0].count, "identical": all(d.all_identical for d in diffs) and diffs[0].count > 0})
    plan = comparison.plan
    return {"ranks": rows,
            "job": {"ranks": len(rows), "identical_on_every_rank": all(r["identical"] for r in rows),
                    "slowest_loader_s": {side: max(r[side]["loader_s"] or 0.0 for r in rows)
                                         for side in ("baseline", "fixed")},
                    "prefetched_bytes": sum(r["fixed"]["prefetched_bytes"] or 0 for r in rows)},
            "plan": None if plan is None else {"mode": plan.mode, "why": plan.why,
                                               "bytes_by_rank": plan.bytes_by_rank()}}
