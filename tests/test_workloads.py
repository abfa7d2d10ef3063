"""The checkpoint maker and the loader patterns on a local disk (no mount)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from readtrace.errors import ExitStatus, ReadtraceError
from readtrace.exits import exit_status
from readtrace.loader.errors import LoaderError
from readtrace.workloads import PATTERNS, digest, load_checkpoint, make_checkpoint
from readtrace.workloads.layout import read_layout, split_contiguous

ROOT = Path(__file__).resolve().parents[1]
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    out = tmp_path_factory.mktemp("ckpt")
    return {"single": make_checkpoint(out / "single", 24)[0], "sharded": make_checkpoint(out / "sharded", 24, 3)}


def file_sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_checkpoint_is_deterministic_and_realistic(ckpt, tmp_path):
    again = make_checkpoint(tmp_path / "again", 24)[0]
    assert file_sha(again) == file_sha(ckpt["single"])
    other = make_checkpoint(tmp_path / "other", 24, seed=1)[0]
    assert file_sha(other) != file_sha(ckpt["single"])
    assert abs(ckpt["single"].stat().st_size - 24 * MiB) < 64 * 1024
    tensors = load_file(ckpt["single"])  # the reference reader accepts it
    assert {torch.bfloat16, torch.float16, torch.float32, torch.int64} <= {t.dtype for t in tensors.values()}
    sizes = sorted(t.numel() * t.element_size() for t in tensors.values())
    assert sizes[0] == 8 and sizes[-1] > MiB and len(tensors) > 60
    assert tensors["step"].dim() == 0


def test_sharded_checkpoint_has_index_and_the_same_tensors(ckpt):
    shards = ckpt["sharded"]
    assert [p.name for p in shards] == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    index = json.loads((shards[0].parent / "model.safetensors.index.json").read_text())
    merged = {}
    for p in shards:
        merged.update(load_file(p))
    assert set(index["weight_map"]) == set(merged)
    assert digest(merged) == digest(load_file(ckpt["single"]))  # data is seeded by name, not by file


def test_layout_matches_safetensors(ckpt):
    reference = load_file(ckpt["single"])
    layout = read_layout(ckpt["single"])
    raw = ckpt["single"].read_bytes()
    for t in layout:
        ref = reference[t.name]
        assert (t.dtype, t.shape) == (ref.dtype, tuple(ref.shape))
        assert raw[t.start:t.end] == ref.reshape(-1).view(torch.uint8).numpy().tobytes()
    assert [t.start for t in layout] == sorted(t.start for t in layout)


def test_split_contiguous_gives_each_worker_one_stretch(ckpt):
    layout = read_layout(ckpt["single"])
    runs = split_contiguous(layout, 4)
    assert len(runs) == 4 and [t for run in runs for t in run] == layout
    sizes = [sum(t.nbytes for t in run) for run in runs]
    assert max(sizes) < 2 * min(sizes)


@pytest.mark.parametrize("pattern", [p for p in PATTERNS if p != "sharded"])
def test_every_pattern_loads_the_same_tensors(ckpt, pattern):
    expected = digest(load_file(ckpt["single"]))
    result, tensors = load_checkpoint([ckpt["single"]], pattern, workers=3)
    assert result.digest == expected
    assert result.tensors == len(tensors) == len(read_layout(ckpt["single"]))
    assert result.bytes == sum(t.nbytes for t in read_layout(ckpt["single"]))


@pytest.mark.parametrize("pattern", ["sharded", "sequential", "fork-own-fd"])
def test_patterns_on_shards_match_the_single_file(ckpt, pattern):
    result, _ = load_checkpoint([ckpt["sharded"][0].parent], pattern, workers=2)
    assert result.files == 3 and result.digest == digest(load_file(ckpt["single"]))


def test_cli_prints_a_final_json_line(ckpt):
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "load.py"), "--pattern", "fork-shared-fd",
                           "--workers", "2", str(ckpt["single"])], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    last = json.loads(done.stdout.splitlines()[-1])
    assert set(last) >= {"pattern", "seconds", "bytes", "tensors", "digest"}
    assert last["digest"] == digest(load_file(ckpt["single"]))


def test_make_checkpoint_cli(tmp_path, ckpt):
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "make_checkpoint.py"), str(tmp_path),
                           "--size-mib", "24"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert file_sha(tmp_path / "model.safetensors") == file_sha(ckpt["single"])


def test_bad_inputs_are_one_line_errors(tmp_path, ckpt):
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\xff" * 64)
    cases = [([str(junk)], "sequential", ExitStatus.BAD_INPUT), ([str(tmp_path / "none")], "sequential",
             ExitStatus.BAD_INPUT), ([str(ckpt["single"])], "sharded", ExitStatus.USAGE)]
    for paths, pattern, code in cases:
        with pytest.raises((ReadtraceError, LoaderError)) as err:  # the loader's own error for the junk file
            load_checkpoint(paths, pattern)
        assert exit_status(err.value) == code
    done = subprocess.run([sys.executable, "-m", "readtrace.workloads.load", "--pattern", "sequential", str(junk)],
                          capture_output=True, text=True)
    assert done.returncode == ExitStatus.BAD_INPUT and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_cuda_without_gpu_is_a_clean_error(ckpt):
    done = subprocess.run([sys.executable, "-m", "readtrace.workloads.load", "--pattern", "sequential",
                           "--device", "cuda", str(ckpt["single"])], capture_output=True, text=True)
    assert done.returncode == ExitStatus.PREREQUISITE
    assert done.stderr.strip() == "load: device cuda: no CUDA GPU is visible to torch"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("pattern", ["sequential", "fork-shared-fd", "mmap-threads"])
def test_cuda_loads_the_same_tensors(ckpt, pattern):
    result, tensors = load_checkpoint([ckpt["single"]], pattern, workers=2, device="cuda")
    assert all(t.is_cuda for t in tensors.values())
    assert result.digest == digest(load_file(ckpt["single"]))
