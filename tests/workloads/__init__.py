"""Small workload scripts with known answers, run under `readtrace record` by the tests.

Each script takes a data file and a JSON path; it does I/O at fixed offsets and writes what the
trace must show (pids, thread ids, fds, offsets) to the JSON file.
"""

import os
import sys
from pathlib import Path

WORKLOADS = Path(__file__).resolve().parent


def workload_cmd(name: str, *args) -> list[str]:
    """The command line that runs workload ``name`` (e.g. "pread_threads") with this Python."""
    return [sys.executable, str(WORKLOADS / f"{name}.py"), *map(str, args)]


def shell_cmd(commands: list[list[str]]) -> list[str]:
    """One `sh -c` running several commands in sequence (one recording, one probe compile)."""
    import shlex

    return ["sh", "-c", " && ".join(shlex.join(c) for c in commands)]


def make_data_file(path: Path, size: int) -> Path:
    """A file of ``size`` pseudo-random bytes, flushed to disk (so its pages can be evicted)."""
    with open(path, "wb") as f:
        f.write(os.urandom(size))
        f.flush()
        os.fsync(f.fileno())
    return path


def ebpf_ready() -> tuple[bool, str]:
    """Can this machine record? (root, bcc, headers, tracefs, BTF, tracepoints)"""
    from readtrace.record.prereq import all_checks

    missing = [f"{c.name}: {c.fix}" for c in all_checks() if c.required and not c.ok]
    return (not missing, "; ".join(missing))
