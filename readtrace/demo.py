"""The end-to-end demo: the founding gcsfuse case, reproduced on the lab mount, diagnosed and fixed.

1. make a checkpoint (readtrace.workloads), 2. mount it with the gcsfuse profile (20 ms first byte),
3. record an example load whose threads fault through one mapping (or fork with a shared fd),
4. report it, 5. ``fix --compare`` (cold, baseline vs fixed, tensors checked), 6. unmount.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import TextIO

from readtrace import runstate
from readtrace.errors import ReadtraceError


def run_demo(*, size_mib: int = 128, pattern: str = "mmap-threads", workers: int = 4, latency_ms: float = 20,
             strategy: str = "both", repeat: int = 1, workdir: str | None = None, record: bool = True,
             out: TextIO = sys.stdout) -> dict:
    """Run the whole demo; returns the fix --compare JSON object. ``workdir`` keeps every artefact."""
    from readtrace.fix.compare import compare
    from readtrace.fix.compare_report import render_table, to_json
    from readtrace.fix.runs import default_recorder
    from readtrace.simfs import force_unmount, mount
    from readtrace.workloads import make_checkpoint

    if size_mib < 1:
        raise ValueError("size_mib must be at least 1")
    recorder, why_not = default_recorder() if record else (None, "recording off (--no-record)")
    say = _printer(out)
    runstate.sweep(say)
    with tempfile.TemporaryDirectory(prefix=f"{runstate.PREFIX}demo-") as tmp, runstate.noted("demo", tmp):
        base = Path(workdir) if workdir else Path(tmp)
        src, mnt = base / "bucket", base / "mnt"
        for d in (src, mnt):
            d.mkdir(parents=True, exist_ok=True)
        say(f"1. checkpoint: {size_mib} MiB of safetensors in {src}")
        checkpoint = make_checkpoint(src, size_mib)[0]
        say(f"2. lab mount: {mnt} (gcsfuse profile: per-handle reader, {latency_ms:g} ms first byte)")
        try:
            with mount(src, mnt, profile="gcsfuse", latency_ms=latency_ms, keep_cache=True,
                       log=base / "simfs.jsonl", overwrite_log=True):
                path = str(mnt / checkpoint.name)
                cmd = [sys.executable, "-m", "readtrace.workloads.load", "--pattern", pattern,
                       "--workers", str(workers), path]
                say(f"3. the load ({pattern}, {workers} workers): {' '.join(cmd[1:])}")
                if recorder is not None:
                    _record_and_report(cmd, base / "load.rtrace", out, say)
                else:
                    say(f"   {why_not}: skipping record and report")
                say("5. readtrace fix --compare (each run cold: the checkpoint's pages evicted first)")
                result = compare(cmd, strategy=strategy, repeat=repeat, files=[path], recorder=recorder,
                                 workdir=base / "runs", log=lambda line: say(f"   {line}"))
                if why_not:
                    result.notes.append(why_not)
                render_table(result, out)
        finally:
            force_unmount(mnt)
        say("6. unmounted" + (f"; artefacts kept in {base}" if workdir else ""))
        return to_json(result)



def _record_and_report(cmd: list[str], trace: Path, out: TextIO, say) -> None:
    from readtrace.analyze import analyze
    from readtrace.record import record_command
    from readtrace.report.terminal import TerminalReport
    from readtrace.trace import load_trace

    result = record_command(cmd, str(trace), force=True, quiet=True)
    result.raise_if_interrupted()
    if result.exit_code != 0:
        raise ReadtraceError(f"the demo load exited with {result.exit_code}")
    say(f"   recorded {result.events:,} events in {result.wall_s:.1f} s -> {trace}")
    say("4. readtrace report")
    TerminalReport(analyze(load_trace(trace)), streams=6).render(out)


def _printer(out: TextIO):
    def say(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    return say


def demo_available() -> str | None:
    """Why the demo cannot run here, or None."""
    if not os.path.exists("/dev/fuse"):
        return "the demo needs /dev/fuse (the lab mount)"
    return None
