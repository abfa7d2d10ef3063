"""One cell of the compatibility matrix: a loader on a mount, end to end through the CLI the way a
user runs it: ``readtrace record``, ``readtrace report --json``, ``readtrace fix --compare --json``.
Shared by tests/compat/ and benchmarks/compat_matrix.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from lab.loaders import Loader
from readtrace.errors import ExitStatus
from readtrace.pagecache.evict import evict

# Findings about the pattern on one handle: what a per-handle file system punishes.
HANDLE_CODES = ("SHARED_FD_INTERLEAVE", "RANDOM_ON_FUSE_HANDLE")
CHECKPOINT_SUFFIXES = (".safetensors", ".pt", ".bin", ".gguf", ".distcp", ".raw")


def readtrace_cli() -> list[str]:
    exe = Path(sys.executable).with_name("readtrace")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "readtrace"]


@dataclass
class CellResult:
    record_rc: int
    record_stderr: str
    lost_events: int | None
    findings: list[dict]  # report --json findings (code, severity, ...)
    fix: dict | None  # fix --compare --json, None when it failed
    fix_rc: int | None  # None: fix --compare was not run
    fix_stderr: str
    digests: list[dict] = field(default_factory=list)  # one line per run of the script (record, baseline, fixed)
    record_s: float = 0.0
    handle_streams: list[dict] = field(default_factory=list)  # the report's open-file/FUSE-handle streams
    wall_s: float | None = None  # the recorded load's wall (report summary)
    data_wait_s: float | None = None  # ... and its wait on the data files (the time split)
    mount_profiles: list[dict] = field(default_factory=list)  # the measured profiles the trace recorded
    floor_s: float | None = None  # the same files read in order, cold (sequential_floor; None: not measured)

    def at_floor(self, slack: float = 0.1, slack_s: float = 1.0) -> bool | None:
        """The recorded load waited on its data files at most its floor + 10 % + 1 s (issue 22's "not
        slow", on the wait: the wall of a short load is mostly start-up and, on a busy machine, waiting
        for a CPU); None: unknown."""
        if self.floor_s is None or self.data_wait_s is None:
            return None
        return self.data_wait_s <= self.floor_s * (1 + slack) + slack_s

    def streams_line(self) -> str:
        """The shared-stream figures an interleave judgement rests on, for an assertion message."""
        keys = ("kind", "tasks", "bytes", "cache_miss_bytes", "in_order_fraction", "task_in_order_fraction",
                "interleave_score", "seek_fraction", "interleaved")
        return "; ".join(", ".join(f"{k}={s.get(k)}" for k in keys) for s in self.handle_streams)

    def handle_findings(self, severities=("high", "warn")) -> list[dict]:
        return [f for f in self.findings if f["code"] in HANDLE_CODES and f["severity"] in severities]


def checkpoint_files(directory: Path) -> list[str]:
    return sorted(str(p) for p in directory.iterdir() if p.suffix in CHECKPOINT_SUFFIXES)


def run_cell(loader: Loader, checkpoint_dir: Path, work: Path, *, repeat: int = 1,
             strategy: str | None = None, timeout: float = 900, fix: bool = True,
             backing: tuple[Path, ...] = (), floor: bool = False, files_from_trace: bool = False) -> CellResult:
    """record -> report -> fix --compare (unless not ``fix``) of ``loader`` reading ``checkpoint_dir``.
    ``backing``: local files under the mount (squashfuse's image) whose page cache is dropped too;
    ``floor``: also time the checkpoint read in order, cold (``sequential_floor``, ``CellResult.floor_s``);
    ``files_from_trace``: `fix --compare TRACE`, the checkpoint files found from the recording alone
    (else the command again with ``--files``)."""
    work.mkdir(parents=True, exist_ok=True)
    digests, trace = work / "digests.jsonl", work / "load.rtrace"
    digests.unlink(missing_ok=True)
    command = loader.command(checkpoint_dir, digests)
    cli = readtrace_cli()
    # the recorded load is a first, cold load: an earlier cell (or its fix --compare) on the same mount may
    # have left part of the checkpoint cached, and a partly warm load shows another pattern
    cold = [*checkpoint_files(checkpoint_dir), *map(str, backing)]
    evict(cold)
    started = time.perf_counter()
    rec = subprocess.run([*cli, "record", "-o", str(trace), "--force", "--", *command], capture_output=True,
                         text=True, timeout=timeout)
    record_s = time.perf_counter() - started
    findings, lost, streams, wall, waited, profiles = [], None, [], None, None, []
    if rec.returncode == 0:
        profiles = json.loads((trace / "meta.json").read_text()).get("mount_profiles") or []
        rep = subprocess.run([*cli, "report", "--json", str(trace)], capture_output=True, text=True,
                             timeout=timeout)
        if rep.returncode == 0:
            data = json.loads(rep.stdout)
            findings = data.get("findings", [])
            lost = _lost(data)
            wall = (data.get("summary") or {}).get("wall_s")
            waited = (data.get("summary") or {}).get("data_wait_s")
            streams = [s for s in data.get("streams", []) if s.get("kind") in ("ofd", "fuse_handle")
                       and (s.get("bytes") or 0) >= 1 << 20]
        else:
            rec = subprocess.CompletedProcess(rec.args, rep.returncode, "", f"report failed: {rep.stderr}")
    floor_s = sequential_floor(checkpoint_files(checkpoint_dir), cold) if floor else None
    target = [str(trace)] if files_from_trace else ["--files", *checkpoint_files(checkpoint_dir), "--", *command]
    fix_timeout = max(timeout, FIX_LOADS * record_s)  # httpdirfs at 256 MiB: a 207 s load, fix past 900 s
    fixed, fix_rc, fix_stderr = _fix(cli, work, target, repeat, strategy, fix_timeout) if fix else (None, None, "")
    lines = [json.loads(x) for x in digests.read_text().splitlines()] if digests.exists() else []
    return CellResult(rec.returncode, rec.stderr[-2000:], lost, findings, fixed, fix_rc, fix_stderr, lines,
                      record_s, streams, wall, waited, profiles, floor_s)


def warm_up(loader: Loader, checkpoint_dir: Path, work: Path) -> None:
    """Run ``loader`` once on a local checkpoint, unrecorded, so that the libraries it imports are in the
    page cache as every later run (fix's included) finds them: the first cell of a benchmark run had
    paid them cold in its recorded load alone (rclone 64 MiB: 1.92 s to the first read, 0.8-1.1 s in
    every other cell, and its fixed prediction +31 %)."""
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run(loader.command(checkpoint_dir, work / "warm-up.jsonl"), capture_output=True, timeout=900)


TIMED_OUT = 124  # the exit status timeout(1) gives a command it stopped: a fix past its time
FIX_LOADS = 12  # the most loads one fix --compare makes: baselines, the floor's, trials, confirmations
FLOOR_STREAMS = 4  # readtrace's prefetch and the own-fd loader's readers on a mount that rewards them


def sequential_floor(files: list[str], cold: list[str], chunk: int = 16 << 20) -> float:
    """Seconds reading ``files`` in order (one after another, 16 MiB reads, fds marked sequential as
    readtrace's readers mark theirs), each after dropping ``cold`` from the page cache: the faster of one
    reader and FLOOR_STREAMS readers of contiguous shares, each its own fd. The floor a load of those
    bytes can reach on the mount (sshfs at 20 ms, 64 MiB: one plain reader 5.7 s, one fadvised 2.95 s,
    4 fadvised 0.95 s; the own-fd loader with 4 threads reached the last)."""
    from readtrace.measure.probe import read_shares

    def timed(readers: int) -> float:
        evict(cold)
        started = time.perf_counter()
        for path in files:
            read_shares(path, readers, shared=False, chunk=chunk, advise=True)
        return time.perf_counter() - started

    return min(timed(1), timed(FLOOR_STREAMS))


def _fix(cli: list[str], work: Path, target: list[str], repeat: int, strategy: str | None,
         timeout: float) -> tuple[dict | None, int, str]:
    """``fix --compare --json`` of the cell's trace or command (``target``): (its JSON when measured,
    exit code, stderr tail)."""
    fix_args = [*cli, "fix", "--compare", "--no-record", "--json", "--repeat", str(repeat),
                "--keep", str(work / "fix")]
    if strategy:
        fix_args += ["--strategy", strategy]
    shutil.rmtree(work / "fix", ignore_errors=True)
    # its own session: a fix still running at ``timeout`` is stopped with its load (SIGTERM: it cleans up)
    process = subprocess.Popen([*fix_args, *target], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, PYTHONUNBUFFERED="1"), start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
        (work / "fix.json").write_text("")
        return None, TIMED_OUT, f"fix --compare stopped after {timeout:.0f} s"
    fix = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    # NO_EVIDENCE: measured and printed, but the shim saw no tensors to compare (a raw-read loader)
    measured = fix.returncode in (ExitStatus.OK, ExitStatus.NO_EVIDENCE)
    (work / "fix.json").write_text(fix.stdout)  # kept beside the trace, for a failed assertion's reader
    fixed = json.loads(fix.stdout) if measured and fix.stdout.strip() else None
    return fixed, fix.returncode, fix.stderr[-2000:]


def _lost(report: dict) -> int | None:
    lost = (report.get("summary") or {}).get("lost_events")
    return None if lost is None else int(lost)


# A lever the report advises (findings[].lever_predictions) -> fix --compare's candidates that apply it
# (the fastest measured counts): benchmarks/prediction.py and tests/compat score the advice with it.
LEVER_CANDIDATES = {"own fd": ("readtrace own-fd", "readtrace own fd per forked worker", "readtrace populate",
                               "readtrace populate after open"),
                    "prefetch": ("readtrace prefetch",), "own-fd loader": ("readtrace own-fd",)}


def candidate_walls(fix: dict | None) -> dict[str, float]:
    """fix --compare's candidates that ran to exit 0: label -> cold wall seconds."""
    cands = ((fix or {}).get("choice") or {}).get("candidates") or []
    return {c["label"]: c["wall_s"] for c in cands if c.get("exit_code") == 0 and c.get("wall_s")}


def advised_levers(findings: list[dict], fix: dict | None) -> list[dict]:
    """Each lever the report advised (predicted to gain; INFO findings left out) with its predicted time
    and the cold wall of the fastest of fix's candidates that applied it (None: not tried)."""
    walls = candidate_walls(fix)
    advised = {}
    for f in findings:
        if f["severity"] != "info":
            for p in f.get("lever_predictions") or []:
                advised.setdefault(p["lever"], p["predicted_s"])
    out = []
    for lever, predicted in advised.items():
        tried = [walls[label] for label in LEVER_CANDIDATES.get(lever, ()) if label in walls]
        out.append({"lever": lever, "predicted_s": predicted, "measured_s": min(tried) if tried else None})
    return out
