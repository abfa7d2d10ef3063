"""Deterministic safetensors checkpoints: a transformer-like mix of tensor sizes and dtypes
(bf16 attention, f16 MLP and head, f32 norms, small int64 tensors), byte-identical for a given
(size, shards, seed). ``python -m readtrace.workloads.checkpoint OUT --size-mib N [--shards K]``."""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import struct
import sys
from pathlib import Path

import torch

from readtrace.errors import UsageError
from readtrace.exits import HANDLED, fail
from readtrace.workloads.layout import CODES

LAYERS = 8
MiB = 1024 * 1024


def plan_tensors(size_mib: float) -> list[tuple[str, torch.dtype, tuple[int, ...]]]:
    """(name, dtype, shape) of a model of about ``size_mib`` MiB."""
    target = int(size_mib * MiB)
    d = max(64, int(math.sqrt(target / 230)) // 64 * 64)  # ~230 d^2 bytes with the layers below
    tensors: list[tuple[str, torch.dtype, tuple[int, ...]]] = [
        ("embed_tokens.weight", torch.bfloat16, (8 * d, d)),
        ("position_ids", torch.int64, (1, 512)),
        ("step", torch.int64, ()),
    ]
    for i in range(LAYERS):
        p = f"layers.{i}."
        tensors += [(p + f"attn.{x}_proj.weight", torch.bfloat16, (d, d)) for x in "qkvo"]
        tensors += [(p + "attn.qkv_bias", torch.bfloat16, (3 * d,)),
                    (p + "mlp.up_proj.weight", torch.float16, (4 * d, d)),
                    (p + "mlp.down_proj.weight", torch.float16, (d, 4 * d)),
                    (p + "input_norm.weight", torch.float32, (d,)),
                    (p + "post_attn_norm.weight", torch.float32, (d,))]
    tensors.append(("norm.weight", torch.float32, (d,)))
    used = sum(_nbytes(dtype, shape) for _, dtype, shape in tensors)
    rows = max(1, (target - used) // (d * 2))
    tensors.append(("lm_head.weight", torch.float16, (rows, d)))
    return tensors


def _nbytes(dtype: torch.dtype, shape: tuple[int, ...]) -> int:
    return math.prod(shape) * torch.empty((), dtype=dtype).element_size()


def tensor_data(name: str, dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> bytes:
    """The bytes of one tensor: seeded by (seed, name), so independent of order and sharding."""
    gen = torch.Generator().manual_seed(int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8],
                                                       "little") >> 1)
    if dtype in (torch.int64, torch.int32):
        t = torch.randint(0, 50_000, shape, generator=gen, dtype=dtype)
    else:
        t = (torch.randn(shape, generator=gen) * 0.02).to(dtype)
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def write_safetensors(path: Path, tensors: list[tuple[str, torch.dtype, tuple[int, ...]]], seed: int) -> None:
    """Write one file tensor by tensor (never the whole model in memory), in safetensors' own order:
    larger dtype alignment first, then by name."""
    ordered = sorted(tensors, key=lambda t: (-torch.empty((), dtype=t[1]).element_size(), t[0]))
    header: dict = {"__metadata__": {"format": "pt", "generator": "readtrace.workloads.checkpoint"}}
    offset = 0
    for name, dtype, shape in ordered:
        size = _nbytes(dtype, shape)
        header[name] = {"dtype": CODES[dtype], "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        for name, dtype, shape in ordered:
            f.write(tensor_data(name, dtype, shape, seed))


def make_checkpoint(out: str | Path, size_mib: float, shards: int = 1, seed: int = 0) -> list[Path]:
    """Write a checkpoint of about ``size_mib`` MiB into directory ``out``: ``model.safetensors``, or
    ``model-0000i-of-0000K.safetensors`` + ``model.safetensors.index.json`` when sharded."""
    if size_mib <= 0 or shards < 1:
        raise UsageError("checkpoint size must be > 0 MiB and shards >= 1")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tensors = plan_tensors(size_mib)
    if shards > len(tensors):
        raise UsageError(f"at most {len(tensors)} shards for this size")
    if shards == 1:
        path = out / "model.safetensors"
        write_safetensors(path, tensors, seed)
        return [path]
    groups = _balanced_groups(tensors, shards)
    paths, weight_map = [], {}
    for i, group in enumerate(groups, 1):
        path = out / f"model-{i:05d}-of-{shards:05d}.safetensors"
        write_safetensors(path, group, seed)
        paths.append(path)
        weight_map.update({name: path.name for name, _, _ in group})
    index = {"metadata": {"total_size": sum(_nbytes(d, s) for _, d, s in tensors)},
             "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return paths


def _balanced_groups(tensors, shards):
    """Consecutive groups of about equal bytes (HF's max_shard_size splitting)."""
    total = sum(_nbytes(d, s) for _, d, s in tensors)
    groups: list[list] = [[] for _ in range(shards)]
    done = 0
    for t in tensors:
        groups[min(shards - 1, done * shards // total)].append(t)
        done += _nbytes(t[1], t[2])
    return [g for g in groups if g]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="output directory")
    parser.add_argument("--size-mib", type=float, required=True, help="about this many MiB in total")
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        paths = make_checkpoint(args.out, args.size_mib, args.shards, args.seed)
    except HANDLED as e:
        return fail("make_checkpoint", e)
    for path in paths:
        print(f"{path}  {path.stat().st_size / MiB:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
