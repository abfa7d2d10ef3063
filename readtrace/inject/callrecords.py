"""The manifest records of the shim's loader calls: queued as each call returns, its tensors digested
then (after the clock stopped), written with the next flush (and at exit) through append_manifest."""

from __future__ import annotations

import atexit
import os
import time
from dataclasses import replace

from readtrace.inject import digestcache, loaded
from readtrace.inject.failclosed import guarded
from readtrace.inject.manifest import tensor_record
from readtrace.inject.shimstate import STATE, Inside
from readtrace.rerun.protocol import append_manifest, process_rank
from readtrace.rerun.records import LoaderCall, Record, Tensor


@guarded("manifest record")
def pending(record: Record) -> None:
    """A manifest record written with the next flush."""
    if STATE.config.manifest:
        with STATE.lock:
            STATE.pending.append(record)


@guarded("manifest record")
def record_import(library: str) -> None:
    """A loader library (transformers, diffusers) was imported: a lever of its own may apply."""
    pending(LoaderCall(call=f"import:{library}", strategy=STATE.config.strategy, seconds=0.0, tensors=0,
                       pid=os.getpid()))
    flush()


@guarded("manifest record")
def record(call: str, path: str, mode: str, seconds: float, fallback: str | None, tensors,
           error: str | None, *, digest: bool | None = None, nested: bool = False, parse=None,
           mmap: bool | None = None) -> None:
    """Queue one call line and its tensors' lines (``tensors``: (name, tensor, slice index or None)).

    Every tensor is digested now, when the loader call has returned (after the clock stopped): in
    memory where the loader copied it, from the file's bytes as they are now (``readtrace.inject.loaded``,
    read past the page cache) where it is a lazy mapping of the file, so digesting reads nothing
    through the script's mapping. ``digest=False`` leaves the digests to ``manifest.fill_digests``.
    ``parse``: bytes -> {name: tensor} for the file's format (default safetensors); ``mmap``: torch.load's.
    """
    if not STATE.config.manifest:
        return
    started = time.perf_counter()
    if digest is False:
        lines = [tensor_record(path, name, tensor, index=index, digest=False) for name, tensor, index in tensors]
    else:
        lines = _digested(path, tensors, parse or loaded.safetensors_from_bytes)
    call_line = LoaderCall(call=call, file=path, strategy=mode, seconds=seconds, tensors=len(lines),
                           digest_seconds=time.perf_counter() - started, pid=os.getpid(),
                           lever=STATE.config.lever or None, mmap=mmap, fallback=fallback or None,
                           error=error or None, nested=nested or None)  # nested: its time counts in its caller
    with STATE.lock:
        STATE.pending.extend([*lines, call_line])


def _digested(path: str, tensors, parse) -> list[Tensor]:
    ranges = loaded.mapped_ranges(path) if os.path.exists(path) else []
    from_file = None
    lines = []
    # Under torchrun the host digests mapped tensors after the run (manifest.fill_digests): every rank
    # reading the whole file here would be every rank's byte spans in the trace (rerun/rankplan.py).
    deferred = process_rank() is not None
    cache = key = known = None  # known: {record name: sha256} an earlier run of this comparison took from the file
    fresh: dict[str, str] = {}
    for name, tensor, index in tensors:
        if loaded.is_mapped(tensor, ranges):
            undigested = tensor_record(path, name, tensor, index=index, digest=False)
            if deferred:
                lines.append(undigested)
                continue
            if known is None:  # the file's identity taken only where a tensor maps it (a stat, on a remote mount)
                cache, key = digestcache.cache_path(STATE.config.manifest), digestcache.file_key(path)
                known = digestcache.cached(cache, key) if key else {}
            if undigested.name in known:
                lines.append(replace(undigested, sha256=known[undigested.name]))
                continue
            if from_file is None:
                with Inside():  # our own parse of the file is not the script's load
                    from_file = parse(loaded.uncached_bytes(path))
            line = tensor_record(path, name, loaded.lookup(from_file, name, index), index=index, digest=True)
            fresh[line.name] = line.sha256
            lines.append(line)
            continue
        lines.append(tensor_record(path, name, tensor, index=index, digest=True))
    if fresh and key and digestcache.file_key(path) == key:  # not rewritten while it was read
        digestcache.remember(cache, key, fresh)
    return lines


@guarded("manifest write")
def flush() -> None:
    with STATE.lock:
        lines, STATE.pending = STATE.pending, []
    if lines and STATE.config.manifest:
        append_manifest(STATE.config.manifest, lines)


atexit.register(flush)
