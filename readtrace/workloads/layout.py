"""Where each tensor of a safetensors file lies, in absolute file offsets, so the example loaders can
read tensors the way real loaders do. The header is parsed by readtrace.loader.header (the one
parser)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from readtrace.loader.fileio import open_fd
from readtrace.loader.header import DTYPES, read_header

CODES = {getattr(torch, attr): code for code, (attr, _) in DTYPES.items() if hasattr(torch, attr)}  # dtype -> name


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
    with open_fd(path, sequential=False) as fd:
        header = read_header(fd, path)
    return [TensorInfo(path, t.name, t.dtype, t.shape, header.data_start + t.begin, header.data_start + t.end)
            for t in header.tensors]


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
