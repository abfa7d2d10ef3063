"""fix --compare never loses measured runs and never claims what it did not measure (issue 8 items 4, 5).

Each case runs the real command line on real files and asserts the message, the exit code and the
state left behind (no temp directories of ours, the checkpoint unchanged where readtrace only read it).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import validate_fix_json
from safetensors.torch import save_file

from readtrace.errors import ExitStatus

PREAD_LOOP = """
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
size, pos = os.fstat(fd).st_size, 0
while pos < size:
    pos += len(os.pread(fd, 1 << 16, pos))
print("read", pos)
"""

TORCH_LOAD = """
import sys, torch
state = torch.load(sys.argv[1], mmap=True, weights_only=True)
print(sum(t.float().sum().item() for t in state["model"].values()))
"""

# Loads its checkpoint, then rewrites it with other values: every run loads different tensors.
REWRITES = """
import sys, torch
from safetensors.torch import load_file, save_file
state = load_file(sys.argv[1])
save_file({k: v + 1 for k, v in state.items()}, sys.argv[1])
"""


@pytest.fixture(autouse=True)
def private_tmp(tmp_path, monkeypatch):
    """The runs' temporary directories go here, so what they leave behind can be seen."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    yield tmp
    assert list(tmp.iterdir()) == []  # work directories and shims all removed


def fix(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "readtrace", "fix", "--compare", "--no-record", *args],
                          capture_output=True, text=True, timeout=600, cwd=cwd, env=os.environ.copy())


def sha256(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture
def safetensors_file(tmp_path):
    torch.manual_seed(2)
    path = tmp_path / "model.safetensors"
    save_file({f"w{i}": torch.randn(256, 256) for i in range(4)}, path)
    return path


def test_nothing_loaded_claims_nothing(tmp_path):
    """`-- true`: no files, nothing evicted, no tensors: no speedup, no 'identical', exit NO_EVIDENCE."""
    work = tmp_path / "cwd"
    work.mkdir()
    out = fix("--", "true", cwd=work)
    assert out.returncode == ExitStatus.NO_EVIDENCE == 6
    assert "faster" not in out.stdout and "slower" not in out.stdout and "yes" not in out.stdout
    assert "not compared" in out.stdout and "tensors identical" in out.stdout and "not checked" in out.stdout
    assert "nothing was evicted, so the runs were not cold" in out.stdout
    assert out.stderr.strip().splitlines()[-1].startswith("readtrace: nothing proven: no checkpoint files")
    assert "Traceback" not in out.stderr and list(work.iterdir()) == []


def test_raw_pread_loop_keeps_its_measured_runs(tmp_path, safetensors_file):
    """No loader call at all (the ZeroDivisionError case): both runs are printed, cold, and the table
    says the tensors could not be compared; exit NO_EVIDENCE; the checkpoint untouched."""
    (tmp_path / "loop.py").write_text(PREAD_LOOP)
    digest, mtime = sha256(safetensors_file), os.stat(safetensors_file).st_mtime_ns
    out = fix("--json", "--strategy", "prefetch", "--files", str(safetensors_file), "--",
              sys.executable, str(tmp_path / "loop.py"), str(safetensors_file))
    assert out.returncode == ExitStatus.NO_EVIDENCE, out.stderr
    data = validate_fix_json(json.loads(out.stdout))
    assert data["baseline"]["wall_s"] > 0 and data["fixed"]["wall_s"] > 0
    assert data["baseline"]["loader_s"] == 0  # nothing was inside a loader call
    # cold, but nothing to compare: no speedup, no "identical", and the JSON says the exit code
    assert data["tensors"] == 0 and data["speedup"] is None and data["tensors_identical"] is None
    assert data["verdict"] == "unproven" and data["exit_code"] == out.returncode
    assert any("no tensors were seen" in why for why in data["unproven"])
    assert "Traceback" not in out.stderr and "nothing proven: no tensors were seen" in out.stderr
    assert (sha256(safetensors_file), os.stat(safetensors_file).st_mtime_ns) == (digest, mtime)


def test_raw_pread_loop_table_has_no_speedup_claim(tmp_path, safetensors_file):
    (tmp_path / "loop.py").write_text(PREAD_LOOP)
    out = fix("--strategy", "prefetch", "--files", str(safetensors_file), "--",
              sys.executable, str(tmp_path / "loop.py"), str(safetensors_file))
    assert out.returncode == ExitStatus.NO_EVIDENCE
    wall = next(line for line in out.stdout.splitlines() if line.strip().startswith("wall time"))
    assert wall.rstrip().endswith("not compared") and "ZeroDivision" not in out.stderr


def test_torch_load_is_seen_and_compared(tmp_path):
    """torch.load(mmap=True) of a .pt: its tensors are recorded in both runs and compared."""
    torch.manual_seed(3)
    path = tmp_path / "model.pt"
    torch.save({"model": {f"layer{i}": torch.randn(128, 128) for i in range(4)}, "step": 7}, path)
    (tmp_path / "load.py").write_text(TORCH_LOAD)
    out = fix("--json", "--strategy", "own-fd", "--", sys.executable, str(tmp_path / "load.py"), str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    data = validate_fix_json(json.loads(out.stdout))
    assert data["tensors"] == 4 and data["tensors_identical"] is True and data["unproven"] == []
    assert data["files"][0]["path"] == str(path)


def test_a_checkpoint_rewritten_by_each_run_shows_different(tmp_path, safetensors_file):
    """Digests are of what each run loaded, not of the file after the run: one run each suffices."""
    (tmp_path / "rewrite.py").write_text(REWRITES)
    out = fix("--strategy", "both", "--files", str(safetensors_file), "--",
              sys.executable, str(tmp_path / "rewrite.py"), str(safetensors_file))
    assert out.returncode == ExitStatus.ERROR
    assert "DIFFERS: w0 (model.safetensors)" in out.stdout and " NO" in out.stdout
    assert out.stderr.strip().splitlines()[-1].startswith("readtrace: the fixed run loaded different tensors")
