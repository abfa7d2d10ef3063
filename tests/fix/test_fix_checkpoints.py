"""Which files `fix --compare` makes cold: the ones that carry the load's data, whatever the loader, and
never the load's code (its interpreter, shared objects, Python files), wherever its environment lives."""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import require
from safetensors.torch import save_file
from workloads import ebpf_ready

from readtrace.errors import ExitStatus, NoEvidenceError
from readtrace.fix.compare import compare
from readtrace.fix.tracefacts import checkpoint_files, command_from_trace

MiB = 1 << 20
ELF = b"\x7fELF\x02\x01\x01" + bytes(57)


def put(root: Path, rel: str, size: int, head: bytes = b"") -> str:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)
    return str(path)


def test_data_files_by_name_index_and_volume_never_code(tmp_path):
    put(tmp_path, ".venv/bin/python", 30_000, ELF)  # the interpreter, recorded by its relative path
    libtorch = put(tmp_path, "opt/torch/lib/libtorch_cpu.so", 4 * MiB, ELF)  # outside any prefix
    versioned = put(tmp_path, "opt/lib/libgomp.so.1.0.0", 2 * MiB, ELF)
    unnamed_elf = put(tmp_path, "tools/loader-bin", 8 * MiB, ELF)  # code by its magic, not its name
    numpy_ext = put(tmp_path, "env/lib/python3.11/site-packages/numpy/_core/_multiarray_umath.cpython-311.so", MiB)
    packaged_pt = put(tmp_path, "env/lib/python3.11/site-packages/pkg/assets/weights.pt", 8 * MiB)
    pyc = put(tmp_path, "src/__pycache__/load.cpython-311.pyc", 2 * MiB)
    gguf = put(tmp_path, "models/tiny.gguf", 16 * MiB, b"GGUF")
    dcp = [put(tmp_path, f"dcp/__{r}_0.distcp", 4 * MiB) for r in range(2)]
    dcp_meta = put(tmp_path, "dcp/.metadata", 20_000)
    raw = put(tmp_path, "raw/weights.raw", 32 * MiB)  # a raw loader's data: by volume
    small = put(tmp_path, "raw/vocab.txt", MiB // 2)
    tokenizer = put(tmp_path, "raw/tokenizer.json", 3 * MiB)
    shards = [put(tmp_path, f"sharded/part-{i}", MiB // 4) for i in range(2)]  # small, no suffix: by the index
    index = tmp_path / "sharded/model.index.json"
    index.write_text(json.dumps({"weight_map": {"a": "part-0", "b": "part-1"}}))
    listed = [".venv/bin/python", libtorch, versioned, unnamed_elf, numpy_ext, packaged_pt, pyc, gguf, *dcp,
              dcp_meta, raw, small, tokenizer, *shards, str(index), "/usr/lib/x86_64-linux-gnu/libc.so.6",
              str(tmp_path / "gone.safetensors")]
    files = [(p, os.path.getsize(os.path.join(tmp_path, p)) if os.path.exists(os.path.join(tmp_path, p)) else 10,
              os.path.getsize(os.path.join(tmp_path, p)) if os.path.exists(os.path.join(tmp_path, p)) else 0)
             for p in listed]
    assert checkpoint_files(files, str(tmp_path)) == sorted([gguf, *dcp, raw, *shards])


def test_volume_counts_bytes_read_not_size(tmp_path):
    big_skimmed = put(tmp_path, "a/archive.tar", 64 * MiB)  # only its header was read
    data = put(tmp_path, "a/weights.raw", 16 * MiB)
    assert checkpoint_files([(big_skimmed, 64 * MiB, 4096), (data, 16 * MiB, 16 * MiB)]) == [data]


def test_a_file_another_process_maps_is_named_before_the_first_run(tmp_path):
    path = put(tmp_path, "model.bin", MiB)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import mmap, sys, time
        f = open({path!r}, "rb"); m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ); m[:4096]
        print("mapped", flush=True); time.sleep(60)""")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "mapped"
        marker = tmp_path / "ran"
        with pytest.raises(NoEvidenceError, match=rf"model\.bin \(mapped by {holder.pid} "):
            compare([sys.executable, "-c", f"open({str(marker)!r}, 'w')"], files=[path], strategy="prefetch")
        assert not marker.exists()  # refused before any run
    finally:
        holder.kill()
        holder.wait()
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ):  # our own mapping is evictable
        compare([sys.executable, "-c", "pass"], files=[path], strategy="prefetch")


LOAD = """
import sys
import numpy, torch
from safetensors.torch import load_file
print(len(load_file(sys.argv[1])))
"""


@pytest.mark.ebpf
def test_a_load_in_another_environment_gets_no_code_evicted(tmp_path):
    """The load's venv reached through a symlinked path: its prefix is not readtrace's, and its
    interpreter, libtorch and numpy's extension modules are not checkpoint files."""
    ok, why = ebpf_ready()
    require(ok, why)
    from readtrace.record import record_command

    checkpoint = tmp_path / "model.safetensors"
    torch.manual_seed(0)
    save_file({f"w{i}": torch.randn(64, 1024) for i in range(4)}, checkpoint)
    env_dir = tmp_path / "other-env"
    env_dir.symlink_to(sys.prefix, target_is_directory=True)
    (tmp_path / "load.py").write_text(LOAD)
    trace = tmp_path / "t.rtrace"
    result = record_command([str(env_dir / "bin" / "python"), "load.py", str(checkpoint)], trace, quiet=True,
                            cwd=str(tmp_path))
    assert result.exit_code == 0
    from readtrace.trace import load_trace

    read = {str(p) for p in load_trace(trace).files["path"]}
    assert any(p.startswith(str(env_dir)) and "libtorch_cpu.so" in p for p in read)  # the case: code outside our prefix
    assert command_from_trace(trace)[2] == [str(checkpoint)]
    out = subprocess.run([sys.executable, "-m", "readtrace", "fix", "--compare", "--no-record", "--strategy",
                          "prefetch", "--json", str(trace)], capture_output=True, text=True, timeout=300)
    assert out.returncode == ExitStatus.OK, out.stderr
    report = json.loads(out.stdout)
    assert [f["path"] for f in report["files"]] == [str(checkpoint)] and report["tensors_identical"] is True


DCP_SAVE = """
import sys, torch, torch.distributed.checkpoint as dcp
torch.manual_seed(1)
dcp.save({f"layer{i}.weight": torch.randn(1024, 1024) for i in range(8)}, checkpoint_id=sys.argv[1])
"""

DCP_LOAD = """
import sys, torch, torch.distributed.checkpoint as dcp
state = {f"layer{i}.weight": torch.empty(1024, 1024) for i in range(8)}
dcp.load(state, checkpoint_id=sys.argv[1])
print(sum(float(t.sum()) for t in state.values()))
"""


@pytest.mark.fuse
@pytest.mark.ebpf
def test_a_distributed_checkpoint_load_is_compared_without_files(tmp_path):
    """torch.distributed.checkpoint.load of a .distcp directory on the lab mount: recorded, then
    `fix --compare TRACE` finds the shard from the trace alone (not .metadata, not torch's code) and
    compares the 8 tensors dcp.load filled in place (the shim records them), instead of exit 6."""
    ok, why = ebpf_ready()
    require(ok, why)
    from conftest import lab_mount

    from readtrace.record import record_command

    def fill(src):
        subprocess.run([sys.executable, "-c", DCP_SAVE, str(src / "ckpt")], check=True, capture_output=True)

    (tmp_path / "load.py").write_text(DCP_LOAD)
    with lab_mount(tmp_path, fill, latency_ms=20, keep_cache=True) as (mnt, _):
        trace = tmp_path / "t.rtrace"
        result = record_command([sys.executable, str(tmp_path / "load.py"), str(mnt / "ckpt")], trace, quiet=True)
        assert result.exit_code == 0
        assert command_from_trace(trace)[2] == [str(mnt / "ckpt" / "__0_0.distcp")]
        # a fixed strategy, not auto: auto may find this short load at its floor and leave it alone, and a load
        # left alone runs nothing changed, so nothing is compared (CI: tensors_identical None)
        out = subprocess.run([sys.executable, "-m", "readtrace", "fix", "--compare", "--strategy", "prefetch",
                              "--no-record", "--json", str(trace)], capture_output=True, text=True, timeout=600)
    assert out.returncode == ExitStatus.OK, out.stderr
    report = json.loads(out.stdout)
    assert report["tensors"] == 8 and report["tensors_identical"] is True and not report["unproven"]
