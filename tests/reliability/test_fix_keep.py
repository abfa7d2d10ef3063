"""`fix --compare --keep DIR` never writes through a link planted in DIR, refuses a DIR that another
user owns or can write, and never appends to an earlier run's files (issue 24: root's 0600 file was
overwritten with a run log; a reused DIR reported "154/154 tensors identical" for 77)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file

from readtrace.errors import ExitStatus
from reliability.conftest import one_line

NOBODY = 65534
LOAD = "import sys; from safetensors.torch import load_file; print(len(load_file(sys.argv[1])))"
STEMS = ("01-baseline", "02-fixed", "baseline-1", "fixed-1", "rank-plan")


@pytest.fixture
def case(tmp_path):
    torch.manual_seed(4)
    ckpt = tmp_path / "model.safetensors"
    save_file({f"w{i}": torch.randn(64, 64) for i in range(5)}, ckpt)
    secret = tmp_path / "secret"
    secret.write_text("root's own\n")
    secret.chmod(0o600)
    return ckpt, secret


def _compare(keep, ckpt, *extra):
    return subprocess.run([sys.executable, "-m", "readtrace", "fix", "--compare", "--no-record",
                           "--strategy", "prefetch", "--files", str(ckpt), "--keep", str(keep), *extra,
                           "--", sys.executable, "-c", LOAD, str(ckpt)],
                          capture_output=True, text=True, timeout=600)


def _plant(keep, secret):
    for stem in STEMS:
        for suffix in (".log", ".jsonl", ".json"):
            (keep / f"{stem}{suffix}").symlink_to(secret)


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(("mode", "owner", "why"), [(0o777, None, "writable by group or others"),
                                                    (0o1777, None, "writable by group or others"),
                                                    (0o755, NOBODY, "owned by nobody")])
def test_a_keep_dir_someone_else_controls_is_refused(tmp_path, case, need_root, mode, owner, why):
    ckpt, secret = case
    keep = tmp_path / "shared"
    keep.mkdir()
    _plant(keep, secret)
    keep.chmod(mode)
    if owner is not None:
        os.chown(keep, owner, owner)
    before = _digest(secret)
    done = _compare(keep, ckpt)
    assert done.returncode == ExitStatus.USAGE and why in one_line(done.stderr)
    assert _digest(secret) == before and secret.stat().st_mode & 0o777 == 0o600


def test_links_in_an_own_keep_dir_are_never_followed(tmp_path, case):
    ckpt, secret = case
    keep = tmp_path / "mine"
    keep.mkdir()
    _plant(keep, secret)
    before = _digest(secret)
    done = _compare(keep, ckpt)
    assert done.returncode == ExitStatus.OK, done.stderr
    assert _digest(secret) == before
    assert f"this one is kept in {keep / 'run-2'}" in done.stderr
    assert sorted(p.name for p in (keep / "run-2").iterdir() if p.suffix == ".jsonl") == \
        ["01-baseline.jsonl", "02-fixed.jsonl"]


def test_a_reused_keep_dir_starts_fresh(tmp_path, case):
    ckpt, _ = case
    keep = tmp_path / "runs"
    first = _compare(keep, ckpt, "--json")
    assert first.returncode == ExitStatus.OK, first.stderr
    kept = {p.name: p.read_bytes() for p in keep.iterdir() if p.is_file()}
    second = _compare(keep, ckpt, "--json")
    assert second.returncode == ExitStatus.OK, second.stderr
    assert json.loads(first.stdout)["tensors"] == json.loads(second.stdout)["tensors"] == 5
    assert {p.name: p.read_bytes() for p in keep.iterdir() if p.is_file()} == kept  # the first run's untouched
    assert (keep / "run-2" / "02-fixed.jsonl").exists()
