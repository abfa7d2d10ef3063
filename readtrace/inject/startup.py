"""Prefetch at interpreter start-up, for loaders the shim cannot route (raw mmap, forked preads ...).

``READTRACE_PREFETCH_FILES`` (os.pathsep-separated) names the checkpoint files; the first Python
process of the rerun streams them into the page cache before the script runs and exports
``READTRACE_PREFETCHED`` so its Python children do not read them again. Imports no torch.
"""

from __future__ import annotations

import json
import os
import time

from readtrace.errors import ReadtraceError
from readtrace.fs.fsinfo import is_remote
from readtrace.pagecache.pin import DEFAULT_HOLD_S, Pins
from readtrace.pagecache.prefetch import DEFAULT_THREADS, prefetch
from readtrace.pagecache.residency import cache_survives_open

_HELD: list[Pins] = []  # prefetched pages locked in memory until their hold time ends or we exit


def prefetch_at_start(env=os.environ) -> None:
    strategy = env.get("READTRACE_FIX", "none")
    files = [f for f in env.get("READTRACE_PREFETCH_FILES", "").split(os.pathsep) if f]
    if strategy not in ("prefetch", "both", "auto") or not files or env.get("READTRACE_PREFETCHED"):
        return
    if strategy == "auto":
        files = [f for f in files if is_remote(f)]
    files = [f for f in files if _cache_kept(f)]  # else the loader's own open() drops what we read
    if not files:
        return
    started = time.perf_counter()
    try:
        hold_s = float(env.get("READTRACE_PREFETCH_PIN_S", DEFAULT_HOLD_S))
        result = prefetch(files, threads=int(env.get("READTRACE_PREFETCH_THREADS", DEFAULT_THREADS)),
                          progress=False, distributed=False, pin=hold_s > 0)
    except ReadtraceError as e:
        _note(env, {"event": "call", "call": "prefetch", "strategy": strategy, "seconds": 0.0,
                    "error": str(e), "pid": os.getpid()})
        return
    if result.pins is not None:
        result.pins.hold(hold_s)
        _HELD.append(result.pins)
    env["READTRACE_PREFETCHED"] = os.pathsep.join(files)
    _note(env, {"event": "call", "call": "prefetch", "file": os.pathsep.join(files), "strategy": strategy,
                "seconds": time.perf_counter() - started, "bytes": result.bytes_read, "tensors": 0,
                "pinned_bytes": result.pinned_bytes, "pin_note": result.pin_note, "pid": os.getpid()})


def release_pin(path: str) -> None:
    """``path`` has been loaded: its prefetched pages need not stay locked any longer."""
    for pins in _HELD:
        for pinned in pins.files:
            if os.path.abspath(pinned.path) == os.path.abspath(path):
                pinned.release()


def already_prefetched(path: str, env=os.environ) -> bool:
    return path in env.get("READTRACE_PREFETCHED", "").split(os.pathsep)


def _cache_kept(path: str) -> bool:
    try:
        return cache_survives_open(path)
    except (OSError, ReadtraceError):
        return False


def _note(env, record: dict) -> None:
    manifest = env.get("READTRACE_MANIFEST")
    if manifest:
        with open(manifest, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, separators=(",", ":")) + "\n")
