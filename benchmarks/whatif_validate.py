"""Validate the what-if storage model (readtrace/analyze/storage/whatif.py) against measured loads on the lab mount.

Each example pattern is recorded with `readtrace record` on the lab FUSE mount (gcsfuse profile) at
0, 5 and 20 ms first byte. The load's own time (what the workload reports: no interpreter start-up)
is predicted for every latency from every recording:

    predicted load(L) = load(src) - data wait(src) + model I/O time(src trace, gcsfuse model at L)

with the mount's per-request cost measured from the src trace (``mount_profile``). ``self`` rows
predict a run from its own trace; ``cross`` rows predict L from the recording at another latency
(the real test: the model has to carry the pattern to a latency it never saw). The fixed rows
predict the shared patterns fixed (``predicted_fixed``) against the measured ``sequential`` load.

``--fix``: instead, run ``readtrace fix --compare --json --keep DIR`` of each pattern at each latency
and compare the report's ``predicted_fixed_s`` of the recorded baseline (its first cold run) with
the measured wall of the fixed run(s) (what ``auto`` chose), and the ``predicted_s`` of the fixed
run's own trace with its wall. ``--from DIR``: recompute those rows from a kept run (no new runs).

    .venv/bin/python benchmarks/whatif_validate.py [--size-mib 128] [--patterns a,b] [--out bench-results]
    .venv/bin/python benchmarks/whatif_validate.py --fix [--keep DIR] [--latencies 0,5,20]
    .venv/bin/python benchmarks/whatif_validate.py --fix --from DIR

Needs root (eBPF) and FUSE. Prints a table and saves JSON under --out.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
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
    from readtrace.analyze.storage.whatif import mount_profile, profile, what_if
    from readtrace.trace import load_trace

    a = analyze(load_trace(trace, lean=True))
    mount = mount_profile(a)
    p = what_if(a, [profile("gcsfuse", latency_ms, request_ms=mount.request_ms if mount else 0.0)])[0]
    return {"data_wait_s": a.summary.time.data_wait_s, "predicted_io_s": p.predicted_io_s,
            "predicted_fixed_io_s": p.predicted_fixed_io_s, "request_ms": mount.request_ms if mount else 0.0,
            "measured_latency_ms": mount.latency_ms if mount else None}


def fix_compare(mnt: Path, ckpt: str, pattern: str, keep: Path) -> dict:
    """``readtrace fix --compare --json`` of one pattern, its runs kept in ``keep``."""
    cmd = [sys.executable, "-m", "readtrace", "fix", "--compare", "--json", "--keep", str(keep), "--",
           sys.executable, "-m", "readtrace.workloads.load", "--pattern", pattern, str(mnt / ckpt)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if res.returncode not in (0,):
        raise RuntimeError(f"fix --compare {pattern}: exit {res.returncode}: {res.stderr.strip()[-400:]}")
    (keep / "compare.json").write_text(res.stdout)
    return json.loads(res.stdout)


def report_summary(trace: Path) -> dict:
    from readtrace.analyze import analyze
    from readtrace.analyze.storage.whatif import mount_profile, what_if
    from readtrace.trace import load_trace

    a = analyze(load_trace(trace, lean=True))
    mount = mount_profile(a)
    p = what_if(a, [mount])[0] if mount else None
    here = asdict(a.summary.prediction) if a.summary.prediction else {}  # the fixed prediction on this mount
    return {"wall_s": a.summary.wall_s, "data_wait_s": a.summary.time.data_wait_s,
            "predicted_fixed_s": here.get("predicted_fixed_s"),
            "fixed_strategy": here.get("fixed_strategy"),
            "predicted_s": p.predicted_s if p else None, "runq_s": a.summary.time.runq_s,
            "predicted_fixed_io_s": p.predicted_fixed_io_s if p else None,
            "startup_s": p.startup_s if p else None, "mount_latency_ms": here.get("mount_latency_ms"),
            "mount_request_ms": here.get("mount_request_ms")}


def fix_rows(keep: Path) -> list[dict]:
    """One row per (pattern, latency) kept under ``keep``/PATTERN-LATENCY: the baseline's fixed
    prediction and the fixed run's own prediction against the fixed run's measured wall."""
    rows = []
    for cell in sorted(p for p in keep.iterdir() if (p / "compare.json").is_file()):
        pattern, latency = cell.name.rsplit("-", 1)
        data = json.loads((cell / "compare.json").read_text())
        base_trace = sorted(cell.glob("*-baseline.rtrace"))[0]
        fixed_traces = sorted(cell.glob("*-fixed.rtrace"))
        base = report_summary(base_trace)
        fixed_wall = data["fixed"]["wall_s"]
        fixed = [report_summary(t) for t in fixed_traces]
        fixed_pred = [f["predicted_s"] for f in fixed if f["predicted_s"] is not None]
        row = {"pattern": pattern, "latency_ms": float(latency), "chosen": data["choice"]["chosen"]
               if data.get("choice") else data["strategy"], "baseline_wall_s": data["baseline"]["wall_s"],
               "baseline_trace_wall_s": base["wall_s"], "fixed_wall_s": fixed_wall,
               "predicted_fixed_s": base["predicted_fixed_s"], "model_strategy": base["fixed_strategy"],
               "fixed_predicted_s": fixed_pred[0] if fixed_pred else None,
               "mount_latency_ms": base["mount_latency_ms"], "mount_request_ms": base["mount_request_ms"],
               "baseline_runq_s": base["runq_s"], "fixed_runq_s": fixed[0]["runq_s"] if fixed else None,
               # the two parts of the prediction: the I/O the fixed load waits for, and what carries over
               "predicted_fixed_io_s": base["predicted_fixed_io_s"],
               "fixed_data_wait_s": fixed[0]["data_wait_s"] if fixed else None,
               "baseline_other_s": base["wall_s"] - base["data_wait_s"],
               "fixed_other_s": fixed[0]["wall_s"] - fixed[0]["data_wait_s"] if fixed else None,
               "startup_s": base["startup_s"],
               "floor_s": ((data.get("choice") or {}).get("floor") or {}).get("total_s"),
               "candidates": {c["label"]: c["wall_s"] for c in (data.get("choice") or {}).get("candidates", [])}}
        row["error_fixed"] = (row["predicted_fixed_s"] / fixed_wall - 1) if row["predicted_fixed_s"] and fixed_wall else None
        # a diagnostic, not a prediction: both sides without the time their threads sat runnable waiting
        # for a CPU (other jobs' load on a shared machine; thread-seconds, ~wall for a mostly 1-thread load)
        if row["predicted_fixed_s"] and row["baseline_runq_s"] is not None and row["fixed_runq_s"] is not None:
            quiet = fixed_wall - row["fixed_runq_s"]
            row["error_without_runq"] = (row["predicted_fixed_s"] - row["baseline_runq_s"]) / quiet - 1 if quiet > 0 else None
        else:
            row["error_without_runq"] = None
        row["error_floor"] = (row["predicted_fixed_s"] / row["floor_s"] - 1) if row["predicted_fixed_s"] and row["floor_s"] else None
        row["error_fixed_trace"] = (row["fixed_predicted_s"] / fixed_wall - 1) if row["fixed_predicted_s"] and fixed_wall else None
        rows.append(row)
    return rows


def print_fix_rows(rows: list[dict]) -> None:
    pct = lambda x: "-" if x is None else f"{100 * x:+.0f}%"  # noqa: E731
    num = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
    print(f"{'pattern':<20} {'ms':>3} {'baseline':>9} {'chosen':<20} {'fixed':>7} {'pred':>7} {'err':>5} "
          f"{'pred(fixed tr)':>14} {'err':>5} {'floor':>6} {'err':>5} {'runq b/f':>11} {'-runq':>5} {'io pred/meas':>12} "
          f"{'other b/f':>11}  model")
    for r in rows:
        print(f"{r['pattern']:<20} {r['latency_ms']:>3g} {r['baseline_wall_s']:>8.2f}s {r['chosen'][:20]:<20} "
              f"{r['fixed_wall_s']:>6.2f}s {r['predicted_fixed_s'] or 0:>6.2f}s {pct(r['error_fixed']):>5} "
              f"{r['fixed_predicted_s'] or 0:>13.2f}s {pct(r['error_fixed_trace']):>5} {num(r['floor_s']):>6} "
              f"{pct(r['error_floor']):>5} "
              f"{num(r['baseline_runq_s'])}/{num(r['fixed_runq_s'])} {pct(r['error_without_runq']):>5} "
              f"{num(r['predicted_fixed_io_s'])}/"
              f"{num(r['fixed_data_wait_s'])} {num(r['baseline_other_s'])}/{num(r['fixed_other_s'])}  {r['model_strategy']}")


def run_fix(args, patterns: list[str], latencies: list[float]) -> int:
    keep = Path(args.keep or tempfile.mkdtemp(prefix="whatif-fix-"))
    keep.mkdir(parents=True, exist_ok=True)
    # keep_cache, as `readtrace demo` mounts it: else fix cannot act on these loaders at all
    for latency, mnt, ckpt in lab_mounts(args.size_mib, latencies, keep_cache=True):
        for pattern in patterns:
            cell = keep / f"{pattern}-{int(latency)}"
            cell.mkdir(exist_ok=True)
            t = time.monotonic()
            data = fix_compare(mnt, ckpt, pattern, cell)
            print(f"fix --compare {pattern} at {latency:g} ms: {data['baseline']['wall_s']:.2f} -> "
                  f"{data['fixed']['wall_s']:.2f} s ({(data.get('choice') or {}).get('chosen')}; "
                  f"{time.monotonic() - t:.0f} s)", file=sys.stderr)
    return save_fix(args, keep)


def lab_mounts(size_mib: int, latencies, keep_cache: bool = False):
    """(latency, mountpoint, checkpoint name) for each latency: one checkpoint behind a lab mount
    (gcsfuse profile) at that first byte, unmounted when the caller moves on."""
    from readtrace.simfs import force_unmount, mount
    from readtrace.workloads import make_checkpoint

    with tempfile.TemporaryDirectory(prefix="whatif-") as tmp:
        tmp = Path(tmp)
        ckpt = make_checkpoint(tmp / "src", size_mib)[0]
        for latency in latencies:
            mnt = tmp / f"mnt{int(latency)}"
            mnt.mkdir()
            try:
                with mount(ckpt.parent, mnt, profile="gcsfuse", latency_ms=latency, keep_cache=keep_cache):
                    yield latency, mnt, ckpt.name
            finally:
                force_unmount(mnt)


def save_fix(args, keep: Path) -> int:
    rows = fix_rows(keep)
    print_fix_rows(rows)
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    path = out / f"whatif_fix_{args.size_mib}mib.json"
    path.write_text(json.dumps({"size_mib": args.size_mib, "keep": str(keep), "rows": rows}, indent=2))
    print(f"saved {path} (runs kept in {keep})", file=sys.stderr)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=128)
    parser.add_argument("--patterns", default=",".join(PATTERNS))
    parser.add_argument("--latencies", default=",".join(f"{x:g}" for x in LATENCIES))
    parser.add_argument("--out", default="bench-results")
    parser.add_argument("--fix", action="store_true", help="validate the fixed prediction against fix --compare")
    parser.add_argument("--keep", help="--fix: keep every run here (default: a new temporary directory, kept)")
    parser.add_argument("--from", dest="from_dir", help="--fix: recompute the rows from runs kept here")
    args = parser.parse_args()
    patterns = args.patterns.split(",")
    if args.fix:
        if args.from_dir:
            return save_fix(args, Path(args.from_dir))
        return run_fix(args, patterns, [float(x) for x in args.latencies.split(",")])
    runs: dict[tuple[str, float], dict] = {}
    for latency, mnt, ckpt in lab_mounts(args.size_mib, LATENCIES):
        for pattern in patterns:
            trace = Path(tempfile.mkdtemp(prefix="whatif-")) / f"{pattern}-{int(latency)}.rtrace"
            t = time.monotonic()
            load_s = record(mnt, ckpt, pattern, trace)
            runs[(pattern, latency)] = {"load_s": load_s, **model(trace, latency),
                                        "trace": str(trace), "record_s": time.monotonic() - t}
            # the model of this trace at the other latencies (for the cross rows)
            runs[(pattern, latency)]["at"] = {str(x): model(trace, x)["predicted_io_s"] for x in LATENCIES}
            print(f"recorded {pattern} at {latency:g} ms: load {load_s:.3f} s", file=sys.stderr)
            shutil.rmtree(trace.parent)
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
