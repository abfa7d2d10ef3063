"""Benchmark: what each recorder costs the load it records, side by side on the same workloads.

Modes, each running `python -m readtrace.workloads.load --pattern P --workers 4 FILE` (64 MiB checkpoint
on the local disk, page cache warm: the worst case for a per-syscall tracer, nothing hides its cost;
plus pread-4k, a loop of 4 KiB preads over the same file: the per-call cost alone):
  bare           the load alone
  ebpf           readtrace record --backend ebpf
  ptrace         readtrace record --backend ptrace --sample-ms 0   (strace only)
  ptrace+sampler readtrace record --backend ptrace --sample-ms 5   (strace + residency sampler)
The load's own time (its JSON line: "seconds", the loading only, not Python's start) is the median of
--reps runs; ratio = mode / bare. Also: the strace parser's speed on a real strace output (lines/s, CPU
time) and the sampler's own CPU time per run. Needs root (eBPF) and strace.

    .venv/bin/python benchmarks/bench_backends.py [--reps 3] [--out bench-results/bench_backends.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PATTERNS = ("sequential", "per-tensor-pread", "fork-shared-fd", "mmap-threads", "pread-4k")
# pread-4k: not a loader: 16,384 warm 4 KiB preads (64 MiB) in a loop, the per-syscall cost alone
_STORM = ("import json, os, sys, time\nfd = os.open(sys.argv[1], os.O_RDONLY); n = os.fstat(fd).st_size // 4096\n"
          "t = time.perf_counter()\nfor i in range(n):\n    os.pread(fd, 4096, i * 4096)\n"
          "print(json.dumps({'seconds': time.perf_counter() - t, 'calls': n}))")
MODES = {"bare": None, "ebpf": ["--backend", "ebpf"], "ptrace": ["--backend", "ptrace", "--sample-ms", "0"],
         "ptrace+sampler": ["--backend", "ptrace", "--sample-ms", "5"]}


def load_cmd(pattern: str, path: Path) -> list[str]:
    if pattern == "pread-4k":
        return [sys.executable, "-c", _STORM, str(path)]
    return [sys.executable, "-m", "readtrace.workloads.load", "--pattern", pattern, "--workers", "4", str(path)]


def run_once(mode: str, pattern: str, path: Path, tmp: Path) -> tuple[float, float, dict | None]:
    """(load seconds, whole command wall seconds, trace meta or None)."""
    out = tmp / f"{mode}-{pattern}.rtrace"
    shutil.rmtree(out, ignore_errors=True)
    cmd = load_cmd(pattern, path)
    if MODES[mode] is not None:
        cmd = [sys.executable, "-m", "readtrace", "record", *MODES[mode], "-q", "-o", str(out), "--", *cmd]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    result = json.loads(p.stdout.strip().splitlines()[-1])
    meta = json.loads((out / "meta.json").read_text()) if out.exists() else None
    shutil.rmtree(out, ignore_errors=True)
    return float(result["seconds"]), wall, meta


def parser_speed(path: Path, tmp: Path) -> dict:
    """Parse a real strace output (per-tensor-pread load, replicated to >= 1 M lines): lines/s."""
    from readtrace.ptrace.parse import StraceParser
    from readtrace.ptrace.recorder import strace_argv, strace_path

    raw = tmp / "strace.out"
    subprocess.run(strace_argv(strace_path(), raw, load_cmd("per-tensor-pread", path)), check=True,
                   capture_output=True)
    lines = raw.read_text(errors="replace").splitlines(keepends=True)
    copies = max(1, -(-1_000_000 // len(lines)))
    parser = StraceParser()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    rows = 0
    for _ in range(copies):
        for line in lines:
            parser.feed(line)
        rows += len(parser.take())
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    n = copies * len(lines)
    return {"lines": n, "rows": rows, "cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
            "lines_per_cpu_s": round(n / cpu), "unparsed": parser.unparsed}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--size-mib", type=int, default=64)
    p.add_argument("--out", default="bench-results/bench_backends.json")
    args = p.parse_args()
    if os.geteuid() != 0 or shutil.which("strace") is None:
        print("bench_backends: needs root (eBPF) and strace", file=sys.stderr)
        return 3
    from readtrace.workloads import make_checkpoint

    tmp = Path(tempfile.mkdtemp(prefix="rt-bench-backends-", dir="/tmp"))
    try:
        path = make_checkpoint(tmp / "ckpt", args.size_mib)[0]
        load_before = os.getloadavg()
        rows, metas = [], {}
        for pattern in PATTERNS:
            times = {m: [] for m in MODES}
            walls = {m: [] for m in MODES}
            for _ in range(args.reps):
                for mode in MODES:  # interleaved: drift on a busy machine hits every mode alike
                    load_s, wall, meta = run_once(mode, pattern, path, tmp)
                    times[mode].append(load_s)
                    walls[mode].append(wall)
                    if meta is not None:
                        metas[f"{mode}/{pattern}"] = meta
            med = {m: statistics.median(v) for m, v in times.items()}
            row = {"pattern": pattern, **{f"{m}_s": round(v, 3) for m, v in med.items()},
                   **{f"{m}_ratio": round(v / med["bare"], 2) for m, v in med.items() if m != "bare"},
                   **{f"{m}_wall_s": round(statistics.median(v), 2) for m, v in walls.items()}}
            sampler = (metas.get(f"ptrace+sampler/{pattern}") or {}).get("sampler") or {}
            row["sampler_cpu_s"] = sampler.get("sample_cpu_s")
            row["sampler_samples"] = sampler.get("samples")
            rows.append(row)
        speed = parser_speed(path, tmp)
        print(f"{'pattern':<18}{'bare s':>8}{'ebpf':>8}{'ptrace':>8}{'ptrace+smp':>11}{'sampler cpu s':>14}")
        for r in rows:
            print(f"{r['pattern']:<18}{r['bare_s']:>8.3f}{r['ebpf_ratio']:>7.2f}x{r['ptrace_ratio']:>7.2f}x"
                  f"{r['ptrace+sampler_ratio']:>10.2f}x{r['sampler_cpu_s'] or 0:>14.3f}")
        print(f"strace parser: {speed['lines']:,} lines in {speed['cpu_s']} s CPU "
              f"({speed['lines_per_cpu_s']:,} lines/s), {speed['unparsed']} unparsed")
        result = {"benchmark": "bench_backends", "machine": platform.node(), "kernel": platform.release(),
                  "cpus": os.cpu_count(), "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
                  "size_mib": args.size_mib, "reps": args.reps, "rows": rows, "parser": speed}
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2))
        print(f"-> {out}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
