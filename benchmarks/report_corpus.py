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

With ``--compat`` the corpus also holds cells of the compatibility suite (lab/: a real loader on a real
FUSE client, its servers on 127.0.0.1), each mount probed first (``readtrace probe``, a private cache):
the floor is the same files read in order, cold, by one reader or 4 own-fd readers, the faster
(lab/cells.sequential_floor),
slow when the load's data wait is over it by 10 % + 1 s; the cause is the pattern on one handle
(SHARED_FD_INTERLEAVE) where several tasks share one and the mount measurably punishes it, else the
page faults of a mapping (MMAP_FAULT_STORM) for mmap loaders, the jumps of one reader on its handle
(RANDOM_ON_FUSE_HANDLE) for torch.distributed.checkpoint where the mount punishes them, none for the
fork pool.

It prints, per finding code, the precision and recall of HIGH (a HIGH is right when the case is slow
and the code is its cause; every slow case with a cause should have one), the HIGHs on cases at their
floor, and the cases where the findings' seconds add up to more than the wall.

    sudo .venv/bin/python benchmarks/report_corpus.py --sizes 64 --latencies 5,20 [--out DIR]
    sudo .venv/bin/python benchmarks/report_corpus.py --sizes 64 --latencies 20 --compat default
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: lab/ (test harness)
from whatif_validate import lab_mounts, record  # noqa: E402  (one home for the lab recordings)

FLOOR_PATTERN = "sequential"
CAUSE = {"fork-shared-fd": "SHARED_FD_INTERLEAVE", "mmap-threads": "SHARED_FD_INTERLEAVE",
         "per-tensor-pread": "RANDOM_ON_FUSE_HANDLE", "fork-own-fd": None, "safetensors-default": None,
         FLOOR_PATTERN: None}
SLOW_FRACTION, SLOW_S = 0.10, 1.0  # over the floor by more than this: slow


# The compat cells of the corpus: every cell of tests/compat (client, latency ms, loader) and a few more of
# the matrix; ``--compat default``.
COMPAT_CELLS = (
    [("lab", 20, name) for name in ("load_file", "safe_open_threads", "transformers", "transformers_sharded",
                                     "diffusers", "torch_load_mmap", "fork_pool")]
    + [("s3fs", 20, "load_file"), ("s3fs", 20, "fork_pool"), ("s3fs", 20, "safe_open_threads"),
       ("rclone", 20, "fork_pool"), ("rclone", 20, "load_file"), ("rclone", 20, "safe_open_threads"),
       ("sshfs", 0, "load_file"), ("sshfs", 20, "load_file"), ("sshfs", 20, "safe_open_threads"),
       ("httpdirfs", 0, "load_file"), ("bindfs", 0, "fork_pool"), ("local", 0, "load_file"),
       ("juicefs", 20, "fork_pool"), ("juicefs", 20, "gguf_memmap"), ("juicefs", 20, "load_file"),
       ("juicefs", 20, "safe_open_threads"), ("squashfuse", 0, "safe_open_threads"), ("squashfuse", 0, "load_file"),
       ("squashfuse", 0, "fork_pool"), ("sshfs", 20, "fork_pool"), ("bindfs", 0, "load_file"), ("local", 0, "fork_pool"),
       ("rclone", 20, "torch_load_mmap")]
    + [(client, 20, name) for client in ("lab-drop", "rclone") for name in ("gguf_memmap", "dcp_load", "raw_mmap_threads")])
# Loaders whose one reader jumps back and forth on its handle: torch.distributed.checkpoint's
# FileSystemReader torch.loads each item from a slice of the .distcp file, reading its zip directory at
# the item's end before its records (rclone at 20 ms: 48 jumps of 555 requests, 1.09 s of their latency).
JUMPING_LOADERS = ("dcp_load",)
MMAP_LOADERS = ("load_file", "safe_open_threads", "transformers", "transformers_sharded", "diffusers",
                "torch_load_mmap", "gguf_memmap", "raw_mmap_threads")


def compat_causes(loader, penalty: float | None) -> list[str]:
    """The finding codes that name a compat cell's cause, by construction (see the module docstring)."""
    from readtrace.measure.profile import HANDLE_PENALTY_MIN

    punishes = penalty is not None and penalty >= HANDLE_PENALTY_MIN
    causes = ["SHARED_FD_INTERLEAVE"] if loader.shares_handle and punishes else []
    causes += ["RANDOM_ON_FUSE_HANDLE"] if loader.name in JUMPING_LOADERS and punishes else []
    return causes + (["MMAP_FAULT_STORM"] if loader.name in MMAP_LOADERS else [])


def compat_cases(cells: list[tuple[str, float, str]], size: int, tmp: Path, fix: bool = False,
                 done=None) -> list[dict]:
    """Record each compat cell cold, with its mount's probe and its floor; ``fix``: then `fix --compare`
    of its command (its JSON under "fix": benchmarks/prediction.py); ``done``: called with each case."""
    import os
    import subprocess

    from lab.cells import readtrace_cli, run_cell, warm_up
    from lab.checkpoints import build_all
    from lab.clients import missing, mounted
    from lab.loaders import LOADERS
    from readtrace.measure.profile import MountProfile
    from readtrace.pagecache.evict import evict

    os.environ["READTRACE_CACHE_DIR"] = str(tmp / "profile-cache")  # this run's probes only
    built = build_all(tmp / "checkpoints", size, tuple(sorted({LOADERS[c[2]].checkpoint for c in cells})))
    for name in dict.fromkeys(n for _, _, n in cells):
        warm_up(LOADERS[name], built[LOADERS[name].checkpoint], tmp / "warm-up")
    out = []
    for client, latency in dict.fromkeys((c, lat) for c, lat, _ in cells):
        if why := missing(client):
            print(f"skip {client}: {why}", file=sys.stderr)
            continue
        with mounted(client, tmp / "checkpoints", tmp / f"mount-{client}-{latency:g}", latency_ms=latency) as m:
            evict([str(p) for p in m.backing])
            probe = subprocess.run([*readtrace_cli(), "probe", "--json", str(m.mountpoint)], capture_output=True,
                                   text=True, timeout=300)
            penalty = MountProfile.from_data(json.loads(probe.stdout)[0]).handle_penalty if probe.returncode == 0 \
                else None
            for name in (n for c, lat, n in cells if (c, lat) == (client, latency)):
                loader, t = LOADERS[name], time.monotonic()
                work = tmp / f"{client}-{latency:g}-{name}"
                r = run_cell(loader, m.mountpoint / built[loader.checkpoint].name, work, fix=fix, floor=True,
                             backing=m.backing)
                if r.record_rc != 0:
                    print(f"{client} {name}: record failed: {r.record_stderr[-300:]}", file=sys.stderr)
                    continue
                c = case(work / "load.rtrace", f"{client}/{name}", latency, size, r.floor_s)
                c["causes_if_slow"] = compat_causes(loader, penalty)
                c["causes"] = c["causes_if_slow"] if c["slow"] else []
                c["cause"] = c["causes"][0] if c["causes"] else None
                c["handle_penalty"] = penalty
                c.update(client=client, loader=name, shares_handle=loader.shares_handle)
                if fix:
                    c["fix"], c["fix_error"] = r.fix, None if r.fix else r.fix_stderr[-300:]
                out.append(c)
                if done:
                    done(c)
                print(f"{client} {latency:g} ms {name}: {time.monotonic() - t:.0f} s", file=sys.stderr)
    return out


def case(trace: Path, pattern: str, latency: float, size: int, floor_s: float | None) -> dict:
    """One recorded case: its truth and what the report said. ``floor_s``: the floor run's data wait."""
    from readtrace.analyze import analyze
    from readtrace.analyze.storage import whatif
    from readtrace.trace import load_trace

    a = analyze(load_trace(trace, lean=True))
    wall, wait = a.summary.wall_s, a.summary.time.data_wait_s
    slow = floor_s is not None and wait > floor_s * (1 + SLOW_FRACTION) + SLOW_S
    own = next(iter(whatif.own_mount_predictions(a)), None)
    return {"pattern": pattern, "latency_ms": latency, "size_mib": size, "wall_s": wall, "data_wait_s": wait,
            "trace": str(trace), "floor_s": floor_s,
            # the report's model against what was measured: the load predicted from its own trace, and
            # the fixed load against the load with its data wait at the floor (what one reader achieved)
            "predicted_s": own.predicted_s if own else None, "predicted_fixed_s":
                a.summary.prediction.predicted_fixed_s if a.summary.prediction else None,
            "at_floor_s": wall - wait + floor_s if floor_s is not None and wall is not None else None,
            "slow": slow, "cause": CAUSE.get(pattern) if slow else None,
            "findings": [{"code": f.code, "severity": f.severity, "role": f.role, "cause": f.cause,
                          "cost_s": f.cost_s, "wait_s": f.wait_s, "floor_s": f.floor_s,
                          "lever_predictions": f.lever_predictions,
                          "not_expected": [r["lever"] for r in f.not_expected]} for f in a.findings],
            "cost_sum_s": sum(f.cost_s for f in a.findings if f.cost_s)}


def score(cases: list[dict]) -> dict:
    """Per code: HIGHs, right ones, precision, recall; the misfires the issue counts."""
    codes = sorted({f["code"] for c in cases for f in c["findings"]} | {v for v in CAUSE.values() if v})
    per_code = {}
    for code in codes:
        high = [c for c in cases if any(f["code"] == code and f["severity"] == "high" for f in c["findings"])]
        right = [c for c in high if c["slow"] and code in _causes(c)]
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


def _causes(c: dict) -> list[str]:
    """The codes that name a case's cause (compat cases may have two: the handle, or the faults on it)."""
    return c.get("causes") or ([c["cause"]] if c["cause"] else [])


def print_table(cases: list[dict], s: dict) -> None:
    print(f"{'pattern':<32} {'ms':>4} {'MiB':>4} {'wall s':>7} {'wait s':>7} {'floor':>6} {'slow':>5}  "
          "cause: severity (cost s)")
    for c in cases:
        named = ", ".join(f"{f['code']}: {f['severity']} ({f['cost_s'] or 0:.2f})" for f in c["findings"]
                          if f["role"] == "cause" and f["cost_s"] is not None) or "-"
        print(f"{c['pattern']:<32} {c['latency_ms']:>4g} {c['size_mib']:>4} {c['wall_s']:>7.2f} "
              f"{c['data_wait_s']:>7.2f} {c['floor_s'] or 0:>6.2f} {'yes' if c['slow'] else 'no':>5}  {named}")
    print(f"\n{s['cases']} cases, {s['slow']} slow")
    for code, r in s["per_code"].items():
        prec = "-" if r["precision"] is None else f"{r['precision']:.0%}"
        rec = "-" if r["recall"] is None else f"{r['recall']:.0%}"
        print(f"  {code:<22} HIGH {r['high']:>3} (right {r['right']}), precision {prec:>4}, recall {rec:>4} of {r['due']}")
    for key in ("high_at_floor", "cost_over_wall", "slow_without_high"):
        print(f"  {key}: {len(s[key])} {s[key] if s[key] else ''}")
    print_predictions(cases)


def print_predictions(cases: list[dict]) -> None:
    """The model's predictions against the measured walls (issue 21): the load from its own trace, and
    the fixed load against the same load with its data wait at the floor."""
    print(f"\n{'pattern':<32} {'ms':>4} {'MiB':>4} {'wall s':>7} {'pred s':>7} {'err':>6}  {'at floor':>8} "
          f"{'pred fixed':>10} {'err':>6}")
    own, fixed = [], []
    for c in cases:
        e1 = c["predicted_s"] / c["wall_s"] - 1 if c.get("predicted_s") and c["wall_s"] else None
        e2 = c["predicted_fixed_s"] / c["at_floor_s"] - 1 if c.get("predicted_fixed_s") and c.get("at_floor_s") \
            else None
        own += [e1] if e1 is not None else []
        fixed += [e2] if e2 is not None else []
        cell = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
        print(f"{c['pattern']:<32} {c['latency_ms']:>4g} {c['size_mib']:>4} {c['wall_s']:>7.2f} "
              f"{cell(c.get('predicted_s'), '7.2f'):>7} {cell(e1, '+6.0%'):>6}  {cell(c.get('at_floor_s'), '8.2f'):>8} "
              f"{cell(c.get('predicted_fixed_s'), '10.2f'):>10} {cell(e2, '+6.0%'):>6}")
    for name, errors in (("load from its own trace", own), ("fixed vs the load at its floor", fixed)):
        within = sum(abs(e) <= 0.3 for e in errors)
        print(f"  {name}: {within} of {len(errors)} within 30 %" if errors else f"  {name}: none predicted")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="64", help="checkpoint sizes in MiB, comma-separated")
    p.add_argument("--latencies", default="5,20", help="first-byte latencies of the lab mount in ms")
    p.add_argument("--patterns", default=",".join(p for p in CAUSE if p != FLOOR_PATTERN))
    p.add_argument("--out", default="bench-results")
    p.add_argument("--from", dest="again", nargs="+", help="score the cases of earlier runs' report_corpus.json "
                                                           "again, together (their traces kept with --keep)")
    p.add_argument("--keep", help="keep the traces in this directory")
    p.add_argument("--compat", help="also the compat cells: 'default' (COMPAT_CELLS) or CLIENT:MS:LOADER,...")
    p.add_argument("--compat-only", action="store_true", help="the compat cells only, no lab patterns")
    args = p.parse_args()
    out = Path(args.out)
    if args.again:
        from lab.loaders import LOADERS

        old = [c for path in args.again for c in json.loads(Path(path).read_text())["cases"]]
        floors = {(c["latency_ms"], c["size_mib"]): c for c in old if c["pattern"] == FLOOR_PATTERN}
        cases = []
        for c in old:
            if "causes" in c:  # a compat cell: its own floor, its causes by construction (today's rules)
                again = case(Path(c["trace"]), c["pattern"], c["latency_ms"], c["size_mib"], c["floor_s"])
                if_slow = compat_causes(LOADERS[c["pattern"].split("/")[1]], c["handle_penalty"])
                causes = if_slow if again["slow"] else []
                cases.append({**again, "causes_if_slow": if_slow, "causes": causes,
                              "cause": causes[0] if causes else None, "handle_penalty": c["handle_penalty"]})
                continue
            floor = floors[c["latency_ms"], c["size_mib"]]
            floor_s = case(Path(floor["trace"]), FLOOR_PATTERN, c["latency_ms"], c["size_mib"], None)["data_wait_s"]
            cases.append(case(Path(c["trace"]), c["pattern"], c["latency_ms"], c["size_mib"], floor_s))
        return _done(cases, out)
    cases = []
    with tempfile.TemporaryDirectory(prefix="corpus-") as tmp:
        tmp = args.keep or tmp
        Path(tmp).mkdir(parents=True, exist_ok=True)
        for size in (int(x) for x in args.sizes.split(",")) if not args.compat_only else ():
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
        if args.compat:
            cells = COMPAT_CELLS if args.compat == "default" else \
                [(c, float(ms), n) for c, ms, n in (x.split(":") for x in args.compat.split(","))]
            cases += compat_cases(list(cells), int(args.sizes.split(",")[0]), Path(tmp))
        return _done(cases, out)


def _done(cases: list[dict], out: Path) -> int:
    s = score(cases)
    print_table(cases, s)
    out.mkdir(exist_ok=True)
    (out / "report_corpus.json").write_text(json.dumps({"cases": cases, "score": s}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
