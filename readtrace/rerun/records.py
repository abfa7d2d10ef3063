"""The manifest's records: one frozen dataclass per kind of line, one writer, one reader.

The child writes them (``protocol.append_manifest`` -> ``manifest_line``), the host reads them back
(``read_records``). A record's fields are its line's keys in the order they are written, after
``"event"``; a field whose default is None is left out of the line while it is None (``sha256``, always
written, is the one optional value written as null). ``rank`` is the writer's RANK under torchrun,
last. The host reads every kind of call through the attributes of ``Call``: one a kind does not have
reads as None. Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import MISSING, dataclass, fields

# The names of the calls the child notes besides the loader calls themselves (LoaderCall.call).
PREFETCH = "prefetch"  # the start-up prefetch (inject/startup.py)
POPULATE_CALL = "populate"  # a mapping faulted in or a loader's fd read ahead (inject/mapfill.py, the shim)
EARLY_READ = "early read"  # a file read into memory at start-up (inject/early.py)
MAPPED = "mmap"  # a checkpoint the script mapped with Python's mmap (inject/mapfill.py)
MAPPED_BYTES = "mapped bytes"  # that mapping's bytes digested
FORKED_SHARED = "fork:shared-fd"  # a forked worker on its parent's open checkpoint (inject/forkfd.py)


class CorruptManifest(ValueError):
    """A manifest line that is not a record (and not a last line cut off by a failed write)."""


class Call:
    """What the host reads of any call record (each kind below is one): an attribute that the record's
    kind does not have reads as None."""

    call: str
    file: str | None
    strategy: str | None
    seconds: float | None
    tensors: int | None
    digest_seconds: float | None
    bytes: int | None
    nested: bool | None
    pid: int | None
    rank: int | None
    mmap: bool | None
    lever: str | None
    fallback: str | None
    error: str | None
    note: str | None
    how: str | None
    waited_s: float | None
    background: bool | None
    pinned_bytes: int | None
    pin_note: str | None
    fd: int | None
    when: str | None
    reopened: bool | None

    def __getattr__(self, name: str):
        if name in Call.__annotations__:
            return None
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")


@dataclass(frozen=True, kw_only=True)
class Tensor:
    """One loaded tensor, or one slice of it (``tensor`` and ``index``: get_slice(tensor)[index])."""

    EVENT = "tensor"
    file: str
    name: str
    dtype: str
    shape: tuple[int, ...]
    tensor: str | None = None
    index: list | None = None
    sha256: str | None = None  # None: left for the host to fill (inject/manifest.fill_digests); written
    rank: int | None = None


@dataclass(frozen=True, kw_only=True)
class Unproven:
    """readtrace's own work failed in the run (inject/failclosed.py): it proves nothing."""

    EVENT = "unproven"
    reason: str
    pid: int | None = None
    rank: int | None = None


@dataclass(frozen=True, kw_only=True)
class LoaderCall(Call):
    """A loader call the shim routed or recorded (``call``: load_file, safe_open, torch.load, ...), or a
    loader library imported (``import:transformers``: no file)."""

    call: str
    file: str | None = None
    strategy: str
    seconds: float
    tensors: int
    digest_seconds: float | None = None
    pid: int
    lever: str | None = None
    mmap: bool | None = None  # torch.load: whether the script asked for mmap=True
    fallback: str | None = None  # why the own-fd loader gave the file to the original one
    error: str | None = None
    nested: bool | None = None  # True: inside a recorded call, whose time counts it already
    rank: int | None = None


@dataclass(frozen=True, kw_only=True)
class PrefetchCall(Call):
    """The start-up prefetch; a prefetch that failed has its ``error`` and no file."""

    call: str = PREFETCH
    file: str | None = None  # the files, os.pathsep-joined
    strategy: str
    seconds: float
    error: str | None = None
    bytes: int | None = None
    tensors: int | None = None
    background: bool | None = None
    nested: bool | None = None
    pinned_bytes: int | None = None
    pin_note: str | None = None
    pid: int
    rank: int | None = None


@dataclass(frozen=True, kw_only=True)
class PopulateCall(Call):
    """A checkpoint's pages faulted in (the shim) or read ahead on the loader's own fd (mapfill)."""

    call: str = POPULATE_CALL
    file: str
    strategy: str
    how: str | None = None  # mapfill: "reopened", "loader's fd", "not started"
    seconds: float
    bytes: int
    tensors: int = 0
    nested: bool = True
    pid: int
    note: str | None = None
    rank: int | None = None


@dataclass(frozen=True, kw_only=True)
class EarlyReadCall(Call):
    """A file read into memory at start-up, taken by a load (``waited_s``) or never used (``note``)."""

    call: str = EARLY_READ
    file: str
    seconds: float
    bytes: int
    waited_s: float | None = None
    note: str | None = None
    strategy: str
    tensors: int = 0
    nested: bool = True
    pid: int
    rank: int | None = None


@dataclass(frozen=True, kw_only=True)
class MappedCall(Call):
    """The script mapped a checkpoint file with Python's mmap."""

    call: str = MAPPED
    file: str
    seconds: float = 0.0
    strategy: str
    tensors: int = 0
    nested: bool = True
    pid: int
    rank: int | None = None


@dataclass(frozen=True, kw_only=True)
class MappedBytesCall(Call):
    """A checkpoint mapping's bytes digested (its Tensor record comes first)."""

    call: str = MAPPED_BYTES
    file: str
    strategy: str
    seconds: float = 0.0
    tensors: int = 1
    digest_seconds: float
    nested: bool = True
    pid: int
    rank: int | None = None


@dataclass(frozen=True, kw_only=True)
class ForkCall(Call):
    """A forked worker (``when``: fork, exec) found an fd on a checkpoint; ``reopened``: own-fd-per-fork."""

    call: str = FORKED_SHARED
    file: str
    fd: int
    when: str
    reopened: bool
    seconds: float = 0.0
    nested: bool = True
    pid: int
    rank: int | None = None


Record = Tensor | Unproven | Call
_CALLS = {kind.call: kind for kind in (PrefetchCall, PopulateCall, EarlyReadCall, MappedCall, MappedBytesCall,
                                       ForkCall)}


def manifest_line(record: Record) -> str:
    """The record's JSON line (with its newline), as the manifest holds it."""
    event = "call" if isinstance(record, Call) else record.EVENT
    values = {"event": event}
    for f in fields(record):
        value = getattr(record, f.name)
        if value is not None or f.default is not None or f.name == "sha256":
            values[f.name] = list(value) if f.name == "shape" else value
    return json.dumps(values, separators=(",", ":")) + "\n"


def read_records(lines: Iterable[str], name: str) -> Iterator[Record]:
    """The records of a manifest's lines (``name``: the file, for messages). A last line cut off by a
    failed write (a full disk) ends it as an Unproven record; any other line that is not JSON raises
    CorruptManifest. A line that is neither a tensor nor unproven is a call; keys a kind does not know
    are passed over, one it needs and lacks reads as None."""
    for lineno, line in enumerate(lines, 1):
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: nested too deeply
            if not line.endswith("\n"):
                yield Unproven(reason=f"{name}:{lineno}: the manifest's last line is cut off (a write failed)")
                return
            raise CorruptManifest(f"{name}:{lineno}: corrupt manifest line") from None
        yield record_of(data)


def record_of(data: dict) -> Record:
    """The typed record of one decoded manifest line."""
    event = data.get("event")
    if event == Unproven.EVENT:
        return Unproven(reason=str(data.get("reason")), pid=data.get("pid"), rank=data.get("rank"))
    kind = Tensor if event == Tensor.EVENT else _CALLS.get(data.get("call"), LoaderCall)
    values = {}
    for f in fields(kind):
        if f.name in data:
            value = data[f.name]
            values[f.name] = tuple(value) if f.name == "shape" and isinstance(value, list) else value
        elif f.default is MISSING:
            values[f.name] = None
    return kind(**values)
