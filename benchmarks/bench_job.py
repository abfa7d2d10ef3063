"""Benchmark: `readtrace report NODE*.rtrace --json` on a synthetic job of K node traces of N events each.

Each node trace is the seed case at scale (bench_report.write_synthetic: 8 ranks on one shared fd of a
FUSE-mounted checkpoint), labelled with its host, start time and ranks. The report runs in a fresh
interpreter; its peak RSS is its own getrusage at exit. Nodes are analysed one at a time, so memory
is that of the largest node, not the sum. Target (issue 13): 100 M events in 10 node traces <= 60 s
and <= 2 GiB RSS on the 2-vCPU VM.

    .venv/bin/python benchmarks/bench_job.py [--nodes 10] [--events 10000000] [--out bench-results/bench_job.json]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_report import WORKERS, measure, save_result, write_synthetic  # noqa: E402

TARGET_S, TARGET_RSS = 60.0, 2 << 30


def write_job(directory: Path, nodes: int, events: int) -> list[Path]:
    paths = []
    for n in range(nodes):
        ranks = {str(101 + w): {"rank": n * WORKERS + w, "local_rank": w, "world_size": nodes * WORKERS}
                 for w in range(WORKERS)}
        meta = {"hostname": f"node{n}", "start_time": f"2026-12-01T10:00:{n:02d}+00:00", "t0_ns": 0,
                "wall_s": 30.0 + n, "ranks": ranks}
        paths.append(write_synthetic(directory / f"node{n}.rtrace", events, meta))
    return paths


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--events", type=int, default=10_000_000, help="events per node")
    p.add_argument("--out", default="bench-results/bench_job.json")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rt-bench-job-", dir="/tmp"))
    try:
        t0 = time.perf_counter()
        write_job(tmp, args.nodes, args.events)
        print(f"{args.nodes} node traces x {args.events:,} events written in {time.perf_counter() - t0:.1f} s")
        load_before = os.getloadavg()
        code = ("from readtrace.cli import main; sys.stdout = open(os.devnull, 'w'); "
                "sys.exit(main(['report', sys.argv[1], '--json']))")
        wall, rss = measure(code, tmp)
        total = args.nodes * args.events
        met = wall <= TARGET_S and rss <= TARGET_RSS
        print(f"{'nodes':>6}{'events':>14}{'wall s':>9}{'peak RSS GiB':>14}{'target':>22}")
        print(f"{args.nodes:>6}{total:>14,}{wall:>9.1f}{rss / (1 << 30):>14.2f}"
              f"{'<= 60 s, <= 2 GiB: ' + ('met' if met else 'NOT met'):>22}")
        result = {"nodes": args.nodes, "events_per_node": args.events, "events": total, "wall_s": round(wall, 2),
                  "peak_rss_gib": round(rss / (1 << 30), 2), "target_met": met,
                  "target": {"wall_s": TARGET_S, "peak_rss_bytes": TARGET_RSS},
                  "load_average_before": load_before, "load_average_after": os.getloadavg(),
                  "machine": {"cpus": os.cpu_count(), "kernel": platform.release()}}
        save_result(result, args.out)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
