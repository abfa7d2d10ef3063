"""The real loaders of the compatibility suite: which script, which checkpoint, what it reads,
whether several tasks read through ONE open file (the pattern a per-handle file system punishes), and
what `fix --compare` compares between its runs."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

SCRIPTS = Path(__file__).with_name("scripts")
# the shim sees the loader's calls (safetensors, torch.load, torch.distributed.checkpoint.load): every tensor
TENSORS = "tensors"
# the script maps the file with Python's mmap: each mapping's bytes (readtrace.inject.mapfill)
MAPPED_BYTES = "mapped bytes"
NOTHING = "nothing"  # raw preads: no run can prove the same data was read


@dataclass(frozen=True)
class Loader:
    name: str
    script: str  # under lab/scripts/
    checkpoint: str  # a kind of lab.checkpoints
    target: str  # what the script is given, relative to the checkpoint directory ("" = the directory)
    shares_handle: bool  # several tasks read through one open file (threads on a mapping, forked fd)
    compares: str  # what fix --compare's runs compare: TENSORS, MAPPED_BYTES or NOTHING

    def command(self, checkpoint_dir: str | Path, digests: str | Path) -> list[str]:
        target = Path(checkpoint_dir) / self.target if self.target else Path(checkpoint_dir)
        return [sys.executable, str(SCRIPTS / self.script), str(target), str(digests)]


LOADERS = {loader.name: loader for loader in (
    Loader("load_file", "load_file.py", "safetensors", "model.safetensors", False, TENSORS),
    Loader("safe_open_threads", "safe_open_threads.py", "safetensors", "model.safetensors", True, TENSORS),
    Loader("transformers", "transformers_load.py", "transformers", "", False, TENSORS),
    Loader("transformers_sharded", "transformers_load.py", "transformers-sharded", "", False, TENSORS),
    Loader("diffusers", "diffusers_load.py", "diffusers", "", False, TENSORS),
    Loader("torch_load_mmap", "torch_load_mmap.py", "pt", "model.pt", False, TENSORS),
    Loader("fork_pool", "fork_pool.py", "safetensors", "model.safetensors", True, NOTHING),
    Loader("gguf_memmap", "gguf_memmap.py", "gguf", "model.gguf", True, MAPPED_BYTES),
    Loader("dcp_load", "dcp_load.py", "dcp", "", False, TENSORS),
    Loader("raw_mmap_threads", "raw_mmap_threads.py", "raw", "weights.raw", True, MAPPED_BYTES),
)}
