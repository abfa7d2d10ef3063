"""Benchmark: `readtrace report NODE*.rtrace --json` on a synthetic job of K node traces of N events each,
in the local process pool and on a local Dask cluster (``report --scheduler``), side by side.

Each node trace is the seed case at scale (bench_report.write_synthetic: 8 ranks on one shared fd of a
FUSE-mounted checkpoint), labelled with its host, start time and ranks. ``--distinct D`` writes D
traces; the other nodes share their Parquet files (hard links) under their own meta.json (host, start,
ranks): the same work per node, K nodes without K times the writing. The report runs in a fresh
interpreter; node traces are analysed by worker processes (analyze/job/analysis.py: one per CPU, as memory
allows) or, with ``--dask W``, by a Dask scheduler and W single-threaded workers started here on
127.0.0.1 (warmed up: their imports are not timed, as on a cluster that already runs). Peak RSS: the
report process's own (it merges: VmHWM) and its largest worker's (getrusage at exit, or each Dask
worker's VmHWM); with W workers at once the job's peak is at most parent + W x worker.
Targets: issue 13, 100 M events in 10 node traces <= 60 s and <= 2 GiB RSS on the 2-vCPU VM; issue
28, the merging process <= 2 GiB at 100 nodes.

    .venv/bin/python benchmarks/bench_job.py [--nodes 10 [--nodes 40 ...]] [--events 10000000]
        [--distinct 10] [--workers auto|N ...] [--dask 1 --dask 2 --dask 4]
        [--out bench-results/bench_job.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: lab/ (test harness, not shipped)
from bench_report import GIB, WORKERS, machine, save_result, write_synthetic  # noqa: E402

TARGET_S, TARGET_GIB = 60.0, 2.0  # issue 13: 10 nodes x 10 M events; the merging process at any size

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
from readtrace.analyze.job.analysis import analyze_job, node_workers
from readtrace.report.jobreport import write_job_json
paths = sorted(Path(sys.argv[1]).glob("*.rtrace"))
scheduler = sys.argv[4] if len(sys.argv) > 4 else None
workers = 0 if scheduler else node_workers(paths) if sys.argv[3] == "auto" else int(sys.argv[3])
print(workers, file=sys.stderr)
job = analyze_job(paths, workers=workers or None, scheduler=scheduler)
assert not job.missing, job.missing
with open(os.devnull, "w") as out:
    write_job_json(job, out)
"""


def _node_meta(n: int, nodes: int) -> dict:
    ranks = {str(101 + w): {"rank": n * WORKERS + w, "local_rank": w, "world_size": nodes * WORKERS}
             for w in range(WORKERS)}
    return {"hostname": f"node{n}", "start_time": f"2026-12-01T10:{n // 60:02d}:{n % 60:02d}+00:00", "t0_ns": 0,
            "wall_s": 30.0 + n % 10, "ranks": ranks}


def write_job(directory: Path, nodes: int, events: int, distinct: int | None = None) -> list[Path]:
    """``nodes`` node traces in ``directory``: ``distinct`` of them written, the others hard links to
    those traces' Parquet files under a meta.json of their own."""
    distinct = min(nodes, distinct or nodes)
    paths = [write_synthetic(directory / f"node{n}.rtrace", events, _node_meta(n, nodes)) for n in range(distinct)]
    for n in range(distinct, nodes):
        base, path = paths[n % distinct], directory / f"node{n}.rtrace"
        path.mkdir()
        for f in base.glob("*.parquet"):
            os.link(f, path / f.name)
        meta = json.loads((base / "meta.json").read_text())
        (path / "meta.json").write_text(json.dumps({**meta, **_node_meta(n, nodes)}))
        paths.append(path)
    return paths


def _hwm(pid: int) -> int:
    """Peak RSS (bytes) of a live process, from its VmHWM."""
    with open(f"/proc/{pid}/status") as f:  # noqa: PTH123
        return int(next(line.split()[1] for line in f if line.startswith("VmHWM:"))) * 1024


def run_job(directory: Path, workers: str, scheduler: str | None = None, dask_pids: list[int] | None = None) -> dict:
    """Wall seconds, workers used, and peak RSS of the report process (the merge) and of its largest worker."""
    rss_file = directory.parent / f"{directory.name}.rss"
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", JOB, str(directory), str(rss_file), workers,
                           *([scheduler] if scheduler else [])], check=True, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    used = int(done.stderr.split()[-1])
    own, child = (int(x) * 1024 for x in rss_file.read_text().split())
    if dask_pids:
        used, child = len(dask_pids), max(_hwm(p) for p in dask_pids)
    bound = own + (used * child if used > 1 or dask_pids else 0)
    return {"workers": used, "wall_s": round(wall, 2), "report_rss_gib": round(own / GIB, 2),
            "worker_rss_gib": round(child / GIB, 2) if used > 1 or dask_pids else None,
            "peak_rss_gib_bound": round(bound / GIB, 2)}


def run_on_dask(directory: Path, workers: int) -> dict:
    """``run_job`` on a fresh local Dask cluster of ``workers`` single-threaded workers, warmed up."""
    from distributed import Client

    from lab.servers import DaskCluster

    with DaskCluster(directory.parent / f"dask{workers}", workers=workers) as cluster:
        with Client(cluster.address, set_as_default=False) as client:
            client.run(lambda: __import__("readtrace.analyze.analysis"))
        return run_job(directory, "dask", cluster.address, [w.pid for w in cluster.workers])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, action="append", default=None, help="node traces (repeat: several jobs)")
    p.add_argument("--events", type=int, default=10_000_000, help="events per node")
    p.add_argument("--distinct", type=int, default=None,
                   help="write this many distinct traces, the other nodes hard links to them (default: all)")
    p.add_argument("--workers", action="append", default=None,
                   help="local pool: 'auto' (what report does) or a number; repeat to measure several")
    p.add_argument("--dask", type=int, action="append", default=[],
                   help="also on a local Dask cluster of this many workers; repeatable")
    p.add_argument("--out", default="bench-results/bench_job.json")
    args = p.parse_args()
    jobs = []
    load_before = os.getloadavg()
    for nodes in args.nodes or [10]:
        tmp = Path(tempfile.mkdtemp(prefix="rt-bench-job-", dir="/tmp"))
        try:
            t0 = time.perf_counter()
            traces = tmp / "job"
            write_job(traces, nodes, args.events, args.distinct)
            disk = sum(f.stat().st_size for t in traces.iterdir() for f in t.iterdir())
            total = nodes * args.events
            print(f"{nodes} node traces x {args.events:,} events ({total:,}; {disk / (1 << 20):.0f} MiB in the "
                  f"traces) written in {time.perf_counter() - t0:.1f} s", flush=True)
            runs = []
            for mode, w in [*(("pool", w) for w in args.workers or ["auto"]), *(("dask", w) for w in args.dask)]:
                runs.append({"mode": mode, "workers_asked": str(w),
                             **(run_job(traces, w) if mode == "pool" else run_on_dask(traces, w))})
                print(f"  {nodes} nodes, {mode} {w}: {runs[-1]}", flush=True)
            for r in runs:
                r["s_per_node"] = round(r["wall_s"] / nodes, 3)
                r["figures"] = [
                    {"figure": "merging process peak RSS", "target": TARGET_GIB, "measured": r["report_rss_gib"],
                     "unit": "GiB", "met": r["report_rss_gib"] <= TARGET_GIB}]
                if nodes == 10 and args.events >= 10_000_000:
                    r["figures"].append({"figure": "100 M events wall", "target": TARGET_S, "measured": r["wall_s"],
                                         "unit": "s", "met": r["wall_s"] <= TARGET_S})
            one = next((r["wall_s"] for r in runs if r["mode"] == "dask" and r["workers"] == 1), None)
            for r in runs:
                r["speedup_vs_1_dask_worker"] = round(one / r["wall_s"], 2) if one else None
            jobs.append({"nodes": nodes, "events_per_node": args.events, "events": total,
                         "trace_bytes": disk, "runs": runs})
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    load_after = os.getloadavg()
    print(f"{'nodes':>6}{'mode':>6}{'workers':>8}{'wall s':>9}{'s/node':>8}{'speedup':>9}{'merge RSS GiB':>15}"
          f"{'worker RSS GiB':>16}{'peak <= GiB':>13}")
    for job in jobs:
        for r in job["runs"]:
            worker = f"{r['worker_rss_gib']:.2f}" if r["worker_rss_gib"] is not None else "-"
            speedup = f"{r['speedup_vs_1_dask_worker']:.2f}" if r["speedup_vs_1_dask_worker"] else "-"
            print(f"{job['nodes']:>6}{r['mode']:>6}{r['workers']:>8}{r['wall_s']:>9.1f}{r['s_per_node']:>8.2f}"
                  f"{speedup:>9}{r['report_rss_gib']:>15.2f}{worker:>16}{r['peak_rss_gib_bound']:>13.2f}")
    print("speedup: wall of 1 Dask worker / this wall (same job)")
    for job in jobs:
        for r in job["runs"]:
            for f in r["figures"]:
                print(f"{job['nodes']} nodes {r['mode']} {r['workers']}: {f['figure']} {f['measured']:.2f} {f['unit']} "
                      f"(target <= {f['target']:g}): {'met' if f['met'] else 'NOT met'}")
    print(f"load average (1/5/15 min) before {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f}, "
          f"after {load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f}")
    save_result({"jobs": jobs, "load_average_before": load_before, "load_average_after": load_after,
                 "machine": machine()}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
