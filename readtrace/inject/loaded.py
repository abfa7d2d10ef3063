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
    """The whole file as it is now, read without filling the page cache: from the page cache where all
    of it is there (a read that fetches and fills nothing: the floor's warm run of a 1 GiB load had
    read it again through the mount, past the cache), else with O_DIRECT where allowed."""
    whole = _all_from_cache(path)
    if whole is not None:
        return whole
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_DIRECT)
    except OSError:
        return _read_then_drop(path)
    try:
        size = os.fstat(fd).st_size
        out = bytearray(size)
        buf = mmap.mmap(-1, CHUNK)  # page-aligned, as O_DIRECT wants
        try:
            pos = 0
            while pos < size:
                n = os.preadv(fd, [buf], pos)
                if n <= 0:
                    break
                out[pos:pos + n] = buf[:n]
                pos += n
        except OSError:  # EINVAL: this file system refuses direct reads after all
            return _read_then_drop(path)
        finally:
            buf.close()
        del out[pos:]  # a file that shrank while it was read: what was there
        return out
    finally:
        os.close(fd)


def _all_from_cache(path: str) -> bytearray | None:
    from readtrace.pagecache.residency import all_cached

    try:
        with open(path, "rb", buffering=0) as f:
            return _whole(f.fileno()) if all_cached(f.fileno()) else None
    except OSError:
        return None


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
