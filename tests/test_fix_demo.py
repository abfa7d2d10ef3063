"""readtrace demo, small and unrecorded (the recorded path is covered by test_fix_lab.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import fuse_available, require, validate_fix_json

pytestmark = [pytest.mark.fuse, pytest.mark.slow]


def test_demo_runs_end_to_end_and_cleans_up(tmp_path):
    require(*fuse_available())
    keep = tmp_path / "demo"
    out = subprocess.run([sys.executable, "-m", "readtrace", "demo", "--size-mib", "8", "--latency-ms", "5",
                          "--no-record", "--json", "--keep", str(keep)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    data = validate_fix_json(json.loads(out.stdout))  # the demo ends with fix --compare's JSON
    assert data["tensors_identical"] is True and data["tensors"] > 50
    assert data["exit_code"] == out.returncode and data["verdict"] != "differs"
    assert data["baseline"]["wall_s"] > 0 and data["fixed"]["wall_s"] > 0
    assert "1. checkpoint" in out.stderr and "6. unmounted" in out.stderr
    with open("/proc/self/mountinfo") as f:
        assert str(keep / "mnt") not in f.read()  # unmounted
    assert (keep / "bucket" / "model.safetensors").exists() and any((keep / "runs").glob("*-fixed.jsonl"))


def test_demo_refuses_a_bad_size():
    out = subprocess.run([sys.executable, "-m", "readtrace", "demo", "--size-mib", "0", "--no-record"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "at least 1" in out.stderr and "Traceback" not in out.stderr
