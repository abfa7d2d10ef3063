"""The checkpoints the compatibility loaders read, built locally with random weights (no hub):
a safetensors file, a .pt of the same tensors, a transformers Llama (single file and sharded), a
diffusers UNet, a GGUF file, a torch distributed checkpoint (.distcp) and a raw file of random bytes,
each of about ``size_mib``. ``build_all(dest, size_mib)`` is idempotent: a kind
already built at that size is kept (one build per cache directory)."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

KINDS = ("safetensors", "pt", "transformers", "transformers-sharded", "diffusers", "gguf", "dcp", "raw")
# checkpoints of loaders readtrace does not route (GGUF memmap, DCP, a raw mmap): fix --compare finds their
# files from the trace alone, and populates the mapped ones through the loader's own open file
UNROUTED_KINDS = ("gguf", "dcp", "raw")
_TENSOR_MIB = 4  # one 1024 x 1024 float32 tensor of the GGUF and DCP checkpoints
_SHARDS = 3  # shards of the sharded transformers checkpoint


def build_all(dest: str | Path, size_mib: int, kinds: tuple[str, ...] = KINDS) -> dict[str, Path]:
    """``{kind: directory}``; each directory holds only that checkpoint (what gets mounted)."""
    root = Path(dest)
    return {kind: build(kind, root / f"{kind}-{size_mib}", size_mib) for kind in kinds}


def build(kind: str, out: Path, size_mib: int) -> Path:
    stamp = out.with_name(out.name + ".built")  # beside it: the directory holds only the checkpoint
    if stamp.exists():
        return out
    if out.exists():
        shutil.rmtree(out)  # a half-built directory of our own
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _BUILDERS[kind](tmp, size_mib)
    tmp.rename(out)
    stamp.write_text(json.dumps({"kind": kind, "size_mib": size_mib}))
    # its dirty pages written back now, not during the first cells' recorded runs (the prediction
    # benchmark's first lab load_file at 64 MiB waited 1.95 s on its reads, 0.38 s at 256 MiB)
    os.sync()
    return out


def _safetensors(out: Path, size_mib: int) -> None:
    from readtrace.workloads import make_checkpoint

    make_checkpoint(out, size_mib)


def _pt(out: Path, size_mib: int) -> None:
    import torch
    from safetensors.torch import load_file

    tmp = out / "src"
    _safetensors(tmp, size_mib)
    torch.save(load_file(tmp / "model.safetensors"), out / "model.pt")
    shutil.rmtree(tmp)


def _llama_config(size_mib: int):
    from transformers import LlamaConfig

    # fp32 parameters: 2 * vocab * d (embeddings, untied head) + layers * (4 d^2 + 3 d * 2.75 d)
    d, layers = 512, 3
    vocab = max(1024, int((size_mib * 2**20 / 4 - layers * 12.25 * d * d) / (2 * d)) // 256 * 256)
    return LlamaConfig(hidden_size=d, intermediate_size=int(2.75 * d), num_hidden_layers=layers,
                       num_attention_heads=8, num_key_value_heads=8, vocab_size=vocab,
                       tie_word_embeddings=False, max_position_embeddings=512)


def _transformers(out: Path, size_mib: int, shard_mib: int | None = None) -> None:
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(_llama_config(size_mib))
    kwargs = {"max_shard_size": f"{shard_mib}MB"} if shard_mib else {"max_shard_size": "100GB"}
    model.save_pretrained(out, **kwargs)


def _transformers_sharded(out: Path, size_mib: int) -> None:
    _transformers(out, size_mib, shard_mib=max(1, math.ceil(size_mib * 1.05 / _SHARDS)))


def _diffusers(out: Path, size_mib: int) -> None:
    import torch
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    # parameters grow with the square of the channel width: scale it to the size asked for
    width = max(32, int(64 * math.sqrt(size_mib / 64)) // 32 * 32)
    unet = UNet2DConditionModel(
        sample_size=32, in_channels=4, out_channels=4, layers_per_block=1, cross_attention_dim=width * 2,
        block_out_channels=(width, width * 2, width * 4, width * 4), attention_head_dim=8,
        down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
        up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3)
    unet.save_pretrained(out)


def _tensors(size_mib: int) -> int:
    return max(1, size_mib // _TENSOR_MIB)


def _gguf(out: Path, size_mib: int) -> None:
    import numpy as np
    from gguf import GGUFWriter

    rng = np.random.default_rng(0)
    writer = GGUFWriter(str(out / "model.gguf"), "llama")
    for i in range(_tensors(size_mib)):
        writer.add_tensor(f"blk.{i}.weight", rng.random((1024, 1024), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _dcp(out: Path, size_mib: int) -> None:
    import torch
    import torch.distributed.checkpoint as dcp

    torch.manual_seed(0)
    dcp.save({f"layer{i}.weight": torch.randn(1024, 1024) for i in range(_tensors(size_mib))}, checkpoint_id=out)


def _raw(out: Path, size_mib: int) -> None:
    import numpy as np

    (out / "weights.raw").write_bytes(np.random.default_rng(0).bytes(size_mib << 20))


_BUILDERS = {"safetensors": _safetensors, "pt": _pt, "transformers": _transformers,
             "transformers-sharded": _transformers_sharded, "diffusers": _diffusers, "gguf": _gguf, "dcp": _dcp,
             "raw": _raw}
