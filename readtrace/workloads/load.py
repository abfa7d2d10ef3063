"""Load a safetensors checkpoint with the read pattern of a real loader, time it, digest it.

``python -m readtrace.workloads.load --pattern NAME [--workers N] [--device cpu|cuda] PATH...``
PATH: safetensors files or directories holding them. Prints a summary line and, last, one JSON
line: pattern, seconds, bytes, tensors, digest. The digest covers every tensor's name, dtype,
shape and bytes, so it is the same for every pattern on the same checkpoint.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from readtrace.errors import ExitStatus, InputError, PrerequisiteError, UsageError
from readtrace.exits import HANDLED, fail
from readtrace.workloads.layout import TensorInfo, read_layout
from readtrace.workloads.patterns import PATTERNS, Tensors


@dataclass(frozen=True)
class LoadResult:
    pattern: str
    seconds: float
    bytes: int
    tensors: int
    digest: str
    workers: int
    device: str
    files: int


def checkpoint_files(paths: list[str | Path]) -> list[str]:
    """The safetensors files named by ``paths`` (a directory stands for its *.safetensors)."""
    files: list[str] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob("*.safetensors"))
            if not found:
                raise InputError(f"no *.safetensors files in {p}")
            files += map(str, found)
        elif p.is_file():
            files.append(str(p))
        else:
            raise InputError(f"no such checkpoint file: {p}")
    return files


def digest(tensors: Tensors) -> str:
    """sha256 over (name, dtype, shape, bytes) of every tensor, in name order."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def to_device(tensors: Tensors, device: str) -> Tensors:
    """Move the loaded tensors to ``device`` (pinned host copies for CUDA, then wait for the copies)."""
    if device == "cpu":
        return tensors
    if not torch.cuda.is_available():
        raise PrerequisiteError("device cuda: no CUDA GPU is visible to torch")
    moved = {name: t.pin_memory().to(device, non_blocking=True) for name, t in tensors.items()}
    torch.cuda.synchronize()
    return moved


def load(paths: list[str | Path], pattern: str, workers: int = 4, device: str = "cpu") -> tuple[LoadResult, Tensors]:
    """Run one pattern over the checkpoint; the time covers reading and the device copy."""
    if pattern not in PATTERNS:
        raise UsageError(f"unknown pattern {pattern!r} (choose from {', '.join(PATTERNS)})")
    if workers < 1:
        raise UsageError("workers must be at least 1")
    if device not in ("cpu", "cuda"):
        raise UsageError(f"device must be cpu or cuda, not {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise PrerequisiteError("device cuda: no CUDA GPU is visible to torch")
    files = checkpoint_files(paths)
    layout: list[TensorInfo] = [t for f in files for t in read_layout(f)]
    names = [t.name for t in layout]
    if len(set(names)) != len(names):
        raise InputError("the same tensor name appears in two files")
    t0 = time.perf_counter()
    tensors = to_device(PATTERNS[pattern](layout, workers), device)
    seconds = time.perf_counter() - t0
    result = LoadResult(pattern, round(seconds, 4), sum(t.nbytes for t in layout), len(tensors), digest(tensors),
                        workers, device, len(files))
    return result, tensors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="load", description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", metavar="PATH")
    parser.add_argument("--pattern", required=True, choices=list(PATTERNS))
    parser.add_argument("--workers", type=int, default=4, help="threads or processes (default 4)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args(argv)
    try:
        result, _ = load(args.paths, args.pattern, args.workers, args.device)
    except HANDLED as e:
        return fail("load", e)
    except OSError as e:
        print(f"load: cannot read {e.filename}: {e.strerror}", file=sys.stderr)
        return ExitStatus.BAD_INPUT
    print(f"{result.pattern}: {result.tensors} tensors, {result.bytes / 2**20:.1f} MiB in {result.seconds:.3f} s "
          f"({result.bytes / max(result.seconds, 1e-9) / 1e6:.0f} MB/s) on {result.device}; digest {result.digest[:16]}")
    print(json.dumps(asdict(result)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
