"""Benchmark: `readtrace report NODE*.rtrace --json` on a synthetic job of K node traces of N events each.

Each node trace is the seed case at scale (bench_report.write_synthetic: 8 ranks on one shared fd of a
FUSE-mounted checkpoint), labelled with its host, start time and ranks. The report runs in a fresh
interpreter; node traces are analysed by worker processes (analyze/job.py: one per CPU, as memory
allows), each a whole node's analysis. Peak RSS: the report process's own and its largest worker's
(VmHWM and getrusage at exit); with W workers at once the job's peak is at most parent + W x worker.
Target (issue 13): 100 M events in 10 node traces <= 60 s and <= 2 GiB RSS on the 2-vCPU VM.

    .venv/bin/python benchmarks/bench_job.py [--nodes 10] [--events 10000000] [--workers auto|N]
        [--out bench-results/bench_job.json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_report import GIB, WORKERS, machine, save_result, write_synthetic  # noqa: E402

TARGET_S, TARGET_GIB = 60.0, 2.0

# The job in a fresh interpreter; at exit it writes its own and its largest child's peak RSS (KiB).
# Its own from VmHWM: getrusage's ru_maxrss survives fork + exec, so it would be this benchmark's peak
# (the traces written: 0.53 GiB for 10 x 10 M events, against the report process's own 0.14 GiB).
JOB = """import os, sys, atexit, resource
from pathlib import Path
def _rss():
    with open("/proc/self/status") as f:
        own = next(line.split()[1] for line in f if line.startswith("VmHWM:"))
    with open(sys.argv[2], "w") as f:
        f.write(f"{own} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}")
atexit.register(_rss)
from readtrace.analyze.job import analyze_job, node_workers
from readtrace.report.jobreport import write_job_json
paths = sorted(Path(sys.argv[1]).glob("*.rtrace"))
workers = node_workers(paths) if sys.argv[3] == "auto" else int(sys.argv[3])
print(workers, file=sys.stderr)
with open(os.devnull, "w") as out:
    write_job_json(analyze_job(paths, workers=workers), out)
"""


def write_job(directory: Path, nodes: int, events: int) -> list[Path]:
    paths = []
    for n in range(nodes):
        ranks = {str(101 + w): {"rank": n * WORKERS + w, "local_rank": w, "world_size": nodes * WORKERS}
                 for w in range(WORKERS)}
        meta = {"hostname": f"node{n}", "start_time": f"2026-12-01T10:00:{n:02d}+00:00", "t0_ns": 0,
                "wall_s": 30.0 + n, "ranks": ranks}
        paths.append(write_synthetic(directory / f"node{n}.rtrace", events, meta))
    return paths


def run_job(directory: Path, workers: str) -> dict:
    """Wall seconds, workers used, and peak RSS of the report process and of its largest worker."""
    rss_file = directory.parent / f"{directory.name}.rss"
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", JOB, str(directory), str(rss_file), workers],
                          check=True, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    used = int(done.stderr.split()[-1])
    own, child = (int(x) * 1024 for x in rss_file.read_text().split())
    bound = own + (used * child if used > 1 else 0)
    return {"workers": used, "wall_s": round(wall, 2), "report_rss_gib": round(own / GIB, 2),
            "worker_rss_gib": round(child / GIB, 2) if used > 1 else None, "peak_rss_gib_bound": round(bound / GIB, 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--events", type=int, default=10_000_000, help="events per node")
    p.add_argument("--workers", action="append", default=None,
                   help="'auto' (what report does) or a number; repeat to measure several side by side")
    p.add_argument("--out", default="bench-results/bench_job.json")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rt-bench-job-", dir="/tmp"))
    try:
        t0 = time.perf_counter()
        traces = tmp / "job"
        write_job(traces, args.nodes, args.events)
        disk = sum(f.stat().st_size for t in traces.iterdir() for f in t.iterdir())
        total = args.nodes * args.events
        print(f"{args.nodes} node traces x {args.events:,} events ({total:,}; {disk / (1 << 20):.0f} MiB on disk) "
              f"written in {time.perf_counter() - t0:.1f} s")
        load_before = os.getloadavg()
        runs = [{"workers_asked": w, **run_job(traces, w)} for w in (args.workers or ["auto"])]
        load_after = os.getloadavg()
        print(f"{'workers':>8}{'wall s':>9}{'report RSS GiB':>16}{'worker RSS GiB':>16}{'peak <= GiB':>13}")
        for r in runs:
            worker = f"{r['worker_rss_gib']:.2f}" if r["worker_rss_gib"] is not None else "-"
            print(f"{r['workers']:>8}{r['wall_s']:>9.1f}{r['report_rss_gib']:>16.2f}{worker:>16}"
                  f"{r['peak_rss_gib_bound']:>13.2f}")
        print(f"{'figure':<44}{'target':>10}{'measured':>10}  met")
        for r in runs:
            for name, target, measured, unit in (
                    (f"{total / 1e6:g} M events wall, {r['workers']} worker(s)", TARGET_S, r["wall_s"], "s"),
                    (f"{total / 1e6:g} M events peak RSS, {r['workers']} worker(s)", TARGET_GIB,
                     r["peak_rss_gib_bound"], "GiB")):
                r.setdefault("figures", []).append({"figure": name, "target": target, "measured": measured,
                                                    "unit": unit, "met": measured <= target})
                print(f"{name:<44}{f'<= {target:g} {unit}':>10}{f'{measured:.2f} {unit}':>10}  "
                      f"{'yes' if measured <= target else 'NO'}")
        print(f"load average (1/5/15 min) before {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f}, "
              f"after {load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f}")
        save_result({"nodes": args.nodes, "events_per_node": args.events, "events": total, "trace_disk_bytes": disk,
                     "runs": runs, "target": {"wall_s": TARGET_S, "peak_rss_gib": TARGET_GIB},
                     "load_average_before": load_before, "load_average_after": load_after,
                     "machine": machine()}, args.out)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
