"""The tensor manifest: one record per loaded tensor (file, name, dtype, shape, sha256 of its bytes).

Both the baseline and the fixed rerun write one (through protocol.append_manifest, its one writer);
identical manifests prove the fix loaded the same tensors. Loader calls go in the same file as call
records (rerun/records.py: every kind of line). The host reads it here and fills missing digests in memory.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from readtrace.errors import ReadtraceError
from readtrace.loader.fileio import tensor_bytes
from readtrace.rerun.records import Call, CorruptManifest, Tensor, Unproven, read_records

if TYPE_CHECKING:  # the host reads and compares manifests without torch (1.5 s of imports)
    import torch


def raw_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as a contiguous 1-D uint8 CPU tensor (a copy only where needed)."""
    import torch

    flat = tensor.detach().contiguous().reshape(-1)
    if flat.dtype != torch.uint8:
        flat = flat.view(torch.uint8)
    return flat.cpu()


def tensor_digest(tensor: torch.Tensor) -> str:
    """sha256 of the tensor's bytes in memory order."""
    raw = raw_bytes(tensor)  # keep it referenced: tensor_bytes() views its memory without owning it
    return hashlib.sha256(tensor_bytes(raw)).hexdigest()


def tensor_record(file: str, name: str, tensor: torch.Tensor, *, index=None, digest: bool = True) -> Tensor:
    """The manifest record of one tensor (or one slice of it: ``index`` as given to get_slice()[...]).

    ``digest=False`` leaves ``sha256`` null, for ``fill_digests`` to compute from the file later
    (an index that cannot be written down is digested now instead).
    """
    whole, encoded = None, None
    if index is not None and not selects_all(index):
        try:
            whole, encoded = name, encode_index(index)
        except TypeError:
            digest = True
        name = f"{name}[{index_text(index)}]"
    return Tensor(file=file, name=name, dtype=str(tensor.dtype).removeprefix("torch."), shape=tuple(tensor.shape),
                  tensor=whole, index=encoded, sha256=tensor_digest(tensor) if digest else None)


def selects_all(index) -> bool:
    """Whether a get_slice index takes the whole tensor (``[...]``, ``[:]``, ``[:, :]``): transformers
    reads every tensor as ``get_slice(name)[...]``, and that record must match the same tensor loaded
    whole (by load_file, or from bytes under disable_mmap)."""
    items = index if isinstance(index, tuple) else (index,)
    return all(item is Ellipsis or (isinstance(item, slice) and item == slice(None)) for item in items)


def encode_index(index) -> list:
    """A get_slice index as JSON: ints, {"slice": [start, stop, step]}, "..." and null (newaxis)."""
    def one(item):
        if isinstance(item, slice):
            return {"slice": [item.start, item.stop, item.step]}
        if item is Ellipsis:
            return "..."
        if item is None or isinstance(item, int):
            return item
        raise TypeError(f"unsupported index {item!r}")

    return [one(i) for i in (index if isinstance(index, tuple) else (index,))]


def decode_index(items: list) -> tuple:
    def one(item):
        if isinstance(item, dict):
            return slice(*item["slice"])
        return Ellipsis if item == "..." else item

    return tuple(one(i) for i in items)


def index_text(index) -> str:
    def one(item):
        if isinstance(item, slice):
            text = ":".join("" if v is None else str(v) for v in (item.start, item.stop, item.step))
            return text.removesuffix(":") or ":"
        return "..." if item is Ellipsis else str(item)

    return ",".join(one(i) for i in (index if isinstance(index, tuple) else (index,)))


@dataclass
class Manifest:
    """What one run loaded: tensor records, and the loader calls with their time."""

    tensors: list[Tensor]
    calls: list[Call]
    failures: list[str] = field(default_factory=list)  # readtrace's own work that failed in the run (failclosed)

    @property
    def loader_s(self) -> float:
        return sum(c.seconds for c in self.calls if not c.nested)

    @property
    def digest_s(self) -> float:
        return sum(c.digest_seconds or 0.0 for c in self.calls)

    @property
    def ranked(self) -> bool:
        """Its records carry the writers' ranks (a torchrun job)."""
        return any(r.rank is not None for r in (*self.tensors, *self.calls))


def fill_digests(manifest: Manifest) -> int:
    """Compute the digests a run left null, from the files with safetensors itself (in memory: the
    manifest file is the child's alone). Returns how many were filled. Call it right after the run."""
    from safetensors import safe_open

    todo = [i for i, r in enumerate(manifest.tensors) if r.sha256 is None]
    for file in sorted({manifest.tensors[i].file for i in todo}):
        with safe_open(file, framework="pt") as handle:
            for i in (i for i in todo if manifest.tensors[i].file == file):
                r = manifest.tensors[i]
                if r.index is not None:
                    tensor = handle.get_slice(r.tensor)[decode_index(r.index)]
                else:
                    tensor = handle.get_tensor(r.name)
                manifest.tensors[i] = replace(r, sha256=tensor_digest(tensor))
    return len(todo)


def read_manifest(path: str | os.PathLike) -> Manifest:
    """Read a manifest written by the shim; a missing file means nothing was loaded through it."""
    from readtrace.replace import no_follow  # the host's: the shim imports this module too

    tensors, calls, failures = [], [], []
    try:
        with open(path, encoding="utf-8", opener=no_follow) as f:  # a link in a work dir is not followed
            for record in read_records(f, str(path)):
                if isinstance(record, Unproven):
                    failures.append(record.reason)
                else:
                    (tensors if isinstance(record, Tensor) else calls).append(record)
    except FileNotFoundError:
        pass
    except CorruptManifest as e:
        raise ReadtraceError(str(e)) from None
    return Manifest(tensors, calls, failures)


@dataclass
class ManifestDiff:
    """How two runs' tensors compare: identical count, and names that differ or are missing."""

    count: int
    identical: int
    differing: list[str]  # "name (file)"
    only_baseline: list[str]
    only_fixed: list[str]

    @property
    def all_identical(self) -> bool:
        return not (self.differing or self.only_baseline or self.only_fixed)


def compare_manifests(baseline: Manifest, fixed: Manifest) -> ManifestDiff:
    """Match tensors by (rank, file, name) and compare dtype, shape and digest (multiset: repeats
    count). The rank is the writer's under torchrun (protocol.append_manifest), else None."""
    def keyed(m: Manifest) -> Counter:
        return Counter((t.rank, t.file, t.name, t.dtype, tuple(t.shape), t.sha256) for t in m.tensors)

    a, b = keyed(baseline), keyed(fixed)
    names_a = {k[:3] for k in a}
    names_b = {k[:3] for k in b}
    differing = sorted({_label(k[:3]) for k in (a - b) + (b - a) if k[:3] in names_a & names_b})
    return ManifestDiff(
        count=sum(b.values()) if b else sum(a.values()),
        identical=sum((a & b).values()),
        differing=differing,
        only_baseline=sorted(_label(k) for k in names_a - names_b),
        only_fixed=sorted(_label(k) for k in names_b - names_a),
    )


def _label(key: tuple[int | None, str, str]) -> str:
    rank, file, name = key
    return f"{name} ({os.path.basename(file)}{'' if rank is None else f', rank {rank}'})"
