"""Benchmark: `readtrace report --json` on a synthetic N-event trace on disk (default 10 M events).

Each measured step runs in its own subprocess; its peak RSS comes from getrusage(RUSAGE_CHILDREN).
Steps side by side: load_trace alone (the floor), load + analyze, the whole `report --json` command.
Target (issue 4): report <= 10 s and <= 2 GiB RSS for 10 M events on the 2-vCPU VM.

    .venv/bin/python benchmarks/bench_report.py [--events 10000000] [--out bench-results/bench_report.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from readtrace.trace import TraceWriter

CHUNK = 1_000_000
WORKERS = 8
READ = 64 * 1024
TARGET_S, TARGET_RSS = 10.0, 2 << 30


def write_synthetic(path: Path, events: int) -> Path:
    """``events`` pread events: 8 forked workers on one shared fd, each sequential over its 1/8 of a file,
    taking turns (the seed case at scale), plus the open event."""
    per_worker = events // WORKERS
    size = per_worker * WORKERS * READ
    w = TraceWriter(path, force=True)
    w.append("files", {"path": ["/mnt/model/big.safetensors"], "dev": [40], "ino": [2], "size": [size],
                       "fstype": ["fuse.gcsfuse"], "mountpoint": ["/mnt/model"]})
    w.append("events", {"ts_ns": [0], "pid": [100], "tid": [100], "comm": ["python"], "op": ["open"], "fd": [3],
                        "ofd": [-0x7777], "path": ["/mnt/model/big.safetensors"], "dev": [40], "ino": [2]})
    for start in range(0, per_worker * WORKERS, CHUNK):
        i = np.arange(start, min(start + CHUNK, per_worker * WORKERS))
        worker, step = i % WORKERS, i // WORKERS
        pid = 101 + worker
        w.append("events", pd.DataFrame({
            "ts_ns": 1000 + i * 2000, "pid": pid.astype(np.int32), "tid": pid.astype(np.int32), "comm": "python",
            "op": "pread", "fd": np.int32(3), "ofd": np.int64(-0x7777), "offset": (worker * per_worker + step) * READ,
            "size": READ, "ret": READ, "latency_ns": 20_000 + (i % 97) * 100}))
    return w.close({"command": ["python", "synthetic.py"], "exit_code": 0, "lost_events": 0})


STEPS = {
    "load_trace": "from readtrace.trace import load_trace; t = load_trace(sys.argv[1])",
    "load+analyze": ("from readtrace.trace import load_trace; from readtrace.analyze import analyze; "
                     "a = analyze(load_trace(sys.argv[1]))"),
    "report --json": ("from readtrace.cli import main; sys.stdout = open(os.devnull, 'w'); "
                      "sys.exit(main(['report', sys.argv[1], '--json']))"),
}


# The child reports its own peak RSS at exit (RUSAGE_CHILDREN in the parent would be the max over all).
_RSS_AT_EXIT = ("import atexit, resource; atexit.register(lambda: open(sys.argv[2], 'w').write("
                "str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)))")


def measure(code: str, trace: Path) -> tuple[float, int]:
    """Wall seconds and peak RSS bytes of ``code`` run in a fresh interpreter."""
    rss_file = trace.parent / "rss"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import os, sys\n{_RSS_AT_EXIT}\n{code}", str(trace), str(rss_file)],
                   check=True)
    wall = time.perf_counter() - t0
    return wall, int(rss_file.read_text()) * 1024


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=10_000_000)
    p.add_argument("--out", default="bench-results/bench_report.json")
    p.add_argument("--keep", action="store_true", help="keep the synthetic trace in /tmp")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rt-bench-", dir="/tmp"))
    try:
        t0 = time.perf_counter()
        trace = write_synthetic(tmp / "bench.rtrace", args.events)
        gen_s = time.perf_counter() - t0
        disk = sum(f.stat().st_size for f in trace.iterdir())
        rows = []
        for name, code in STEPS.items():
            wall, rss = measure(code, trace)
            rows.append({"step": name, "wall_s": round(wall, 2), "peak_rss_mib": round(rss / (1 << 20))})
        floor = rows[0]["wall_s"]
        print(f"trace: {args.events:,} events, {disk / (1 << 20):.0f} MiB on disk, written in {gen_s:.1f} s")
        print(f"{'step':<16}{'wall s':>9}{'x load':>9}{'peak RSS MiB':>15}")
        for r in rows:
            r["x_load"] = round(r["wall_s"] / floor, 2)
            print(f"{r['step']:<16}{r['wall_s']:>9.2f}{r['x_load']:>9.2f}{r['peak_rss_mib']:>15}")
        report = rows[-1]
        ok = report["wall_s"] <= TARGET_S and report["peak_rss_mib"] << 20 <= TARGET_RSS
        print(f"target <= {TARGET_S:.0f} s and <= {TARGET_RSS >> 30} GiB: {'met' if ok else 'NOT met'}")
        result = {"events": args.events, "trace_disk_bytes": disk, "steps": rows, "target_met": ok,
                  "machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                              "python": platform.python_version()}}
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2))
        print(f"saved {out}")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
