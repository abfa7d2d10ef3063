"""The whole contract between ``readtrace fix`` (the host) and the processes of a rerun (the child).

The host puts a ``Rerun`` into the child's environment (``to_env``); the sitecustomize hook, the
start-up prefetch and the shim read it back (``from_env``). Nothing else reads or writes READTRACE_*
variables. The child answers through the manifest, a JSON-lines file that ``append_manifest`` alone
writes (its records: rerun/records.py). Standard library only and import-free: the command line reads the strategy names before
loading torch, and the hook reads the rest before the user's script runs.

To add a setting: a field with a default here, and its variable in ``_VARIABLES``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the hook reads the Rerun alone: the records load with the first write
    from readtrace.rerun.records import Record

OWN_FD_PER_FORK = "own-fd-per-fork"  # each forked worker reopens the checkpoint fds it inherited (inject/forkfd.py)
POPULATE = "populate"  # a checkpoint the script maps is read ahead through the loader's own fd (inject/mapfill.py)
STRATEGIES = ("none", "prefetch", "own-fd", "both", OWN_FD_PER_FORK, POPULATE, "auto")  # what the shim accepts; none = record only
FIX_STRATEGIES = STRATEGIES[1:]  # what `readtrace fix` applies
_PREFETCHING = ("prefetch", "both")  # per-file modes that stream the file into the page cache first
_ROUTING = ("own-fd", "both")  # per-file modes that load through readtrace's own-fd loader


class LeverName(StrEnum):
    """The levers ``fix --compare`` may try (``Rerun.lever``): fix/levers.py says when each applies, the
    shim (inject/shim.py) applies the first three; ``omp-1`` is an environment variable alone."""

    SAFETENSORS_PREAD = "safetensors-pread"
    DISABLE_MMAP = "disable-mmap"
    TORCH_LOAD_NO_MMAP = "torch-load-no-mmap"
    OMP_1 = "omp-1"


def prefetches(mode: str) -> bool:
    """Does this strategy (or per-file mode) stream files into the page cache before they load?
    ``auto`` may: it picks ``both`` per file on FUSE and network file systems."""
    return mode in _PREFETCHING or mode == "auto"


def routes(mode: str) -> bool:
    """Does this per-file mode load through readtrace's own-fd loader?"""
    return mode in _ROUTING


@dataclass(frozen=True)
class Rerun:
    """What the processes of one rerun are asked to do."""

    strategy: str = "none"  # one of STRATEGIES
    manifest: str | None = None  # the child appends what it loaded here (None: record nothing)
    device: str | None = None  # load onto this device instead of the one the script asks for
    prefetch_files: tuple[str, ...] = ()  # prefetched at interpreter start (loaders the shim cannot route)
    prefetched: tuple[str, ...] = ()  # set by the process that prefetched them, for its children
    chunk_mib: float | None = None  # reader chunk size (None: the loader's default)
    threads: int | None = None  # own-fd loader threads (None: its default)
    prefetch_threads: int | None = None  # None: the prefetcher's default
    prefetch_pin_s: float | None = None  # hold prefetched pages locked this long (None: the default)
    prefetch_distributed: bool = True  # split the prefetch over torchrun's local ranks
    prefetch_background: bool = False  # prefetch in a thread while the script starts (its loads wait)
    prefetch_plan: str | None = None  # torchrun: each rank prefetches its pieces of this plan (rerun/rankplan.py)
    readtrace_path: str | None = None  # where readtrace is importable from (appended to sys.path)
    files: tuple[str, ...] = ()  # the checkpoint files of the comparison (names a load from bytes)
    lever: str | None = None  # apply this loader lever (readtrace.fix.levers) instead of a strategy
    calls_log: str | None = None  # record loader entry-point calls here (readtrace record; inject/calls.py)
    early_read: bool = True  # own-fd files on mounts that drop the cache: read them at start-up (inject/early.py)
    populate_inline: bool = True  # populate fills a file before its mapping returns (False: alongside, inject/mapfill.py)

    @property
    def active(self) -> bool:
        """The shim has something to do: route loads, or record them."""
        return self.strategy != "none" or self.manifest is not None

    def start_prefetch(self) -> tuple[str, ...]:
        """The files to prefetch before the script runs (none once a parent process did)."""
        return () if self.prefetched or not prefetches(self.strategy) else self.prefetch_files

    def early_read_candidates(self) -> tuple[str, ...]:
        """The files this process may read early (inject/early.py keeps those on mounts that drop the
        cache): the own-fd loader will load them, and no parent process read them already."""
        mode = "both" if self.strategy == "auto" else self.strategy  # auto: both on remote files
        if not self.early_read or self.prefetched or self.prefetch_plan or not routes(mode):
            return ()
        return self.prefetch_files or self.files

    def to_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: os.environ) without any READTRACE_* variable of ours, plus this rerun's."""
        env = {k: v for k, v in (os.environ if base is None else base).items() if k not in _NAMES}
        for f in fields(self):
            value = getattr(self, f.name)
            if value != f.default:
                env[_VARIABLES[f.name]] = _encode(value)
        return env

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Rerun:
        """The rerun ``env`` (default: os.environ) describes. A value that does not parse keeps its
        default: the child must never break the user's program over it."""
        env = os.environ if env is None else env
        values = {}
        for f in fields(cls):
            text = env.get(_VARIABLES[f.name], "")
            if text:
                try:
                    values[f.name] = _decode(text, f.default, _NUMBERS.get(f.name))
                except ValueError:
                    continue
        rerun = cls(**values)
        return rerun if rerun.strategy in STRATEGIES else replace(rerun, strategy="none")

    def export(self, env: MutableMapping[str, str]) -> None:
        """Write this rerun into ``env`` in place (os.environ: for this process's children)."""
        for name in _NAMES:
            env.pop(name, None)
        env.update(self.to_env({}))


def append_manifest(path: str | os.PathLike, records: list[Record]) -> None:
    """Append records as JSON lines in one write (O_APPEND: safe from several processes). Under
    torchrun each record carries the writer's ``rank`` (its RANK), so the host compares rank by rank."""
    from readtrace.rerun.records import manifest_line

    rank = process_rank()
    if rank is not None:
        records = [replace(r, rank=rank) for r in records]
    data = "".join(manifest_line(r) for r in records).encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def process_rank(env: Mapping[str, str] | None = None) -> int | None:
    """This process's RANK in a distributed job (torchrun sets it; a forked worker inherits it), or None."""
    text = (os.environ if env is None else env).get("RANK", "")
    return int(text) if text.isdigit() else None


_VARIABLES = {
    "strategy": "READTRACE_FIX",
    "manifest": "READTRACE_MANIFEST",
    "device": "READTRACE_DEVICE",
    "prefetch_files": "READTRACE_PREFETCH_FILES",
    "prefetched": "READTRACE_PREFETCHED",
    "chunk_mib": "READTRACE_CHUNK_MB",
    "threads": "READTRACE_THREADS",
    "prefetch_threads": "READTRACE_PREFETCH_THREADS",
    "prefetch_pin_s": "READTRACE_PREFETCH_PIN_S",
    "prefetch_distributed": "READTRACE_PREFETCH_DIST",
    "prefetch_background": "READTRACE_PREFETCH_BACKGROUND",
    "prefetch_plan": "READTRACE_PREFETCH_PLAN",
    "readtrace_path": "READTRACE_PYTHONPATH",  # also read by shim_sitecustomize, before readtrace imports
    "files": "READTRACE_FILES",
    "lever": "READTRACE_LEVER",
    "calls_log": "READTRACE_CALLS",  # also read by inject/calls.py (standard library only)
    "early_read": "READTRACE_EARLY_READ",
    "populate_inline": "READTRACE_POPULATE_INLINE",
}
_NAMES = frozenset(_VARIABLES.values())
_NUMBERS = {"chunk_mib": float, "threads": int, "prefetch_threads": int, "prefetch_pin_s": float}


def _encode(value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple):
        return os.pathsep.join(value)
    return str(value)


def _decode(text: str, default, number: type | None):
    if number is not None:
        value = number(text)
        if not math.isfinite(value) or value < 0:  # nan, inf, negative: no setting means that
            raise ValueError(text)
        return value
    if isinstance(default, bool):
        return text != "0"
    if isinstance(default, tuple):
        return tuple(p for p in text.split(os.pathsep) if p)
    return text
