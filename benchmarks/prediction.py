"""The report's predictions and advice against what `fix --compare` measures, per client (issue 21).

    sudo .venv/bin/python benchmarks/prediction.py --sizes 64 --cells default
    sudo .venv/bin/python benchmarks/prediction.py --sizes 256 --cells lab:20:safe_open_threads,rclone:20:fork_pool

Per compat cell (a real loader on a real FUSE client, servers on 127.0.0.1, the mount probed first;
benchmarks/report_corpus.compat_cases): the load recorded cold and reported, then `fix --compare` of
its command (strategy auto, cold runs, tensors compared). Printed as tables, saved as JSON:

- the load predicted from its own trace (what-if model on the mount's measured costs) against that
  recorded cold run's wall (fix's own baseline, cold and not recorded, beside it), and the report's
  fixed prediction against the measured fixed side (the baseline where fix left the load alone);
- each load predicted with the costs measured from another loader's trace on the same mount (its own
  trace's costs fit its own pattern; another load's test whether the model carries over);
- per lever the report advises (``findings[].lever_predictions``: predicted to gain on this mount), its
  predicted time and the measured wall of fix's candidate that applies it (own fd: readtrace's own-fd
  loader, an own fd per forked worker or a populate through the loader's fd; own-fd loader: readtrace's
  own-fd loader; prefetch: readtrace's prefetch), and the levers ruled out;
- SHARED_FD_INTERLEAVE flagged, i.e. claimed to cost enough that own fds gain >= 1.3x (a cause whose
  seconds are >= 23 % of the wall: wall / (wall - cost) >= 1.3), against the truth: fix's own fd per
  forked worker (the one candidate that changes the shared handle and nothing else) measured >= 1.3x
  faster than the baseline; a loader that shares no handle must not be flagged; where the sharing is
  threads on one mapping, fix's candidates change the reads too, so the truth is not measured ("-").

Targets: every prediction within 30 %; no advised lever measured slower than its baseline (< 0.97x);
the interleave flagged exactly where own fds measure >= 1.3x.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: lab/ (test harness)
from compat_matrix import machine  # noqa: E402
from report_corpus import compat_cases  # noqa: E402

from lab.cells import advised_levers, candidate_walls  # noqa: E402
from readtrace.fix.candidates import NO_HARM  # noqa: E402
from readtrace.measure.profile import HANDLE_PENALTY_MIN  # noqa: E402

# The cells of ``--cells default``: each client of tests/compat and the new ones, with a loader that reads
# through threads, one that forks workers on one fd and one plain load (httpdirfs' auto takes ~20 min a
# loader: one cell).
DEFAULT_CELLS = ([(c, lat, n) for c, lat in (("lab", 20), ("rclone", 20), ("juicefs", 20), ("sshfs", 20), ("s3fs", 20))
                  for n in ("safe_open_threads", "fork_pool", "load_file")]
                 + [("lab-drop", 20, "safe_open_threads"), ("squashfuse", 0, "safe_open_threads"),
                    ("bindfs", 0, "fork_pool"), ("httpdirfs", 0, "load_file")])
WITHIN = 0.30  # a prediction within 30 % of the measured wall
OWN_FD_GAIN = HANDLE_PENALTY_MIN  # own fds measured this much faster: the interleave cost the load
OWN_FD_PER_FORK = "readtrace own fd per forked worker"


def row(c: dict) -> dict:
    """One cell: the predictions, the advice and what fix measured."""
    fix = c.get("fix") or {}
    base = (fix.get("baseline") or {}).get("wall_s")
    fixed = base if fix.get("left_alone") else (fix.get("fixed") or {}).get("wall_s")
    walls = candidate_walls(fix)
    ruled_out = {lever for f in c["findings"] if f["severity"] != "info" for lever in f.get("not_expected") or []}
    levers = [{**lv, "gain": base / lv["measured_s"] if base and lv["measured_s"] else None}
              for lv in advised_levers(c["findings"], fix)]
    own = walls.get(OWN_FD_PER_FORK)
    own_gain = base / own if base and own else None
    wall = c["wall_s"]
    claimed = [wall / (wall - f["cost_s"]) for f in c["findings"] if f["code"] == "SHARED_FD_INTERLEAVE"
               and f["severity"] != "info" and f["cost_s"] and wall and f["cost_s"] < wall]
    flagged = bool(claimed) and max(claimed) >= OWN_FD_GAIN
    truth = (False if not c["shares_handle"] else None if own_gain is None else own_gain >= OWN_FD_GAIN)
    return {"client": c["client"], "loader": c["loader"], "size_mib": c["size_mib"], "latency_ms": c["latency_ms"],
            "recorded_s": c["wall_s"], "predicted_s": c["predicted_s"], "baseline_s": base,
            "predicted_fixed_s": c["predicted_fixed_s"], "fixed_s": fixed, "left_alone": fix.get("left_alone"),
            "verdict": fix.get("verdict"), "chosen": (fix.get("choice") or {}).get("chosen"),
            "tensors_identical": fix.get("tensors_identical"), "handle_penalty": c["handle_penalty"],
            "levers": levers, "ruled_out": sorted(ruled_out), "own_fd_gain": own_gain,
            "interleave_flagged": flagged, "interleave_claimed": max(claimed, default=None),
            "interleave_truth": truth, "candidates": walls,
            "fix_error": c.get("fix_error"), "trace": c["trace"],
            "findings": [f"{f['code']}:{f['severity']}:{f['cost_s'] if f['cost_s'] is None else round(f['cost_s'], 2)}"
                         for f in c["findings"]]}


def off(predicted: float | None, wall: float | None) -> float | None:
    """Signed relative error of a prediction against the measured wall."""
    return None if predicted is None or not wall else predicted / wall - 1


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _x(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.0%}" + ("" if abs(x) <= WITHIN else " MISS")


def print_tables(rows: list[dict]) -> dict:
    """The three tables and the score of each target."""
    print("\n| client | loader | MiB | recorded s | predicted s (off) | baseline s | fixed s | predicted fixed s (off) "
          "| verdict |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['client']} | {r['loader']} | {r['size_mib']} | {_s(r['recorded_s'])} | {_s(r['predicted_s'])} "
              f"({_pct(off(r['predicted_s'], r['recorded_s']))}) | {_s(r['baseline_s'])} | {_s(r['fixed_s'])}"
              f"{' (left alone)' if r['left_alone'] else ''} | {_s(r['predicted_fixed_s'])} "
              f"({_pct(off(r['predicted_fixed_s'], r['fixed_s']))}) | {r['verdict'] or r['fix_error'] or '-'} |")
    print("\n| client | loader | MiB | lever advised | predicted s | measured s | gain | ruled out |")
    print("|---|---|---|---|---|---|---|---|")
    slower, advised = [], 0
    for r in rows:
        for lv in r["levers"] or [{"lever": "-", "predicted_s": None, "measured_s": None, "gain": None}]:
            gain = lv["gain"]
            if lv["lever"] != "-":
                advised += 1
                if gain is not None and gain < NO_HARM:
                    slower.append(f"{r['client']}/{r['loader']}/{lv['lever']}")
            print(f"| {r['client']} | {r['loader']} | {r['size_mib']} | {lv['lever']} | {_s(lv['predicted_s'])} | "
                  f"{_s(lv['measured_s'])} | {'-' if gain is None else f'{gain:.2f}x'} | "
                  f"{', '.join(r['ruled_out']) or '-'} |")
    print("\n| client | loader | MiB | per-handle penalty (probe) | own fd per worker measured | SHARED_FD claims "
          "| flagged (>= 1.3x) | should be |")
    print("|---|---|---|---|---|---|---|---|")
    wrong = []
    for r in rows:
        truth = r["interleave_truth"]
        if truth is not None and truth != r["interleave_flagged"]:
            wrong.append(f"{r['client']}/{r['loader']}")
        gain, penalty = r["own_fd_gain"], r["handle_penalty"]
        print(f"| {r['client']} | {r['loader']} | {r['size_mib']} | {'-' if penalty is None else f'{penalty:.2f}x'} | "
              f"{'-' if gain is None else f'{gain:.2f}x'} | {_x(r.get('interleave_claimed'))} | "
              f"{'yes' if r['interleave_flagged'] else 'no'} | "
              f"{'-' if truth is None else ('yes' if truth else 'no')} |")
    crossed = print_cross(rows)
    errors = [off(r[p], r[m]) for r in rows for p, m in (("predicted_s", "recorded_s"), ("predicted_fixed_s", "fixed_s"))]
    known = [e for e in errors if e is not None]
    score = {"predictions": len(known), "within_30pct": sum(abs(e) <= WITHIN for e in known),
             "cross_predictions": len(crossed), "cross_within_30pct": sum(abs(e) <= WITHIN for e in crossed),
             "advised_levers": advised, "advised_slower_than_baseline": slower,
             "interleave_wrong": wrong, "load_average": os.getloadavg()}
    print(f"\npredictions within {WITHIN:.0%}: {score['within_30pct']} of {score['predictions']} (with another load's "
          f"costs: {score['cross_within_30pct']} of {score['cross_predictions']}); advised levers "
          f"measured slower than the baseline: {len(slower)} of {advised} {slower or ''}; SHARED_FD_INTERLEAVE "
          f"wrong: {len(wrong)} {wrong or ''}; load average {score['load_average'][0]:.2f}")
    return score


def cross_predictions(rows: list[dict]) -> None:
    """Each row's load predicted with the mount costs measured from each other loader's trace of the same
    client and size (``row["cross"]``); the traces must still be there (before the work directory goes)."""
    from readtrace.analyze import analyze
    from readtrace.analyze.storage import whatif
    from readtrace.trace import load_trace

    analysed = {}
    for r in rows:
        if r.get("trace") and Path(r["trace"]).exists():
            analysed[id(r)] = analyze(load_trace(r["trace"], lean=True))
    for r in rows:
        a, r["cross"] = analysed.get(id(r)), []
        if a is None or a.summary.wall_s is None:
            continue
        for donor in rows:
            d = analysed.get(id(donor))
            if donor is r or d is None or (donor["client"], donor["size_mib"]) != (r["client"], r["size_mib"]):
                continue
            costs = whatif.mount_profile(d)
            if costs is not None:
                r["cross"].append({"costs_from": donor["loader"], "predicted_s": whatif.what_if(a, [costs])[0].predicted_s})


def print_cross(rows: list[dict]) -> list[float]:
    """The table of ``cross_predictions``; the signed errors."""
    print("\n| client | MiB | load | recorded s | costs from | predicted s (off) |")
    print("|---|---|---|---|---|---|")
    errors = []
    for r in rows:
        for c in r.get("cross") or []:
            e = off(c["predicted_s"], r["recorded_s"])
            if e is not None:
                errors.append(e)
            print(f"| {r['client']} | {r['size_mib']} | {r['loader']} | {_s(r['recorded_s'])} | {c['costs_from']} | "
                  f"{_s(c['predicted_s'])} ({_pct(e)}) |")
    return errors


def parse_cells(text: str) -> list[tuple[str, float, str]]:
    if text == "default":
        return DEFAULT_CELLS
    cells = []
    for part in text.split(","):
        client, latency, loader = part.split(":")
        cells.append((client, float(latency), loader))
    return cells


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="64", help="checkpoint sizes in MiB, comma-separated")
    p.add_argument("--cells", default="default", help="'default' or CLIENT:MS:LOADER,...")
    p.add_argument("--out", default="bench-results")
    p.add_argument("--table", metavar="JSON", nargs="+", help="only print the tables of saved runs")
    p.add_argument("--keep", help="keep checkpoints, traces and runs in this directory (default: a temporary one)")
    args = p.parse_args()
    if args.table:
        rows = [r for t in args.table for r in json.loads(Path(t).read_text())["rows"]]
        if not any("cross" in r for r in rows):  # saved before that table: from the kept traces, where still there
            cross_predictions(rows)
        print_tables(rows)
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        with _work(args.keep, size) as tmp:
            def done(c: dict) -> None:  # saved after every cell: a long run cut short keeps what it has
                rows.append(row(c))
                save(out / "prediction.json", args, rows, None)

            start = len(rows)
            compat_cases(parse_cells(args.cells), size, Path(tmp), fix=True, done=done)
            cross_predictions(rows[start:])
            save(out / "prediction.json", args, rows, None)
    score = print_tables(rows)
    save(out / "prediction.json", args, rows, score)
    print(f"saved {out / 'prediction.json'}")
    return 0


@contextmanager
def _work(keep: str | None, size: int):
    """The directory of one size's cells: under ``keep`` (kept), else a temporary one."""
    if keep is None:
        with tempfile.TemporaryDirectory(prefix="readtrace-prediction-") as tmp:
            yield tmp
        return
    path = Path(keep) / f"{size}MiB"
    path.mkdir(parents=True, exist_ok=True)
    yield str(path)


def save(path: Path, args, rows: list[dict], score: dict | None) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"machine": machine(), "args": vars(args), "rows": rows, "score": score}, indent=2))
    tmp.replace(path)


if __name__ == "__main__":
    sys.exit(main())
