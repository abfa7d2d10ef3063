"""A labelled corpus of real recordings and how far the report's words can be trusted on it (issue 22).

Each case is one cold load of an example pattern (``readtrace.workloads.load``) recorded on the lab mount
(gcsfuse profile) at a first-byte latency and checkpoint size. Its truth is known by construction:

- **slow or not**, measured against its floor: the ``sequential`` pattern (one reader, large reads in
  file order) recorded on the same mount just before; a case is slow when its wait on the data files
  (the time split's ``data_wait_s``) is more than 10 % + 1 s over the floor run's (fix --compare's rule
  for "not slow", on the waits: on a shared 2-vCPU machine the walls of 64 MiB loads varied 8-30 s with
  the CPU load, the waits did not);
- **its cause**: fork-shared-fd and mmap-threads take turns on one handle (SHARED_FD_INTERLEAVE);
  per-tensor-pread reads tensors out of file order (RANDOM_ON_FUSE_HANDLE); the others have none.

It prints, per finding code, the precision and recall of HIGH (a HIGH is right when the case is slow
and the code is its cause; every slow case with a cause should have one), the HIGHs on cases at their
floor, and the cases where the findings' seconds add up to more than the wall.

    sudo .venv/bin/python benchmarks/report_corpus.py --sizes 64 --latencies 5,20 [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from whatif_validate import lab_mounts, record  # noqa: E402  (one home for the lab recordings)

FLOOR_PATTERN = "sequential"
CAUSE = {"fork-shared-fd": "SHARED_FD_INTERLEAVE", "mmap-threads": "SHARED_FD_INTERLEAVE",
         "per-tensor-pread": "RANDOM_ON_FUSE_HANDLE", "fork-own-fd": None, "safetensors-default": None,
         FLOOR_PATTERN: None}
SLOW_FRACTION, SLOW_S = 0.10, 1.0  # over the floor by more than this: slow


def case(trace: Path, pattern: str, latency: float, size: int, floor_s: float | None) -> dict:
    """One recorded case: its truth and what the report said. ``floor_s``: the floor run's data wait."""
    from readtrace.analyze import analyze
    from readtrace.trace import load_trace

    a = analyze(load_trace(trace, lean=True))
    wall, wait = a.summary["wall_s"], a.summary["data_wait_s"]
    slow = floor_s is not None and wait > floor_s * (1 + SLOW_FRACTION) + SLOW_S
    return {"pattern": pattern, "latency_ms": latency, "size_mib": size, "wall_s": wall, "data_wait_s": wait,
            "trace": str(trace), "floor_s": floor_s,
            "slow": slow, "cause": CAUSE[pattern] if slow else None,
            "findings": [{"code": f.code, "severity": f.severity, "role": f.role, "cause": f.cause,
                          "cost_s": f.cost_s, "wait_s": f.wait_s, "floor_s": f.floor_s} for f in a.findings],
            "cost_sum_s": sum(f.cost_s for f in a.findings if f.cost_s)}


def score(cases: list[dict]) -> dict:
    """Per code: HIGHs, right ones, precision, recall; the misfires the issue counts."""
    codes = sorted({f["code"] for c in cases for f in c["findings"]} | {v for v in CAUSE.values() if v})
    per_code = {}
    for code in codes:
        high = [c for c in cases if any(f["code"] == code and f["severity"] == "high" for f in c["findings"])]
        right = [c for c in high if c["slow"] and c["cause"] == code]
        due = [c for c in cases if c["slow"] and c["cause"] == code]
        found = [c for c in due if c in right]
        per_code[code] = {"high": len(high), "right": len(right), "precision": len(right) / len(high) if high else None,
                          "due": len(due), "recall": len(found) / len(due) if due else None}
    return {"cases": len(cases), "slow": sum(c["slow"] for c in cases), "per_code": per_code,
            "high_at_floor": [f"{c['pattern']} {c['latency_ms']:g} ms {c['size_mib']} MiB" for c in cases
                              if not c["slow"] and any(f["severity"] == "high" for f in c["findings"])],
            "cost_over_wall": [f"{c['pattern']} {c['latency_ms']:g} ms {c['size_mib']} MiB" for c in cases
                               if c["cost_sum_s"] > c["wall_s"] + 1e-6],
            "slow_without_high": [f"{c['pattern']} {c['latency_ms']:g} ms {c['size_mib']} MiB" for c in cases
                                  if c["slow"] and not any(f["severity"] == "high" for f in c["findings"])]}


def print_table(cases: list[dict], s: dict) -> None:
    print(f"{'pattern':<20} {'ms':>4} {'MiB':>4} {'wall s':>7} {'wait s':>7} {'floor':>6} {'slow':>5}  "
          "cause: severity (cost s)")
    for c in cases:
        named = ", ".join(f"{f['code']}: {f['severity']} ({f['cost_s'] or 0:.2f})" for f in c["findings"]
                          if f["role"] == "cause" and f["cost_s"] is not None) or "-"
        print(f"{c['pattern']:<20} {c['latency_ms']:>4g} {c['size_mib']:>4} {c['wall_s']:>7.2f} "
              f"{c['data_wait_s']:>7.2f} {c['floor_s'] or 0:>6.2f} {'yes' if c['slow'] else 'no':>5}  {named}")
    print(f"\n{s['cases']} cases, {s['slow']} slow")
    for code, r in s["per_code"].items():
        prec = "-" if r["precision"] is None else f"{r['precision']:.0%}"
        rec = "-" if r["recall"] is None else f"{r['recall']:.0%}"
        print(f"  {code:<22} HIGH {r['high']:>3} (right {r['right']}), precision {prec:>4}, recall {rec:>4} of {r['due']}")
    for key in ("high_at_floor", "cost_over_wall", "slow_without_high"):
        print(f"  {key}: {len(s[key])} {s[key] if s[key] else ''}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="64", help="checkpoint sizes in MiB, comma-separated")
    p.add_argument("--latencies", default="5,20", help="first-byte latencies of the lab mount in ms")
    p.add_argument("--patterns", default=",".join(p for p in CAUSE if p != FLOOR_PATTERN))
    p.add_argument("--out", default="bench-results")
    p.add_argument("--from", dest="again", help="score the cases of an earlier run's report_corpus.json again "
                                                "(its traces kept with --keep)")
    p.add_argument("--keep", help="keep the traces in this directory")
    args = p.parse_args()
    out = Path(args.out)
    if args.again:
        old = json.loads(Path(args.again).read_text())["cases"]
        floors = {(c["latency_ms"], c["size_mib"]): c for c in old if c["pattern"] == FLOOR_PATTERN}
        cases = []
        for c in old:
            floor = floors[c["latency_ms"], c["size_mib"]]
            floor_s = case(Path(floor["trace"]), FLOOR_PATTERN, c["latency_ms"], c["size_mib"], None)["data_wait_s"]
            cases.append(case(Path(c["trace"]), c["pattern"], c["latency_ms"], c["size_mib"], floor_s))
        return _done(cases, out)
    cases = []
    with tempfile.TemporaryDirectory(prefix="corpus-") as tmp:
        tmp = args.keep or tmp
        Path(tmp).mkdir(parents=True, exist_ok=True)
        for size in (int(x) for x in args.sizes.split(",")):
            for latency, mnt, ckpt in lab_mounts(size, [float(x) for x in args.latencies.split(",")]):
                floor_trace = Path(tmp) / f"{FLOOR_PATTERN}-{latency:g}-{size}.rtrace"
                t = time.monotonic()
                record(mnt, ckpt, FLOOR_PATTERN, floor_trace)
                floor = case(floor_trace, FLOOR_PATTERN, latency, size, None)
                floor_s = floor["data_wait_s"]
                cases.append(case(floor_trace, FLOOR_PATTERN, latency, size, floor_s))
                for pattern in args.patterns.split(","):
                    trace = Path(tmp) / f"{pattern}-{latency:g}-{size}.rtrace"
                    record(mnt, ckpt, pattern, trace)
                    cases.append(case(trace, pattern, latency, size, floor_s))
                print(f"{size} MiB at {latency:g} ms: {time.monotonic() - t:.0f} s", file=sys.stderr)
        return _done(cases, out)


def _done(cases: list[dict], out: Path) -> int:
    s = score(cases)
    print_table(cases, s)
    out.mkdir(exist_ok=True)
    (out / "report_corpus.json").write_text(json.dumps({"cases": cases, "score": s}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
