"""Which rank of a distributed job a process is: the launcher's variables in its environment.

torchrun (and torch.distributed's other launchers, SLURM-style wrappers that export the same names)
start every worker with RANK / LOCAL_RANK / WORLD_SIZE ... in its environment. The recorder reads
them from ``/proc/PID/environ`` when the process execs, while it still exists; children that fork
without exec inherit their parent's rank (resolved at analysis time from the fork rows).
"""

from __future__ import annotations

RANK_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")


def parse_environ(raw: bytes) -> dict[str, int] | None:
    """The rank variables of a NUL-separated environment block; None without a RANK."""
    found: dict[str, int] = {}
    for entry in raw.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        key = name.decode("ascii", "replace")
        if sep and key in RANK_VARIABLES:
            try:
                found[key.lower()] = int(value)
            except ValueError:
                continue  # a launcher's placeholder or garbage: not a rank
    return found if "rank" in found else None


def rank_of(pid: int) -> dict[str, int] | None:
    """The rank variables of a live process (None: no rank, gone, or not ours to read)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return parse_environ(f.read())
    except OSError:
        return None
