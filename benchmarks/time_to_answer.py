"""How long `fix --compare` takes to answer, next to the slow load it proves a fix for (issue 23).

    python benchmarks/time_to_answer.py --sizes 256 --mounts lab rclone \
        --loaders safe_open-threads transformers fork-shared-fd --baselines recorded made

Per cell (mount x loader x checkpoint size) and recorder, side by side in one run: the baseline (the
unchanged command, cold, not recorded), the fixed side's wall (median of compare's fixed runs), the
total wall of `fix --compare` (strategy auto, files given as a trace would give them: no discovery
run), the ratio total / baseline, what auto chose, the verdict, tensors identical, and the fix's own
cost per run: ``recorder_s_per_run`` (median of the recorder call minus the run's own wall:
compile/attach if any, record, write the trace), ``analysis_s_per_run`` (median of the comparison's trace
analyses: the recorded or first baseline run's, and each run's whose summary the table or verdict reads) and ``fix_overhead_s_per_run`` (the total minus every
run's own wall and the floor's read + warm run, per run: recorder, evictions, shim, digests, analyses). Recorders: ``one-probe-set`` (today, fix/recording.py: probes compiled
once per compare, a trace analysed when the table reads it) and ``older`` (the recorder before issue
23: probes compiled and detached for every run, every trace analysed at once; both share the faster
trace writing of the same commit).
Mounts: ``lab`` (readtrace's simfs, gcsfuse profile, keep_cache) and ``rclone`` (a real client,
HTTP backend, drops the page cache on every open), both at --latency-ms first-byte latency.
Baselines: ``recorded`` (the load recorded cold first, as a user does, then ``fix --compare TRACE``: the
recorded run counts as a baseline run where it can, fix/recorded.py; the recording itself is not in the
total, the user had it) and ``made`` (``fix --compare -- CMD``: the comparison makes every run).
Table printed, JSON under bench-results/. Needs root (eBPF), FUSE, rclone for its cells.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from readtrace.errors import ReadtraceError
from readtrace.fix.compare import compare
from readtrace.fix.recording import RunRecorder
from readtrace.fix.verdict import verdict_of
from readtrace.pagecache.evict import evict

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: lab/ (test harness, not shipped)
from fix_matrix import build, command, files_of  # noqa: E402  (the loaders' checkpoints and scripts)

from lab.clients import mounted as client_mounted  # noqa: E402

LOADERS = ("safe_open-threads", "transformers", "fork-shared-fd")
EXTRA_LOADERS = ("load_file",)  # on request: safetensors' load_file, one sequential reader (often at its floor)
RECORDERS = {"one-probe-set": False, "older": True}  # name -> RunRecorder(older=...)
BASELINES = ("recorded", "made")  # the first baseline run: the user's recorded run, or one the comparison makes


class TimedRecorder:
    """A recorder that notes, per run, its own cost beyond the run's wall (record + analysis)."""

    def __init__(self, inner: RunRecorder):
        self.inner = inner
        self.overheads: list[float] = []

    def __call__(self, cmd, env, cwd, trace):
        started = time.perf_counter()
        code, wall, summary = self.inner(cmd, env, cwd, trace)
        self.overheads.append(time.perf_counter() - started - wall)
        return code, wall, summary

    def attach(self):  # the probes compiled ahead (fix/recording.attaching): counted in the comparison's total
        self.inner.attach()

    def close(self):
        self.inner.close()


@contextmanager
def mounted(kind: str, src: Path, root: Path, latency_ms: float):
    """The mount point of ``src`` seen through ``kind``."""
    if kind == "rclone":
        with client_mounted("rclone", src, root / "rclone", latency_ms=latency_ms) as m:
            yield Path(m.mountpoint)
        return
    from readtrace.simfs import force_unmount, mount

    mnt = Path(tempfile.mkdtemp(prefix="mnt-lab-", dir=root))
    try:
        with mount(src, mnt, profile="gcsfuse", latency_ms=latency_ms, keep_cache=True):
            yield mnt
    finally:
        force_unmount(mnt)


def cold_wall(cmd: list[str], files: list[str]) -> float:
    evict(files)
    started = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - started


def record_cold(cmd: list[str], files: list[str], out: Path) -> str:
    """``readtrace record`` of ``cmd``, cold, as a user records the load before ``fix --compare TRACE``."""
    evict(files)
    subprocess.run([sys.executable, "-m", "readtrace", "record", "--force", "-o", str(out), "--", *cmd], check=True,
                   capture_output=True)
    return str(out)


def cell(kind: str, loader: str, size_mib: int, latency_ms: float, root: Path, recorders: list[str],
         baselines: list[str]) -> list[dict]:
    src, marker = root / f"src-{loader}-{size_mib}", root / f"target-{loader}-{size_mib}.txt"  # marker: off the mount
    if not marker.exists():
        src.mkdir(exist_ok=True)
        marker.write_text(build(loader, src, size_mib))
        os.sync()  # the checkpoint's dirty pages written back now, not during a later floor or run
    target = marker.read_text()
    rows = []
    with mounted(kind, src, root, latency_ms) as mnt:
        cmd = command(loader, root, str(mnt / target))
        files = files_of(mnt / target)
        baseline = cold_wall(cmd, files)
        for name, first in ((r, b) for r in recorders for b in baselines):
            row = {"mount": kind, "loader": loader, "size_mib": size_mib, "recorder": name, "baseline_run": first}
            try:
                trace = record_cold(cmd, files, root / f"{loader}-{size_mib}.rtrace") if first == "recorded" else None
                rows.append(_compare_row(cmd, files, RunRecorder(older=RECORDERS[name]), baseline, row, trace))
            except ReadtraceError as e:  # a shared machine: say it in the row, go on with the next
                rows.append({**row, **dict.fromkeys(COLUMNS[6:]), "error": str(e)})
            print(_line(rows[-1]), flush=True)
    return rows


@contextmanager
def timed_analyses() -> Iterator[list[float]]:
    """The seconds of each trace analysis (``readtrace.analyze.analyze``: the recorded or first baseline
    run's, fix/recorded.py, and each run's summary read lazily, fix/recording.py) made inside the block."""
    import readtrace.analyze as analyzer

    seconds: list[float] = []
    inner = analyzer.analyze

    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - started)

    analyzer.analyze = timed
    try:
        yield seconds
    finally:
        analyzer.analyze = inner


def _compare_row(cmd: list[str], files: list[str], inner: RunRecorder, baseline: float, row: dict,
                 trace: str | None) -> dict:
    """One `fix --compare` (auto) of ``cmd`` with ``inner`` recording, timed, as a table row; ``trace``: the
    recorded run (`fix --compare TRACE`), else None (`fix --compare -- CMD`)."""
    recorder = TimedRecorder(inner)
    started = time.perf_counter()
    with timed_analyses() as analyses:
        result = compare(cmd, strategy="auto", files=files, recorder=recorder, recorded_from=trace)
    total = time.perf_counter() - started
    # each run once (a trial that needed no confirmation run is also the fixed side: the same trace)
    recorded = list({r.trace_path or id(r): r for r in result.runs + (result.choice.trials if result.choice else [])
                     if not (trace and r.recorded == trace)}.values())  # the user's was not made by the comparison
    floor = result.choice.floor if result.choice else None
    # the floor's read, and its warm run unless the recorded run's own time stood for it
    floor_s = floor.read_s + (0.0 if floor.warm_recorded else floor.warm_s) if floor else 0.0
    # everything fix --compare spent beyond the loads themselves (and the floor's read + warm run)
    overhead = (total - sum(r.wall_s for r in recorded) - floor_s) / max(len(recorded), 1)
    fixed = [r.wall_s for r in result.side("fixed")]
    return {**row, "baseline_s": round(baseline, 2), "fixed_s": round(statistics.median(fixed), 2) if fixed else None,
            "total_s": round(total, 2), "ratio": round(total / baseline, 2), "runs": len(recorded),
            "recorder_s_per_run": round(statistics.median(recorder.overheads), 2) if recorder.overheads else None,
            "recorder_s": [round(o, 2) for o in recorder.overheads],
            "analysis_s_per_run": round(statistics.median(analyses), 2) if analyses else None,
            "analysis_s": [round(a, 2) for a in analyses],
            "fix_overhead_s_per_run": round(overhead, 2), "floor_s": round(floor_s, 2),
            "run_walls_s": [round(r.wall_s, 2) for r in recorded],
            "chosen": result.choice.chosen.label if result.choice else None,
            "verdict": verdict_of(result).word, "identical": result.diff.all_identical, "tensors": result.diff.count,
            "recorded_counted": any(trace and r.recorded == trace for r in result.runs), "notes": result.notes}


COLUMNS = ("mount", "loader", "size_mib", "recorder", "baseline_run", "recorded_counted", "baseline_s", "fixed_s",
           "total_s", "ratio", "runs",
           "recorder_s_per_run", "analysis_s_per_run", "fix_overhead_s_per_run", "chosen", "verdict", "identical")


def _line(row: dict) -> str:
    return "  ".join(f"{row[c]!s:>{max(len(c), 8)}}" for c in COLUMNS)


def save(out: Path, rows: list[dict], load_at_start: tuple) -> None:
    """The rows so far with the load average as JSON (after every cell: a long run keeps what it measured)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"load_average_start": load_at_start, "load_average_now": os.getloadavg(),
                               "rows": rows}, indent=2))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[256], help="checkpoint sizes in MiB (1024: --sizes 256 1024)")
    p.add_argument("--mounts", nargs="+", default=["lab", "rclone"], choices=["lab", "rclone"])
    p.add_argument("--loaders", nargs="+", default=list(LOADERS), choices=LOADERS + EXTRA_LOADERS)
    p.add_argument("--recorders", nargs="+", default=["one-probe-set"], choices=list(RECORDERS))
    p.add_argument("--baselines", nargs="+", default=list(BASELINES), choices=BASELINES,
                   help="recorded: the load recorded cold first, `fix --compare TRACE` (its run counts as a "
                        "baseline run where it can); made: `fix --compare -- CMD` makes its own")
    p.add_argument("--latency-ms", type=float, default=20.0)
    p.add_argument("--root", type=Path, default=None, help="where checkpoints are built (kept between runs)")
    p.add_argument("--out", type=Path, default=Path("bench-results/time_to_answer.json"))
    args = p.parse_args()
    if os.geteuid() != 0:
        print("time_to_answer: needs root (eBPF recording)", file=sys.stderr)
        return 2
    root = args.root or Path(tempfile.mkdtemp(prefix="tta-"))
    root.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print("  ".join(f"{c:>{max(len(c), 8)}}" for c in COLUMNS))
    rows = []
    for size in args.sizes:
        for kind in args.mounts:
            for loader in args.loaders:
                rows += cell(kind, loader, size, args.latency_ms, root, args.recorders, args.baselines)
                save(args.out, rows, load)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; JSON: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
