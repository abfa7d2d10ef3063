"""Validate the what-if storage model (readtrace/analyze/whatif.py) against measured loads on the lab mount.

Each example pattern is recorded with `readtrace record` on the lab FUSE mount (gcsfuse profile) at
0, 5 and 20 ms first byte. The load's own time (what the workload reports: no interpreter start-up)
is predicted for every latency from every recording:

    predicted load(L) = load(src) - data wait(src) + model I/O time(src trace, gcsfuse model at L)

with the mount's per-request cost measured from the src trace (``mount_profile``). ``self`` rows
predict a run from its own trace; ``cross`` rows predict L from the recording at another latency
(the real test: the model has to carry the pattern to a latency it never saw). The fixed rows
predict the shared patterns fixed (``predicted_fixed``) against the measured ``sequential`` load.

    .venv/bin/python benchmarks/whatif_validate.py [--size-mib 128] [--patterns a,b] [--out bench-results]

Needs root (eBPF) and FUSE. Prints a table and saves JSON under --out.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PATTERNS = ("mmap-threads", "fork-shared-fd", "fork-own-fd", "per-tensor-pread", "safetensors-default",
            "sequential")
LATENCIES = (0.0, 5.0, 20.0)


def record(mnt: Path, ckpt: str, pattern: str, out: Path) -> float:
    """Record one load; returns the load time the workload measured itself."""
    cmd = [sys.executable, "-m", "readtrace", "record", "-q", "--force", "-o", str(out), "--",
           sys.executable, "-m", "readtrace.workloads.load", "--pattern", pattern, str(mnt / ckpt)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=True)
    line = next(x for x in res.stdout.splitlines() if x.startswith("{"))
    return float(json.loads(line)["seconds"])


def model(trace: Path, latency_ms: float) -> dict:
    from readtrace.analyze import analyze
    from readtrace.analyze.whatif import mount_profile, profile, what_if
    from readtrace.trace import load_trace

    a = analyze(load_trace(trace, lean=True))
    mount = mount_profile(a)
    p = what_if(a, [profile("gcsfuse", latency_ms, request_ms=mount.request_ms if mount else 0.0)])[0]
    return {"data_wait_s": a.summary["data_wait_s"], "predicted_io_s": p.predicted_io_s,
            "predicted_fixed_io_s": p.predicted_fixed_io_s, "request_ms": mount.request_ms if mount else 0.0,
            "measured_latency_ms": mount.latency_ms if mount else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=128)
    parser.add_argument("--patterns", default=",".join(PATTERNS))
    parser.add_argument("--out", default="bench-results")
    args = parser.parse_args()
    from readtrace.simfs import force_unmount, mount
    from readtrace.workloads import make_checkpoint

    patterns = args.patterns.split(",")
    runs: dict[tuple[str, float], dict] = {}
    with tempfile.TemporaryDirectory(prefix="whatif-") as tmp:
        tmp = Path(tmp)
        ckpt = make_checkpoint(tmp / "src", args.size_mib)[0]
        for latency in LATENCIES:
            mnt = tmp / f"mnt{int(latency)}"
            mnt.mkdir()
            try:
                with mount(ckpt.parent, mnt, profile="gcsfuse", latency_ms=latency):
                    for pattern in patterns:
                        trace = tmp / f"{pattern}-{int(latency)}.rtrace"
                        t = time.monotonic()
                        load_s = record(mnt, ckpt.name, pattern, trace)
                        runs[(pattern, latency)] = {"load_s": load_s, **model(trace, latency),
                                                    "trace": str(trace), "record_s": time.monotonic() - t}
                        # the model of this trace at the other latencies (for the cross rows)
                        runs[(pattern, latency)]["at"] = {str(x): model(trace, x)["predicted_io_s"] for x in LATENCIES}
                        print(f"recorded {pattern} at {latency:g} ms: load {load_s:.3f} s", file=sys.stderr)
            finally:
                force_unmount(mnt)
    rows = []
    for (pattern, src), r in runs.items():
        for target in LATENCIES:
            measured = runs.get((pattern, target))
            if measured is None:
                continue
            predicted = r["load_s"] - r["data_wait_s"] + r["at"][str(target)]
            rows.append({"pattern": pattern, "from_ms": src, "to_ms": target, "kind": "self" if src == target else "cross",
                         "predicted_load_s": predicted, "measured_load_s": measured["load_s"],
                         "error": predicted / measured["load_s"] - 1})
        if pattern != "sequential" and ("sequential", src) in runs:
            fixed = r["load_s"] - r["data_wait_s"] + r["predicted_fixed_io_s"]
            seq = runs[("sequential", src)]["load_s"]
            rows.append({"pattern": pattern, "from_ms": src, "to_ms": src, "kind": "fixed vs sequential",
                         "predicted_load_s": fixed, "measured_load_s": seq, "error": fixed / seq - 1})
    print(f"{'pattern':<20} {'kind':<20} {'from':>5} {'to':>5} {'predicted':>10} {'measured':>10} {'error':>7}")
    for row in rows:
        print(f"{row['pattern']:<20} {row['kind']:<20} {row['from_ms']:>5g} {row['to_ms']:>5g} "
              f"{row['predicted_load_s']:>9.3f}s {row['measured_load_s']:>9.3f}s {100 * row['error']:>6.1f}%")
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    path = out / f"whatif_validate_{args.size_mib}mib.json"
    path.write_text(json.dumps({"size_mib": args.size_mib, "rows": rows,
                                "runs": {f"{p}@{lat:g}": {k: v for k, v in r.items() if k != "trace"}
                                         for (p, lat), r in runs.items()}}, indent=2))
    print(f"saved {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
