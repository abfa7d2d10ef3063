"""Parse and validate a safetensors header from an open fd, as strictly as safetensors itself.

Layout: 8-byte little-endian header length N, N bytes of UTF-8 JSON, then the data section. Every
tensor's ``data_offsets`` are relative to the data section; sorted by offset they must tile it exactly
(no overlap, no hole, nothing after the last tensor), as safetensors' own ``Metadata::validate`` demands.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass

import torch

from readtrace.loader.errors import CheckpointFormatError
from readtrace.loader.fileio import pread_exact

__all__ = ["CheckpointFormatError", "Header", "TensorInfo", "read_header"]

MAX_HEADER_BYTES = 100_000_000  # safetensors' own limit (HeaderTooLarge)

# safetensors dtype name -> (torch attribute, bits per element as counted in the header's shape)
DTYPES: dict[str, tuple[str, int]] = {
    "BOOL": ("bool", 8),
    "U8": ("uint8", 8),
    "I8": ("int8", 8),
    "F8_E4M3": ("float8_e4m3fn", 8),
    "F8_E4M3FNUZ": ("float8_e4m3fnuz", 8),
    "F8_E5M2": ("float8_e5m2", 8),
    "F8_E5M2FNUZ": ("float8_e5m2fnuz", 8),
    "F8_E8M0": ("float8_e8m0fnu", 8),
    "F4": ("float4_e2m1fn_x2", 4),  # two values per byte: torch's last dim is half the header's
    "I16": ("int16", 16),
    "U16": ("uint16", 16),
    "F16": ("float16", 16),
    "BF16": ("bfloat16", 16),
    "I32": ("int32", 32),
    "U32": ("uint32", 32),
    "F32": ("float32", 32),
    "I64": ("int64", 64),
    "U64": ("uint64", 64),
    "F64": ("float64", 64),
    "C64": ("complex64", 64),
}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's entry: name, dtype (safetensors name and torch dtype), shape, byte range."""

    name: str
    dtype_name: str
    dtype: torch.dtype
    shape: tuple[int, ...]  # as torch sees it (F4: last dim halved)
    begin: int  # relative to the data section
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class Header:
    """A validated header: where the data section lies in the file and what it holds."""

    data_start: int
    data_len: int
    tensors: tuple[TensorInfo, ...]  # in file order (by offset), as safetensors returns them
    metadata: dict[str, str] | None

    @property
    def names(self) -> list[str]:
        return [t.name for t in self.tensors]


def read_header(fd: int, path: str | os.PathLike) -> Header:
    """Read and validate the header of the safetensors file open on ``fd``."""
    return _header(lambda size, offset: _pread_exact(fd, size, offset, path), os.fstat(fd).st_size, path)


def header_from_bytes(data: memoryview, path: str | os.PathLike) -> Header:
    """Validate the header of a safetensors file whose whole bytes are ``data``."""
    return _header(lambda size, offset: bytes(data[offset:offset + size]), len(data), path)


def _header(read, file_size: int, path) -> Header:
    """The header, given ``read(size, offset) -> exactly size bytes`` of a ``file_size``-byte file."""
    if file_size == 0:
        raise CheckpointFormatError(path, "the file is empty")
    if file_size < 8:
        raise CheckpointFormatError(path, f"{file_size} bytes is shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", read(8, 0))
    if n > MAX_HEADER_BYTES:
        raise CheckpointFormatError(path, f"header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit")
    if 8 + n > file_size:
        raise CheckpointFormatError(path, f"header length {n} runs past the end of the {file_size}-byte file")
    raw = read(n, 8)
    return parse_header_json(raw, data_start=8 + n, data_len=file_size - 8 - n, path=path)


def parse_header_json(raw: bytes, *, data_start: int, data_len: int, path: str | os.PathLike) -> Header:
    """Validate the JSON header ``raw`` against a data section of ``data_len`` bytes."""
    if not raw.startswith(b"{"):
        raise CheckpointFormatError(path, "the header does not start with '{'")
    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:  # RecursionError: nested too deeply
        raise CheckpointFormatError(path, f"malformed JSON header ({e})") from None
    if not isinstance(doc, dict):
        raise CheckpointFormatError(path, "the header is not a JSON object")
    metadata = _check_metadata(doc.pop("__metadata__", None), path)
    infos = sorted((_tensor_info(name, entry, path) for name, entry in doc.items()),
                   key=lambda t: (t.begin, t.end, t.name))
    expected = 0
    for info in infos:
        if info.begin != expected:
            what = "overlaps the previous tensor" if info.begin < expected else "leaves a hole before it"
            raise CheckpointFormatError(path, f"tensor {info.name!r} at offset {info.begin} {what} "
                                              f"(expected offset {expected})")
        expected = info.end
    if expected > data_len:
        raise CheckpointFormatError(path, f"truncated: tensors need {expected} data bytes, "
                                          f"the file holds {data_len}")
    if expected < data_len:
        raise CheckpointFormatError(path, f"{data_len - expected} bytes after the last tensor "
                                          "are not described by the header")
    return Header(data_start, data_len, tuple(infos), metadata)


def _tensor_info(name: str, entry: object, path) -> TensorInfo:
    if not isinstance(entry, dict):
        raise CheckpointFormatError(path, f"entry {name!r} is not an object")
    dtype_name, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype_name not in DTYPES:
        raise CheckpointFormatError(path, f"tensor {name!r} has unknown dtype {dtype_name!r}")
    attr, bits = DTYPES[dtype_name]
    dtype = getattr(torch, attr, None)
    if dtype is None:
        raise CheckpointFormatError(path, f"tensor {name!r}: dtype {dtype_name} needs torch.{attr}, "
                                          f"which torch {torch.__version__} lacks")
    if not _is_int_list(shape):
        raise CheckpointFormatError(path, f"tensor {name!r} has an invalid shape {shape!r}")
    if not (_is_int_list(offsets) and len(offsets) == 2 and offsets[0] <= offsets[1]):
        raise CheckpointFormatError(path, f"tensor {name!r} has invalid data_offsets {offsets!r}")
    nbits = math.prod(shape) * bits
    if nbits % 8 or offsets[1] - offsets[0] != nbits // 8:
        raise CheckpointFormatError(path, f"tensor {name!r}: {dtype_name} {shape} needs {nbits / 8:g} bytes, "
                                          f"data_offsets span {offsets[1] - offsets[0]}")
    torch_shape = tuple(shape)
    if bits == 4:
        if not shape or shape[-1] % 2:
            raise CheckpointFormatError(path, f"tensor {name!r}: F4 needs an even last dimension")
        torch_shape = (*shape[:-1], shape[-1] // 2)
    return TensorInfo(name, dtype_name, dtype, torch_shape, offsets[0], offsets[1])


def _check_metadata(metadata: object, path) -> dict[str, str] | None:
    if metadata is None:
        return None
    if not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
        raise CheckpointFormatError(path, "__metadata__ must map strings to strings")
    return metadata


def _is_int_list(value: object) -> bool:
    return isinstance(value, list) and all(type(v) is int and v >= 0 for v in value)


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    doc = dict(pairs)
    if len(doc) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"duplicate key {dup!r}")
    return doc


def _pread_exact(fd: int, size: int, offset: int, path) -> bytes:
    data = pread_exact(fd, size, offset)
    if len(data) != size:
        raise CheckpointFormatError(path, f"file ended while reading {size} bytes at offset {offset}")
    return data
