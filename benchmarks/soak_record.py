"""Soak: one `readtrace record` over a long loop of checkpoint loads on the lab mount.

Asserts nothing (a benchmark, not a test); measures what must stay bounded: the recorder's RSS
(sampled every second from /proc; peak overall and per fifth of the run, so growth shows), the disk
space the spool holds, the trace size, the longest gap between drains, lost events, and that the
trace stays readable (`readtrace report --json` on it).

  python benchmarks/soak_record.py                 # 20 minutes (issue 8)
  nice -n 10 python benchmarks/soak_record.py --minutes 5 --size-mib 32

Needs root (eBPF) and /dev/fuse. Table printed, JSON saved to bench-results/soak_record.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOOP = """
import subprocess, sys, time
path, until = sys.argv[1], time.monotonic() + float(sys.argv[2])
patterns = ["safetensors-default", "per-tensor-pread", "mmap-threads", "fork-shared-fd"]
n = 0
while time.monotonic() < until:
    pattern = patterns[n % len(patterns)]
    subprocess.run([sys.executable, "-m", "readtrace.workloads.load", "--pattern", pattern,
                    "--workers", "2", path], check=True, stdout=subprocess.DEVNULL)
    n += 1
print(f"loads: {n}", flush=True)
"""


MEMORY_FIELDS = ("Rss", "Anonymous", "Shared_Clean", "Shared_Dirty")  # smaps_rollup: the ring mappings are shared


def memory_kib(pid: int) -> dict[str, int] | None:
    """The recorder's resident memory by kind (kB), from /proc/PID/smaps_rollup."""
    try:
        lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    except OSError:
        return None
    found = {}
    for line in lines:
        key, _, rest = line.partition(":")
        if key in MEMORY_FIELDS:
            found[key] = int(rest.split()[0])
    return found if "Rss" in found else None


def _disk_bytes(path: Path) -> int:
    """Disk space a file holds (the spool's decoded parts are punched out: its size stays)."""
    try:
        return path.stat().st_blocks * 512
    except OSError:
        return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--size-mib", type=float, default=32.0)
    ap.add_argument("--latency-ms", type=float, default=2.0)
    ap.add_argument("--out", default="bench-results/soak_record.json")
    args = ap.parse_args()

    from readtrace.simfs import mount
    from readtrace.workloads import make_checkpoint

    duration = args.minutes * 60
    with tempfile.TemporaryDirectory(prefix="readtrace-soak-") as tmp:
        base = Path(tmp)
        src, mnt = base / "bucket", base / "mnt"
        src.mkdir()
        mnt.mkdir()
        ckpt = make_checkpoint(src, args.size_mib)[0]
        (base / "loop.py").write_text(LOOP)
        trace = base / "soak.rtrace"
        with mount(src, mnt, profile="gcsfuse", latency_ms=args.latency_ms, keep_cache=False,
                   log=base / "simfs.jsonl"):
            cmd = [sys.executable, "-m", "readtrace", "record", "-o", str(trace), "--",
                   sys.executable, str(base / "loop.py"), str(mnt / ckpt.name), str(duration)]
            started = time.monotonic()
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            samples: list[tuple[float, dict[str, int]]] = []
            spool_peak = 0
            while proc.poll() is None:
                memory = memory_kib(proc.pid)
                if memory is not None:
                    samples.append((time.monotonic() - started, memory))
                spool_peak = max([spool_peak] + [_disk_bytes(p) for p in base.glob(".soak.rtrace.partial-*/*")])
                time.sleep(1.0)
            out, err = proc.communicate()
            wall = time.monotonic() - started
        report_started = time.monotonic()
        report = subprocess.run([sys.executable, "-m", "readtrace", "report", "--json", str(trace)],
                                capture_output=True, text=True)
        report_s = time.monotonic() - report_started
        meta = json.loads((trace / "meta.json").read_text()) if (trace / "meta.json").exists() else {}
        trace_bytes = sum(p.stat().st_size for p in trace.glob("*")) if trace.exists() else 0
    def per_fifth(kind: str) -> list[float]:
        """Peak of one memory kind in each fifth of the loop (MiB): growth shows as a rising row."""
        return [round(max((m.get(kind, 0) for t, m in samples if k * duration / 5 <= t < (k + 1) * duration / 5),
                          default=0) / 1024, 1) for k in range(5)]

    result = {
        "machine": f"{os.cpu_count()} vCPU, {os.uname().release}", "minutes": args.minutes,
        "checkpoint_mib": args.size_mib, "latency_ms": args.latency_ms, "record_exit": proc.returncode,
        "loads": out.strip(), "wall_s": round(wall, 1), "records": meta.get("records"),
        "calls": meta.get("calls"), "lost_events": meta.get("lost_events"), "partial": meta.get("partial"),
        "max_drain_gap_s": meta.get("max_drain_gap_s"), "live_decoded_records": meta.get("live_decoded_records"),
        "rss_peak_mib": round(max((m["Rss"] for _, m in samples), default=0) / 1024, 1),
        "rss_peak_per_fifth_mib": per_fifth("Rss"),
        "anon_peak_per_fifth_mib": per_fifth("Anonymous"),
        "shared_peak_per_fifth_mib": [round(a + b, 1) for a, b in zip(per_fifth("Shared_Clean"),
                                                                       per_fifth("Shared_Dirty"), strict=True)],
        "rss_after_loop_peak_mib": round(max((m["Rss"] for t, m in samples if t >= duration), default=0) / 1024, 1),
        "spool_peak_mib": round(spool_peak / 2**20, 1), "trace_mib": round(trace_bytes / 2**20, 1),
        "report_exit": report.returncode, "report_s": round(report_s, 1),
        "recorder_stderr_tail": err.strip().splitlines()[-3:],
    }
    for key, value in result.items():
        print(f"{key:28} {value}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    return 0 if proc.returncode == 0 and report.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
