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


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (a torchrun rendezvous)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_cmd(nproc: int, port: int, *args, nnodes: int = 1, node_rank: int = 0) -> list[str]:
    """torchrun (torch.distributed.run with this Python) of ``nproc`` ranks per node, rendezvous on
    127.0.0.1:``port``, running ``args`` (a script and its arguments)."""
    nodes = ["--nnodes", str(nnodes), "--node_rank", str(node_rank)] if nnodes > 1 else []
    return [sys.executable, "-m", "torch.distributed.run", *nodes, "--nproc_per_node", str(nproc),
            "--master_addr", "127.0.0.1", "--master_port", str(port), *map(str, args)]


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
