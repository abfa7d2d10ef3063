"""Render a Comparison: one plain-text table for people, one JSON object for machines."""

from __future__ import annotations

import statistics
from typing import TextIO

from readtrace.fix.candidates import confirmed
from readtrace.fix.compare import Comparison
from readtrace.fix.rankcompare import rank_comparison
from readtrace.fix.schedule import STOP_RULE
from readtrace.fix.verdict import (
    CONFIRM_RULE,
    FIXED,
    NO_GAIN,
    SLOW_NO_FIX,
    SLOWER,
    SPREAD_RULE,
    UNPROVEN,
    differing_names,
    verdict_of,
)
from readtrace.inject.manifest import compare_manifests

SIDES = ("baseline", "fixed")
MEASURED, STOPPED, FAILED, NOT_TRIED = "measured", "stopped", "failed", "not tried"  # a candidate's status
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
    timed = [r.loader_s for r in runs if r.loader_s is not None]  # the recorded run's loader calls were not timed
    out = {"wall_s": statistics.median(r.wall_s for r in runs),
           "loader_s": statistics.median(timed) if timed else None,
           "runs": [{"wall_s": r.wall_s, "loader_s": r.loader_s, "trace": r.trace_path,
                     "recorded": bool(r.recorded)} for r in runs]}
    summaries = [r.summary for r in runs if r.summary]
    if summaries:
        keys = {k for s in summaries for k, v in s.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        for key in sorted(keys - out.keys()):  # the trace's own wall_s must not replace the run's
            values = [s[key] for s in summaries if isinstance(s.get(key), int | float)]
            out[key] = statistics.median(values) if values else None
        out["findings"] = sorted({code for s in summaries for code in s.get("findings", []) if code})
    return out


def to_json(comparison: Comparison) -> dict:
    """The comparison as one JSON object (schema: docs/fix-compare.schema.json)."""
    diff = comparison.diff
    verdict = verdict_of(comparison)
    proven = verdict.word != UNPROVEN
    return {
        "verdict": verdict.word,
        "why": verdict.why,
        "change": verdict.change,
        "exit_code": verdict.exit_code,
        "rule": SPREAD_RULE,
        "command": comparison.command,
        "strategy": comparison.strategy,
        "cold": comparison.cold,
        "repeat": len(comparison.side("fixed")),
        "baseline": side_summary(comparison, "baseline"),
        "fixed": side_summary(comparison, "fixed"),
        "speedup": verdict.speedup,
        "speedup_at_least": verdict.speedup_at_least,
        "left_alone": comparison.left_alone if proven else None,
        "rerun_ratio": comparison.rerun_ratio if proven else None,
        "tensors": diff.count,
        "tensors_identical": None if _nothing_rerun(comparison) else
        diff.all_identical if diff.count or not diff.all_identical else None,
        "differing_tensors": differing_names(diff),
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
            "candidates": [_trial_json(comparison, t) for t in choice.trials]
            + [{"label": n.label, "status": NOT_TRIED, "wall_s": None, "exit_code": None, "tensors_identical": None,
                "predicted_s": n.predicted_s, "predicted_by": n.predicted_by, "why": n.why} for n in choice.not_tried],
            "floor": None if floor is None else {"bytes": floor.bytes, "sequential_read_s": floor.read_s,
                                                 "streams": floor.streams, "warm_s": floor.warm_s,
                                                 "warm_from": floor.warm_from,
                                                 "total_s": floor.total_s},
            "confirmation": choice.confirmation or None, "confirmation_rule": CONFIRM_RULE, "stop_rule": STOP_RULE}


def _trial_json(comparison: Comparison, t) -> dict:
    """One candidate's cold run: measured, stopped at its limit, or failed; with its prediction."""
    status = STOPPED if t.stopped else MEASURED if t.exit_code == 0 else FAILED
    return {"label": t.label, "status": status, "wall_s": t.wall_s, "exit_code": t.exit_code,
            "tensors_identical": None if t.stopped else _trial_identical(comparison, t),
            "predicted_s": t.predicted_s, "predicted_by": t.predicted_by, "why": t.stopped}


def _trial_identical(comparison: Comparison, trial) -> bool | None:
    """Did this candidate's run load the baseline's tensors? None: it failed, or no tensors to compare."""
    baselines = comparison.side("baseline")
    if trial.exit_code != 0 or not baselines:
        return None
    diff = compare_manifests(baselines[0].manifest, trial.manifest)
    return diff.all_identical if diff.count else None


def render_table(comparison: Comparison, out: TextIO) -> None:
    data = to_json(comparison)
    base, fixed = data["baseline"], data["fixed"]
    repeat = data["repeat"]
    temperature = ("cold" if comparison.evictions_cold else "not cold") if data["cold"] else "warm"
    n_base = len(base["runs"])
    runs = f"{repeat} {temperature} run{'s' * (repeat > 1)} each" if n_base == repeat else \
        f"{n_base} baseline and {repeat} fixed {temperature} run{'s' * (repeat > 1)}"
    if _nothing_rerun(comparison):
        runs = f"{n_base} {temperature} baseline run{'s' * (n_base > 1)}; left alone, so nothing changed was run"
    out.write(f"fix --compare: strategy {data['strategy']}, {runs}"
              f"{' (median, interleaved)' if max(repeat, n_base) > 1 else ''}\n")
    word = data["verdict"]
    proven = word == FIXED  # the only verdict under which a gain is printed
    rows = [("wall time", _fmt(base["wall_s"], "seconds"), _fmt(fixed["wall_s"], "seconds"), _wall_claim(data)),
            ("time inside loader calls", _fmt(base["loader_s"], "seconds"), _fmt(fixed["loader_s"], "seconds"),
             _loader_claim(comparison) if proven else "")]
    for label, key, kind in TRACE_ROWS:
        if key in base or key in fixed:
            rows.append((label, _fmt(base.get(key), kind), _fmt(fixed.get(key), kind), ""))
    if data["tensors"] and _nothing_rerun(comparison):
        rows.append(("tensors", f"{data['tensors']} seen", "", "not compared (nothing changed)"))
    elif data["tensors"]:
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
    out.write(f"  verdict: {word}: {data['why']}\n")
    if word in (FIXED, NO_GAIN, SLOWER):
        out.write(f"  rule: {data['rule']}\n")
    if data["change"] and word in (FIXED, SLOW_NO_FIX):
        whose = "the one-line change" if word == FIXED else "the one-line change you can make yourself"
        out.write(f"  {whose}: {data['change']}\n")


def _wall_claim(data: dict) -> str:
    """The wall row's last cell: a gain only under ``fixed``; what else the verdict allows otherwise."""
    word = data["verdict"]
    if word == FIXED:
        return _speedup(data["speedup"])
    if word == SLOWER:
        return f"{data['fixed']['wall_s'] / data['baseline']['wall_s']:.2f}x slower"
    if word == NO_GAIN:
        return "no gain beyond the runs' spread"
    if data["left_alone"]:
        return _left_alone(data["rerun_ratio"])
    return "not compared"


def _loader_claim(comparison: Comparison) -> str:
    """Time inside loader calls: a gain only where those times, too, beat the baseline's beyond their spread."""
    base = [r.loader_s for r in comparison.side("baseline") if r.loader_s is not None]
    fixed = [r.loader_s for r in comparison.side("fixed")]
    if not base or not confirmed(fixed, base) or not all(fixed):
        return ""
    return _speedup(statistics.median(base) / statistics.median(fixed))


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
        gain = _speedup(_ratio(b["loader_s"], f["loader_s"])) if proven else ""
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
        streams = floor.get("streams") or 1
        how = "sequential read" if streams == 1 else f"read in order by {streams} own-fd streams"
        warm = ("the recorded run besides its waits on the checkpoint" if floor.get("warm_from") == "recorded run"
                else "the load warm")
        out.write(f"  floor: {how} of {_fmt(floor['bytes'], 'bytes')} {floor['sequential_read_s']:.2f} s"
                  f" + {warm} {floor['warm_s']:.2f} s = {floor['total_s']:.2f} s\n")
    for cand in choice["candidates"]:
        predicted = "" if cand["predicted_s"] is None else f" (predicted {cand['predicted_s']:.2f} s)"
        if cand["status"] == NOT_TRIED:
            out.write(f"    not tried {cand['label']:<24} {predicted.strip()}{': ' * bool(predicted)}{cand['why']}\n")
            continue
        if cand["status"] == STOPPED:
            state = cand["why"]
        else:
            state = f"exit {cand['exit_code']}" if cand["exit_code"] else f"{cand['wall_s']:.2f} s"
        same = {True: "", False: ", tensors differ", None: ""}[cand["tensors_identical"]]
        out.write(f"    tried {cand['label']:<28} {state}{same}{predicted}\n")
    if any(c["status"] == STOPPED for c in choice["candidates"]):
        out.write(f"  stop rule: {choice['stop_rule']}\n")
    if choice["confirmation"]:
        out.write(f"  confirmation: {choice['confirmation']} (rule: {choice['confirmation_rule']})\n")


def _nothing_rerun(comparison: Comparison) -> bool:
    """Left alone with no run of the unchanged command on the fixed side: no tensors were compared."""
    return comparison.left_alone and not comparison.side("fixed")


def _left_alone(rerun_ratio: float | None) -> str:
    """The "fixed" side of a load left alone is the same command run again: no gain, only noise."""
    noise = f"; two runs {abs(1 - rerun_ratio) * 100:.0f} % apart" if rerun_ratio else ""
    return f"unchanged (left alone{noise})"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _speedup(x: float | None) -> str:
    """'3.1x faster' ('1.03x faster' below 1.1x, never '1.0x faster'); the caller has applied the spread rule."""
    if x is None or x == float("inf") or x <= 0:
        return ""
    return f"{x:.1f}x faster" if x >= 1.095 else f"{x:.2f}x faster" if x >= 1 else f"{1 / x:.2f}x slower"


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
