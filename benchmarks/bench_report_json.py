"""Benchmark: `report --json` against the terminal report on a trace of many small files, side by side.

A synthetic trace (lab.synthetic.small_files: N files of 100 bytes, each read back then
forth) is analysed once; then each output is rendered --reps times into memory: the terminal report,
--json (bounded: the first 100 files and 100 streams per kind) and --json --all. Printed as a table
and saved as JSON. Before the bound (issue 8 item 13): 20k files gave 168 MB of JSON in 32 s.

    .venv/bin/python benchmarks/bench_report_json.py [--files 20000] [--reps 3] [--out bench-results/bench_report_json.json]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: lab/ (test harness, not shipped)

from lab.synthetic import small_files  # noqa: E402
from readtrace.analyze import analyze  # noqa: E402
from readtrace.report.jsonreport import write_json  # noqa: E402
from readtrace.report.terminal import TerminalReport  # noqa: E402
from readtrace.trace import load_trace, write_trace  # noqa: E402

OUTPUTS = {
    "terminal": lambda a, out: TerminalReport(a).render(out),
    "json": lambda a, out: write_json(a, out),
    "json --all": lambda a, out: write_json(a, out, everything=True),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--files", type=int, default=20_000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", default="bench-results/bench_report_json.json")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = write_trace(Path(tmp) / "small.rtrace", **small_files(args.files))
        t0 = time.perf_counter()
        a = analyze(load_trace(trace, lean=True))
        analyze_s = time.perf_counter() - t0
    rows = []
    for name, render in OUTPUTS.items():
        times, size = [], 0
        for _ in range(args.reps):
            buf = io.StringIO()
            t = time.perf_counter()
            render(a, buf)
            times.append(time.perf_counter() - t)
            size = len(buf.getvalue().encode())
        rows.append({"output": name, "median_s": statistics.median(times), "bytes": size})
    base = rows[0]["median_s"]
    print(f"{args.files} files, {len(a.streams)} streams; analysis {analyze_s:.2f} s "
          f"({platform.node()}, {os.cpu_count()} CPUs)")
    print(f"{'output':<12} {'median s':>9} {'x terminal':>11} {'MB':>8}")
    for r in rows:
        r["ratio_to_terminal"] = r["median_s"] / base
        print(f"{r['output']:<12} {r['median_s']:>9.3f} {r['ratio_to_terminal']:>11.2f} {r['bytes'] / 1e6:>8.2f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"files": args.files, "streams": len(a.streams), "analysis_s": analyze_s,
                               "reps": args.reps, "rows": rows, "cpus": os.cpu_count()}, indent=2))


if __name__ == "__main__":
    main()
