"""One cell of the compatibility matrix: a loader on a mount, end to end through the CLI the way a
user runs it: ``readtrace record``, ``readtrace report --json``, ``readtrace fix --compare --json``.
Shared by tests/compat/ and benchmarks/compat_matrix.py."""

from __future__ import annotations

import json
import os
import shutil
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
CHECKPOINT_SUFFIXES = (".safetensors", ".pt", ".bin")


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
             strategy: str | None = None, timeout: float = 900, fix: bool = True) -> CellResult:
    """record -> report -> fix --compare (unless not ``fix``) of ``loader`` reading ``checkpoint_dir``."""
    work.mkdir(parents=True, exist_ok=True)
    digests, trace = work / "digests.jsonl", work / "load.rtrace"
    digests.unlink(missing_ok=True)
    command = loader.command(checkpoint_dir, digests)
    cli = readtrace_cli()
    # the recorded load is a first, cold load: an earlier cell (or its fix --compare) on the same mount may
    # have left part of the checkpoint cached, and a partly warm load shows another pattern
    evict(checkpoint_files(checkpoint_dir))
    started = time.perf_counter()
    rec = subprocess.run([*cli, "record", "-o", str(trace), "--force", "--", *command], capture_output=True,
                         text=True, timeout=timeout)
    record_s = time.perf_counter() - started
    findings, lost, streams = [], None, []
    if rec.returncode == 0:
        rep = subprocess.run([*cli, "report", "--json", str(trace)], capture_output=True, text=True,
                             timeout=timeout)
        if rep.returncode == 0:
            data = json.loads(rep.stdout)
            findings = data.get("findings", [])
            lost = _lost(data)
            streams = [s for s in data.get("streams", []) if s.get("kind") in ("ofd", "fuse_handle")
                       and (s.get("bytes") or 0) >= 1 << 20]
        else:
            rec = subprocess.CompletedProcess(rec.args, rep.returncode, "", f"report failed: {rep.stderr}")
    fixed, fix_rc, fix_stderr = _fix(cli, checkpoint_dir, work, command, repeat, strategy, timeout) \
        if fix else (None, None, "")
    lines = [json.loads(x) for x in digests.read_text().splitlines()] if digests.exists() else []
    return CellResult(rec.returncode, rec.stderr[-2000:], lost, findings, fixed, fix_rc, fix_stderr, lines,
                      record_s, streams)


def _fix(cli: list[str], checkpoint_dir: Path, work: Path, command: list[str], repeat: int,
         strategy: str | None, timeout: float) -> tuple[dict | None, int, str]:
    """``fix --compare --json`` of the cell's command: (its JSON when measured, exit code, stderr tail)."""
    fix_args = [*cli, "fix", "--compare", "--no-record", "--json", "--repeat", str(repeat),
                "--keep", str(work / "fix"), "--files", *checkpoint_files(checkpoint_dir)]
    if strategy:
        fix_args += ["--strategy", strategy]
    shutil.rmtree(work / "fix", ignore_errors=True)
    fix = subprocess.run([*fix_args, "--", *command], capture_output=True, text=True, timeout=timeout,
                         env=dict(os.environ, PYTHONUNBUFFERED="1"))
    # NO_EVIDENCE: measured and printed, but the shim saw no tensors to compare (a raw-read loader)
    measured = fix.returncode in (ExitStatus.OK, ExitStatus.NO_EVIDENCE)
    fixed = json.loads(fix.stdout) if measured and fix.stdout.strip() else None
    return fixed, fix.returncode, fix.stderr[-2000:]


def _lost(report: dict) -> int | None:
    lost = (report.get("summary") or {}).get("lost_events")
    return None if lost is None else int(lost)
