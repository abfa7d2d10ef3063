"""What a run actually loaded, digested when its loader call returns (not from the file after the run).

A tensor the loader copied into memory is digested in memory. A tensor that is a lazy mapping of
the checkpoint (safetensors' mmap, torch.load(mmap=True)) is digested from the file's bytes as they
are at that moment, read on a separate fd from the page cache where the whole file is there, else
with O_DIRECT, so that digesting neither reads the mapping in an order the script never used nor
fills the page cache the script reads from
(without O_DIRECT, e.g. tmpfs: a plain read, and the pages dropped again if none were cached).
A script that rewrites its checkpoint after loading it therefore shows the bytes it loaded.
"""

from __future__ import annotations

import io
import mmap
import os
from collections.abc import Iterable, Iterator

CHUNK = 16 << 20


def mapped_ranges(path: str) -> list[tuple[int, int]]:
    """Address ranges of this process's mappings of ``path`` (from /proc/self/maps)."""
    real = os.path.realpath(path)
    ranges = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[5].rstrip("\n") in (real, path):
                    start, end = (int(x, 16) for x in parts[0].split("-"))
                    ranges.append((start, end))
    except OSError:
        return []
    return ranges


def is_mapped(tensor, ranges: list[tuple[int, int]]) -> bool:
    """Whether the tensor's storage lives in one of ``ranges`` (a lazy view of the file)."""
    if not ranges or tensor.device.type != "cpu":
        return False
    ptr = tensor.untyped_storage().data_ptr()
    return any(start <= ptr < end for start, end in ranges)


def uncached_bytes(path: str) -> bytearray:
    """The whole file as it is now, read without filling the page cache: each run of pages that the page
    cache holds from there (a read that fetches and fills nothing), the others past it with O_DIRECT
    where allowed, else a plain read of the file with the pages dropped again if none
    were cached. Run by run: the warm run of a 1 GiB transformers load, its file read into the cache
    just before, had lost 143-627 of its 262,144 pages by the time it digested (what drops them on this
    VM, with 19 GB free, is not known), and read the whole GiB again through the mount, past the cache
    (20.9 s at 20 ms)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return _read_then_drop(path)
    try:
        size = os.fstat(fd).st_size
        out = bytearray(size)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no read-ahead from the cached runs into the others
        runs = _cached_runs(fd, size)
        pos = 0
        with _DirectReader(path, needed=not all(cached for _, _, cached in runs)) as direct:
            for run in runs:
                pos = run[0] + _read_run(run, fd, direct, out)
                if pos < run[1]:  # a file that shrank while it was read: what was there
                    break
        del out[pos:]
        return out
    except _NoDirect:
        return _read_then_drop(path)
    finally:
        os.close(fd)


BRIDGE_BYTES = 4 << 20


def _cached_runs(fd: int, size: int) -> list[tuple[int, int, bool]]:
    """(start, end, in the page cache) of the file's runs of pages that are, or are not (mincore); one run
    not cached where the kernel cannot say."""
    import numpy as np

    from readtrace.pagecache.residency import PAGE, ResidencyMap

    if size == 0:
        return []
    try:
        pages = ResidencyMap(os.dup(fd))
        try:
            pages.sample()
            resident = pages.resident.astype(bool)
        finally:
            pages.close()
    except OSError:
        return [(0, size, False)]
    bounds = [0, *(np.flatnonzero(np.diff(resident)) + 1).tolist(), len(resident)]
    runs = [(first * PAGE, min(end * PAGE, size), bool(resident[first]))
            for first, end in zip(bounds[:-1], bounds[1:], strict=True)]
    return _bridged(runs)


def _bridged(runs: list[tuple[int, int, bool]]) -> list[tuple[int, int, bool]]:
    """``runs`` with each cached run of at most BRIDGE_BYTES between two uncached ones read past the cache
    with them: on a remote mount a direct read that skips costs a new request's first byte (the lab mount
    at 20 ms: 400 runs of a few pages each took 9.3 s), the bridged bytes a little bandwidth."""
    out: list[tuple[int, int, bool]] = []
    for start, end, cached in runs:
        if not cached and len(out) >= 2 and out[-1][2] and not out[-2][2] and out[-1][1] - out[-1][0] <= BRIDGE_BYTES:
            out[-2:] = [(out[-2][0], end, False)]
        else:
            out.append((start, end, cached))
    return out


def _whole_pages(nbytes: int) -> int:
    return -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE


def _read_run(run: tuple[int, int, bool], fd: int, direct: _DirectReader, out: bytearray) -> int:
    """Bytes of ``run`` = (start, end, cached) into ``out``: from the page cache on ``fd`` where cached,
    else past it; how many it got (fewer: the file ended)."""
    start, end, cached = run
    if not cached:
        return direct.read(out, start, end)
    from readtrace.loader.fileio import read_into

    return read_into(fd, memoryview(out)[start:end], start, chunk_bytes=CHUNK)


class _NoDirect(Exception):
    """This file system refuses direct reads."""


class _DirectReader:
    """Reads past the page cache: O_DIRECT, each read through a page-aligned buffer of its own."""

    def __init__(self, path: str, needed: bool):
        self.fd = None
        if needed:
            try:
                self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_DIRECT)
            except OSError:
                raise _NoDirect() from None

    def read(self, out: bytearray, start: int, end: int) -> int:
        buf = mmap.mmap(-1, min(CHUNK, _whole_pages(end - start)))
        pos = start
        try:
            with memoryview(buf) as view:
                while pos < end:  # no further than the run: each read's length in whole pages, as O_DIRECT wants
                    n = os.preadv(self.fd, [view[:min(len(buf), _whole_pages(end - pos))]], pos)
                    if n <= 0:
                        break
                    n = min(n, end - pos)
                    out[pos:pos + n] = buf[:n]
                    pos += n
        except OSError:  # EINVAL: this file system refuses direct reads after all
            raise _NoDirect() from None
        finally:
            buf.close()
        return pos - start

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)


def _whole(fd: int) -> bytearray:
    """The whole file open on ``fd`` in one writable buffer (tensors may view it: no copy)."""
    from readtrace.loader.fileio import read_into

    out = bytearray(os.fstat(fd).st_size)
    got = read_into(fd, memoryview(out), 0, chunk_bytes=CHUNK)
    return out if got == len(out) else out[:got]


def _read_then_drop(path: str) -> bytearray:
    from readtrace.pagecache.residency import cached_pages

    cached_before = cached_pages(path)[0]
    with open(path, "rb", buffering=0) as f:
        data = _whole(f.fileno())
        if cached_before == 0:  # we brought every page in: give them back
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return data


def safetensors_from_bytes(data: bytes | bytearray) -> dict:
    """The tensors of a safetensors file's whole bytes: views into a writable ``data`` (readtrace's own
    header parser; safetensors' ``load`` copied every tensor, 0.8 s of a 220 MiB file's 1 s of digests),
    else, or for a header that parser refuses, safetensors' own copies."""
    from readtrace.loader.errors import CheckpointFormatError

    if isinstance(data, bytearray):
        from readtrace.loader.loader import tensors_from_memory

        try:
            return tensors_from_memory("the file's bytes", memoryview(data))
        except CheckpointFormatError:
            pass
    from safetensors.torch import load

    return load(bytes(data))


def torch_from_bytes(data: bytes, kwargs: dict):
    import torch

    kwargs = {k: v for k, v in kwargs.items() if k not in ("mmap", "map_location")}
    return torch.load(io.BytesIO(data), map_location="cpu", **kwargs)


def torch_from_memory(torch_load, data, args: tuple, kwargs: dict):
    """``torch.load`` (the original function) of bytes already in memory, with the caller's arguments
    (mmap dropped: there is no file to map)."""
    kwargs = {k: v for k, v in kwargs.items() if k != "mmap"}
    return torch_load(io.BytesIO(data), *args, **kwargs)


def flatten(obj, prefix: str = "") -> Iterator[tuple[str, object]]:
    """(dotted name, tensor) for every tensor inside a torch.load result (dicts, lists, tuples)."""
    import torch

    if isinstance(obj, torch.Tensor):
        yield prefix or "<tensor>", obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from flatten(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            yield from flatten(value, f"{prefix}.{i}" if prefix else str(i))


def lookup(tensors: dict, name: str, index=None):
    tensor = tensors[name]
    return tensor if index is None else tensor[index]


def first_tensor_names(pairs: Iterable[tuple[str, object]]) -> dict:
    """A dict of the pairs, keeping the first tensor of a repeated name."""
    out: dict = {}
    for name, tensor in pairs:
        out.setdefault(name, tensor)
    return out
