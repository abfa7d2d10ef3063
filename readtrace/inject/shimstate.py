"""The shim's state in one process: the rerun's settings (read once, at import), the loader functions
it replaced, the manifest records not written yet, and whether this thread is inside a patched call.
Every module of the shim (shim.py, routing.py, safeopen.py, callrecords.py) shares this one ``STATE``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from readtrace.loader import loader
from readtrace.loader.errors import LoaderError
from readtrace.loader.fileio import chunk_bytes_of
from readtrace.pagecache import prefetch as prefetcher
from readtrace.rerun.protocol import Rerun

# What our loader may raise for a file the original loader should then be given (it fails or
# succeeds as it would have without the shim).
REFUSED = (LoaderError, OSError, ValueError)


@dataclass
class Config:
    strategy: str = "none"
    device: str | None = None
    manifest: str | None = None
    chunk_bytes: int = loader.DEFAULT_CHUNK_BYTES
    threads: int | None = None  # the loader's default
    prefetch_threads: int = prefetcher.DEFAULT_THREADS
    prefetch_distributed: bool | None = None
    prefetch_pin_s: float | None = None  # the default hold (inject/startup.py pin_seconds)
    lever: str | None = None

    @classmethod
    def from_env(cls, env=os.environ) -> Config:
        rerun = Rerun.from_env(env)
        return cls(
            strategy=rerun.strategy,
            device=rerun.device,
            manifest=rerun.manifest,
            chunk_bytes=chunk_bytes_of(rerun.chunk_mib),
            threads=rerun.threads,
            prefetch_threads=rerun.prefetch_threads or prefetcher.DEFAULT_THREADS,
            prefetch_distributed=None if rerun.prefetch_distributed else False,
            prefetch_pin_s=rerun.prefetch_pin_s,
            lever=rerun.lever,
        )


@dataclass
class State:
    config: Config
    originals: dict = field(default_factory=dict)
    prefetched: set = field(default_factory=set)
    pending: list = field(default_factory=list)
    patched: set = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    local: threading.local = field(default_factory=threading.local)  # .inside: in a patched call


STATE = State(Config.from_env())


def inside() -> bool:
    """This thread is inside a patched call (a nested safetensors call is not recorded twice)."""
    return getattr(STATE.local, "inside", False)


class Inside:
    """Marks this thread as inside a patched call, so nested safetensors calls are not recorded twice;
    with ``spent``, hands it the seconds spent inside (a safe_open handle's time)."""

    def __init__(self, spent: Callable[[float], None] | None = None):
        self.spent = spent

    def __enter__(self):
        self.outer = inside()
        STATE.local.inside = True
        self.started = time.perf_counter()

    def __exit__(self, *exc):
        STATE.local.inside = self.outer
        if self.spent is not None:
            self.spent(time.perf_counter() - self.started)
        return False
