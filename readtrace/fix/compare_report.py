"""Render a Comparison: one plain-text table for people, one JSON object for machines."""

from __future__ import annotations

import statistics
from typing import TextIO

from readtrace.fix.compare import Comparison
from readtrace.fix.rankcompare import rank_comparison

SIDES = ("baseline", "fixed")
# (label, summary key, format) of the trace-derived rows; shown when the runs were recorded.
TRACE_ROWS = (
    ("bytes fetched (page-cache misses)", "cache_miss_bytes", "bytes"),
    ("bytes read by the program", "bytes_read", "bytes"),
    ("FUSE read requests", "fuse_read_requests", "count"),
    ("% consecutive on the handle", "handle_consecutive_fraction", "percent"),
    ("lost events", "lost_events", "count"),
)


def side_summary(comparison: Comparison, side: str) -> dict:
    """Medians over one side's runs: wall, loader time and every numeric trace summary field."""
    runs = comparison.side(side)
    if not runs:
        return {"wall_s": None, "loader_s": None, "runs": []}
    out = {"wall_s": statistics.median(r.wall_s for r in runs),
           "loader_s": statistics.median(r.loader_s for r in runs),
           "runs": [{"wall_s": r.wall_s, "loader_s": r.loader_s, "trace": r.trace_path} for r in runs]}
    summaries = [r.summary for r in runs if r.summary]
    if summaries:
        keys = {k for s in summaries for k, v in s.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        for key in sorted(keys):
            values = [s[key] for s in summaries if isinstance(s.get(key), int | float)]
            out[key] = statistics.median(values) if values else None
        out["findings"] = sorted({code for s in summaries for code in s.get("findings", []) if code})
    return out


def to_json(comparison: Comparison) -> dict:
    diff = comparison.diff
    return {
        "command": comparison.command,
        "strategy": comparison.strategy,
        "cold": comparison.cold,
        "repeat": len(comparison.side("fixed")),
        "baseline": side_summary(comparison, "baseline"),
        "fixed": side_summary(comparison, "fixed"),
        "speedup": comparison.speedup,
        "left_alone": comparison.left_alone,
        "rerun_ratio": comparison.rerun_ratio,
        "tensors": diff.count,
        "tensors_identical": diff.all_identical,
        "differing_tensors": diff.differing + [f"{n} (baseline only)" for n in diff.only_baseline]
        + [f"{n} (fixed only)" for n in diff.only_fixed],
        "files": [{"path": e.path, "fstype": e.fstype, "resident_before": e.before, "resident_after": e.after}
                  for e in comparison.evictions],
        "notes": comparison.notes,
        "unproven": comparison.unproven,
        "choice": _choice_json(comparison),
        **_ranks_json(comparison),
    }


def _ranks_json(comparison: Comparison) -> dict:
    """Under torchrun: ``ranks`` (per rank, baseline vs fixed), ``job`` and ``rank_plan``; else nulls."""
    found = rank_comparison(comparison)
    if found is None:
        return {"ranks": None, "job": None, "rank_plan": None}
    return {"ranks": found["ranks"], "job": found["job"], "rank_plan": found["plan"]}


def _choice_json(comparison: Comparison) -> dict | None:
    choice = comparison.choice
    if choice is None:
        return None
    floor = choice.floor
    return {"chosen": choice.chosen.label, "change": choice.chosen.change, "why": choice.why,
            "candidates": [{"label": t.label, "wall_s": t.wall_s, "exit_code": t.exit_code,
                            "tensors_identical": t.label in choice.identical if t.exit_code == 0 else None}
                           for t in choice.trials],
            "floor": None if floor is None else {"bytes": floor.bytes, "sequential_read_s": floor.read_s,
                                                 "warm_s": floor.warm_s, "total_s": floor.total_s}}


def render_table(comparison: Comparison, out: TextIO) -> None:
    data = to_json(comparison)
    base, fixed = data["baseline"], data["fixed"]
    repeat = data["repeat"]
    temperature = ("cold" if comparison.evictions_cold else "not cold") if data["cold"] else "warm"
    n_base = len(base["runs"])
    runs = f"{repeat} {temperature} run{'s' * (repeat > 1)} each" if n_base == repeat else \
        f"{n_base} baseline and {repeat} fixed {temperature} run{'s' * (repeat > 1)}"
    out.write(f"fix --compare: strategy {data['strategy']}, {runs}"
              f"{' (median, interleaved)' if max(repeat, n_base) > 1 else ''}\n")
    proven = not data["unproven"]
    rows = [("wall time", _fmt(base["wall_s"], "seconds"), _fmt(fixed["wall_s"], "seconds"),
             _left_alone(data["rerun_ratio"]) if data["left_alone"] and proven
             else _speedup(data["speedup"]) if proven else "not compared"),
            ("time inside loader calls", _fmt(base["loader_s"], "seconds"), _fmt(fixed["loader_s"], "seconds"),
             _speedup(_ratio(base["loader_s"], fixed["loader_s"])) if proven and not data["left_alone"] else "")]
    for label, key, kind in TRACE_ROWS:
        if key in base or key in fixed:
            rows.append((label, _fmt(base.get(key), kind), _fmt(fixed.get(key), kind), ""))
    if data["tensors"]:
        rows.append(("tensors identical", f"{comparison.diff.identical}/{data['tensors']}", "",
                     "yes" if data["tensors_identical"] else "NO"))
    else:
        rows.append(("tensors identical", "none seen", "", "not checked"))
    widths = [max(len(r[i]) for r in [("", "baseline", "fixed", "")] + rows) for i in range(4)]
    header = ("", "baseline", "fixed", "")
    for row in [header, *rows]:
        out.write(f"  {row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:>{widths[2]}}  {row[3]}".rstrip()
                  + "\n")
    if data["ranks"]:
        _render_ranks(data, proven, out)
    for side in SIDES:
        if "findings" in data[side]:
            out.write(f"  findings {side}: {', '.join(data[side]['findings']) or 'none'}\n")
    for name in data["differing_tensors"]:
        out.write(f"  DIFFERS: {name}\n")
    _render_choice(data["choice"], out)
    for note in data["notes"]:
        out.write(f"  note: {note}\n")
    for why in data["unproven"]:
        out.write(f"  cannot compare: {why}\n")


def _render_ranks(data: dict, proven: bool, out: TextIO) -> None:
    """One line per rank: loader time and digest per side, prefetched bytes, trace figures, identity."""
    job, plan = data["job"], data["rank_plan"]
    if plan:
        out.write(f"  rank plan: {plan['mode']}: {plan['why']}\n")
    header = ("rank", "loader baseline", "loader fixed", "", "prefetched", "read baseline", "read fixed",
              "digest baseline", "digest fixed", "tensors")
    rows = []
    for r in data["ranks"]:
        b, f = r["baseline"], r["fixed"]
        gain = _speedup(_ratio(b["loader_s"], f["loader_s"])) if proven and not data["left_alone"] else ""
        rows.append((str(r["rank"]), _fmt(b["loader_s"], "seconds"), _fmt(f["loader_s"], "seconds"), gain,
                     _fmt(f["prefetched_bytes"], "bytes"), _fmt(b.get("bytes_read"), "bytes"),
                     _fmt(f.get("bytes_read"), "bytes"), _digest_text(b["digest"]), _digest_text(f["digest"]),
                     f"{r['tensors']} {'identical' if r['identical'] else 'DIFFER'}"))
    slowest = job["slowest_loader_s"]
    rows.append(("job", _fmt(slowest["baseline"], "seconds"), _fmt(slowest["fixed"], "seconds"), "",
                 _fmt(job["prefetched_bytes"], "bytes"), "", "", "", "",
                 "identical on every rank" if job["identical_on_every_rank"] else "NOT identical on every rank"))
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    out.write("  per rank (loader: time inside its loader calls; job: the slowest rank's):\n")
    for row in [header, *rows]:
        out.write("    " + "  ".join(f"{cell:<{w}}" if i in (0, 3, 9) else f"{cell:>{w}}"
                                   for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip() + "\n")


def _digest_text(digest) -> str:
    return digest if isinstance(digest, str) else "runs differ"


def _render_choice(choice: dict | None, out: TextIO) -> None:
    if choice is None:
        return
    out.write(f"  auto chose: {choice['chosen']}: {choice['why']}\n")
    floor = choice["floor"]
    if floor:
        out.write(f"  floor: sequential read of {_fmt(floor['bytes'], 'bytes')} {floor['sequential_read_s']:.2f} s"
                  f" + the load warm {floor['warm_s']:.2f} s = {floor['total_s']:.2f} s\n")
    for cand in choice["candidates"]:
        state = f"exit {cand['exit_code']}" if cand["exit_code"] else f"{cand['wall_s']:.2f} s"
        out.write(f"    tried {cand['label']:<28} {state}\n")
    if choice["chosen"] != "left alone":
        out.write(f"  the one-line change: {choice['change']}\n")


def _left_alone(rerun_ratio: float | None) -> str:
    """The "fixed" side of a load left alone is the same command run again: no gain, only noise."""
    noise = f"; two runs {abs(1 - rerun_ratio) * 100:.0f} % apart" if rerun_ratio else ""
    return f"unchanged (left alone{noise})"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _speedup(x: float | None) -> str:
    """'3.1x faster', '1.25x slower', or 'same' within 3 % (never 'faster' for 1.0x)."""
    if x is None or x == float("inf") or x <= 0:
        return ""
    if 1 / 1.03 < x < 1.03:
        return "same (within 3 %)"
    return f"{x:.1f}x faster" if x >= 1 else f"{1 / x:.2f}x slower"


def _fmt(value, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "seconds":
        return f"{value:.2f} s"
    if kind == "percent":
        return f"{100 * value:.0f} %"
    if kind == "bytes":
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value >= size:
                return f"{value / size:.1f} {unit}"
        return f"{int(value)} B"
    return f"{int(value):,}"
