"""Where each tensor of a safetensors file lies: the 8-byte header length, the JSON header, then
the data section. Parsed here so the loaders can read tensors the way real loaders do."""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import torch

from readtrace.errors import ExitStatus, ReadtraceError

DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}
CODES = {dtype: code for code, dtype in DTYPES.items()}
MAX_HEADER = 100 * 1024 * 1024


@dataclass(frozen=True)
class TensorInfo:
    """One tensor: absolute byte range ``[start, end)`` in its file."""

    path: str
    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


def read_layout(path: str | Path) -> list[TensorInfo]:
    """The tensors of one safetensors file in file order; a malformed file is a one-line error."""
    path = str(path)
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise ValueError("shorter than 8 bytes")
            (header_len,) = struct.unpack("<Q", head)
            if header_len > MAX_HEADER:
                raise ValueError(f"header length {header_len} is implausible")
            header = json.loads(f.read(header_len))
        size = os.path.getsize(path)
        base = 8 + header_len
        tensors = []
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            begin, end = meta["data_offsets"]
            if not 0 <= begin <= end <= size - base:
                raise ValueError(f"tensor {name} lies outside the file")
            tensors.append(TensorInfo(path, name, DTYPES[meta["dtype"]], tuple(meta["shape"]), base + begin,
                                      base + end))
    except OSError as e:
        raise ReadtraceError(f"cannot read {path}: {e.strerror}", ExitStatus.BAD_INPUT) from None
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise ReadtraceError(f"not a safetensors file: {path} ({e})", ExitStatus.BAD_INPUT) from None
    return sorted(tensors, key=lambda t: t.start)


def split_contiguous(tensors: list[TensorInfo], parts: int) -> list[list[TensorInfo]]:
    """Cut a file-ordered tensor list into ``parts`` contiguous runs of about equal bytes, the way
    multi-worker loaders hand each worker its own stretch of the file."""
    total = sum(t.nbytes for t in tensors) or 1
    runs: list[list[TensorInfo]] = [[] for _ in range(parts)]
    done = 0
    for t in tensors:
        index = min(parts - 1, (done + t.nbytes // 2) * parts // total)  # by the tensor's middle
        runs[index].append(t)
        done += t.nbytes
    return [run for run in runs if run]
