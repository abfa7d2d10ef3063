"""A raw mmap read by threads, on mounts that drop the page cache on open: baseline vs `populate`.

    python benchmarks/populate_mmap.py --size-mib 256 --latency-ms 20 --clients lab-drop rclone

Per client: a random file of --size-mib, lab/scripts/raw_mmap_threads.py (one mmap, --workers threads each touching
every page of its quarter) run by `fix --compare --strategy populate` (cold, interleaved, the mapped
bytes' digests compared), a cold `dd bs=16M` of the file on the same mount, and the script warm on
the local copy. Target (issue 25): populate within 1.5x of dd + the warm load. JSON lines printed.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: lab/ (test harness, not shipped)

from lab.clients import mounted  # noqa: E402
from lab.loaders import SCRIPTS  # noqa: E402
from readtrace.fix.compare import compare  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from compat_matrix import dd_seconds  # noqa: E402  (the one cold dd of both matrices)

SCRIPT = SCRIPTS / "raw_mmap_threads.py"


def warm_local_s(script: Path, path: Path, workers: int) -> float:
    cmd = [sys.executable, str(script), str(path), "--workers", str(workers)]
    subprocess.run(cmd, check=True, capture_output=True)  # warms the local copy
    started = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - started


def cell(client: str, size_mib: int, latency_ms: float, workers: int, repeat: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="populate-bench-") as tmp:
        work = Path(tmp)
        src = work / "src"
        src.mkdir()
        (src / "weights.raw").write_bytes(os.urandom(size_mib << 20))
        script = SCRIPT
        warm = warm_local_s(script, src / "weights.raw", workers)
        with mounted(client, src, work, latency_ms=latency_ms) as m:
            path = str(m.path("weights.raw"))
            dd = dd_seconds([path])
            result = compare([sys.executable, str(script), path, "--workers", str(workers)], strategy="populate",
                             repeat=repeat, files=[path], workdir=work / "runs")
        base, fixed = result.median("baseline", "wall_s"), result.median("fixed", "wall_s")
        return {"client": client, "size_mib": size_mib, "latency_ms": latency_ms, "workers": workers,
                "repeat": repeat, "baseline_s": round(base, 2), "populate_s": round(fixed, 2),
                "speedup": round(base / fixed, 2), "dd_s": round(dd, 2), "warm_local_s": round(warm, 2),
                "of_floor": round(fixed / (dd + warm), 2), "identical": result.diff.all_identical,
                "load_avg": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--clients", nargs="+", default=["lab-drop", "rclone"])
    args = parser.parse_args()
    for client in args.clients:
        print(json.dumps(cell(client, args.size_mib, args.latency_ms, args.workers, args.repeat)), flush=True)


if __name__ == "__main__":
    main()
